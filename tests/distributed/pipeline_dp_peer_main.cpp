// One rank of a pipeline test with data-parallel replicas
// (tests/distributed/test_pipeline.cpp starts STAGES × REPLICAS of them): the small
// GPT-2 of pipeline_test_model.h on synthetic tokens, MICRO micro-batches
// per replica and step, a data-parallel optimizer across the replicas of
// each stage. Afterwards every rank writes its parameters to
// OUT/params-replica<r>-stage<s>.pt, and each replica's stage 0 the step
// losses of its micro-batches to OUT/losses-replica<r>.
//
//   actkit_pipeline_dp_peer STAGES REPLICAS MICRO OPTIMIZER WARMUP STEPS OUT
//
// OPTIMIZER: adam, lamb, onebit-adam, onebit-lamb; WARMUP: steps before
// the freeze (1-bit only). With REPLICAS = 1 the optimizer runs in one
// process per stage (no exchange): the reference. PEER_DIE_RANK=r makes
// rank r exit abruptly (status 9) after step 1, as a crash would; a rank
// whose error then names "rank r" exits with status 3 (else 1).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "actkit/comm/communicator.h"
#include "actkit/converters/state_dict.h"
#include "actkit/optim/adam.h"
#include "actkit/optim/lamb.h"
#include "actkit/pipeline/replica_groups.h"
#include "actkit/pipeline/stage_runner.h"
#include "pipeline_test_model.h"

using namespace actkit;

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: actkit_pipeline_dp_peer STAGES REPLICAS MICRO OPTIMIZER WARMUP STEPS OUT\n";
    return 2;
  }
  try {
    const int stages = std::stoi(argv[1]), replicas = std::stoi(argv[2]);
    const std::string name = argv[4], out = argv[7];
    Communicator world(GroupConfig::from_env());
    pipeline::ReplicaGroups groups = pipeline::make_replica_groups(world, stages, replicas);
    pipeline::PipelineConfig c = test_pipeline_config(stages);
    c.replicas = replicas;
    c.micro_batches = std::stoi(argv[3]);
    c.optimizer = name;
    c.lr = 1e-3;
    const bool onebit = name.rfind("onebit-", 0) == 0;
    const std::string algorithm = onebit ? name.substr(7) : name;
    optim::ExchangeOptions exchange{groups.stage_replicas.get(), onebit ? optim::Exchange::kOneBit : optim::Exchange::kFp32,
                                    onebit ? std::stoll(argv[5]) : 0};
    pipeline::Replication replication;
    replication.index = groups.replica;
    replication.exchanges = true;
    replication.make_optimizer = [&](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
      if (algorithm == "adam") return std::make_unique<optim::Adam>(params, optim::AdamOptions(c.lr), exchange);
      return std::make_unique<optim::Lamb>(params, optim::LambOptions(c.lr), exchange);
    };
    TestBatches all = test_batches(c, 0, c.micro_batches * replicas);
    pipeline::ReplicaShare share(*all.batches, groups.replica, c.micro_batches);
    pipeline::StageRunner runner(*groups.pipeline, c, share, replication);
    std::ofstream losses;
    if (groups.stage == 0) losses.open(out + "/losses-replica" + std::to_string(groups.replica));
    const int64_t steps = std::stoi(argv[6]);
    for (int64_t step = 0; step < steps; ++step) {
      const auto report = runner.train_step(step, c.lr);
      if (groups.stage == 0) losses << report.loss << "\n" << std::flush;
      const char* die = std::getenv("PEER_DIE_RANK");
      if (die != nullptr && std::atoi(die) == world.rank() && step == 1) std::_Exit(9);
    }
    save_tensors(runner.named_parameters(),
                 out + "/params-replica" + std::to_string(groups.replica) + "-stage" + std::to_string(groups.stage) +
                     ".pt");
    groups.pipeline->flush();
    world.barrier();
  } catch (const std::exception& e) {
    std::cerr << "pipeline dp peer: " << e.what() << "\n";
    const char* die = std::getenv("PEER_DIE_RANK");
    const std::string named = die != nullptr ? std::string("rank ") + die : "";
    return !named.empty() && std::string(e.what()).find(named) != std::string::npos ? 3 : 1;
  }
  return 0;
}
