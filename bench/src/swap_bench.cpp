#include "actkit/bench/swap_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/process/process.h"
#include "actkit/swap/io_engine.h"

namespace actkit::bench {
namespace {

// Runs fio with `args` and returns what it printed; throws Error on failure.
std::string run_fio(std::vector<std::string> args) {
  args.insert(args.begin(), "fio");
  const ProcessResult r = run_process(args, ChildOutput::kCapture);
  if (!r.succeeded()) throw Error(c10::str("fio failed (status ", r.exit_status, "):\n", r.output));
  return r.output;
}

// fio reads ':' in --filename as a separator between files: escape it.
std::string fio_filename(const std::string& path) {
  std::string out;
  for (char ch : path) {
    if (ch == ':') out += '\\';
    out += ch;
  }
  return out;
}

// fio with the same pattern as ours: one job, sequential, O_DIRECT.
double fio_gbps(const SwapBenchConfig& c, const std::string& file, bool write) {
  const auto j = nlohmann::json::parse(run_fio(
      {"--name=actkit", "--filename=" + fio_filename(file), std::string("--rw=") + (write ? "write" : "read"),
       c10::str("--bs=", c.block), c10::str("--iodepth=", c.queue_depth), "--ioengine=io_uring", "--direct=1",
       c10::str("--size=", c.bytes), "--numjobs=1", "--output-format=json"}));
  const auto& job = j.at("jobs").at(0).at(write ? "write" : "read");
  return job.at("bw_bytes").get<double>() / 1e9;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SwapBenchReport run_swap_bench(const SwapBenchConfig& c) {
  if (c.dir.empty() || !files::is_directory(c.dir)) {
    throw InvalidInput("bench swap: --dir must be an existing directory, got '" + c.dir + "'");
  }
  if (c.bytes < c.block || c.block % kIoAlignment != 0 || c.repeats < 1) {
    throw InvalidInput("bench swap: size must be >= block, block a multiple of 4 KiB, repeats >= 1");
  }
  IoEngineOptions o;
  o.queue_depth = c.queue_depth;
  o.block_size = c.block;
  if (c.engine == "uring") o.kind = IoEngineKind::kUring;
  else if (c.engine == "threads") o.kind = IoEngineKind::kThreads;
  else if (c.engine != "auto") throw InvalidInput("bench swap: --engine must be auto, uring or threads");
  auto engine = make_io_engine(o);

  SwapBenchReport r;
  r.engine = engine->name();
  r.engine_note = engine->note();
  const uint64_t bytes = c.bytes / kIoAlignment * kIoAlignment;
  AlignedBuffer data(bytes);
  for (uint64_t i = 0; i < bytes; i += 4096) std::memset(data.data() + i, int(i / 4096), 4096);
  const std::string ours = c.dir + "/actkit-swap-bench.dat";
  const std::string theirs = c.dir + "/actkit-swap-bench-fio.dat";
  const bool fio = program_in_path("fio");
  if (fio) r.fio_version = run_fio({"--version"}).substr(0, 32);
  while (!r.fio_version.empty() && (r.fio_version.back() == '\n' || r.fio_version.back() == ' ')) r.fio_version.pop_back();
  Bandwidth best_fio;
  try {
    for (int rep = 0; rep < c.repeats; ++rep) {
      {
        ::unlink(ours.c_str());
        IoFile f = IoFile::open(ours, true);
        r.direct = f.direct();
        // Allocated up front, as fio does (its fallocate=native default): an
        // O_DIRECT write that extends a file is serialized by the filesystem.
        if (::posix_fallocate(f.fd(), 0, off_t(bytes)) != 0) throw IoError("cannot allocate " + ours, errno);
        const int id = engine->add_file(f.fd(), f.direct(), f.path());
        auto t0 = std::chrono::steady_clock::now();
        engine->wait(engine->write(id, 0, data.data(), bytes, "bench"));
        r.ours.write_gbps = std::max(r.ours.write_gbps, double(bytes) / seconds_since(t0) / 1e9);
        t0 = std::chrono::steady_clock::now();
        engine->wait(engine->read(id, 0, data.data(), bytes, "bench"));
        r.ours.read_gbps = std::max(r.ours.read_gbps, double(bytes) / seconds_since(t0) / 1e9);
        engine->remove_file(id);
      }
      if (fio) {
        ::unlink(theirs.c_str());
        best_fio.write_gbps = std::max(best_fio.write_gbps, fio_gbps(c, theirs, true));
        best_fio.read_gbps = std::max(best_fio.read_gbps, fio_gbps(c, theirs, false));
      }
    }
  } catch (...) {
    ::unlink(ours.c_str());
    ::unlink(theirs.c_str());
    throw;
  }
  ::unlink(ours.c_str());
  ::unlink(theirs.c_str());
  if (fio) r.fio = best_fio;
  return r;
}

}  // namespace actkit::bench
