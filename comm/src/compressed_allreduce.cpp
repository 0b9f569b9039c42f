// The compressed allreduce (see the header). Both errors are written to
// spares and swapped in only once every rank's chunks came back finite, so a
// skipped step leaves the state exactly as it was on every rank.
#include "actkit/comm/compressed_allreduce.h"

#include <c10/util/StringUtil.h>

#include <limits>
#include <numeric>
#include <utility>

#include "actkit/comm/onebit_codec.h"
#include "actkit/core/errors.h"

namespace actkit {

CompressedAllreduce::CompressedAllreduce(Communicator* comm, int64_t numel)
    : comm_(comm), world_(comm != nullptr ? comm->world_size() : 1), numel_(numel) {
  if (numel < 0) throw InvalidInput("CompressedAllreduce: negative size");
  // Padding to a multiple of N·lcm(N, 8): N chunks of whole sign bytes.
  const int64_t unit = int64_t(world_) * std::lcm<int64_t>(world_, 8);
  const int64_t padded = (numel + unit - 1) / unit * unit;
  chunk_ = padded / world_;
  worker_error_ = at::zeros({padded}, at::kFloat);
  server_error_ = at::zeros({chunk_}, at::kFloat);
  worker_spare_ = at::empty_like(worker_error_);
  server_spare_ = at::empty_like(server_error_);
  const int64_t cb = onebit_chunk_bytes(chunk_);
  values_ = at::zeros({padded}, at::kFloat);
  sent_ = at::empty({world_ * cb}, at::kByte);
  received_ = at::empty({world_ * cb}, at::kByte);
  served_ = at::empty({cb}, at::kByte);
  gathered_ = at::empty({world_ * cb}, at::kByte);
  mean_ = at::empty({chunk_}, at::kFloat);
}

int64_t CompressedAllreduce::wire_bytes_per_call() const {
  return 2 * int64_t(world_ - 1) * onebit_chunk_bytes(chunk_);
}

bool CompressedAllreduce::average(at::Tensor& buffer, const std::string& what) {
  if (buffer.scalar_type() != at::kFloat || !buffer.device().is_cpu() || !buffer.is_contiguous() ||
      buffer.numel() != numel_) {
    throw InvalidInput(c10::str(what, ": the compressed allreduce takes a contiguous fp32 CPU buffer of ", numel_,
                                " values, got ", buffer.scalar_type(), " of ", buffer.numel()));
  }
  const int n = world_;
  const int64_t cb = onebit_chunk_bytes(chunk_);
  values_.narrow(0, 0, numel_).copy_(buffer);
  values_.narrow(0, numel_, padded_numel() - numel_).zero_();  // the last call's decoded padding

  // 1. Every rank's chunks, each with its own scale, to the rank serving it.
  for (int i = 0; i < n; ++i) {
    at::Tensor next = worker_spare_.narrow(0, i * chunk_, chunk_);
    onebit_encode(values_.narrow(0, i * chunk_, chunk_), worker_error_.narrow(0, i * chunk_, chunk_), next,
                  sent_.data_ptr<uint8_t>() + i * cb);
  }
  if (comm_ != nullptr) {
    comm_->all_to_all(sent_, received_, c10::str(what, " (1-bit chunks to their servers)"));
  } else {
    received_.copy_(sent_);
  }

  // 2. This rank's chunk: the mean of every rank's copy, plus the server error.
  mean_.zero_();
  bool finite = true;
  for (int j = 0; j < n; ++j) finite = onebit_decode(received_.data_ptr<uint8_t>() + j * cb, mean_, true) && finite;
  if (finite) {
    mean_.div_(float(n));
    finite = onebit_encode(mean_, server_error_, server_spare_, served_.data_ptr<uint8_t>());
  }
  if (!finite) {
    // A NaN scale tells every rank to skip this step.
    at::Tensor nan = at::full({chunk_}, std::numeric_limits<float>::quiet_NaN(), at::kFloat);
    at::Tensor scratch = at::zeros({chunk_}, at::kFloat);
    onebit_encode(nan, scratch, served_.data_ptr<uint8_t>());
  }

  // 3. Every server's encoded mean to every rank.
  if (comm_ != nullptr) {
    comm_->all_gather(served_, gathered_, c10::str(what, " (1-bit averages to every rank)"));
  } else {
    gathered_.copy_(served_);
  }
  for (int j = 0; j < n; ++j) {
    at::Tensor out = values_.narrow(0, j * chunk_, chunk_);  // scratch: a refused chunk leaves the buffer alone
    if (!onebit_decode(gathered_.data_ptr<uint8_t>() + j * cb, out)) return false;  // nothing committed
  }
  buffer.copy_(values_.narrow(0, 0, numel_));
  std::swap(worker_error_, worker_spare_);
  std::swap(server_error_, server_spare_);
  return true;
}

void CompressedAllreduce::set_errors(const at::Tensor& worker, const at::Tensor& server) {
  if (worker.numel() != worker_error_.numel() || server.numel() != server_error_.numel()) {
    throw InvalidInput(c10::str("CompressedAllreduce: error state of ", worker.numel(), " + ", server.numel(),
                                " values where this buffer over ", world_, " ranks needs ", worker_error_.numel(),
                                " + ", server_error_.numel(), " (another model or world size)"));
  }
  worker_error_ = worker.to(at::kFloat).contiguous().clone();
  server_error_ = server.to(at::kFloat).contiguous().clone();
}

}  // namespace actkit
