#include "actkit/pipeline/stage_boundaries.h"

#include <c10/util/StringUtil.h>

#include <cstring>

#include "actkit/core/errors.h"
#include "actkit/pipeline/aqsgd_boundary.h"

namespace actkit::pipeline {

uint64_t rounding_seed(const PipelineConfig& config, const StagePosition& at, int64_t step, int micro_batch,
                       int direction) {
  return config.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(step) << 24) ^ (uint64_t(micro_batch) << 8) ^
         (uint64_t(at.stage) << 2) ^ uint64_t(direction) ^ (uint64_t(at.replica) << 48);
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

void StageBoundaries::send_validation(const at::Tensor& y, int64_t i) {
  const BoundaryCodec codec =
      config_.forward_codec.kind == BoundaryCodec::kAqsgd ? parse_boundary_codec("fp32", 0) : config_.forward_codec;
  comm_.send(at_.stage + 1, kActivations, encode_boundary(y, codec, rounding_seed(config_, at_, -1 - i, 0, 0)));
}

at::Tensor StageBoundaries::receive_validation(int64_t i) {
  const std::string which = c10::str("validation batch ", i);
  return decode_boundary(receive_bytes(which),
                         boundary_name(at_.stage - 1, at_.stage) + " (activations of " + which + ")",
                         activation_shape());
}

namespace {

std::string micro_batch_name(int64_t step, int micro_batch) {
  return c10::str("micro-batch ", micro_batch, ", step ", step);
}

// Every message through the forward codec.
class PlainBoundaries : public StageBoundaries {
 public:
  PlainBoundaries(Communicator& comm, const PipelineConfig& config, const StagePosition& at)
      : StageBoundaries(comm, config, at) {}
  void send(const at::Tensor& y, const std::vector<int64_t>&, int64_t step, int micro_batch) override {
    comm_.send(at_.stage + 1, kActivations,
               encode_boundary(y.detach(), config_.forward_codec, rounding_seed(config_, at_, step, micro_batch, 0)));
  }
  at::Tensor receive(const std::vector<int64_t>&, int64_t step, int micro_batch) override {
    const std::string which = micro_batch_name(step, micro_batch);
    return decode_boundary(receive_bytes(which),
                           boundary_name(at_.stage - 1, at_.stage) + " (activations of " + which + ")",
                           activation_shape());
  }
};

// AQ-SGD: an AqsgdBoundary on each side this stage holds, the sender's
// toward stage + 1 and the receiver's from stage - 1.
class AqsgdBoundaries : public StageBoundaries {
 public:
  AqsgdBoundaries(Communicator& comm, const PipelineConfig& config, const StagePosition& at, int64_t resume_step)
      : StageBoundaries(comm, config, at) {
    const std::vector<int64_t> row{config.seq_len, config.model_options.hidden};
    const auto [send_error, recv_error] = on_each_side([&](bool sender) {
      const int from = sender ? at.stage : at.stage - 1;
      (sender ? send_ : recv_) = std::make_unique<AqsgdBoundary>(
          store_name(from, from + 1, sender ? "sender" : "receiver"), config.buffers, config.forward_codec, row,
          resume_step);
    });
    compare_checkpoints(resume_step >= 0 ? c10::str("resuming at step ", resume_step) : "opening the buffers",
                        send_error, recv_error);
  }

  bool needs_example_ids() const override { return send_ || recv_; }

  void begin_step(int micro_batches) override {
    if (recv_ && config_.buffers.check) comm_.expect(at_.stage - 1, kBufferChecks, micro_batches, 64);
  }

  void prefetch(const std::vector<int64_t>& ids) override {
    if (send_) send_->prefetch(ids);
    if (recv_) recv_->prefetch(ids);
  }

  void send(const at::Tensor& y, const std::vector<int64_t>& ids, int64_t step, int micro_batch) override {
    comm_.send(at_.stage + 1, kActivations, send_->send(y, ids, step, buffer_seed(step, micro_batch, at_.stage)));
    if (config_.buffers.check) {
      const uint32_t crc = send_->last_checksum();
      std::vector<uint8_t> b(sizeof(crc));
      std::memcpy(b.data(), &crc, sizeof(crc));
      comm_.send(at_.stage + 1, kBufferChecks, b);
    }
  }

  at::Tensor receive(const std::vector<int64_t>& ids, int64_t step, int micro_batch) override {
    const std::string which = micro_batch_name(step, micro_batch);
    const std::string where = boundary_name(at_.stage - 1, at_.stage) + " (activations of " + which + ")";
    const auto bytes = receive_bytes(which);
    at::Tensor x = recv_->receive(bytes, ids, step, buffer_seed(step, micro_batch, at_.stage - 1), where);
    if (config_.buffers.check) {
      const auto theirs = comm_.recv(at_.stage - 1, kBufferChecks, "the buffer checksum of " + which);
      const uint32_t mine = recv_->last_checksum();
      if (theirs.size() != sizeof(mine) || std::memcmp(theirs.data(), &mine, sizeof(mine)) != 0) {
        throw CommError(c10::str(where, ": m(ξ) of examples ", c10::Join(",", ids),
                                 " differ between the two sides (checksums)"),
                        at_.stage - 1);
      }
    }
    return x;
  }

  void checkpoint(int64_t steps) override {
    const auto [send_error, recv_error] =
        on_each_side([&](bool sender) { (sender ? send_ : recv_)->store().checkpoint(steps); });
    compare_checkpoints(c10::str("at the checkpoint of step ", steps), send_error, recv_error);
  }

  void add_to(StageSummary& s) const override {
    for (AqsgdBoundary* b : {send_.get(), recv_.get()}) {
      if (b == nullptr) continue;
      const ExampleStoreStats st = b->store().stats();
      s.buffer_bytes_stored += st.bytes_stored;
      s.buffer_bytes_per_example = b->bytes_per_example();
      s.buffer_bytes_read += st.bytes_read;
      s.buffer_bytes_written += st.bytes_written;
      s.buffer_wait_seconds += st.wait_seconds;
    }
  }

 private:
  // Runs `action(sender)` for each side this stage holds (the sender's
  // toward stage + 1, the receiver's from stage - 1) and returns each
  // side's error text (empty: none), so that both sides of a boundary hear
  // of a failure before either throws.
  template <class Action>
  std::pair<std::string, std::string> on_each_side(Action action) {
    std::string errors[2];
    for (const bool sender : {true, false}) {
      if (sender ? at_.last(config_) : at_.first()) continue;
      try {
        action(sender);
      } catch (const Error& e) {
        errors[sender ? 0 : 1] = e.what();
      }
    }
    return {errors[0], errors[1]};
  }

  // The same on both sides of a boundary.
  uint64_t buffer_seed(int64_t step, int micro_batch, int boundary) const {
    return config_.seed * 0xD1B54A32D192ED03ull ^ (uint64_t(step) << 24) ^ (uint64_t(micro_batch) << 8) ^
           (uint64_t(boundary) << 2) ^ 3u ^ (uint64_t(at_.replica) << 48);
  }

  std::string store_name(int from, int to, const char* side) const {
    // Replicas see other examples: each keeps m(ξ) of its own.
    const std::string replica = config_.replicas == 1 ? "" : c10::str("-replica", at_.replica);
    return c10::str("boundary", from, "to", to, replica, "-", side, ".store");
  }

  // Both sides of each boundary compare their stores' checkpoints. An
  // error text (opening or saving a store failed) is sent in place of the
  // state, so both sides fail with it. Every message is received before
  // anything is thrown, so no side is left waiting. Throws CommError.
  void compare_checkpoints(const std::string& when, const std::string& send_error, const std::string& recv_error) {
    const bool first = at_.first(), last = at_.last(config_);
    const int stage = at_.stage;
    auto state = [](const std::unique_ptr<AqsgdBoundary>& b, const std::string& error) {
      if (!error.empty()) return "error: " + error;
      const ExampleStoreCheckpoint& c = b->store().last_checkpoint();
      return c10::str("step ", c.step, ", ", c.examples, " examples, digest ", c.digest);
    };
    auto text = [](const std::string& t) { return std::vector<uint8_t>(t.begin(), t.end()); };
    if (!last) comm_.send(stage + 1, kBufferChecks, text(state(send_, send_error)));
    if (!first) comm_.send(stage - 1, kBufferChecks, text(state(recv_, recv_error)));
    if (!last) comm_.expect(stage + 1, kBufferChecks, 1, kMaxReportBytes);
    if (!first) comm_.expect(stage - 1, kBufferChecks, 1, kMaxReportBytes);
    std::string problem;
    int peer = -1;
    for (int side = 0; side < 2; ++side) {
      const bool sender = side == 0;
      if (sender ? last : first) continue;
      const int other = sender ? stage + 1 : stage - 1;
      const std::string mine = sender ? state(send_, send_error) : state(recv_, recv_error);
      const auto bytes = comm_.recv(other, kBufferChecks, "the other side's aqsgd buffer state " + when);
      const std::string theirs(bytes.begin(), bytes.end());
      if (!problem.empty()) continue;
      const std::string b = sender ? boundary_name(stage, other) : boundary_name(other, stage);
      const char* me = sender ? "sender" : "receiver";
      const char* them = sender ? "receiver" : "sender";
      if (mine.rfind("error: ", 0) == 0) {
        problem = c10::str(b, ", ", when, ": the ", me, "'s buffers (stage ", stage, "): ", mine.substr(7));
      } else if (theirs.rfind("error: ", 0) == 0) {
        problem = c10::str(b, ", ", when, ": the ", them, "'s buffers (stage ", other, "): ", theirs.substr(7));
      } else if (mine != theirs) {
        problem = c10::str(b, ", ", when, ": the two sides' aqsgd buffers disagree: the ", me, " (stage ", stage,
                           ") holds ", mine, ", the ", them, " (stage ", other, ") ", theirs);
      }
      if (!problem.empty()) peer = other;
    }
    if (!problem.empty()) throw CommError(problem, peer);
  }

  std::unique_ptr<AqsgdBoundary> send_, recv_;
};

}  // namespace

std::unique_ptr<StageBoundaries> StageBoundaries::make(Communicator& comm, const PipelineConfig& config,
                                                       const StagePosition& at, int64_t resume_step) {
  if (config.forward_codec.kind == BoundaryCodec::kAqsgd) {
    return std::make_unique<AqsgdBoundaries>(comm, config, at, resume_step);
  }
  return std::make_unique<PlainBoundaries>(comm, config, at);
}

}  // namespace actkit::pipeline
