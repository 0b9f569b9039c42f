#include "actkit/core/enum_names.h"
#include "actkit/pipeline/pipeline_config.h"

#include <c10/util/StringUtil.h>

#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::pipeline {

namespace {
constexpr EnumName<TiedGradient> kTiedGradientNames[] = {
    {TiedGradient::kCodec, "codec"}, {TiedGradient::kFeedback, "feedback"}, {TiedGradient::kFp32, "fp32"}};
}  // namespace

const char* to_string(TiedGradient tied) { return enum_name(kTiedGradientNames, tied); }

TiedGradient parse_tied_gradient(const std::string& name) {
  return parse_enum(kTiedGradientNames, name, "tied gradient");
}


void PipelineConfig::validate() const {
  if (stages < 1) throw InvalidInput(c10::str("stages must be >= 1, got ", stages));
  if (micro_batches < 1 || micro_batches > kMaxMicroBatches) {
    throw InvalidInput(c10::str("micro-batches must be in 1..", kMaxMicroBatches, ", got ", micro_batches));
  }
  if (micro_batch_size < 1) throw InvalidInput(c10::str("micro-batch size must be >= 1, got ", micro_batch_size));
  if (seq_len < 1 || seq_len > model_options.max_positions) {
    throw InvalidInput(c10::str("sequence length ", seq_len, " outside 1..", model_options.max_positions));
  }
  if (!(lr > 0) || !std::isfinite(lr)) throw InvalidInput(c10::str("--lr: a finite rate > 0, got ", lr));
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) throw InvalidInput("--weight-decay: finite and >= 0");
  if (in_flight != 0 && in_flight < stages) {
    throw InvalidInput(c10::str("in flight: at least the number of stages (", stages, "), or 0, got ", in_flight));
  }
  if (replicas < 1) throw InvalidInput(c10::str("replicas must be >= 1, got ", replicas));
  const size_t links = size_t(stages - 1);
  if ((!forward_links.empty() && forward_links.size() != links) ||
      (!backward_links.empty() && backward_links.size() != links)) {
    throw InvalidInput(c10::str("give one link per boundary: ", links, " for ", stages, " stages"));
  }
  if (backward_codec.kind == BoundaryCodec::kAqsgd) {
    throw InvalidInput("aqsgd compresses activations; gradients go back as directq (--bw-bits)");
  }
  if (uses_error_feedback() && backward_codec.kind == BoundaryCodec::kFp32) {
    throw InvalidInput("error feedback (--bw-feedback, --tied-gradient feedback) needs a lossy gradient codec, not fp32");
  }
  if (stages < 2 && (backward_feedback || tied_gradient != TiedGradient::kCodec)) {
    throw InvalidInput("--bw-feedback and --tied-gradient are about what crosses between stages: give --stages 2 or more");
  }
  if (forward_codec.kind == BoundaryCodec::kAqsgd) {
    if (buffers.dir.empty()) throw InvalidInput("aqsgd: no buffer directory (--buffer-dir)");
    if (buffers.memory_budget < -1) throw InvalidInput("aqsgd: the buffer memory budget must be >= 0, or -1 for none");
    if (buffers.prefetch_depth < 0) throw InvalidInput("aqsgd: the prefetch depth must be >= 0");
  }
  if (warmup_steps < 0) throw InvalidInput("pipeline: the full-precision warm-up must be >= 0 steps");
  if (forward_codec.kind == BoundaryCodec::kTah && model_options.hidden % forward_codec.tah_group != 0) {
    throw InvalidInput(c10::str("tah: the hidden size ", model_options.hidden, " is not a multiple of the tile size ",
                                forward_codec.tah_group));
  }
}

std::vector<std::pair<std::string, std::string>> PipelineConfig::facts() const {
  const ModelOptions& o = model_options;
  auto links_text = [](const std::vector<LinkSpec>& links) {
    std::string s;
    for (const auto& l : links) s += c10::str(l.bits_per_second, "/", l.latency_seconds, ";");
    return s;
  };
  return {
      {"model", model},
      {"shape", c10::str("layers=", o.layers, " hidden=", o.hidden, " heads=", o.heads, " vocab=", o.vocab_size,
                         " positions=", o.max_positions, " dropout=", o.dropout)},
      {"seq_len", std::to_string(seq_len)},
      {"stages", replicas == 1 ? std::to_string(stages) : c10::str(stages, " x ", replicas, " replicas")},
      {"micro_batches", c10::str(micro_batches, "x", micro_batch_size)},
      {"schedule", c10::str(to_string(schedule), " in_flight=", in_flight)},
      // A warm-up of another codec than aqsgd's only when set, so that a checkpoint from before it still resumes.
      {"forward_codec", forward_codec.describe() + (forward_codec.kind != BoundaryCodec::kAqsgd && warmup_steps > 0
                                                        ? c10::str(" warmup_steps=", warmup_steps)
                                                        : "")},
      // Suffixes only when set, so that a checkpoint of a run without them still resumes.
      {"backward_codec", backward_codec.describe() + (backward_feedback ? " feedback" : "") +
                             (tied_gradient == TiedGradient::kCodec ? "" : c10::str(" tied=", to_string(tied_gradient)))},
      {"buffers", forward_codec.kind != BoundaryCodec::kAqsgd
                      ? "none"
                      : c10::str(to_string(buffers.format), " warmup_steps=", warmup_steps,
                                 " check=", buffers.check)},
      {"level", level.spec},
      {"balance", to_string(balance)},
      {"optimizer", c10::str(optimizer, " lr=", lr, " wd=", weight_decay)},
      {"seed", std::to_string(seed)},
      {"links", links_text(forward_links) + "|" + links_text(backward_links) + "|" + to_string(link_mode)},
      {"run", run},
  };
}

}  // namespace actkit::pipeline
