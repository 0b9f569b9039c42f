// One stage of a pipeline test (tests/test_pipeline.cpp starts one per
// stage with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set): a small GPT-2
// on synthetic tokens, trained for a few steps; every stage then saves its
// parameters to OUT, and rank 0 writes the step losses to OUT/losses.
//
//   actkit_pipeline_peer SCHEDULE CODEC FW_BITS BW_BITS STEPS OUT [LEVEL [INIT]]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "actkit/comm/communicator.h"
#include "actkit/pipeline/stage_runner.h"
#include "actkit/pipeline/synthetic_source.h"
#include "pipeline_test_model.h"

using namespace actkit;

int main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: actkit_pipeline_peer SCHEDULE CODEC FW_BITS BW_BITS STEPS OUT [LEVEL [INIT]]\n";
    return 2;
  }
  try {
    Communicator comm(GroupConfig::from_env());
    pipeline::PipelineConfig c = test_pipeline_config(comm.world_size());
    c.schedule = pipeline::parse_schedule(argv[1]);
    c.forward_codec = pipeline::parse_boundary_codec(argv[2], std::stoi(argv[3]));
    c.backward_codec = pipeline::parse_boundary_codec(argv[2] == std::string("tah") ? "directq" : argv[2],
                                                      std::stoi(argv[4]));
    if (argc > 7) c.level = parse_level(argv[7]);
    pipeline::SyntheticSource data(c.micro_batch_size, c.seq_len, c.model_options.vocab_size, c.seed);
    pipeline::StageRunner runner(comm, c, data, argc > 8 ? argv[8] : "");
    std::ofstream losses;
    if (comm.rank() == 0) losses.open(std::string(argv[6]) + "/losses");
    for (int64_t step = 0; step < std::stoi(argv[5]); ++step) {
      const auto report = runner.train_step(step, c.lr);
      if (comm.rank() == 0) losses << report.loss << "\n";
    }
    runner.save(argv[6], std::stoi(argv[5]));
    runner.gather_reports();
    comm.flush();
    comm.barrier();
  } catch (const std::exception& e) {
    std::cerr << "pipeline peer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
