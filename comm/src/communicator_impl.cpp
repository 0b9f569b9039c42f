// Communicator::Impl's threads and waits (communicator_impl.h): the
// sender and receiver thread of each (peer, channel), the polled waits on
// the store, and the diagnosis that names a failed peer.
#include "communicator_impl.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>
#include <future>
#include <memory>

namespace actkit {
namespace comm_detail {

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

}  // namespace comm_detail

CommError Communicator::Impl::lagging_rank_error(const std::string& what, int64_t seq, const std::string& error) {
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

std::vector<uint8_t> Communicator::Impl::await_key(const std::string& key, int r, const char* what) {
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

bool Communicator::Impl::has_aborted(int global_rank) const {
  for (int r = 0; r < config.world_size; ++r) {
    if (r == config.rank || global(r) != global_rank) continue;
    try {
      return store->check({abort_key(r)});
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

void Communicator::Impl::form_groups(const c10::intrusive_ptr<c10d::Store>& over, int rank, int size,
                                     const GroupConfig& with) {
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

void Communicator::Impl::send_loop(Outbound& o, int peer, int channel) {
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

void Communicator::Impl::receive_loop(Inbound& in, int peer, int channel) {
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

bool Communicator::Impl::start_and_wait(Inbound& in, std::vector<at::Tensor>& tensors, int peer, int tag) {
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

}  // namespace actkit
