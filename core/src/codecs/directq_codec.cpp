// DirectQ (design §4.5): planning, the CPU/CUDA dispatch, and the checks a
// received payload gets.
#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cstring>

#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/errors.h"
#include "dispatch.h"

namespace actkit {
namespace {

constexpr const char* kDirectQWhat = "encode_directq";

CompressedMeta plan(const at::Tensor& x, const DirectQOptions& o) {
  detail::check_device(x, kDirectQWhat);
  detail::float_type_of(x.scalar_type(), kDirectQWhat);
  if (o.bits < 2 || o.bits > 8) throw InvalidInput(c10::str(kDirectQWhat, ": bits must be in 2..8, got ", o.bits));
  if (x.numel() == 0) throw InvalidInput(c10::str(kDirectQWhat, ": the tensor is empty (shape ", x.sizes(), ")"));
  if (o.per_channel && x.dim() == 0) throw InvalidInput(c10::str(kDirectQWhat, ": per-channel scales need rank >= 1"));
  CompressedMeta m;
  m.kind = CodecKind::kDirectQ;
  m.dtype = x.scalar_type();
  m.shape = x.sizes().vec();
  m.bits = o.bits;
  m.per_channel = o.per_channel;
  m.full_grid = o.grid == kernels::DirectQGrid::kFull;
  try {
    m.validate();
  } catch (const FormatError& e) {
    throw InvalidInput(c10::str(kDirectQWhat, ": ", e.what()));
  }
  return m;
}

}  // namespace

CompressedTensor encode_directq(const at::Tensor& x, const DirectQOptions& options) {
  CompressedMeta m = plan(x, options);
  const at::Tensor input = x.contiguous();
  at::Tensor payload = detail::allocate_payload(m, x.device());

  kernels::DirectQEncodeArgs args;
  args.input = input.data_ptr();
  args.input_type = detail::float_type_of(x.scalar_type(), kDirectQWhat);
  args.numel = m.numel();
  args.num_scales = m.num_scales();
  args.bits = m.bits;
  args.grid = options.grid;
  args.stochastic = options.stochastic;
  args.key = kernels::make_rng_key(options.seed);
  args.scales = reinterpret_cast<float*>(payload.data_ptr<uint8_t>());
  args.codes = payload.data_ptr<uint8_t>() + m.meta_bytes();

  const kernels::EncodeStatus status =
      x.is_cuda() ? detail::cuda::directq_encode(x.device(), args) : kernels::directq_encode_cpu(args);
  if (status != kernels::EncodeStatus::kOk) throw InvalidInput(c10::str(kDirectQWhat, ": the input contains NaN or Inf"));
  return CompressedTensor(std::move(m), std::move(payload));
}

void detail::decode_directq(const CompressedTensor& ct, at::Tensor& out) {
  const CompressedMeta& m = ct.meta();
  const uint8_t* base = ct.payload().data_ptr<uint8_t>();
  kernels::DirectQDecodeArgs args;
  args.scales = reinterpret_cast<const float*>(base);
  args.codes = base + m.meta_bytes();
  args.numel = m.numel();
  args.num_scales = m.num_scales();
  args.bits = m.bits;
  args.grid = m.full_grid ? kernels::DirectQGrid::kFull : kernels::DirectQGrid::kSymmetric;
  args.output = out.data_ptr();
  args.output_type = float_type_of(m.dtype, "decode");
  if (out.is_cuda()) {
    cuda::directq_decode(out.device(), args);
  } else {
    kernels::directq_decode_cpu(args);
  }
}

void detail::check_directq_payload(const CompressedMeta& meta, const uint8_t* payload) {
  for (int64_t c = 0; c < meta.num_scales(); ++c) {
    uint32_t bits;
    std::memcpy(&bits, payload + 4 * c, 4);
    // Sign bit clear and below +Inf: a finite, non-negative scale.
    if (bits >= 0x7f800000u) {
      throw FormatError(c10::str("payload: directq scale ", c, " is negative, NaN or Inf"));
    }
  }
}

}  // namespace actkit
