// An emulated network link: a rate and a one-way latency, for each directed
// link between two ranks, and the token bucket that paces a sender to it.
// Plain arithmetic on clocks, no c10d: the pacing decides *when* a message
// may leave, the communicator sends it then.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace actkit {

// How links are emulated: paced inside the process (LinkPacer) or shaped
// by the kernel (tc in network namespaces; the latency is still added
// in-process, as there is no netem).
enum class LinkMode { kProcess, kKernel };
const char* to_string(LinkMode mode);  // "process", "kernel"
// Throws InvalidInput naming the accepted values.
LinkMode parse_link_mode(const std::string& text);

struct LinkSpec {
  double bits_per_second = 0;  // 0: unlimited
  double latency_seconds = 0;
  bool limited() const { return bits_per_second > 0 || latency_seconds > 0; }
};

// "100Mbps", "1.5Gbps", "800kbps", "12500000bps", "unlimited" (also "0").
// Throws InvalidInput naming the text for anything else or a rate <= 0.
double parse_bandwidth(const std::string& text);
// "10ms", "0.5s", "250us", "0". Throws InvalidInput for anything else.
double parse_latency(const std::string& text);
// A comma-separated list of either, one value or `count` of them; one value
// is repeated `count` times. Throws InvalidInput for another length.
std::vector<double> parse_bandwidth_list(const std::string& text, size_t count);
std::vector<double> parse_latency_list(const std::string& text, size_t count);
// "100 Mbit/s", "unlimited".
std::string format_bandwidth(double bits_per_second);

// Paces one directed link: a message of n bytes handed over at time t
// starts when the link is free (the previous message has been serialized),
// takes n·8/rate on the wire and arrives `latency` later. Messages never
// overtake each other. Thread-safe (the channels of one link share it).
class LinkPacer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LinkPacer(LinkSpec spec = {}) : spec_(spec) {}
  const LinkSpec& spec() const { return spec_; }

  // Reserves the wire for `bytes` handed over at `now`; returns when the
  // message arrives at the far end (now itself on an unlimited link).
  Clock::time_point reserve(size_t bytes, Clock::time_point now);

 private:
  LinkSpec spec_;
  std::mutex mutex_;
  Clock::time_point wire_free_{};  // when the last reserved message has been serialized
};

}  // namespace actkit
