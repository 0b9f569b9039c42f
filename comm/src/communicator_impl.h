// The state behind a Communicator (communicator.h), shared by the files
// that implement it: communicator.cpp (forming groups, byte messages),
// communicator_impl.cpp (the sender and receiver threads, waits on the
// store and the diagnosis of a failed peer) and communicator_checks.cpp
// (handshake, barrier, collectives). Internal to comm/.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actkit/comm/comm_error.h"
#include "actkit/comm/communicator.h"
#include "actkit/core/errors.h"
#include "process_group.h"

namespace actkit {
namespace comm_detail {
using Clock = std::chrono::steady_clock;

// Set by a rank whose communicator ends with an exception.
inline std::string abort_key(int rank) { return c10::str("abort/", rank); }

// How often a handshake looks at the store: a failed peer is noticed
// within this, at a cost of one small request per peer.
constexpr auto kStorePoll = std::chrono::milliseconds(20);

// How long the store gets to answer while a failure is diagnosed: a live
// store answers in microseconds on loopback, milliseconds across machines.
constexpr auto kDiagnosis = std::chrono::milliseconds(3000);

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What went wrong, without LibTorch's backtrace (a user reads it).
inline std::string reason(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
}

// Size messages and byte messages of one channel use separate c10d tags.
inline int size_tag(int channel) { return 2 * channel; }
inline int bytes_tag(int channel) { return 2 * channel + 1; }

struct Outgoing {
  std::vector<uint8_t> bytes;
  Clock::time_point deliver_at;
};

// Messages queued for one peer on one channel, and the thread sending them.
struct Outbound {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Outgoing> queue;
  bool busy = false;  // a message is being sent
  bool stop = false;
  Clock::time_point last_delivery{};  // when the emulated link delivers the last queued message
  std::string error;  // first failure; later sends refuse
  ChannelStats stats;
  std::thread thread;
};

// Messages expected from one peer on one channel, and the thread receiving them.
struct Inbound {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<int64_t> limits;  // size limit of each message announced by expect() and not yet received
  std::deque<std::vector<uint8_t>> ready;
  bool stop = false;
  std::string error;
  c10::intrusive_ptr<c10d::Work> pending;  // the receive in progress, for abort at teardown
  ChannelStats stats;
  std::thread thread;
};

// Whether the TCP store at addr:port answers a request within kDiagnosis.
// The request runs on a detached thread that owns everything it uses (a
// client's own waits outlast the limit it is given): one stuck on a
// stopped store is left behind and ends with its socket.
bool store_answers(const std::string& addr, int port);

}  // namespace comm_detail
using namespace comm_detail;  // the comm/ sources' own names

struct Communicator::Impl {
  GroupConfig config;
  // A subgroup's ranks in the outermost group (empty: this is that group),
  // and its name.
  std::vector<int> members;
  std::string name;
  c10::intrusive_ptr<c10d::Store> store;
  bool hosts_store = false;  // rank 0 of the outermost group over TCP: the store lives in this process
  // Byte messages go through a Gloo group whatever the backend: they are
  // host bytes, c10d's Gloo keeps each tag a stream of its own, and it
  // lets a receive wait ahead of need while sends to the same peer go on.
  // (NCCL matches point-to-point operations by order on one stream per
  // pair of ranks, tags ignored, so a receive posted ahead would hold up
  // the sends behind it.) The collectives go through `collective_group`: the
  // same Gloo group, or with --backend nccl an NCCL group on this rank's
  // GPU, `device`, through which their tensors are staged.
  c10::intrusive_ptr<detail::CollectiveGroup> group;
  c10::intrusive_ptr<detail::CollectiveGroup> collective_group;
  c10::Device device{c10::kCPU};
  std::vector<std::unique_ptr<LinkPacer>> pacers;  // per peer
  std::map<std::pair<int, int>, std::unique_ptr<Outbound>> outbound;
  std::map<std::pair<int, int>, std::unique_ptr<Inbound>> inbound;
  std::mutex maps_mutex;  // guards the two maps (entries are stable once made)
  int handshakes = 0;     // calls so far; every rank makes the same calls
  std::unique_ptr<LinkPacer> egress = std::make_unique<LinkPacer>();  // this rank's interface, for the collectives
  int64_t collectives = 0;  // entered so far (the store holds it as coll/<rank>)
  CollectiveStats collective_stats;

  // Runs the collective `start` begins: records its entry in the store,
  // waits for it within the timeout, then holds the caller until the
  // emulated interface would have carried `wire` bytes in `hops` hops.
  template <class Start>
  void collective(const std::string& what, int64_t wire, int hops, Start start) {
    const Clock::time_point t0 = Clock::now();
    Clock::time_point deliver = t0;
    if (egress->spec().limited()) {
      const auto latency = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(egress->spec().latency_seconds * std::max(0, hops - 1)));
      deliver = egress->reserve(size_t(wire), t0) + latency;
      check_pacing(*egress, deliver, t0, what, -1);  // before the peers can count this rank in
    }
    const int64_t seq = ++collectives;
    try {
      const std::string text = std::to_string(seq);
      store->set(c10::str("coll/", config.rank), std::vector<uint8_t>(text.begin(), text.end()));
    } catch (const std::exception& e) {
      throw CommError(c10::str(me(), ": ", what, ": the store at rank 0 is unreachable (is rank 0 alive?): ", reason(e)),
                      0);
    }
    std::string error;
    try {
      c10::intrusive_ptr<c10d::Work> work = start();
      if (!work->wait(config.timeout)) error = "timed out";
    } catch (const std::exception& e) {
      error = reason(e);
    }
    if (!error.empty()) throw lagging_rank_error(what, seq, error);
    std::this_thread::sleep_until(deliver);
    collective_stats.calls += 1;
    collective_stats.wire_bytes += wire;
    collective_stats.seconds += seconds_since(t0);
  }

  // After a failed collective: the rank that entered fewer collectives than
  // this one is the one to blame (it died or hangs before this call).
  CommError lagging_rank_error(const std::string& what, int64_t seq, const std::string& error);

  void check_bytes(const at::Tensor& t, const std::string& what, const char* name) const {
    if (t.scalar_type() != at::kByte || !t.device().is_cpu() || !t.is_contiguous()) {
      throw InvalidInput(c10::str(what, ": ", name, " must be a contiguous uint8 CPU tensor"));
    }
  }

  // Ranks as the user knows them: the outermost group's numbers.
  int global(int r) const { return members.empty() ? r : members[size_t(r)]; }

  // Every wait honours the timeout, the emulated link's too: a message the
  // link would still be carrying past it fails now, saying why, instead of
  // holding both ends (the receiver would time out blaming the sender).
  void check_pacing(const LinkPacer& pacer, Clock::time_point deliver, Clock::time_point now, const std::string& what,
                    int peer) const {
    const double seconds = std::chrono::duration<double>(deliver - now).count();
    const double limit = std::chrono::duration<double>(config.timeout).count();
    if (seconds <= limit) return;
    throw CommError(c10::str(me(), ": ", what, ": the emulated link at ", pacer.spec().bits_per_second,
                             " bit/s would deliver it in ", seconds, " s, beyond the ", limit,
                             " s timeout (a higher --bandwidth or --timeout)"),
                    peer);
  }

  // The value of `key`, which rank `r` sets, once it is there: polled, so
  // that a rank that failed meanwhile (abort_key) is named at once rather
  // than at the timeout. Throws CommError naming the failed rank, or `r`
  // at the timeout or when the store is gone.
  std::vector<uint8_t> await_key(const std::string& key, int r, const char* what);
  // Whether the peer of outermost rank `global_rank` has said in the store
  // that it failed. False for this rank, a rank outside the group, or when
  // the store is gone: the caller's own error then stands.
  bool has_aborted(int global_rank) const;

  std::string who(int r) const { return c10::str("rank ", global(r)); }
  std::string me() const {
    return members.empty() ? who(config.rank) : c10::str(who(config.rank), " (in group ", name, ")");
  }

  void check_peer(int peer, int channel, const char* what) const {
    if (peer < 0 || peer >= config.world_size || peer == config.rank) {
      throw InvalidInput(c10::str(what, ": peer ", peer, " is not another rank of the group of ", config.world_size));
    }
    if (channel < 0 || channel >= kMaxChannels) {
      throw InvalidInput(c10::str(what, ": channel ", channel, " outside 0..", kMaxChannels - 1));
    }
  }

  Outbound& outbound_for(int peer, int channel) {
    std::lock_guard<std::mutex> lock(maps_mutex);
    auto& slot = outbound[{peer, channel}];
    if (!slot) {
      slot = std::make_unique<Outbound>();
      Outbound* o = slot.get();
      o->thread = std::thread([this, o, peer, channel] { send_loop(*o, peer, channel); });
    }
    return *slot;
  }

  Inbound& inbound_for(int peer, int channel) {
    std::lock_guard<std::mutex> lock(maps_mutex);
    auto& slot = inbound[{peer, channel}];
    if (!slot) {
      slot = std::make_unique<Inbound>();
      Inbound* in = slot.get();
      in->thread = std::thread([this, in, peer, channel] { receive_loop(*in, peer, channel); });
    }
    return *slot;
  }

  // Forms this group's c10d groups over `store`, for rank `rank` of
  // `size`: Gloo always (under the prefix "gloo"), NCCL too for --backend
  // nccl (under "nccl").
  void form_groups(const c10::intrusive_ptr<c10d::Store>& over, int rank, int size, const GroupConfig& with);

  // `t` where the collectives' backend wants it: itself on the CPU (Gloo),
  // a copy on this rank's GPU (NCCL).
  at::Tensor on_device(const at::Tensor& t) const { return device.is_cpu() ? t : t.to(device); }

  // The thread of `o`: sends its queued messages in order, each when the
  // emulated link would deliver it; the first failure refuses every later one.
  void send_loop(Outbound& o, int peer, int channel);

  // The thread of `in`: receives the messages expect() announced, each
  // within its size limit; a broken stream fails every later recv.
  void receive_loop(Inbound& in, int peer, int channel);

  // Starts a c10d receive into `tensors` and waits for it. False when
  // teardown aborted it.
  bool start_and_wait(Inbound& in, std::vector<at::Tensor>& tensors, int peer, int tag);
};

}  // namespace actkit
