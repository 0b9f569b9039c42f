// Communicator over c10d (see the header). One sender thread per (peer,
// channel) with messages queued; one receiver thread per (peer, channel)
// that receives as many messages as expect() announced and no more, so no
// receive is left pending when the group is torn down.
#include "actkit/comm/communicator.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "listen_socket.h"
#include "process_group.h"

namespace actkit {
namespace {

using Clock = std::chrono::steady_clock;

// Set by a rank whose communicator ends with an exception.
std::string abort_key(int rank) { return c10::str("abort/", rank); }

// How often a handshake looks at the store: a failed peer is noticed
// within this, at a cost of one small request per peer.
constexpr auto kStorePoll = std::chrono::milliseconds(20);

// How long the store gets to answer while a failure is diagnosed: a live
// store answers in microseconds on loopback, milliseconds across machines.
constexpr auto kDiagnosis = std::chrono::milliseconds(3000);

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What went wrong, without LibTorch's backtrace (a user reads it).
std::string reason(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
}

// Size messages and byte messages of one channel use separate c10d tags.
int size_tag(int channel) { return 2 * channel; }
int bytes_tag(int channel) { return 2 * channel + 1; }

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
bool store_answers(const std::string& addr, int port) {
  auto answered = std::make_shared<std::promise<void>>();
  std::future<void> done = answered->get_future();
  std::thread([addr, port, answered] {
    try {
      c10d::TCPStoreOptions probe;
      probe.port = uint16_t(port);
      probe.isServer = false;
      probe.waitWorkers = false;
      probe.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kDiagnosis);
      c10d::TCPStore(addr, probe).check({"actkit/probe"});
      answered->set_value();
    } catch (...) {
      answered->set_exception(std::current_exception());
    }
  }).detach();
  if (done.wait_for(kDiagnosis) != std::future_status::ready) return false;
  try {
    done.get();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

struct Communicator::Impl {
  GroupConfig config;
  // A subgroup's ranks in the outermost group (empty: this is that group),
  // and its name.
  std::vector<int> members;
  std::string name;
  c10::intrusive_ptr<c10d::Store> store;
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
  CommError lagging_rank_error(const std::string& what, int64_t seq, const std::string& error) {
    // A stopped rank 0 holds the TCP store too: ask it through a client of
    // its own, on a thread of its own, and give up on it after kDiagnosis
    // (a client's own waits outlast the limit it is given), so that the
    // diagnosis adds seconds, not another timeout.
    try {
      if (config.store_file.empty() && !store_answers(config.master_addr, config.master_port)) {
        throw CommError("the store does not answer", 0);
      }
    } catch (const std::exception&) {
      return CommError(c10::str(me(), ": ", what, " failed (", error,
                                ") and the store at rank 0 does not answer: is rank 0 alive (or stopped)?"),
                       0);
    }
    for (int r = 0; r < config.world_size; ++r) {
      if (r == config.rank) continue;
      int64_t theirs = 0;
      try {
        const std::string key = c10::str("coll/", r);
        if (store->check({key})) {
          const auto v = store->get(key);
          theirs = std::stoll(std::string(v.begin(), v.end()));
        }
      } catch (const std::exception&) {
        return CommError(c10::str(me(), ": ", what, " failed (", error,
                                  ") and the store at rank 0 is unreachable: is rank 0 alive?"),
                         0);
      }
      if (theirs < seq) {
        return CommError(c10::str(me(), ": ", what, " failed: ", who(r), " has not arrived (it entered ", theirs,
                                  " collectives, this rank ", seq, "): is ", who(r), " alive? (", error, ")"),
                         global(r));
      }
    }
    return CommError(c10::str(me(), ": ", what, " failed: a peer left during the transfer: ", error), -1);
  }

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
  std::vector<uint8_t> await_key(const std::string& key, int r, const char* what) {
    const Clock::time_point deadline = Clock::now() + config.timeout;
    try {
      while (!store->check({key})) {
        for (int peer = 0; peer < config.world_size; ++peer) {
          if (peer != config.rank && store->check({abort_key(peer)})) {
            throw CommError(c10::str(me(), ": ", what, ": ", who(peer), " failed (its own error says why)"),
                            global(peer));
          }
        }
        if (Clock::now() >= deadline) {
          throw CommError(c10::str(me(), ": ", what, ": ", who(r), " did not arrive within ",
                                   std::chrono::duration<double>(config.timeout).count(), " s: is ", who(r), " alive?"),
                          global(r));
        }
        std::this_thread::sleep_for(kStorePoll);
      }
      return store->get(key);
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError(c10::str(me(), ": ", what, ": the store at rank 0 is unreachable (is rank 0 alive?): ", reason(e)),
                      0);
    }
  }
  // Whether a peer has said in the store that it failed. False when the
  // store is gone: the caller's own error then stands.
  bool any_peer_aborted() const {
    try {
      for (int peer = 0; peer < config.world_size; ++peer) {
        if (peer != config.rank && store->check({abort_key(peer)})) return true;
      }
    } catch (const std::exception&) {
    }
    return false;
  }
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
  void form_groups(const c10::intrusive_ptr<c10d::Store>& over, int rank, int size, const GroupConfig& with) {
    detail::BackendGroup gloo =
        detail::make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("gloo", over), rank, size, with);
    group = gloo.group;
    collective_group = gloo.group;
    device = gloo.device;
    if (with.backend == CommBackend::kNccl) {
      detail::BackendGroup nccl =
          detail::make_nccl_group(c10::make_intrusive<c10d::PrefixStore>("nccl", over), rank, size, with);
      collective_group = nccl.group;
      device = nccl.device;
    }
  }

  // `t` where the collectives' backend wants it: itself on the CPU (Gloo),
  // a copy on this rank's GPU (NCCL).
  at::Tensor on_device(const at::Tensor& t) const { return device.is_cpu() ? t : t.to(device); }

  void send_loop(Outbound& o, int peer, int channel) {
    std::unique_lock<std::mutex> lock(o.mutex);
    for (;;) {
      o.cv.wait(lock, [&] { return o.stop || !o.queue.empty(); });
      if (o.queue.empty()) return;  // stopped with nothing left to send
      Outgoing m = std::move(o.queue.front());
      o.queue.pop_front();
      o.busy = true;
      lock.unlock();
      std::string error;
      try {
        std::this_thread::sleep_until(m.deliver_at);  // the emulated link
        std::vector<at::Tensor> size{at::full({1}, int64_t(m.bytes.size()), at::kLong)};
        group->send(size, peer, size_tag(channel))->wait(config.timeout);
        if (!m.bytes.empty()) {
          std::vector<at::Tensor> data{at::from_blob(m.bytes.data(), {int64_t(m.bytes.size())}, at::kByte)};
          group->send(data, peer, bytes_tag(channel))->wait(config.timeout);
        }
      } catch (const std::exception& e) {
        error = reason(e);
      }
      lock.lock();
      o.busy = false;
      if (!error.empty() && o.error.empty()) {
        o.error = c10::str(me(), ": sending on channel ", channel, " to ", who(peer), " failed: ", error);
        o.queue.clear();  // nothing after a failed message can arrive in order
      }
      o.cv.notify_all();
    }
  }

  void receive_loop(Inbound& in, int peer, int channel) {
    std::unique_lock<std::mutex> lock(in.mutex);
    for (;;) {
      in.cv.wait(lock, [&] { return in.stop || !in.limits.empty(); });
      if (in.stop) return;
      const int64_t limit = in.limits.front();
      lock.unlock();
      std::vector<uint8_t> bytes;
      std::string error;
      try {
        // Tensors the c10d Work owns: a receive that outlives this loop (a
        // timeout, then a late message) still writes into live memory.
        std::vector<at::Tensor> size{at::empty({1}, at::kLong)};
        if (!start_and_wait(in, size, peer, size_tag(channel))) return;  // aborted at teardown
        const int64_t n = size[0].item<int64_t>();
        if (n < 0 || n > limit) {
          error = c10::str("it announced a message of ", n, " bytes where at most ", limit,
                           " were expected (a corrupt stream, or a different program)");
        } else if (n > 0) {
          std::vector<at::Tensor> data{at::empty({n}, at::kByte)};
          if (!start_and_wait(in, data, peer, bytes_tag(channel))) return;
          const uint8_t* p = data[0].data_ptr<uint8_t>();
          bytes.assign(p, p + n);
        }
      } catch (const std::exception& e) {
        error = reason(e);
      }
      lock.lock();
      if (!error.empty()) {
        in.error = error;
        in.cv.notify_all();
        return;  // the stream from this peer is broken: every later recv fails
      }
      in.limits.pop_front();
      in.ready.push_back(std::move(bytes));
      in.cv.notify_all();
    }
  }

  // Starts a c10d receive into `tensors` and waits for it. False when
  // teardown aborted it.
  bool start_and_wait(Inbound& in, std::vector<at::Tensor>& tensors, int peer, int tag) {
    c10::intrusive_ptr<c10d::Work> work = group->recv(tensors, peer, tag);
    {
      std::lock_guard<std::mutex> lock(in.mutex);
      if (in.stop) {
        work->abort();
        return false;
      }
      in.pending = work;
    }
    const bool done = work->wait(config.timeout);
    std::lock_guard<std::mutex> lock(in.mutex);
    in.pending.reset();
    return done;
  }
};

Communicator::Communicator() : impl_(std::make_unique<Impl>()) {}

Communicator::Communicator(const GroupConfig& config) : impl_(std::make_unique<Impl>()) {
  config.validate();
  Impl& s = *impl_;
  s.config = config;
  try {
    c10::intrusive_ptr<c10d::Store> root;
    if (!config.store_file.empty()) {
      root = c10::make_intrusive<c10d::FileStore>(config.store_file, config.world_size);
      root->setTimeout(config.timeout);
    } else {
      c10d::TCPStoreOptions options;
      options.port = uint16_t(config.master_port);
      options.isServer = config.rank == 0;
#if defined(ACTKIT_STORE_LISTEN_FD)
      if (options.isServer) options.masterListenFd = listen_socket(config.master_addr, config.master_port, 0);
#endif
      options.numWorkers = size_t(config.world_size);
      options.waitWorkers = true;
      options.timeout = config.timeout;
      root = c10::make_intrusive<c10d::TCPStore>(config.master_addr, options);
    }
    s.store = c10::make_intrusive<c10d::PrefixStore>("actkit", root);
    s.form_groups(s.store, config.rank, config.world_size, config);
  } catch (const InvalidInput&) {
    throw;  // a backend this build or machine lacks: nothing to wait for
  } catch (const CommError&) {
    throw;  // already says what failed (the store's port)
  } catch (const std::exception& e) {
    // A port another program holds fails at once, not after the timeout: say which.
    const std::string why = reason(e);
    const bool in_use = why.find("Address already in use") != std::string::npos;
    throw CommError(in_use ? c10::str("rank ", config.rank, ": port ", config.master_port, " on ", config.master_addr,
                                      " is in use by another program: give another --port (MASTER_PORT)")
                           : c10::str("rank ", config.rank, ": the group of ", config.world_size, " at ",
                                      config.master_addr, ":", config.master_port, " did not form within ",
                                      std::chrono::duration<double>(config.timeout).count(), " s: ", why),
                    -1);
  }
  for (int r = 0; r < config.world_size; ++r) s.pacers.push_back(std::make_unique<LinkPacer>());
}

std::unique_ptr<Communicator> Communicator::subgroup(const std::string& name, const std::vector<int>& members) {
  Impl& s = *impl_;
  if (name.empty() || name.find('/') != std::string::npos) {
    throw InvalidInput(c10::str("subgroup: the name '", name, "' must be non-empty and without '/'"));
  }
  int index = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= s.config.world_size || (i > 0 && members[i] <= members[i - 1])) {
      throw InvalidInput(c10::str("subgroup ", name, ": members must be ascending ranks of a group of ",
                                  s.config.world_size, ", got ", c10::Join(",", members)));
    }
    if (members[i] == s.config.rank) index = int(i);
  }
  if (index < 0) {
    throw InvalidInput(c10::str("subgroup ", name, ": ", s.me(), " is not among its members ", c10::Join(",", members)));
  }
  std::unique_ptr<Communicator> sub(new Communicator());
  Impl& t = *sub->impl_;
  t.config = s.config;
  t.config.rank = index;
  t.config.world_size = int(members.size());
  for (int m : members) t.members.push_back(s.global(m));
  t.name = s.members.empty() ? name : s.name + "/" + name;
  try {
    t.store = c10::make_intrusive<c10d::PrefixStore>("group/" + name, s.store);
    t.form_groups(t.store, index, int(members.size()), s.config);
  } catch (const std::exception& e) {
    throw CommError(c10::str(s.me(), ": the group ", name, " of ranks ", c10::Join(",", t.members),
                             " did not form within ", std::chrono::duration<double>(s.config.timeout).count(),
                             " s: ", reason(e)),
                    -1);
  }
  for (size_t r = 0; r < members.size(); ++r) t.pacers.push_back(std::make_unique<LinkPacer>());
  return sub;
}

Communicator::~Communicator() {
  Impl& s = *impl_;
  // Destroyed by an exception (a refused checkpoint, bad data, a crash of
  // this rank's own making): say so in the store, so that peers waiting in
  // a handshake fail at once naming this rank instead of at their timeout.
  if (std::uncaught_exceptions() > 0 && s.store) {
    try {
      s.store->set(abort_key(s.config.rank), std::vector<uint8_t>{1});
    } catch (const std::exception&) {
      // The store is gone with rank 0: the peers notice that themselves.
    }
  }
  // Let queued sends leave (each bounded by the timeout), then stop.
  for (auto& [key, o] : s.outbound) {
    {
      std::lock_guard<std::mutex> lock(o->mutex);
      o->stop = true;
    }
    o->cv.notify_all();
  }
  for (auto& [key, o] : s.outbound) o->thread.join();
  for (auto& [key, in] : s.inbound) {
    std::lock_guard<std::mutex> lock(in->mutex);
    in->stop = true;
    if (in->pending) in->pending->abort();  // only after a failure: normally nothing is pending
    in->cv.notify_all();
  }
  for (auto& [key, in] : s.inbound) in->thread.join();
}

int Communicator::rank() const { return impl_->config.rank; }
int Communicator::world_size() const { return impl_->config.world_size; }
const GroupConfig& Communicator::config() const { return impl_->config; }

void Communicator::set_link(int peer, LinkSpec spec) {
  impl_->check_peer(peer, 0, "set_link");
  if (spec.bits_per_second < 0 || spec.latency_seconds < 0) throw InvalidInput("set_link: negative rate or latency");
  impl_->pacers[size_t(peer)] = std::make_unique<LinkPacer>(spec);
}

void Communicator::send(int peer, int channel, std::vector<uint8_t> bytes) {
  Impl& s = *impl_;
  s.check_peer(peer, channel, "send");
  Outbound& o = s.outbound_for(peer, channel);
  const size_t wire_bytes = bytes.size() + sizeof(int64_t);
  std::lock_guard<std::mutex> lock(o.mutex);
  if (!o.error.empty()) throw CommError(o.error, peer);
  const Clock::time_point now = Clock::now();
  const Clock::time_point deliver_at = s.pacers[size_t(peer)]->reserve(wire_bytes, now);
  s.check_pacing(*s.pacers[size_t(peer)], deliver_at, now, c10::str("a message to ", s.who(peer)), s.global(peer));
  o.stats.messages += 1;
  o.stats.bytes += int64_t(wire_bytes);
  o.last_delivery = std::max(o.last_delivery, deliver_at);
  o.queue.push_back({std::move(bytes), deliver_at});
  o.cv.notify_all();
}

void Communicator::flush() {
  Impl& s = *impl_;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::pair<std::pair<int, int>, Outbound*>> all;
  {
    std::lock_guard<std::mutex> lock(s.maps_mutex);
    for (auto& [key, o] : s.outbound) all.push_back({key, o.get()});
  }
  for (auto& [key, o] : all) {
    std::unique_lock<std::mutex> lock(o->mutex);
    const Clock::time_point t1 = Clock::now();
    // The emulated link holds messages back until it would have delivered
    // them; the timeout counts from the last of those deliveries.
    const Clock::time_point deadline = std::max(t1, o->last_delivery) + s.config.timeout;
    const bool done = o->cv.wait_until(lock, deadline, [&] {
      return !o->error.empty() || (o->queue.empty() && !o->busy);
    });
    o->stats.wait_seconds += seconds_since(t1);
    if (!o->error.empty()) throw CommError(o->error, s.global(key.first));
    if (!done) {
      throw CommError(c10::str(s.me(), ": messages to ", s.who(key.first), " on channel ", key.second,
                               " still unsent after ", seconds_since(t0), " s: is ", s.who(key.first), " alive?"),
                      s.global(key.first));
    }
  }
}

void Communicator::expect(int peer, int channel, int count, int64_t max_bytes) {
  Impl& s = *impl_;
  s.check_peer(peer, channel, "expect");
  if (count < 0) throw InvalidInput("expect: negative count");
  if (max_bytes < 0 || max_bytes > kMaxMessageBytes) {
    throw InvalidInput(c10::str("expect: a message limit of ", max_bytes, " bytes is outside 0..", kMaxMessageBytes));
  }
  Inbound& in = s.inbound_for(peer, channel);
  std::lock_guard<std::mutex> lock(in.mutex);
  for (int i = 0; i < count; ++i) in.limits.push_back(max_bytes);
  in.cv.notify_all();
}

std::vector<uint8_t> Communicator::recv(int peer, int channel, const std::string& what) {
  Impl& s = *impl_;
  s.check_peer(peer, channel, "recv");
  Inbound& in = s.inbound_for(peer, channel);
  std::unique_lock<std::mutex> lock(in.mutex);
  if (in.ready.empty() && in.limits.empty() && in.error.empty()) {
    throw InvalidInput(c10::str("recv of ", what, " from rank ", peer, " on channel ", channel,
                                ": no message was announced with expect()"));
  }
  const Clock::time_point t0 = Clock::now();
  // The receiver thread's own wait ends at the timeout; the margin lets
  // its error (which says more) arrive first.
  const bool arrived = in.cv.wait_for(lock, s.config.timeout + std::chrono::seconds(2),
                                      [&] { return !in.ready.empty() || !in.error.empty(); });
  in.stats.wait_seconds += seconds_since(t0);
  if (!in.ready.empty()) {
    std::vector<uint8_t> bytes = std::move(in.ready.front());
    in.ready.pop_front();
    in.stats.messages += 1;
    in.stats.bytes += int64_t(bytes.size() + sizeof(int64_t));
    return bytes;
  }
  if (!arrived) {
    throw CommError(c10::str(s.me(), ": timed out after ", seconds_since(t0), " s waiting for ", what, " from ",
                             s.who(peer), ": is ", s.who(peer), " alive?"),
                    s.global(peer));
  }
  throw CommError(c10::str(s.me(), ": waiting for ", what, " from ", s.who(peer), ": ", in.error), s.global(peer));
}

void Communicator::handshake(const std::vector<std::pair<std::string, std::string>>& facts) {
  Impl& s = *impl_;
  std::ostringstream mine;
  for (const auto& [name, value] : facts) mine << name << '\n' << value << '\n';
  const std::string text = mine.str();
  const int round = s.handshakes++;  // each call compares under keys of its own
  const auto key = [round](int r) { return c10::str("handshake/", round, "/", r); };
  try {
    s.store->set(key(s.config.rank), std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception& e) {
    throw CommError(c10::str(s.me(), ": handshake: the store at rank 0 is unreachable: ", reason(e)), 0);
  }
  // The first difference found, with the rank it names.
  std::string problem;
  int problem_rank = -1;
  // A peer that failed or never came (await_key's error), kept until this
  // rank has said it is done, so that rank 0 can wait for the others.
  std::exception_ptr failure;
  bool peer_failed = false;
  try {
    for (int r = 0; r < s.config.world_size && problem.empty(); ++r) {
      if (r == s.config.rank) continue;
      const std::vector<uint8_t> theirs = s.await_key(key(r), r, "handshake");
      std::istringstream in(std::string(theirs.begin(), theirs.end()));
      std::string name, value;
      size_t i = 0;
      while (problem.empty() && std::getline(in, name) && std::getline(in, value)) {
        if (i >= facts.size() || facts[i].first != name) {
          problem = c10::str(s.me(), ": handshake: ", s.who(r), " reports '", name, "' where this rank has '",
                             i < facts.size() ? facts[i].first : "nothing", "' (a different program version?)");
        } else if (facts[i].second != value) {
          problem = c10::str(s.me(), ": handshake: ", name, " differs: ", s.who(r), " has '", value, "', ",
                             s.who(s.config.rank), " has '", facts[i].second, "'");
        }
        ++i;
      }
      if (problem.empty() && i != facts.size()) {
        problem = c10::str(s.me(), ": handshake: ", s.who(r), " reports ", i, " settings, this rank ", facts.size(),
                           " (a different program version?)");
      }
      if (!problem.empty()) problem_rank = r;
    }
  } catch (const CommError&) {
    failure = std::current_exception();
    peer_failed = s.any_peer_aborted();
  }
  // Every rank says when it has compared. Rank 0 holds the store: leaving on
  // a difference, or on a peer that failed, before the others have seen it
  // would leave them "store unreachable" (or "rank 0 failed") instead of
  // naming the cause themselves, so it waits for them, briefly and at most
  // once. A peer that never came is not waited for: every rank has already
  // spent the timeout on it.
  const auto done_key = [round](int r) { return c10::str("handshake/", round, "/done/", r); };
  try {
    s.store->set(done_key(s.config.rank), std::vector<uint8_t>{1});
  } catch (const std::exception&) {
    // Only rank 0's waiting reads it; a store that is gone ends the run anyway.
  }
  if (problem.empty() && !failure) return;
  if (s.config.rank == 0 && (failure == nullptr || peer_failed)) {
    const Clock::time_point deadline =
        Clock::now() + std::min<Clock::duration>(s.config.timeout, std::chrono::seconds(10));
    try {
      for (int r = 1; r < s.config.world_size; ++r) {
        while (!s.store->check({done_key(r)}) && !s.store->check({abort_key(r)}) && Clock::now() < deadline) {
          std::this_thread::sleep_for(kStorePoll);
        }
      }
    } catch (const std::exception&) {
      // The difference (or the failed peer) is the error to report.
    }
  }
  if (failure) std::rethrow_exception(failure);
  throw CommError(problem, s.global(problem_rank));
}

void Communicator::barrier() {
  Impl& s = *impl_;
  try {
    s.group->barrier()->wait(s.config.timeout);
  } catch (const std::exception& e) {
    throw CommError(c10::str(s.me(), ": barrier failed: ", reason(e)), -1);
  }
}

void Communicator::set_egress(LinkSpec spec) {
  if (spec.bits_per_second < 0 || spec.latency_seconds < 0) throw InvalidInput("set_egress: negative rate or latency");
  impl_->egress = std::make_unique<LinkPacer>(spec);
}

void Communicator::all_reduce_sum(at::Tensor& t, const std::string& what) {
  Impl& s = *impl_;
  const at::ScalarType type = t.scalar_type();
  if ((type != at::kDouble && type != at::kFloat && type != at::kHalf) || !t.device().is_cpu() || !t.is_contiguous()) {
    throw InvalidInput(c10::str(what, ": all_reduce_sum takes a contiguous fp64, fp32 or fp16 CPU tensor"));
  }
  const int n = s.config.world_size;
  if (n == 1) return;
  const int64_t wire = 2 * (n - 1) * t.nbytes() / n;
  at::Tensor staged = s.on_device(t);
  s.collective(what, wire, 2 * (n - 1), [&] {
    std::vector<at::Tensor> tensors{staged};
    return s.collective_group->allreduce(tensors);
  });
  if (!staged.is_same(t)) t.copy_(staged);
}

void Communicator::all_to_all(const at::Tensor& in, at::Tensor& out, const std::string& what) {
  Impl& s = *impl_;
  s.check_bytes(in, what, "the input");
  s.check_bytes(out, what, "the output");
  const int n = s.config.world_size;
  if (in.numel() != out.numel() || in.numel() % n != 0) {
    throw InvalidInput(c10::str(what, ": all_to_all needs input and output of one size divisible by ", n, ", got ",
                                in.numel(), " and ", out.numel()));
  }
  if (n == 1) {
    out.copy_(in);
    return;
  }
  at::Tensor input = s.on_device(in);
  at::Tensor output = s.device.is_cpu() ? out : at::empty_like(out, at::TensorOptions().device(s.device));
  s.collective(what, (n - 1) * in.numel() / n, 1, [&] {
    std::vector<int64_t> counts;  // empty: equal splits
    return s.collective_group->alltoall_base(output, input, counts, counts);
  });
  if (!output.is_same(out)) out.copy_(output);
}

void Communicator::all_gather(const at::Tensor& in, at::Tensor& out, const std::string& what) {
  Impl& s = *impl_;
  s.check_bytes(in, what, "the input");
  s.check_bytes(out, what, "the output");
  const int n = s.config.world_size;
  if (out.numel() != n * in.numel()) {
    throw InvalidInput(c10::str(what, ": all_gather needs an output of ", n, " × ", in.numel(), " bytes, got ",
                                out.numel()));
  }
  if (n == 1) {
    out.copy_(in);
    return;
  }
  at::Tensor output = s.device.is_cpu() ? out : at::empty_like(out, at::TensorOptions().device(s.device));
  s.collective(what, (n - 1) * in.numel(), n - 1, [&] {
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < n; ++r) outputs[0].push_back(output.narrow(0, r * in.numel(), in.numel()));
    std::vector<at::Tensor> inputs{s.on_device(in)};
    return s.collective_group->allgather(outputs, inputs);
  });
  if (!output.is_same(out)) out.copy_(output);
}

CollectiveStats Communicator::collective_stats() const { return impl_->collective_stats; }

ChannelStats Communicator::sent_stats(int peer, int channel) const {
  std::lock_guard<std::mutex> lock(impl_->maps_mutex);
  const auto it = impl_->outbound.find({peer, channel});
  if (it == impl_->outbound.end()) return {};
  std::lock_guard<std::mutex> inner(it->second->mutex);
  return it->second->stats;
}

ChannelStats Communicator::received_stats(int peer, int channel) const {
  std::lock_guard<std::mutex> lock(impl_->maps_mutex);
  const auto it = impl_->inbound.find({peer, channel});
  if (it == impl_->inbound.end()) return {};
  std::lock_guard<std::mutex> inner(it->second->mutex);
  return it->second->stats;
}

}  // namespace actkit
