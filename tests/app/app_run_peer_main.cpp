// One rank of a data-parallel or pipeline run as the commands run it
// (app::run_dp_worker, app::run_pipeline_rank), for the multi-rank tests of
// test_app_runs.cpp, which start it as several ranks under a short timeout.
//
//   actkit_app_run_peer MODE DELAY_MS DELAYED OUT
//
// MODE: dp-text (GPT-2 on synthetic tokens), dp-images (ResNet-18 on
// synthetic images, saved to OUT.ckpt) or pipeline (one stage, replicas =
// the world). Each evaluation or validation batch takes DELAY_MS longer on
// the ranks DELAYED names ("all" or one rank), as a large split or a
// loaded machine would make it. Rank 0 writes to OUT one line: the
// evaluation (or validation loss) in %.17g, and for dp-images the same
// evaluation of the saved model.pt in this one process.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "actkit/app/evaluation.h"
#include "actkit/app/dp_run.h"
#include "actkit/app/pipeline_run.h"
#include "actkit/converters/state_dict.h"
#include "app/small_run.h"

using namespace actkit;

namespace {

app::DpRunConfig dp_config(const std::string& mode, const std::string& out) {
  app::DpRunConfig c;
  c.optimizer = optim::parse_optimizer_choice("adam");
  c.group = GroupConfig::from_env();
  c.run.steps = 2;
  if (mode == "dp-text") {
    make_small_text_run(c.run, {1, 32, 2, 16, 0.0}, 64);
    c.batch = 4;
  } else {
    c.run.model.zoo = "resnet18";
    c.run.data.set = DataSet::kSynthetic;
    c.run.data.train_limit = 64;
    // Two evaluation batches (500 and 100), one per rank: rank 1 scores its
    // own with rank 0's running statistics.
    c.run.data.validation_limit = 600;
    c.batch = 8;
    c.run.checkpoint.save = out + ".ckpt";
  }
  return c;
}

app::PipelineRunConfig pipeline_config() {
  app::PipelineRunConfig c;
  pipeline::PipelineConfig& p = c.pipeline;
  c.run.model.shape = {1, 32, 2, 16, 0.0};
  p.stages = 1;
  c.group = GroupConfig::from_env();
  p.replicas = c.group.world_size;
  p.micro_batches = 2;
  p.micro_batch_size = 2;
  c.replica_optimizer = optim::parse_optimizer_choice("adam");
  c.run.data.set = DataSet::kSynthetic;
  c.run.data.train_limit = 32;
  c.validation_batches = 16;
  c.run.steps = 2;
  return c;
}

// The DP evaluation of `c`'s saved model in this process alone.
double evaluation_of_saved(const app::DpRunConfig& c) {
  auto model = make_model(c.run.model.zoo, app::training_model_options(c.run.model.zoo, c.run.model.shape));
  load_state_dict(*model, c.run.checkpoint.save + "/model.pt");
  return app::evaluate(*model, *TrainingData::open(app::data_options(c.run)), c.batch, at::kCPU);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: actkit_app_run_peer dp-text|dp-images|pipeline DELAY_MS all|RANK OUT\n";
    return 2;
  }
  try {
    const std::string mode = argv[1], delayed = argv[3], out = argv[4];
    const auto delay = std::chrono::milliseconds(std::stoi(argv[2]));
    const int rank = GroupConfig::from_env().rank;
    const bool slow = delayed == "all" || std::stoi(delayed) == rank;
    auto on_batch = [&](int64_t, int64_t) {
      if (slow) std::this_thread::sleep_for(delay);
    };
    std::string line;
    if (mode == "pipeline") {
      app::PipelineCallbacks callbacks;
      callbacks.on_validate = on_batch;
      const app::PipelineRunResult r = app::run_pipeline_rank(pipeline_config(), callbacks);
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%.17g", r.val_loss);
      if (r.leader) line = buffer;
    } else {
      const app::DpRunConfig c = dp_config(mode, out);
      app::DpCallbacks callbacks;
      callbacks.on_evaluate = on_batch;
      const app::DpRunResult r = app::run_dp_worker(c, callbacks);
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%.17g", r.evaluation);
      line = buffer;
      if (r.leader && mode == "dp-images") {
        std::snprintf(buffer, sizeof buffer, " %.17g", evaluation_of_saved(c));
        line += buffer;
      }
      if (!r.leader) line.clear();
    }
    if (rank == 0) {
      std::FILE* f = std::fopen(out.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write " + out);
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::cerr << "app run peer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
