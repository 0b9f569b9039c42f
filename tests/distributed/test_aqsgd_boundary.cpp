// AQ-SGD's boundary codec, both sides in one process: full precision on
// first sight and during the warm-up, deltas afterwards, the two sides'
// m(ξ) bit-identical after every message in every buffer format, m(ξ)
// converging to a repeated activation, and a payload of the wrong kind
// refused with the boundary named.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"
#include "actkit/pipeline/aqsgd_boundary.h"
#include "test_util.h"

namespace actkit {
namespace {

using pipeline::AqsgdBoundary;
using pipeline::BufferFormat;
using pipeline::BufferOptions;

struct Pair {
  test::TempDir dir;
  std::unique_ptr<AqsgdBoundary> sender, receiver;
  Pair(BufferFormat format, int bits, int64_t warmup_steps, int64_t budget = -1) {
    BufferOptions o;
    o.dir = dir.path();
    o.format = format;
    o.warmup_steps = warmup_steps;
    o.memory_budget = budget;
    o.engine.kind = IoEngineKind::kThreads;
    const auto codec = pipeline::parse_boundary_codec("aqsgd", bits);
    sender = std::make_unique<AqsgdBoundary>("s.store", o, codec, std::vector<int64_t>{8, 16});
    receiver = std::make_unique<AqsgdBoundary>("r.store", o, codec, std::vector<int64_t>{8, 16});
  }
  // One message; returns what the receiver computes on.
  at::Tensor pass(const at::Tensor& a, const std::vector<int64_t>& ids, int64_t step, uint64_t seed = 5) {
    const auto payload = sender->send(a, ids, step, seed);
    last_kind = CompressedTensor::deserialize(payload).kind();
    at::Tensor x = receiver->receive(payload, ids, step, seed, "boundary 0->1 (test)");
    EXPECT_EQ(sender->last_checksum(), receiver->last_checksum());
    EXPECT_EQ(sender->store().digest(), receiver->store().digest());
    return x;
  }
  CodecKind last_kind = CodecKind::kRaw;
};

TEST(AqsgdBoundary, FullPrecisionFirstThenDeltasAndBothSidesAgree) {
  for (BufferFormat f : {BufferFormat::kFp16, BufferFormat::kFp32, BufferFormat::kQ8, BufferFormat::kQ4}) {
    Pair p(f, 3, /*warmup_steps=*/1);
    at::manual_seed(1);
    const at::Tensor a0 = at::randn({3, 8, 16});
    // Warm-up step: the activation itself, exactly.
    at::Tensor x = p.pass(a0, {10, 11, 12}, 0);
    EXPECT_EQ(p.last_kind, CodecKind::kRaw);
    EXPECT_TRUE(at::equal(x, a0));
    // After the warm-up, seen examples go as deltas; the receiver computes on m.
    const at::Tensor a1 = a0 + 0.1 * at::randn({3, 8, 16});
    x = p.pass(a1, {10, 11, 12}, 1);
    EXPECT_EQ(p.last_kind, CodecKind::kDirectQ);
    // The delta's error (3 bits over deltas of about 0.1), or q4 storage's
    // own (4 bits over values of about 3).
    EXPECT_LT((x - a1).abs().max().item<double>(), f == BufferFormat::kQ4 ? 0.6 : 0.1) << pipeline::to_string(f);
    // An unseen example in the micro-batch: full precision for all of it.
    x = p.pass(a1, {10, 11, 99}, 2);
    EXPECT_EQ(p.last_kind, CodecKind::kRaw);
    EXPECT_TRUE(at::equal(x, a1));
  }
}

TEST(AqsgdBoundary, TheDeltaErrorIsBoundedByItsScale) {
  // Round-to-nearest with one scale per channel: |a - m_new| <= max over
  // the channel of |a - m_old| / (2 L) (L = 2^(b-1) - 1), plus fp32 m's
  // own rounding.
  for (int bits : {2, 3, 4, 8}) {
    Pair p(BufferFormat::kFp32, bits, 0);
    at::manual_seed(bits);
    const at::Tensor a0 = at::randn({2, 8, 16});
    p.pass(a0, {1, 2}, 0);
    const at::Tensor a1 = a0 + at::randn({2, 8, 16});
    const at::Tensor x = p.pass(a1, {1, 2}, 1);
    const double levels = double((1 << (bits - 1)) - 1);
    const at::Tensor bound = (a1 - a0).abs().amax({0, 1}) / (2 * levels) + 1e-5;
    EXPECT_TRUE(((x - a1).abs() <= bound).all().item<bool>()) << bits;
  }
}

TEST(AqsgdBoundary, MConvergesToARepeatedActivation) {
  // The point of AQ-SGD: as activations settle, so do the deltas, and the
  // error of 2-bit messages shrinks where direct 2-bit quantization's would not.
  Pair p(BufferFormat::kFp32, 2, 0);
  at::manual_seed(3);
  const at::Tensor a = at::randn({2, 8, 16});
  p.pass(at::zeros({2, 8, 16}), {4, 5}, 0);
  double first = 0, last = 0;
  for (int step = 1; step <= 12; ++step) {
    const double err = (p.pass(a, {4, 5}, step) - a).abs().max().item<double>();
    if (step == 1) first = err;
    last = err;
  }
  EXPECT_LT(last, first / 20);
}

TEST(AqsgdBoundary, StochasticRoundingKeepsBothSidesTogether) {
  test::TempDir dir;
  BufferOptions o;
  o.dir = dir.path();
  auto codec = pipeline::parse_boundary_codec("aqsgd", 2);
  codec.stochastic = true;
  AqsgdBoundary s("s.store", o, codec, {8, 16}), r("r.store", o, codec, {8, 16});
  at::manual_seed(4);
  for (int step = 0; step < 4; ++step) {
    const at::Tensor a = at::randn({2, 8, 16});
    const auto payload = s.send(a, {1, 2}, step, 100 + step);
    r.receive(payload, {1, 2}, step, 100 + step, "b");
    ASSERT_EQ(s.store().digest(), r.store().digest());
  }
}

// What `--check-buffers` compares: when one side's m(ξ) of one example
// differs, that side's checksum of the next micro-batch holding it differs,
// in every buffer format; StageRunner fails the step on it. Two ways to
// differ: another well-formed value (example 3's stored as example 2's; for
// q8/q4 a payload ending with its own CRC-32C, which a plain CRC-32C over
// the stored bytes could not tell apart), and example 2's own value with one
// bit flipped (a q8/q4 payload's own checksum refuses it first).
TEST(AqsgdBoundary, TheChecksumSeesOneSidesBufferDiffer) {
  for (BufferFormat f : {BufferFormat::kFp16, BufferFormat::kFp32, BufferFormat::kQ8, BufferFormat::kQ4}) {
    for (const bool damage : {false, true}) {
      Pair p(f, 2, /*warmup_steps=*/1);
      at::manual_seed(6);
      const at::Tensor a = at::randn({3, 8, 16});
      p.pass(a, {1, 2, 3}, 0);
      std::vector<uint8_t> m = p.receiver->store().get(damage ? 2 : 3);
      if (damage) m[m.size() / 2] ^= 0x10;
      p.receiver->store().put(2, m);
      const at::Tensor b = a + 0.05 * at::randn({3, 8, 16});
      const auto payload = p.sender->send(b, {1, 2, 3}, 1, 9);
      bool refused = false;
      try {
        p.receiver->receive(payload, {1, 2, 3}, 1, 9, "boundary 0->1 (test)");
      } catch (const FormatError&) {
        refused = true;
      }
      EXPECT_TRUE(refused || p.sender->last_checksum() != p.receiver->last_checksum())
          << pipeline::to_string(f) << (damage ? " damaged" : " swapped");
      EXPECT_EQ(refused, damage && (f == BufferFormat::kQ8 || f == BufferFormat::kQ4)) << pipeline::to_string(f);
      if (!refused) EXPECT_NE(p.sender->store().digest(), p.receiver->store().digest()) << pipeline::to_string(f);
    }
  }
}

TEST(AqsgdBoundary, APayloadOfTheWrongKindNamesTheBoundary) {
  Pair p(BufferFormat::kFp16, 4, 0);
  const at::Tensor a = at::randn({2, 8, 16});
  p.pass(a, {1, 2}, 0);
  // The receiver expects a delta for {1, 2}; a full-precision payload for
  // them (the sender lost its buffers, say) is refused.
  Pair fresh(BufferFormat::kFp16, 4, 0);
  const auto full = fresh.sender->send(a, {1, 2}, 1, 5);
  try {
    p.receiver->receive(full, {1, 2}, 1, 5, "boundary 2->3 (activations of micro-batch 1, step 1)");
    ADD_FAILURE() << "a full payload was taken for a delta";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("boundary 2->3"), std::string::npos) << e.what();
  }
  // Truncated and flipped bytes.
  auto delta = p.sender->send(a, {1, 2}, 1, 5);
  auto cut = delta;
  cut.resize(cut.size() / 2);
  EXPECT_THROW(p.receiver->receive(cut, {1, 2}, 1, 5, "b"), FormatError);
  delta[delta.size() / 2] ^= 0x40;
  EXPECT_THROW(p.receiver->receive(delta, {1, 2}, 1, 5, "b"), FormatError);
  // A wrong shape for the examples.
  EXPECT_THROW(p.sender->send(at::randn({3, 8, 16}), {1, 2}, 1, 5), InvalidInput);
}

TEST(AqsgdBoundary, StoragePerExample) {
  for (auto [f, expected] : {std::pair{BufferFormat::kFp16, 256}, {BufferFormat::kFp32, 512}}) {
    Pair p(f, 4, 0);
    EXPECT_EQ(p.sender->bytes_per_example(), expected);
  }
  Pair q4(BufferFormat::kQ4, 4, 0), q8(BufferFormat::kQ8, 4, 0);
  EXPECT_LT(q4.sender->bytes_per_example(), q8.sender->bytes_per_example());
  EXPECT_LT(q8.sender->bytes_per_example(), 256);
}

}  // namespace
}  // namespace actkit
