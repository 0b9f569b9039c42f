// Communicator over c10d (see the header): forming the group and its
// subgroups, and byte messages. One sender thread per (peer, channel) with
// messages queued; one receiver thread per (peer, channel) that receives as
// many messages as expect() announced and no more, so no receive is left
// pending when the group is torn down (communicator_impl.cpp).
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "communicator_impl.h"
#include "listen_socket.h"

namespace actkit {

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
    s.hosts_store = config.store_file.empty() && config.rank == 0;
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
  const bool failing = std::uncaught_exceptions() > 0 && s.store;
  if (failing) {
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
  // The store goes with this process. Close the groups' connections first,
  // so that a peer blocked on this rank fails now; then stay until every
  // peer has marked its own way out (after its diagnosis, which reads the
  // store to name the rank that stopped), briefly and at most once. Without
  // it a peer failing a moment after rank 0 found the store gone and named
  // no one (seen under load: DataParallelRanks.DeadRankIsNamedWithinTheTimeout).
  // A dead peer never marks: the wait is bounded as the handshake's is.
  if (failing && s.hosts_store) {
    s.collective_group.reset();
    s.group.reset();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::min<std::chrono::steady_clock::duration>(s.config.timeout, std::chrono::seconds(10));
    try {
      for (int r = 1; r < s.config.world_size; ++r) {
        while (!s.store->check({abort_key(r)}) && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(kStorePoll);
        }
      }
    } catch (const std::exception&) {
      // Nothing more to wait for.
    }
  }
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
