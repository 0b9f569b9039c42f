#include "actkit/pipeline/stage_boundaries.h"

#include <c10/util/StringUtil.h>

#include <cstring>

#include "actkit/core/errors.h"
#include "aqsgd_boundaries.h"

namespace actkit::pipeline {

uint64_t message_seed(const PipelineConfig& config, int stage, int replica, int64_t step, int micro_batch,
                      SeedKind kind) {
  // m(ξ)'s rounding draws from a stream of its own (another multiplier).
  const uint64_t stream = kind == SeedKind::kBufferRounding ? 0xD1B54A32D192ED03ull : 0x9E3779B97F4A7C15ull;
  return config.seed * stream ^ (uint64_t(step) << 24) ^ (uint64_t(micro_batch) << 8) ^ (uint64_t(stage) << 2) ^
         uint64_t(kind) ^ (uint64_t(replica) << 48);
}

std::string boundary_name(int from, int to) { return c10::str("boundary ", from, "->", to); }

int64_t boundary_limit(const PipelineConfig& c) {
  // fp32 values, the header (rank <= 16, the codec extension) and the
  // checksum: a peer announcing more is not sending this tensor.
  return c.micro_batch_size * c.seq_len * c.model_options.hidden * int64_t(sizeof(float)) + 4096;
}

std::vector<uint8_t> StageBoundaries::receive_bytes(const std::string& which) {
  return comm_.recv(at_.stage - 1, kActivations, "activations of " + which);
}

std::vector<int64_t> StageBoundaries::activation_shape() const {
  return {config_.micro_batch_size, config_.seq_len, config_.model_options.hidden};
}

namespace {

// What a float tensor of `numel` values costs on the wire uncompressed.
int64_t fp32_message_bytes(int64_t numel) {
  return numel * int64_t(sizeof(float)) + Communicator::kMessageHeaderBytes;
}

}  // namespace

std::string micro_batch_name(int64_t step, int micro_batch) {
  return c10::str("micro-batch ", micro_batch, ", step ", step);
}

void StageBoundaries::begin_step(int micro_batches) {
  if (!at_.first()) comm_.expect(at_.stage - 1, kActivations, micro_batches, boundary_limit(config_));
  if (!at_.last(config_)) comm_.expect(at_.stage + 1, kGradients, micro_batches, boundary_limit(config_));
}

void StageBoundaries::send(const at::Tensor& y, const std::vector<int64_t>& ids, int64_t step, int micro_batch) {
  raw_forward_bytes_ += fp32_message_bytes(y.numel());
  send_activations(y, ids, step, micro_batch);
}

void StageBoundaries::send_validation(const at::Tensor& y, int64_t i) {
  raw_forward_bytes_ += fp32_message_bytes(y.numel());
  // aqsgd sends what it has not seen in full precision.
  const BoundaryCodec codec = config_.forward_codec.kind == BoundaryCodec::kAqsgd ? BoundaryCodec{} : config_.forward_codec;
  comm_.send(at_.stage + 1, kActivations, encode_boundary(y, codec, seed(-1 - i, 0, SeedKind::kActivations)));
}

at::Tensor StageBoundaries::receive_validation(int64_t i) {
  const std::string which = c10::str("validation batch ", i);
  return decode_boundary(receive_bytes(which),
                         boundary_name(at_.stage - 1, at_.stage) + " (activations of " + which + ")",
                         activation_shape());
}

void StageBoundaries::send_gradient(const at::Tensor& g, int64_t step, int m) {
  raw_backward_bytes_ += fp32_message_bytes(g.numel());
  const uint64_t s = seed(step, m, SeedKind::kGradients);
  comm_.send(at_.stage - 1, kGradients,
             config_.backward_feedback ? feedback_.encode(c10::str("gradients/", m), g, config_.backward_codec, s)
                                       : encode_boundary(g, config_.backward_codec, s));
}

at::Tensor StageBoundaries::receive_gradient(int64_t step, int m, const std::vector<int64_t>& shape) {
  const std::string which = micro_batch_name(step, m);
  const auto bytes = comm_.recv(at_.stage + 1, kGradients, "gradients of " + which);
  return decode_boundary(bytes, boundary_name(at_.stage + 1, at_.stage) + " (gradients of " + which + ")", shape);
}

void StageBoundaries::exchange_tied_gradients(int64_t step,
                                              const std::vector<std::pair<std::string, std::vector<int>>>& shared,
                                              const torch::OrderedDict<std::string, at::Tensor>& named) {
  if (shared.empty()) return;
  const int stage = at_.stage;
  for (const auto& [name, owners] : shared) {
    for (int o : owners) {
      if (o != stage) comm_.expect(o, kTiedGradients, 1, named[name].numel() * int64_t(sizeof(float)) + 4096);
    }
  }
  // The backward codec's size: the exchange costs what a boundary gradient
  // of that size costs (exact for fp32).
  const BoundaryCodec codec = config_.tied_gradient == TiedGradient::kFp32 ? BoundaryCodec{} : config_.backward_codec;
  std::vector<at::Tensor> own_decoded;
  for (const auto& [name, owners] : shared) {
    const at::Tensor p = named[name];
    const at::Tensor g = p.grad().defined() ? p.grad() : at::zeros_like(p);
    const uint64_t s = seed(step, 0, SeedKind::kTiedGradient);
    std::vector<uint8_t> bytes;
    if (config_.tied_gradient == TiedGradient::kFeedback) {
      own_decoded.emplace_back();
      bytes = feedback_.encode("tied/" + name, g, codec, s, &own_decoded.back());
    } else {
      bytes = encode_boundary(g, codec, s);
      own_decoded.push_back(decode_boundary(bytes, "this stage's own gradient of " + name));
    }
    for (int o : owners) {
      if (o != stage) {
        tied_bytes_ += int64_t(bytes.size()) + Communicator::kMessageHeaderBytes;
        comm_.send(o, kTiedGradients, bytes);
      }
    }
  }
  for (size_t i = 0; i < shared.size(); ++i) {
    const auto& [name, owners] = shared[i];
    at::Tensor p = named[name];
    at::Tensor total;
    for (int o : owners) {
      at::Tensor g = own_decoded[i];
      if (o != stage) {
        const std::string what = c10::str("the gradient of ", name, " in step ", step);
        g = decode_boundary(comm_.recv(o, kTiedGradients, what), c10::str("stage ", o, "->", stage, " (", what, ")"),
                            p.sizes().vec());
      }
      total = total.defined() ? total + g : g.clone();
    }
    p.mutable_grad() = total;
  }
}

std::vector<LinkReport> StageBoundaries::link_reports() const {
  const int stage = at_.stage;
  std::vector<LinkReport> links;
  if (!at_.last(config_)) {
    const ChannelStats s = comm_.sent_stats(stage + 1, kActivations);
    links.push_back({stage, stage + 1, true, s.bytes, 0, raw_forward_bytes_});
  }
  if (!at_.first()) {
    const ChannelStats s = comm_.sent_stats(stage - 1, kGradients);
    links.push_back({stage, stage - 1, false, s.bytes, 0, raw_backward_bytes_});
    // The wait on the link into this stage is this stage's to report.
    links.push_back({stage - 1, stage, true, 0, comm_.received_stats(stage - 1, kActivations).wait_seconds, 0});
  }
  if (!at_.last(config_)) {
    links.push_back({stage + 1, stage, false, 0, comm_.received_stats(stage + 1, kGradients).wait_seconds, 0});
  }
  return links;
}

void StageBoundaries::add_to(StageSummary& summary) const { summary.tied_bytes = tied_bytes_; }

namespace {

// Every message through the forward codec, but the warm-up's in fp32
// (messages say their codec: the receiver needs no switch).
class PlainBoundaries : public StageBoundaries {
 public:
  PlainBoundaries(Communicator& comm, const PipelineConfig& config, const StagePosition& at)
      : StageBoundaries(comm, config, at) {}
  void send_activations(const at::Tensor& y, const std::vector<int64_t>&, int64_t step, int micro_batch) override {
    const BoundaryCodec codec = step < config_.warmup_steps ? BoundaryCodec{} : config_.forward_codec;
    comm_.send(at_.stage + 1, kActivations,
               encode_boundary(y.detach(), codec, seed(step, micro_batch, SeedKind::kActivations)));
  }
  at::Tensor receive(const std::vector<int64_t>&, int64_t step, int micro_batch) override {
    const std::string which = micro_batch_name(step, micro_batch);
    return decode_boundary(receive_bytes(which),
                           boundary_name(at_.stage - 1, at_.stage) + " (activations of " + which + ")",
                           activation_shape());
  }
};

}  // namespace

std::unique_ptr<StageBoundaries> StageBoundaries::make(Communicator& comm, const PipelineConfig& config,
                                                       const StagePosition& at, int64_t resume_step) {
  if (config.forward_codec.kind == BoundaryCodec::kAqsgd) return make_aqsgd_boundaries(comm, config, at, resume_step);
  return std::make_unique<PlainBoundaries>(comm, config, at);
}

}  // namespace actkit::pipeline
