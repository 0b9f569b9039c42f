#include "actkit/core/codecs/pergroup_codec.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"
#include "dispatch.h"

namespace actkit {
namespace {

constexpr const char* kPerGroupWhat = "encode_per_group";

CompressedMeta plan(const at::Tensor& x, const PerGroupOptions& o) {
  detail::check_device(x, kPerGroupWhat);
  detail::float_type_of(x.scalar_type(), kPerGroupWhat);
  if (x.dim() < 1) throw InvalidInput(c10::str(kPerGroupWhat, ": needs a tensor of rank >= 1, got a scalar"));
  if (o.group_size < 8 || o.group_size > kernels::kMaxGroupSize || o.group_size % 8 != 0) {
    throw InvalidInput(c10::str(kPerGroupWhat, ": group size must be a multiple of 8 in [8, ", kernels::kMaxGroupSize,
                                "], got ", o.group_size));
  }
  CompressedMeta m;
  m.kind = CodecKind::kPerGroup;
  m.dtype = x.scalar_type();
  m.shape = x.sizes().vec();
  m.group_size = o.group_size;
  m.meta_format = o.meta_format;
  if (o.sample_bits.empty()) {
    if (o.bits < 1 || o.bits > 8) throw InvalidInput(c10::str(kPerGroupWhat, ": bits must be in 1..8, got ", o.bits));
    m.bits = o.bits;
  } else {
    if (int64_t(o.sample_bits.size()) != m.num_samples()) {
      throw InvalidInput(c10::str(kPerGroupWhat, ": ", o.sample_bits.size(), " per-sample bits for ", m.num_samples(),
                                  " samples"));
    }
    for (uint8_t b : o.sample_bits) {
      if (b < 1 || b > 8) throw InvalidInput(c10::str(kPerGroupWhat, ": per-sample bits must be in 1..8, got ", int(b)));
    }
    m.bits = 0;
    m.sample_bits = o.sample_bits;
  }
  try {
    m.validate();
  } catch (const FormatError& e) {
    throw InvalidInput(c10::str(kPerGroupWhat, ": ", e.what()));
  }
  return m;
}

// Fills the kernel layout; `offsets` must outlive the layout.
kernels::PerGroupLayout layout_of(const CompressedMeta& m, const std::vector<int64_t>& offsets) {
  kernels::PerGroupLayout L;
  L.num_samples = m.num_samples();
  L.sample_size = m.sample_size();
  L.group_size = m.group_size;
  L.uniform_bits = m.bits;
  if (m.bits == 0) {
    L.sample_bits = m.sample_bits.data();
    L.sample_bit_offset = offsets.data();
  }
  return L;
}

const char* describe_per_group(kernels::EncodeStatus s) {
  switch (s) {
    case kernels::EncodeStatus::kNonFinite:
      return "the input contains NaN or Inf (NonFinitePolicy::kError; use kPropagate to decode such groups as NaN)";
    case kernels::EncodeStatus::kMetaOverflow:
      return "a group's minimum or range does not fit the fp16 metadata (use MetaFormat::kBFloat16)";
    default: return "encode failed";
  }
}

}  // namespace

CompressedTensor encode_per_group(const at::Tensor& x, const PerGroupOptions& options) {
  CompressedMeta m = plan(x, options);
  const at::Tensor input = x.contiguous();
  at::Tensor payload = detail::allocate_payload(m, x.device());
  const std::vector<int64_t> offsets = m.sample_bit_offsets();

  kernels::PerGroupEncodeArgs args;
  args.input = input.data_ptr();
  args.input_type = detail::float_type_of(x.scalar_type(), kPerGroupWhat);
  args.layout = layout_of(m, offsets);
  args.meta_format = m.meta_format;
  args.key = kernels::make_rng_key(options.seed);
  args.propagate_nonfinite = options.non_finite == NonFinitePolicy::kPropagate;
  args.meta = reinterpret_cast<uint16_t*>(payload.data_ptr<uint8_t>());
  args.codes = payload.data_ptr<uint8_t>() + m.meta_bytes();

  const kernels::EncodeStatus status = x.is_cuda()
                                           ? detail::cuda::pergroup_encode(x.device(), args, !args.propagate_nonfinite)
                                           : kernels::pergroup_encode_cpu(args);
  if (status != kernels::EncodeStatus::kOk) throw InvalidInput(c10::str(kPerGroupWhat, ": ", describe_per_group(status)));
  return CompressedTensor(std::move(m), std::move(payload));
}

void detail::decode_per_group(const CompressedTensor& ct, int64_t begin, int64_t end, at::Tensor& out) {
  const CompressedMeta& m = ct.meta();
  const std::vector<int64_t> stream_offsets = m.sample_bit_offsets();  // empty for uniform bits
  const auto bit_offset = [&](int64_t n) {
    return m.bits != 0 ? n * m.sample_size() * m.bits : stream_offsets[size_t(n)];
  };
  // The range's codes start at `first_bit` of the stream; the kernels take
  // a byte pointer, so a range starting mid-byte keeps the remainder in
  // per-sample offsets relative to that byte.
  const int64_t first_bit = bit_offset(begin);
  const int64_t first_byte = first_bit / 8;
  const int64_t count = end - begin;
  std::vector<uint8_t> bits;
  std::vector<int64_t> offsets;
  kernels::PerGroupLayout layout;
  layout.num_samples = count;
  layout.sample_size = m.sample_size();
  layout.group_size = m.group_size;
  if (m.bits != 0 && first_bit % 8 == 0) {
    layout.uniform_bits = m.bits;
  } else {
    bits.resize(size_t(count));
    offsets.resize(size_t(count));
    for (int64_t n = 0; n < count; ++n) {
      bits[size_t(n)] = uint8_t(m.bits != 0 ? m.bits : m.sample_bits[size_t(begin + n)]);
      offsets[size_t(n)] = bit_offset(begin + n) - 8 * first_byte;
    }
    layout.sample_bits = bits.data();
    layout.sample_bit_offset = offsets.data();
  }
  const uint8_t* base = ct.payload().data_ptr<uint8_t>();
  kernels::PerGroupDecodeArgs args;
  args.meta = reinterpret_cast<const uint16_t*>(base) + 2 * begin * layout.groups_per_sample();
  args.codes = base + m.meta_bytes() + first_byte;
  args.layout = layout;
  args.meta_format = m.meta_format;
  args.output = out.data_ptr();
  args.output_type = float_type_of(m.dtype, "decode");
  if (out.is_cuda()) {
    cuda::pergroup_decode(out.device(), args);
  } else {
    kernels::pergroup_decode_cpu(args);
  }
}

}  // namespace actkit
