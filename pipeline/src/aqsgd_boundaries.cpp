// AQ-SGD's side of the stage boundaries (stage_boundaries.h): an
// AqsgdBoundary on each side a stage holds, the sender's toward stage + 1
// and the receiver's from stage - 1, opened, checkpointed and compared with
// the other side of each boundary together.
#include "aqsgd_boundaries.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>

#include "actkit/core/errors.h"
#include "actkit/pipeline/aqsgd_boundary.h"

namespace actkit::pipeline {
namespace {

class AqsgdBoundaries : public StageBoundaries {
 public:
  AqsgdBoundaries(Communicator& comm, const PipelineConfig& config, const StagePosition& at, int64_t resume_step)
      : StageBoundaries(comm, config, at) {
    const std::vector<int64_t> row{config.seq_len, config.model_options.hidden};
    BufferOptions buffers = config.buffers;
    buffers.warmup_steps = config.warmup_steps;
    const auto [send_error, recv_error] = on_each_side([&](bool sender) {
      const int from = sender ? at.stage : at.stage - 1;
      (sender ? send_ : recv_) = std::make_unique<AqsgdBoundary>(
          store_name(from, from + 1, sender ? "sender" : "receiver"), buffers, config.forward_codec, row,
          resume_step);
    });
    compare_checkpoints(resume_step >= 0 ? c10::str("resuming at step ", resume_step) : "opening the buffers",
                        send_error, recv_error);
  }

  bool needs_example_ids() const override { return send_ || recv_; }

  void begin_step(int micro_batches) override {
    StageBoundaries::begin_step(micro_batches);
    if (recv_ && config_.buffers.check) comm_.expect(at_.stage - 1, kBufferChecks, micro_batches, 64);
  }

  void prefetch(const std::vector<int64_t>& ids) override {
    if (send_) send_->prefetch(ids);
    if (recv_) recv_->prefetch(ids);
  }

  void send_activations(const at::Tensor& y, const std::vector<int64_t>& ids, int64_t step, int micro_batch) override {
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
    StageBoundaries::add_to(s);
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

  // The same on both sides of a boundary: `sender` is its sending stage.
  uint64_t buffer_seed(int64_t step, int micro_batch, int sender) const {
    return message_seed(config_, sender, at_.replica, step, micro_batch, SeedKind::kBufferRounding);
  }

  std::string store_name(int from, int to, const char* side) const {
    // Replicas see other examples: each keeps m(ξ) of its own.
    const std::string replica = config_.replicas == 1 ? "" : c10::str("-replica", at_.replica);
    return c10::str("boundary", from, "to", to, replica, "-", side, ".store");
  }

  // What one side says of its store when the two sides compare: its
  // checkpoint, or why it has none. On the wire: a tag byte (0: the
  // checkpoint, 1: an error), then the text.
  struct SideState {
    bool failed = false;
    std::string text;
    std::vector<uint8_t> bytes() const {
      std::vector<uint8_t> b(text.size() + 1, uint8_t(failed ? 1 : 0));
      std::copy(text.begin(), text.end(), b.begin() + 1);
      return b;
    }
    static SideState parse(const std::vector<uint8_t>& b) {
      if (b.empty() || b[0] > 1) return {true, "a malformed buffer-state message"};
      return {b[0] == 1, std::string(b.begin() + 1, b.end())};
    }
  };

  static SideState state_of(const std::unique_ptr<AqsgdBoundary>& b, const std::string& error) {
    if (!error.empty()) return {true, error};
    const ExampleStoreCheckpoint& c = b->store().last_checkpoint();
    return {false, c10::str("step ", c.step, ", ", c.examples, " examples, digest ", c.digest)};
  }

  // Both sides of each boundary compare their stores' checkpoints. An
  // error (opening or saving a store failed) is sent in place of the state,
  // so both sides fail with it. Every message is received before anything
  // is thrown, so no side is left waiting. Throws CommError.
  void compare_checkpoints(const std::string& when, const std::string& send_error, const std::string& recv_error) {
    const bool first = at_.first(), last = at_.last(config_);
    const int stage = at_.stage;
    if (!last) comm_.send(stage + 1, kBufferChecks, state_of(send_, send_error).bytes());
    if (!first) comm_.send(stage - 1, kBufferChecks, state_of(recv_, recv_error).bytes());
    if (!last) comm_.expect(stage + 1, kBufferChecks, 1, kMaxReportBytes);
    if (!first) comm_.expect(stage - 1, kBufferChecks, 1, kMaxReportBytes);
    std::string problem;
    int peer = -1;
    for (int side = 0; side < 2; ++side) {
      const bool sender = side == 0;
      if (sender ? last : first) continue;
      const int other = sender ? stage + 1 : stage - 1;
      const SideState mine = sender ? state_of(send_, send_error) : state_of(recv_, recv_error);
      const SideState theirs =
          SideState::parse(comm_.recv(other, kBufferChecks, "the other side's aqsgd buffer state " + when));
      if (!problem.empty()) continue;
      const std::string b = sender ? boundary_name(stage, other) : boundary_name(other, stage);
      const char* me = sender ? "sender" : "receiver";
      const char* them = sender ? "receiver" : "sender";
      if (mine.failed) {
        problem = c10::str(b, ", ", when, ": the ", me, "'s buffers (stage ", stage, "): ", mine.text);
      } else if (theirs.failed) {
        problem = c10::str(b, ", ", when, ": the ", them, "'s buffers (stage ", other, "): ", theirs.text);
      } else if (mine.text != theirs.text) {
        problem = c10::str(b, ", ", when, ": the two sides' aqsgd buffers disagree: the ", me, " (stage ", stage,
                           ") holds ", mine.text, ", the ", them, " (stage ", other, ") ", theirs.text);
      }
      if (!problem.empty()) peer = other;
    }
    if (!problem.empty()) throw CommError(problem, peer);
  }

  std::unique_ptr<AqsgdBoundary> send_, recv_;
};

}  // namespace

std::unique_ptr<StageBoundaries> make_aqsgd_boundaries(Communicator& comm, const PipelineConfig& config,
                                                       const StagePosition& at, int64_t resume_step) {
  return std::make_unique<AqsgdBoundaries>(comm, config, at, resume_step);
}

}  // namespace actkit::pipeline
