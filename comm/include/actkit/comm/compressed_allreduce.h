// The compressed allreduce of 1-bit Adam / 1-bit LAMB (design §4.8): the
// average over every rank of one fp32 buffer, sent at one bit per value,
// with error feedback on both sides so that what one step loses the next
// one sends.
//
// Three phases, each rank serving one chunk of the buffer:
//   1. every rank encodes its buffer plus its worker error, chunk by chunk
//      (one scale per chunk), and all_to_all sends chunk i to rank i;
//   2. rank i decodes the N copies of chunk i it received, averages them
//      (summed in rank order, then divided by N), adds its server error and
//      encodes the result;
//   3. all_gather gives every rank every encoded average, which each decodes.
// Every rank ends with the same bytes, so the same result. The buffer is
// padded with zeros to a multiple of N·lcm(N, 8) (whole bytes of signs in
// every chunk).
//
// Volume per call on each rank's wire: 2(N−1)·(4 + P/(8N)) bytes for a
// padded buffer of P values, against 8(N−1)/N·P for a ring fp32 allreduce:
// 32× less, minus the scales.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "actkit/comm/communicator.h"

namespace actkit {

class CompressedAllreduce {
 public:
  // For buffers of `numel` values, over `comm`'s group; comm == nullptr is
  // a group of one (the codec and both errors still apply). Throws
  // InvalidInput for a negative numel.
  CompressedAllreduce(Communicator* comm, int64_t numel);

  int world_size() const { return world_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return chunk_ * world_; }
  int64_t chunk_numel() const { return chunk_; }
  // Bytes this rank puts on the wire per call (both phases).
  int64_t wire_bytes_per_call() const;

  // Replaces `buffer` (fp32, CPU, contiguous, numel()) by the 1-bit average
  // over every rank and updates both errors. Returns false on every rank,
  // with the buffer and both errors as they were, when some rank's input (or
  // an average) was NaN or Inf: the caller skips the step. `what` names the
  // call for errors. Throws InvalidInput for a wrong buffer, CommError for a
  // dead, hung or mismatched peer.
  bool average(at::Tensor& buffer, const std::string& what);

  // The error feedback state, for checkpoints: the worker error (padded
  // numel) and this rank's server error (chunk numel).
  const at::Tensor& worker_error() const { return worker_error_; }
  const at::Tensor& server_error() const { return server_error_; }
  // Restores both (copied). Throws InvalidInput naming the size that
  // differs (a checkpoint of another model or world size).
  void set_errors(const at::Tensor& worker, const at::Tensor& server);

 private:
  Communicator* comm_;
  int world_;
  int64_t numel_;
  int64_t chunk_;
  at::Tensor worker_error_;
  at::Tensor server_error_;
  // A call's new errors go to these and are swapped in on success, so a
  // skipped step keeps the old ones without a copy.
  at::Tensor worker_spare_, server_spare_;
  // Scratch reused by every call: the padded values, the encoded chunks
  // sent, received, served and gathered, the served chunk's mean.
  at::Tensor values_, sent_, received_, served_, gathered_, mean_;
};

}  // namespace actkit
