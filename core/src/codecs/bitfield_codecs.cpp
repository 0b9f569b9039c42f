#include "actkit/core/codecs/bitfield_codecs.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"
#include "dispatch.h"

namespace actkit {
namespace {

CompressedMeta bitfield_meta(CodecKind kind, const at::Tensor& t, at::ScalarType dtype, int bits) {
  CompressedMeta m;
  m.kind = kind;
  m.dtype = dtype;
  m.shape = t.sizes().vec();
  m.bits = bits;
  m.group_size = 0;
  return m;
}

}  // namespace

CompressedTensor encode_index(const at::Tensor& indices, int bits) {
  constexpr const char* kWhat = "encode_index";
  detail::check_device(indices, kWhat);
  if (indices.scalar_type() == at::kBool) {
    throw InvalidInput(c10::str(kWhat, ": got a bool tensor; use encode_mask"));
  }
  const kernels::IntType type = detail::int_type_of(indices.scalar_type(), kWhat);
  if (bits < 1 || bits > 8) throw InvalidInput(c10::str(kWhat, ": bits must be in 1..8, got ", bits));
  CompressedMeta m = bitfield_meta(CodecKind::kIndex, indices, indices.scalar_type(), bits);
  const at::Tensor input = indices.contiguous();
  at::Tensor payload = detail::allocate_payload(m, indices.device());
  const kernels::EncodeStatus status =
      indices.is_cuda() ? detail::cuda::bitfield_encode(indices.device(), input.data_ptr(), type, m.numel(), bits,
                                                        payload.data_ptr<uint8_t>(), /*wait_status=*/true)
                        : kernels::bitfield_encode_cpu(input.data_ptr(), type, m.numel(), bits,
                                                       payload.data_ptr<uint8_t>());
  if (status != kernels::EncodeStatus::kOk) {
    throw InvalidInput(c10::str(kWhat, ": a value is outside [0, ", (1 << bits) - 1, "] (", bits, " bits)"));
  }
  return CompressedTensor(std::move(m), std::move(payload));
}

CompressedTensor encode_mask(const at::Tensor& mask) {
  detail::check_device(mask, "encode_mask");
  if (mask.scalar_type() != at::kBool) {
    throw InvalidInput(c10::str("encode_mask: expected a bool tensor, got ", mask.scalar_type()));
  }
  CompressedMeta m = bitfield_meta(CodecKind::kMask, mask, at::kBool, 1);
  const at::Tensor input = mask.contiguous();
  at::Tensor payload = detail::allocate_payload(m, mask.device());
  // Bool values are 0 or 1, so the range check cannot fail.
  if (mask.is_cuda()) {
    detail::cuda::bitfield_encode(mask.device(), input.data_ptr(), kernels::IntType::kUInt8, m.numel(), 1,
                                  payload.data_ptr<uint8_t>(), /*wait_status=*/false);
  } else {
    kernels::bitfield_encode_cpu(input.data_ptr(), kernels::IntType::kUInt8, m.numel(), 1,
                                 payload.data_ptr<uint8_t>());
  }
  return CompressedTensor(std::move(m), std::move(payload));
}

CompressedTensor encode_positive_mask(const at::Tensor& x) {
  constexpr const char* kWhat = "encode_positive_mask";
  detail::check_device(x, kWhat);
  const kernels::FloatType type = detail::float_type_of(x.scalar_type(), kWhat);
  CompressedMeta m = bitfield_meta(CodecKind::kMask, x, at::kBool, 1);
  const at::Tensor input = x.contiguous();
  at::Tensor payload = detail::allocate_payload(m, x.device());
  if (x.is_cuda()) {
    detail::cuda::bitfield_encode_positive(x.device(), input.data_ptr(), type, m.numel(), payload.data_ptr<uint8_t>());
  } else {
    kernels::bitfield_encode_positive_cpu(input.data_ptr(), type, m.numel(), payload.data_ptr<uint8_t>());
  }
  return CompressedTensor(std::move(m), std::move(payload));
}

void detail::decode_bitfield(const CompressedTensor& ct, int64_t begin, int64_t end, at::Tensor& out) {
  const CompressedMeta& m = ct.meta();
  const kernels::IntType type = int_type_of(m.dtype, "decode");
  const int64_t first_bit = begin * m.sample_size() * m.bits;
  const int64_t count = (end - begin) * m.sample_size();
  if (first_bit % 8 != 0) {
    // The kernels start at a byte; a range starting mid-byte decodes whole.
    at::Tensor all = at::empty(m.shape, out.options());
    decode_bitfield(ct, 0, m.num_samples(), all);
    out.copy_(all.narrow(0, begin, end - begin));
    return;
  }
  const uint8_t* in = ct.payload().data_ptr<uint8_t>() + first_bit / 8;
  if (out.is_cuda()) {
    cuda::bitfield_decode(out.device(), in, count, m.bits, out.data_ptr(), type);
  } else {
    kernels::bitfield_decode_cpu(in, count, m.bits, out.data_ptr(), type);
  }
}

}  // namespace actkit
