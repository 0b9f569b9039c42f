// The compressed allreduce (see the header). Both errors are updated in
// copies and committed only once every rank's chunks came back finite, so a
// skipped step leaves the state exactly as it was on every rank.
#include "actkit/comm/compressed_allreduce.h"

#include <c10/util/StringUtil.h>

#include <numeric>

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
  at::Tensor values = at::zeros({padded_numel()}, at::kFloat);
  values.narrow(0, 0, numel_).copy_(buffer);

  // 1. Every rank's chunks, each with its own scale, to the rank serving it.
  at::Tensor worker_error = worker_error_.clone();
  at::Tensor sent = at::empty({n * cb}, at::kByte);
  for (int i = 0; i < n; ++i) {
    at::Tensor error = worker_error.narrow(0, i * chunk_, chunk_);
    onebit_encode(values.narrow(0, i * chunk_, chunk_), error, sent.data_ptr<uint8_t>() + i * cb);
  }
  at::Tensor received = at::empty({n * cb}, at::kByte);
  if (comm_ != nullptr) {
    comm_->all_to_all(sent, received, c10::str(what, " (1-bit chunks to their servers)"));
  } else {
    received.copy_(sent);
  }

  // 2. This rank's chunk: the mean of every rank's copy, plus the server error.
  at::Tensor mean = at::zeros({chunk_}, at::kFloat);
  bool finite = true;
  for (int j = 0; j < n; ++j) finite = onebit_decode(received.data_ptr<uint8_t>() + j * cb, mean, true) && finite;
  at::Tensor server_error = server_error_.clone();
  at::Tensor served = at::empty({cb}, at::kByte);
  if (finite) {
    mean.div_(float(n));
    finite = onebit_encode(mean, server_error, served.data_ptr<uint8_t>());
  }
  if (!finite) {
    // A NaN scale tells every rank to skip this step.
    at::Tensor nan = at::full({chunk_}, std::numeric_limits<float>::quiet_NaN(), at::kFloat);
    at::Tensor scratch = at::zeros({chunk_}, at::kFloat);
    onebit_encode(nan, scratch, served.data_ptr<uint8_t>());
  }

  // 3. Every server's encoded mean to every rank.
  at::Tensor gathered = at::empty({n * cb}, at::kByte);
  if (comm_ != nullptr) {
    comm_->all_gather(served, gathered, c10::str(what, " (1-bit averages to every rank)"));
  } else {
    gathered.copy_(served);
  }
  for (int j = 0; j < n; ++j) {
    at::Tensor out = values.narrow(0, j * chunk_, chunk_);
    if (!onebit_decode(gathered.data_ptr<uint8_t>() + j * cb, out)) return false;  // nothing committed
  }
  buffer.copy_(values.narrow(0, 0, numel_));
  worker_error_ = worker_error;
  server_error_ = server_error;
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
