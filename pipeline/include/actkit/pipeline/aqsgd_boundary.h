// One side of an AQ-SGD boundary (AQ-SGD Alg. 1, design §4.6). Both the
// sending stage and the receiving stage keep m(ξ), the last message of
// example ξ, in an ExampleStore. The first time a micro-batch's examples
// are seen (or during the warm-up) the sender sends a(ξ) in fp32 and both
// sides set m(ξ) = a(ξ); afterwards it sends Q(a(ξ) - m(ξ)) (DirectQ, one
// scale per hidden channel) and both sides add the decoded delta to m(ξ),
// decoding the same bytes with the same kernel, so their m(ξ) stay
// bit-identical. The receiver computes on m(ξ).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actkit/pipeline/boundary_codec.h"
#include "actkit/swap/example_store.h"

namespace actkit::pipeline {

// How m(ξ) is kept: fp16 (the authors' default), fp32, or the per-group
// codec at 8 or 4 bits (both sides keep the same compressed bytes).
enum class BufferFormat { kFp16, kFp32, kQ8, kQ4 };
BufferFormat parse_buffer_format(const std::string& name);  // fp16 | fp32 | q8 | q4
const char* to_string(BufferFormat f);

struct BufferOptions {
  std::string dir;            // where the stores' files live
  int64_t memory_budget = -1;  // per store, bytes: -1 no limit, 0 files only (ExampleStoreOptions)
  BufferFormat format = BufferFormat::kFp16;
  int prefetch_depth = 2;      // micro-batches whose m(ξ) are read ahead
  bool check = false;          // exchange a checksum of every micro-batch's m(ξ) and fail on a difference
  int64_t warmup_steps = 0;    // steps that send full precision whatever was seen
  IoEngineOptions engine;
};

class AqsgdBoundary {
 public:
  // The store of this side of a boundary: `file` in options.dir, fresh, or
  // reopened at `resume_step` (>= 0; see ExampleStore). `row_shape` is one
  // example's activation (sequence, hidden). Throws as ExampleStore does.
  AqsgdBoundary(const std::string& file, const BufferOptions& options, const BoundaryCodec& codec,
                std::vector<int64_t> row_shape, int64_t resume_step = -1);

  // True when the message for these examples is a delta: past the warm-up,
  // and every example has an m(ξ). Both sides decide alike.
  bool sends_delta(int64_t step, const std::vector<int64_t>& ids) const;

  // Sender: the payload for activation `a` (B x sequence x hidden, one row
  // per id), with m(ξ) updated. `seed` drives stochastic rounding and the
  // compressed buffer format; the receiver must be given the same.
  std::vector<uint8_t> send(const at::Tensor& a, const std::vector<int64_t>& ids, int64_t step, uint64_t seed);
  // Receiver: what to compute on, with m(ξ) updated. Throws FormatError
  // starting with `where` for a payload that does not parse or is not the
  // kind (full or delta) this side expects.
  at::Tensor receive(const std::vector<uint8_t>& payload, const std::vector<int64_t>& ids, int64_t step,
                     uint64_t seed, const std::string& where);

  // CRC-32C of the m(ξ) the last send()/receive() stored, in id order.
  uint32_t last_checksum() const { return last_checksum_; }
  // Reads m(ξ) of `ids` ahead of need.
  void prefetch(const std::vector<int64_t>& ids) { store_->prefetch(ids); }
  // Bytes one example's m(ξ) takes in this format.
  int64_t bytes_per_example() const;

  ExampleStore& store() { return *store_; }
  const BufferOptions& options() const { return options_; }

 private:
  at::Tensor load(int64_t id);  // m(ξ) as fp32 (row_shape)
  // Stores rows of m (B x row_shape) and returns them as the stored format decodes them.
  at::Tensor store_rows(const at::Tensor& m, const std::vector<int64_t>& ids, uint64_t seed);
  at::Tensor gather(const std::vector<int64_t>& ids);

  BufferOptions options_;
  BoundaryCodec codec_;
  std::vector<int64_t> row_shape_;
  std::unique_ptr<ExampleStore> store_;
  uint32_t last_checksum_ = 0;
};

}  // namespace actkit::pipeline
