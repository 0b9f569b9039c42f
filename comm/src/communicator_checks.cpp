// Communicator's checks and collectives (see the header): the startup
// handshake, the barrier, and the all-reduce, all-to-all and all-gather
// that every rank enters in the same order, each paced by the emulated
// interface and failing within the timeout naming the rank to blame.
#include <sstream>

#include "communicator_impl.h"

namespace actkit {

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
  } catch (const CommError& e) {
    failure = std::current_exception();
    peer_failed = s.has_aborted(e.peer());  // not a peer that never came
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

}  // namespace actkit
