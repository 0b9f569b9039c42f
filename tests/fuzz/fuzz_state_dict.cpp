// libFuzzer target for the loaders of state dicts and checkpoints: bytes in,
// the path every loader takes. check_archive first (what read_checked_archive
// does to every file), then, on what it passes, ACTkit's state-dict reader
// and LibTorch's InputArchive (the optimizer state in pipeline and dp
// checkpoints) with an optimizer loaded from it. Built with ASan and UBSan
// (scripts/fuzz.sh). A crash or a sanitizer report is a bug: in ACTkit, or in
// LibTorch on a file the check let through, which the check must then refuse.
// So is any exception from ACTkit's code but actkit::Error, and any from
// LibTorch's loader (InputArchive::load_from, reading every entry) but
// c10::Error: callers catch only that. LibTorch's optimizers' load() is
// different: it reads entries with InputArchive::read(key, IValue&), which
// throws torch::jit::ObjectAttributeError for a key the archive lacks (a
// well-formed archive of something else), so there any std::exception is
// caught, as the CLI would catch it.
//
// A mutation of a record's bytes breaks its CRC-32, which the check refuses
// first; so most mutations here (LLVMFuzzerCustomMutator) take the archive
// apart, mutate one record (or its name) and write the archive again with
// correct CRCs, as a crafted file would be. The rest mutate the raw bytes, for
// the zip layer itself.
#include <torch/serialize/input-archive.h>
#include <torch/torch.h>

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "actkit/converters/archive_check.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "pickle/pickle_check.h"  // converters/src: which records are pickles

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

// ------------------------------------------------------------ the target

volatile uint8_t g_sink;

// Reads every byte of a tensor's storage here, in instrumented code, so that
// ASan sees a storage that is bigger than the memory under it; traps when the
// tensor's view reaches past its storage.
void touch(const at::Tensor& t) {
  if (!t.defined() || t.layout() != at::kStrided || !t.device().is_cpu() || !t.has_storage()) return;
  const c10::Storage& storage = t.storage();
  const auto* p = static_cast<const uint8_t*>(storage.data());
  uint8_t x = 0;
  for (size_t i = 0; i < storage.nbytes(); ++i) x ^= p[i];
  g_sink = x;
  if (t.numel() == 0) return;
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  if ((last + 1) * int64_t(t.element_size()) > int64_t(storage.nbytes())) __builtin_trap();
}

void touch(const c10::IValue& v, int depth) {
  if (depth > 80) __builtin_trap();  // the check bounds nesting at 64
  if (v.isTensor()) touch(v.toTensor());
  if (v.isTuple()) {
    for (const c10::IValue& item : v.toTupleRef().elements()) touch(item, depth + 1);
  } else if (v.isList()) {
    for (const c10::IValue& item : v.toListRef()) touch(item, depth + 1);
  } else if (v.isGenericDict()) {
    for (const auto& item : v.toGenericDict()) touch(item.value(), depth + 1);
  } else if (v.isObject()) {
    for (const c10::IValue& slot : v.toObjectRef().slots()) touch(slot, depth + 1);
  }
}

// Every entry of an archive (and of those inside it, 4 deep), as a resume
// reads them.
void read_archive(torch::serialize::InputArchive& archive, int depth) {
  for (const std::string& key : archive.keys()) {
    c10::IValue value;
    if (archive.try_read(key, value)) touch(value, 0);
    torch::serialize::InputArchive inner;
    if (depth < 4 && archive.try_read(key, inner)) read_archive(inner, depth + 1);
  }
}

// Runs `load`, LibTorch reading an archive; false when it threw. Any
// exception is a refusal: the loaders turn c10::Error and every other
// std::exception LibTorch throws (a type string it cannot parse, a missing
// attribute) into a FormatError naming the file (app/src/dp_run.cpp,
// pipeline/src/stage_checkpoint.cpp). What the fuzzer hunts is a crash.
template <typename Load>
bool libtorch_reads(const Load& load) {
  try {
    load();
    return true;
  } catch (const std::exception&) {
  }
  return false;
}

template <typename Optimizer, typename Options>
void load_optimizer(const std::string& bytes, const Options& options) {
  torch::nn::Linear linear(3, 2);
  Optimizer optimizer(linear->parameters(), options);
  libtorch_reads([&] {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    optimizer.load(archive);
    linear(torch::ones({1, 3})).sum().backward();
    optimizer.step();
  });
}

// InputArchive over the bytes, every entry read; then the optimizers the
// pipeline (SGD with momentum) and LibTorch's examples (Adam) load from it,
// stepped once.
void load_with_libtorch(const std::string& bytes) {
  const bool read = libtorch_reads([&] {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    read_archive(archive, 0);
  });
  if (!read) return;
  load_optimizer<torch::optim::SGD>(bytes, torch::optim::SGDOptions(0.1).momentum(0.9));
  load_optimizer<torch::optim::Adam>(bytes, torch::optim::AdamOptions(0.1));
}

// ------------------------------------------------ the structured mutator

struct Record {
  std::string name, data;
};

uint64_t le(const std::string& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | uint8_t(b[at + size_t(i)]);
  return v;
}

void put_le(std::string& out, uint64_t v, int n) {  // n > 8: zeros follow
  for (int i = 0; i < n; ++i) out += char(i < 8 ? (v >> (8 * i)) & 0xff : 0);
}

// The records of a zip archive (stored or deflated, no zip64: inputs are
// small), or false when `b` is not one. Every offset checked.
bool read_zip(const std::string& b, std::vector<Record>& out) {
  if (b.size() < 22 || le(b, b.size() - 22, 4) != 0x06054b50) return false;
  const uint64_t entries = le(b, b.size() - 12, 2), cd = le(b, b.size() - 6, 4);
  uint64_t at = cd;
  for (uint64_t i = 0; i < entries; ++i) {
    if (at > b.size() || b.size() - at < 46 || le(b, at, 4) != 0x02014b50) return false;
    const uint64_t method = le(b, at + 10, 2), size = le(b, at + 20, 4), usize = le(b, at + 24, 4);
    const uint64_t name_len = le(b, at + 28, 2), skip = le(b, at + 30, 2) + le(b, at + 32, 2);
    const uint64_t local = le(b, at + 42, 4);
    if (b.size() - at - 46 < name_len + skip || local > b.size() || b.size() - local < 30) return false;
    const uint64_t data = local + 30 + le(b, local + 26, 2) + le(b, local + 28, 2);
    if (data > b.size() || b.size() - data < size || usize > (1u << 20)) return false;
    Record r{b.substr(size_t(at + 46), size_t(name_len)), b.substr(size_t(data), size_t(size))};
    if (method == 8) {
      std::string inflated(size_t(usize), '\0');
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;
      z.next_in = reinterpret_cast<Bytef*>(r.data.data());
      z.avail_in = uInt(r.data.size());
      z.next_out = reinterpret_cast<Bytef*>(inflated.data());
      z.avail_out = uInt(inflated.size());
      const int rc = inflate(&z, Z_FINISH);
      inflateEnd(&z);
      if (rc != Z_STREAM_END || z.avail_out != 0) return false;
      r.data = std::move(inflated);
    } else if (method != 0) {
      return false;
    }
    out.push_back(std::move(r));
    at += 46 + name_len + skip;
  }
  return true;
}

// A zip archive of `records`, stored, each with its correct CRC-32.
std::string write_zip(const std::vector<Record>& records) {
  std::string out, directory;
  for (const Record& r : records) {
    const uint32_t crc = actkit::crc32_zip(r.data.data(), r.data.size());
    const uint64_t local = out.size();
    for (std::string* s : {&out, &directory}) {
      put_le(*s, s == &out ? 0x04034b50 : 0x02014b50, 4);
      if (s == &directory) put_le(*s, 20, 2);  // version made by
      put_le(*s, 20, 2);                       // version needed
      put_le(*s, 0, 2 + 2 + 2 + 2);            // flags, method (stored), time, date
      put_le(*s, crc, 4);
      put_le(*s, r.data.size(), 4);
      put_le(*s, r.data.size(), 4);
      put_le(*s, r.name.size(), 2);
      put_le(*s, 0, 2);  // extra field
      if (s == &directory) {
        put_le(*s, 0, 2 + 2 + 2 + 4);  // comment, disk, internal and external attributes
        put_le(*s, local, 4);
      }
      *s += r.name;
      if (s == &out) out += r.data;
    }
  }
  const uint64_t cd = out.size();
  out += directory;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);  // disk numbers
  put_le(out, records.size(), 2);
  put_le(out, records.size(), 2);
  put_le(out, directory.size(), 4);
  put_le(out, cd, 4);
  put_le(out, 0, 2);  // comment
  return out;
}

// libFuzzer's own mutation of `s`, which may grow it by up to `room` bytes.
void mutate(std::string& s, size_t room) {
  const size_t n = s.size();
  s.resize(n + room);
  s.resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(s.data()), n, s.size()));
}

// One record's bytes mutated (a pickle's, half the time), or its name, or
// the record dropped or copied under another name.
void mutate_records(std::vector<Record>& records, std::minstd_rand& rng, size_t room) {
  if (records.empty()) return;
  std::vector<size_t> pickles;
  for (size_t i = 0; i < records.size(); ++i) {
    if (actkit::is_pickle_record(records[i].name)) pickles.push_back(i);
  }
  const size_t i = !pickles.empty() && rng() % 2 ? pickles[rng() % pickles.size()] : rng() % records.size();
  switch (rng() % 16) {
    case 0: mutate(records[i].name, 16); break;
    case 1: records.erase(records.begin() + std::ptrdiff_t(i)); break;
    case 2: {
      Record copy = records[i];
      mutate(copy.name, 16);
      records.push_back(std::move(copy));
    } break;
    default: mutate(records[i].data, room);
  }
}

}  // namespace

// LibTorch's warnings (an optimizer "still using the old serialization
// format", ...) would print on nearly every input. (LibTorch 1.13's API,
// what scripts/fuzz.sh builds against.)
class Silent : public c10::WarningHandler {
  void process(const c10::SourceLocation&, const std::string&, bool) override {}
};

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static Silent silent;
  c10::Warning::set_warning_handler(&silent);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  std::vector<Record> records;
  if (rng() % 4 != 0 && read_zip(std::string(reinterpret_cast<const char*>(data), size), records)) {
    mutate_records(records, rng, max_size > size ? std::min<size_t>(max_size - size, 4096) : 0);
    const std::string out = write_zip(records);
    if (out.size() <= max_size) {
      std::memcpy(data, out.data(), out.size());
      return out.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    actkit::check_archive(bytes, "input");
  } catch (const actkit::Error&) {
    return 0;
  }
  try {
    for (const auto& item : actkit::state_dict_from_archive(bytes, "input")) touch(item.value());
  } catch (const actkit::Error&) {
  }
  load_with_libtorch(bytes);
  return 0;
}
