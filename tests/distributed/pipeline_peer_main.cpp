// One stage of a pipeline test (tests/distributed/test_pipeline.cpp starts one per
// stage with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set): a small GPT-2
// on synthetic tokens, trained for a few steps; every stage then saves its
// checkpoint to OUT, and rank 0 writes the step losses to OUT/losses. A
// rank that fails also writes its error to OUT/error-rank<RANK>, so a test
// can check what each rank said.
//
//   actkit_pipeline_peer SCHEDULE CODEC FW_BITS BW_BITS STEPS OUT [LEVEL [INIT]]
//
// From the environment (all but the first and PEER_WARMUP_STEPS for aqsgd runs):
//   PEER_POOL=N           synthetic examples seen in turn (default: 16 for aqsgd, else 0: all new)
//   PEER_BUFFERS=DIR      the buffer stores' directory (default OUT/buffers)
//   PEER_BUFFER_MEMORY=B  memory per store in bytes (-1: no limit; default)
//   PEER_WARMUP_STEPS=W   steps whose activations cross in full precision (default: 2 for aqsgd, else 0)
//   PEER_SAVE_AT=K:DIR    also checkpoint to DIR after K steps
//   PEER_RESUME=DIR       continue from DIR (INIT is then ignored)
//   PEER_CRASH=1          stop after the last step without saving, as a crash would
//   PEER_VALIDATE_EVERY=K also validate after every K steps (rank 0 writes the losses to OUT/validation)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "actkit/comm/communicator.h"
#include "actkit/pipeline/stage_runner.h"
#include "pipeline_test_model.h"

using namespace actkit;

namespace {
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: actkit_pipeline_peer SCHEDULE CODEC FW_BITS BW_BITS STEPS OUT [LEVEL [INIT]]\n";
    return 2;
  }
  try {
    Communicator comm(GroupConfig::from_env());
    const std::string codec = argv[2], out = argv[6];
    pipeline::PipelineConfig c = test_pipeline_config(comm.world_size());
    c.schedule = pipeline::parse_schedule(argv[1]);
    pipeline::BoundaryChoice choice;
    choice.codec = codec;
    choice.fw_bits = std::stoi(argv[3]);
    choice.bw_bits = std::stoi(argv[4]);
    const pipeline::BoundaryCodecs codecs = pipeline::boundary_codecs(choice);
    c.forward_codec = codecs.forward;
    c.backward_codec = codecs.backward;
    if (argc > 7) c.level = parse_level(argv[7]);
    const bool aqsgd = codec == "aqsgd";
    const int64_t pool = std::stoll(env_or("PEER_POOL", aqsgd ? "16" : "0"));
    c.buffers.dir = env_or("PEER_BUFFERS", out + "/buffers");
    c.buffers.memory_budget = std::stoll(env_or("PEER_BUFFER_MEMORY", "-1"));
    c.warmup_steps = std::stoll(env_or("PEER_WARMUP_STEPS", aqsgd ? "2" : "0"));
    c.buffers.check = true;
    const std::string resume = env_or("PEER_RESUME", "");
    const std::string save_at = env_or("PEER_SAVE_AT", "");
    const int64_t save_step = save_at.empty() ? -1 : std::stoll(save_at.substr(0, save_at.find(':')));
    const std::string save_dir = save_at.empty() ? "" : save_at.substr(save_at.find(':') + 1);

    TestBatches data = test_batches(c, pool, c.micro_batches);
    pipeline::StageRunner runner(comm, c, *data.batches, local_optimizer(c),
                                 resume.empty() ? (argc > 8 ? argv[8] : "") : resume, !resume.empty());
    const int64_t validate_every = std::stoll(env_or("PEER_VALIDATE_EVERY", "0"));
    std::ofstream losses, validation;
    if (comm.rank() == 0) {
      losses.open(out + "/losses");
      losses.precision(17);  // a test compares runs bit for bit
      if (validate_every > 0) validation.open(out + "/validation");
    }
    const int64_t steps = std::stoi(argv[5]);
    for (int64_t step = runner.start_step(); step < steps; ++step) {
      const auto report = runner.train_step(step, c.lr);
      if (comm.rank() == 0) losses << report.loss << "\n" << std::flush;
      if (step + 1 == save_step) runner.save(save_dir, save_step);
      if (validate_every > 0 && (step + 1) % validate_every == 0) {
        for (double loss : runner.validation_losses()) validation << loss << "\n";
      }
    }
    if (env_or("PEER_CRASH", "") == "1") return 0;
    runner.save(out, steps);
    runner.gather_reports();
    comm.flush();
    comm.barrier();
  } catch (const std::exception& e) {
    std::cerr << "pipeline peer: " << e.what() << "\n";
    std::ofstream(std::string(argv[6]) + "/error-rank" + env_or("RANK", "0")) << e.what();
    return 1;
  }
  return 0;
}
