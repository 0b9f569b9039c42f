// One rank of a multi-process data-parallel test (tests/distributed/test_data_parallel.cpp
// starts two to four of these with RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT set). Each scenario exits 0 when everything it checked held,
// 3 when it caught the CommError it was meant to see, 1 otherwise (the
// reason on stderr).
//
//   actkit_dp_peer allreduce      the 1-bit allreduce equals a single-process
//                                 simulation of every rank's arithmetic, bit for bit
//   actkit_dp_peer warmup         adam / lamb over fp32 and in a 1-bit warm-up equal
//                                 LibTorch's Adam / a single-process LAMB on the
//                                 averaged gradients, bit for bit (2 ranks)
//   actkit_dp_peer freeze         1-bit Adam and LAMB freeze after the warm-up on every
//                                 rank and keep every rank's parameters identical
//   actkit_dp_peer resume DIR     a checkpoint in the compression stage resumes bit for bit
//   actkit_dp_peer nan            a NaN on one rank skips the step on every rank
//   actkit_dp_peer dead           the last rank exits after two steps; the others fail
//   actkit_dp_peer mismatch       the last rank has another warm-up; every rank refuses
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "actkit/comm/communicator.h"
#include "actkit/comm/compressed_allreduce.h"
#include "actkit/comm/onebit_codec.h"
#include "actkit/optim/adam.h"
#include "actkit/optim/lamb.h"

using namespace actkit;

namespace {

int fail(const std::string& why) {
  std::cerr << "dp peer: " << why << "\n";
  return 1;
}

// Values one rank contributes at one step: deterministic in (rank, step).
at::Tensor input_of(int rank, int step, int64_t n) {
  at::Generator g = at::detail::createCPUGenerator(uint64_t(1000 * rank + step + 1));
  return at::randn({n}, g, at::kFloat) * float(1 + rank);
}

bool same(const at::Tensor& a, const at::Tensor& b) { return a.sizes() == b.sizes() && at::equal(a, b); }

// The single-process simulation: every rank's worker error and the
// servers' errors, chunk by chunk, in the order the allreduce promises.
struct Simulation {
  int n;
  int64_t chunk, numel;
  std::vector<at::Tensor> worker_errors, server_errors;

  Simulation(int world, int64_t size, int64_t chunk_numel) : n(world), chunk(chunk_numel), numel(size) {
    for (int r = 0; r < n; ++r) {
      worker_errors.push_back(at::zeros({n * chunk}, at::kFloat));
      server_errors.push_back(at::zeros({chunk}, at::kFloat));
    }
  }
  at::Tensor step(const std::vector<at::Tensor>& inputs) {
    const int64_t cb = onebit_chunk_bytes(chunk);
    std::vector<std::vector<uint8_t>> encoded(size_t(n), std::vector<uint8_t>(size_t(n * cb)));
    for (int r = 0; r < n; ++r) {
      at::Tensor padded = at::zeros({n * chunk}, at::kFloat);
      padded.narrow(0, 0, numel).copy_(inputs[size_t(r)]);
      for (int i = 0; i < n; ++i) {
        at::Tensor e = worker_errors[size_t(r)].narrow(0, i * chunk, chunk);
        onebit_encode(padded.narrow(0, i * chunk, chunk), e, encoded[size_t(r)].data() + i * cb);
      }
    }
    at::Tensor out = at::zeros({n * chunk}, at::kFloat);
    for (int i = 0; i < n; ++i) {
      at::Tensor mean = at::zeros({chunk}, at::kFloat);
      for (int r = 0; r < n; ++r) onebit_decode(encoded[size_t(r)].data() + i * cb, mean, true);
      mean.div_(float(n));
      std::vector<uint8_t> served(static_cast<size_t>(cb));
      onebit_encode(mean, server_errors[size_t(i)], served.data());
      at::Tensor slot = out.narrow(0, i * chunk, chunk);
      onebit_decode(served.data(), slot);
    }
    return out.narrow(0, 0, numel).clone();
  }
};

int allreduce(Communicator& c) {
  const int n = c.world_size(), me = c.rank();
  for (int64_t size : {int64_t(1), int64_t(1003), int64_t(40000)}) {
    CompressedAllreduce ar(&c, size);
    Simulation sim(n, size, ar.chunk_numel());
    at::Tensor sum_in = at::zeros({size}), sum_out = at::zeros({size});
    for (int step = 0; step < 6; ++step) {
      std::vector<at::Tensor> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, step, size));
      at::Tensor mine = inputs[size_t(me)].clone();
      if (!ar.average(mine, "test allreduce")) return fail("a finite input was refused");
      const at::Tensor expected = sim.step(inputs);
      if (!same(mine, expected)) return fail("size " + std::to_string(size) + " step " + std::to_string(step) +
                                              ": the allreduce differs from the simulation");
      if (!same(ar.worker_error(), sim.worker_errors[size_t(me)]) ||
          !same(ar.server_error(), sim.server_errors[size_t(me)])) {
        return fail("the error feedback differs from the simulation");
      }
    }
  }
  return 0;
}

// A small "model": tensors of several sizes, one empty, one never given a
// gradient.
std::vector<torch::Tensor> make_params() {
  torch::manual_seed(7);
  return {torch::randn({16, 8}), torch::randn({8}), torch::randn({0}), torch::randn({3, 5, 2}), torch::randn({4})};
}
constexpr size_t kNoGrad = 4;

void set_grads(std::vector<torch::Tensor>& ps, int rank, int step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i == kNoGrad) continue;
    at::Generator g = at::detail::createCPUGenerator(uint64_t(97 * rank + 13 * step + int(i) + 5));
    ps[i].mutable_grad() = ps[i].detach() * 0.1 + at::randn(ps[i].sizes(), g) * float(rank + 1);
  }
}

std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// The gradient every rank's average gives: (Σ_r g_r) / N.
void set_mean_grads(std::vector<torch::Tensor>& ps, int world, int step) {
  std::vector<torch::Tensor> sum;
  for (int r = 0; r < world; ++r) {
    auto copy = clone_params(ps);
    set_grads(copy, r, step);
    for (size_t i = 0; i < ps.size(); ++i) {
      if (i == kNoGrad) continue;
      if (sum.size() <= i) sum.resize(ps.size());
      sum[i] = sum[i].defined() ? sum[i] + copy[i].grad() : copy[i].grad().clone();
    }
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i != kNoGrad) ps[i].mutable_grad() = sum[i] / float(world);
  }
}

bool same_params(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i].detach(), b[i].detach())) return false;
  }
  return true;
}

int warmup(Communicator& c) {
  const int n = c.world_size(), me = c.rank();
  const int steps = 5;
  for (const std::string algo : {"adam", "lamb"}) {
    for (optim::Exchange ex : {optim::Exchange::kFp32, optim::Exchange::kOneBit}) {
      auto mine = clone_params(make_params());
      auto ref = clone_params(make_params());
      optim::ExchangeOptions eo{&c, ex, steps + 1};  // the freeze comes after the last step here
      std::unique_ptr<torch::optim::Optimizer> dp, single;
      if (algo == "adam") {
        dp = std::make_unique<optim::Adam>(mine, optim::AdamOptions(0.01).weight_decay(0.01), eo);
        single = std::make_unique<torch::optim::Adam>(ref, torch::optim::AdamOptions(0.01).weight_decay(0.01));
      } else {
        dp = std::make_unique<optim::Lamb>(mine, optim::LambOptions(0.01).weight_decay(0.01), eo);
        single = std::make_unique<optim::Lamb>(ref, optim::LambOptions(0.01).weight_decay(0.01));
      }
      for (int s = 0; s < steps; ++s) {
        set_grads(mine, me, s);
        dp->step();
        set_mean_grads(ref, n, s);
        single->step();
        if (!same_params(mine, ref)) {
          return fail(algo + " over " + optim::to_string(ex) + ": step " + std::to_string(s) +
                      " differs from the single-process optimizer on the averaged gradient");
        }
      }
      if (!same(mine[kNoGrad].detach(), make_params()[kNoGrad])) return fail("a parameter without gradient moved");
    }
  }
  return 0;
}

// Every rank's parameters, gathered; true when they are all the same bytes.
bool identical_everywhere(Communicator& c, const std::vector<torch::Tensor>& ps) {
  std::vector<at::Tensor> flat;
  for (const auto& p : ps) flat.push_back(p.detach().reshape({-1}));
  at::Tensor mine = at::cat(flat).contiguous();
  at::Tensor bytes = at::from_blob(mine.data_ptr(), {int64_t(mine.nbytes())}, at::kByte).clone();
  at::Tensor all = at::empty({c.world_size() * bytes.numel()}, at::kByte);
  c.all_gather(bytes, all, "parameter comparison");
  for (int r = 1; r < c.world_size(); ++r) {
    if (!at::equal(all.narrow(0, 0, bytes.numel()), all.narrow(0, r * bytes.numel(), bytes.numel()))) return false;
  }
  return true;
}

std::unique_ptr<optim::DataParallelOptimizer> make_optimizer(const std::string& algo, std::vector<torch::Tensor> ps,
                                                             Communicator* c, int64_t warmup) {
  optim::ExchangeOptions eo{c, optim::Exchange::kOneBit, warmup};
  if (algo == "adam") return std::make_unique<optim::Adam>(ps, optim::AdamOptions(0.01), eo);
  return std::make_unique<optim::Lamb>(ps, optim::LambOptions(0.01).weight_decay(0.01), eo);
}

int freeze(Communicator& c) {
  for (const std::string algo : {"adam", "lamb"}) {
    auto ps = clone_params(make_params());
    auto opt = make_optimizer(algo, ps, &c, 3);
    c.handshake(opt->handshake_facts());
    for (int s = 0; s < 8; ++s) {
      set_grads(ps, c.rank(), s);
      opt->step();
      if (opt->compressing() != (s >= 2)) return fail(algo + ": the freeze is not after step 3");
      if (!identical_everywhere(c, ps)) return fail(algo + ": ranks' parameters differ after step " + std::to_string(s));
    }
    const auto& st = opt->exchange_stats();
    if (st.warmup_steps != 3 || st.compressed_steps != 5) return fail(algo + ": wrong stage counts");
    // Each compressed step carries about 1/32 of an fp32 allreduce.
    const double per_warmup = double(st.warmup_bytes) / 3, per_compressed = double(st.compressed_bytes) / 5;
    if (c.world_size() > 1 && !(per_compressed < per_warmup / 4)) return fail(algo + ": compressed steps not smaller");
  }
  return 0;
}

int resume(Communicator& c, const std::string& dir) {
  for (const std::string algo : {"adam", "lamb"}) {
    const std::string file = dir + "/" + algo + "-rank" + std::to_string(c.rank()) + ".pt";
    auto ps = clone_params(make_params());
    auto opt = make_optimizer(algo, ps, &c, 3);
    std::vector<torch::Tensor> saved_params;
    for (int s = 0; s < 9; ++s) {
      if (s == 5) {
        torch::save(*opt, file);
        saved_params = clone_params(ps);
      }
      set_grads(ps, c.rank(), s);
      opt->step();
    }
    // Resume at step 5 with fresh objects, as a new process would.
    auto again = clone_params(saved_params);
    auto opt2 = make_optimizer(algo, again, &c, 3);
    torch::load(*opt2, file);
    if (!opt2->compressing() || opt2->steps() != 5) return fail(algo + ": the checkpoint lost the stage or step");
    for (int s = 5; s < 9; ++s) {
      set_grads(again, c.rank(), s);
      opt2->step();
    }
    if (!same_params(ps, again)) return fail(algo + ": the resumed run differs from the uninterrupted one");
    // Another warm-up is refused, naming it.
    auto other = make_optimizer(algo, clone_params(saved_params), &c, 4);
    try {
      torch::load(*other, file);
      return fail(algo + ": a checkpoint of another warm-up was accepted");
    } catch (const InvalidInput& e) {
      if (std::string(e.what()).find("warm-up") == std::string::npos) return fail(std::string("unclear: ") + e.what());
    }
  }
  return 0;
}

int nan_step(Communicator& c) {
  for (const std::string algo : {"adam", "lamb"}) {
    auto ps = clone_params(make_params());
    auto opt = make_optimizer(algo, ps, &c, 2);
    for (int s = 0; s < 6; ++s) {
      set_grads(ps, c.rank(), s);
      const bool poison = (s == 1 || s == 4) && c.rank() == c.world_size() - 1;  // one warm-up, one compressed
      if (poison) ps[0].mutable_grad()[3][2] = std::numeric_limits<float>::quiet_NaN();
      const auto before = clone_params(ps);
      opt->step();
      const bool skip = s == 1 || s == 4;
      if (opt->last_step_skipped() != skip) return fail(algo + ": step " + std::to_string(s) + " skip flag wrong");
      if (skip && !same_params(before, ps)) return fail(algo + ": a skipped step moved parameters");
      if (!identical_everywhere(c, ps)) return fail(algo + ": ranks differ after a skipped step");
    }
    if (opt->skipped_steps() != 2 || opt->steps() != 4) return fail(algo + ": skipped steps miscounted");
  }
  return 0;
}

int dead(Communicator& c) {
  auto ps = clone_params(make_params());
  auto opt = make_optimizer("lamb", ps, &c, 1);
  for (int s = 0; s < 4; ++s) {
    if (s == 2 && c.rank() == c.world_size() - 1) std::_Exit(0);  // dies without a word
    set_grads(ps, c.rank(), s);
    try {
      opt->step();
    } catch (const CommError& e) {
      std::cerr << e.what() << "\n";
      const std::string named = "rank " + std::to_string(c.world_size() - 1);
      return std::string(e.what()).find(named) != std::string::npos ? 3 : fail("the error does not name " + named);
    }
  }
  return fail("no error although a rank died");
}

int mismatch(Communicator& c) {
  auto ps = clone_params(make_params());
  auto opt = make_optimizer("adam", ps, &c, c.rank() == c.world_size() - 1 ? 5 : 4);
  try {
    c.handshake(opt->handshake_facts());
  } catch (const CommError& e) {
    std::cerr << e.what() << "\n";
    return std::string(e.what()).find("warmup steps") != std::string::npos ? 3 : fail("unclear mismatch error");
  }
  return fail("different warm-ups were accepted");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: actkit_dp_peer SCENARIO [ARGS]");
  const std::string scenario = argv[1];
  try {
    GroupConfig config = GroupConfig::from_env();
    Communicator c(config);
    int rc = 1;
    if (scenario == "allreduce") rc = allreduce(c);
    else if (scenario == "warmup") rc = warmup(c);
    else if (scenario == "freeze") rc = freeze(c);
    else if (scenario == "resume" && argc > 2) rc = resume(c, argv[2]);
    else if (scenario == "nan") rc = nan_step(c);
    else if (scenario == "dead") rc = dead(c);
    else if (scenario == "mismatch") rc = mismatch(c);
    else return fail("unknown scenario " + scenario);
    if (rc == 0) c.barrier();
    return rc;
  } catch (const CommError& e) {
    std::cerr << "dp peer: " << e.what() << "\n";
    return scenario == "dead" || scenario == "mismatch" ? 3 : 1;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
