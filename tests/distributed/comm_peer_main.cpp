// One rank of a multi-process comm test (tests/distributed/test_comm.cpp starts two to
// four of these with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set). Each
// scenario exits 0 when everything it checked held, 3 when it caught the
// CommError it was meant to see, 1 otherwise (with the reason on stderr).
//
//   actkit_comm_peer exchange            every size of message around a ring and back
//   actkit_comm_peer mismatch            the last rank reports different bits
//   actkit_comm_peer dead                rank 0 exits without sending; the others wait
//   actkit_comm_peer hang                rank 0 sleeps without sending; the others wait
//   actkit_comm_peer oversized           rank 0 sends more than rank 1 expects
//   actkit_comm_peer rate BYTES RATE LATENCY OUT
//                                        rank 0 sends BYTES to rank 1 over the
//                                        emulated link; rank 1 writes the rate it
//                                        saw (bit/s) to OUT
//   actkit_comm_peer shaped RATE BYTES OUT
//                                        in a fresh network namespace: shape
//                                        loopback with tc tbf at RATE, then run
//                                        `rate BYTES unlimited 0 OUT` as two ranks
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "actkit/process/process.h"
#include "actkit/comm/communicator.h"

using namespace actkit;

namespace {

std::vector<uint8_t> pattern(int rank, int index, size_t size) {
  std::vector<uint8_t> v(size);
  for (size_t j = 0; j < size; ++j) v[j] = uint8_t(rank * 31 + index * 7 + int(j % 251));
  return v;
}

int fail(const std::string& why) {
  std::cerr << "comm peer: " << why << "\n";
  return 1;
}

int exchange(Communicator& c) {
  const int w = c.world_size(), r = c.rank();
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  const std::vector<size_t> sizes = {0, 1, 1000, (size_t(3) << 20) + 7};
  c.handshake({{"scenario", "exchange"}, {"sizes", std::to_string(sizes.size())}});
  c.expect(prev, 0, int(sizes.size()));
  c.expect(next, 1, int(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) c.send(next, 0, pattern(r, int(i), sizes[i]));
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> got = c.recv(prev, 0, "ring message " + std::to_string(i));
    if (got != pattern(prev, int(i), sizes[i])) return fail("ring message " + std::to_string(i) + " differs");
    c.send(prev, 1, std::move(got));  // echo back on the other channel
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (c.recv(next, 1, "echo " + std::to_string(i)) != pattern(r, int(i), sizes[i])) {
      return fail("echo " + std::to_string(i) + " differs");
    }
  }
  c.flush();
  const ChannelStats s = c.sent_stats(next, 0);
  size_t expected = 0;
  for (size_t n : sizes) expected += n + 8;
  if (s.messages != int64_t(sizes.size()) || s.bytes != int64_t(expected)) return fail("sent stats are wrong");
  c.barrier();
  return 0;
}

int expect_comm_error(const std::function<void()>& body, const std::string& must_mention) {
  try {
    body();
  } catch (const CommError& e) {
    std::cerr << e.what() << "\n";
    if (std::string(e.what()).find(must_mention) == std::string::npos) {
      return fail("the error does not mention '" + must_mention + "'");
    }
    return 3;
  }
  return fail("no CommError");
}

int rate(Communicator& c, size_t bytes, const std::string& bw, const std::string& latency, const std::string& out) {
  const size_t chunk = size_t(1) << 20;
  const int messages = int((bytes + chunk - 1) / chunk);
  if (c.rank() == 0) c.set_link(1, LinkSpec{parse_bandwidth(bw), parse_latency(latency)});
  if (c.rank() == 1) c.expect(0, 0, messages);
  c.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  if (c.rank() == 0) {
    for (int i = 0; i < messages; ++i) c.send(1, 0, std::vector<uint8_t>(std::min(chunk, bytes - i * chunk), 7));
    c.flush();
  } else {
    int64_t received = 0;
    for (int i = 0; i < messages; ++i) received += int64_t(c.recv(0, 0, "chunk " + std::to_string(i)).size()) + 8;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ofstream(out) << double(received) * 8 / s << "\n";
  }
  c.barrier();
  return 0;
}

// Runs in a network namespace of its own (the test starts it under
// `unshare -n`), so shaping its loopback touches nothing else.
int shaped(const std::string& bw, const std::string& bytes, const std::string& out) {
  const std::string rate_arg = std::to_string(int64_t(parse_bandwidth(bw) / 1000)) + "kbit";
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"ip", "link", "set", "lo", "mtu", "1500", "up"},
           {"tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate_arg, "burst", "32kb", "latency", "50ms"}}) {
    if (!run_process(argv).succeeded()) return fail("cannot shape loopback: " + argv[0] + " failed");
  }
  std::vector<ProcessSpec> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back({{self_executable(), "rate", bytes, "unlimited", "0", out},
                     {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", "29400"}}});
  }
  for (const auto& result : run_processes(ranks, std::chrono::seconds(30))) {
    if (!result.succeeded()) return fail("a rank failed under kernel shaping");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "shaped" && argc == 5) return shaped(argv[2], argv[3], argv[4]);
    Communicator c(GroupConfig::from_env());
    if (scenario == "exchange") return exchange(c);
    if (scenario == "rate" && argc == 6) return rate(c, std::stoull(argv[2]), argv[3], argv[4], argv[5]);
    if (scenario == "mismatch") {
      const std::string bits = c.rank() == c.world_size() - 1 ? "3" : "4";
      return expect_comm_error([&] { c.handshake({{"model", "gpt2"}, {"fw_bits", bits}}); }, "fw_bits");
    }
    if (scenario == "fails-early") {
      // The last rank fails before the handshake (a refused checkpoint, say):
      // its communicator ends with the exception; the others must name it.
      // The middle ranks come late, after rank 0 (the store's host) has
      // seen the failure: rank 0 must wait for them before it leaves.
      const int last = c.world_size() - 1;
      if (c.rank() == last) throw std::runtime_error("refused checkpoint");
      if (c.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return expect_comm_error([&] { c.handshake({{"model", "gpt2"}}); },
                               "rank " + std::to_string(last) + " failed");
    }
    if (scenario == "stopped") {
      // Rank 0 (the store's host) stops as under SIGSTOP: rank 1's
      // all-reduce fails naming it within the timeout and a few seconds.
      c.barrier();
      if (c.rank() == 0) {
        // Someone must end a stopped process: a child, once rank 1 is done.
        const pid_t self = ::getpid();
        const unsigned wait_s = unsigned(std::chrono::duration_cast<std::chrono::seconds>(c.config().timeout).count()) + 6;
        if (::fork() == 0) {
          ::sleep(wait_s);
          ::kill(self, SIGKILL);
          ::_exit(0);
        }
        ::raise(SIGSTOP);
      }
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor t = at::ones({4});
      const int status = expect_comm_error([&] { c.all_reduce_sum(t, "a sum"); }, "rank 0");
      const auto waited = std::chrono::steady_clock::now() - t0;
      // Before: the diagnosis waited a second timeout on the stopped store.
      if (waited > c.config().timeout + std::chrono::seconds(4)) {
        return fail("noticed only after " + std::to_string(std::chrono::duration<double>(waited).count()) + " s");
      }
      return status;
    }
    if (scenario == "slow-link") {
      // 1 kB at 8 kbit/s takes 1 s, 100 kB 100 s: beyond the timeout,
      // refused when sent (and an all-reduce the same), not held.
      if (c.rank() == 0) {
        c.set_link(1, {8000, 0});
        c.send(1, 0, std::vector<uint8_t>(1000, 1));
        const int sent = expect_comm_error([&] { c.send(1, 0, std::vector<uint8_t>(100000, 1)); }, "timeout");
        if (sent != 3) return sent;
        c.set_egress({8000, 0});
        at::Tensor big = at::zeros({100000});
        const int reduced = expect_comm_error([&] { c.all_reduce_sum(big, "a big sum"); }, "timeout");
        c.set_egress({});
        c.barrier();
        return reduced;
      }
      c.expect(0, 0, 1);
      c.recv(0, 0, "the small message");
      c.barrier();
      return 3;
    }
    if (scenario == "oversized") {
      c.barrier();
      if (c.rank() == 0) {
        // Its bytes are never taken: leave once the size has gone.
        c.send(1, 0, std::vector<uint8_t>(1000, 1));
        std::this_thread::sleep_for(std::chrono::seconds(1));
        _exit(0);
      }
      c.expect(0, 0, 1, 100);
      return expect_comm_error([&] { c.recv(0, 0, "a small message"); }, "at most 100");
    }
    if (scenario == "dead" || scenario == "hang") {
      c.barrier();
      if (c.rank() == 0) {
        if (scenario == "dead") _exit(0);  // no goodbye: as if the machine went away
        std::this_thread::sleep_for(std::chrono::seconds(60));
        return 0;
      }
      c.expect(0, 0);
      return expect_comm_error([&] { c.recv(0, 0, "activations of micro-batch 0"); }, "rank 0");
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return fail("usage: actkit_comm_peer exchange|mismatch|dead|hang|rate ...|shaped ...");
}
