// TAH-Quant (design §4.7): planning, the CPU/CUDA dispatch, and the checks
// a received payload gets.
#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cmath>
#include <cstring>

#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/errors.h"
#include "actkit/kernels/half.h"
#include "dispatch.h"

namespace actkit {
namespace {

constexpr const char* kTahWhat = "encode_tah";

CompressedMeta plan(const at::Tensor& x, const TahOptions& o) {
  detail::check_device(x, kTahWhat);
  detail::float_type_of(x.scalar_type(), kTahWhat);
  if (x.dim() < 1) throw InvalidInput(c10::str(kTahWhat, ": needs a tensor of rank >= 1 (tokens x channels), got a scalar"));
  if (x.numel() == 0) throw InvalidInput(c10::str(kTahWhat, ": the tensor is empty (shape ", x.sizes(), ")"));
  const int g = o.group_size;
  if (g < 8 || g > kernels::kTahMaxGroupSize || (g & (g - 1)) != 0) {
    throw InvalidInput(c10::str(kTahWhat, ": group size must be a power of two in [8, ", kernels::kTahMaxGroupSize,
                                "], got ", g));
  }
  if (x.size(-1) % g != 0) {
    throw InvalidInput(c10::str(kTahWhat, ": the channels (last dimension, ", x.size(-1),
                                ") must be a multiple of the group size ", g));
  }
  if (o.high_bits < 1 || o.high_bits > 8 || o.low_bits < 1 || o.low_bits > o.high_bits) {
    throw InvalidInput(c10::str(kTahWhat, ": bits must satisfy 1 <= low_bits <= high_bits <= 8, got low ", o.low_bits,
                                ", high ", o.high_bits));
  }
  if (!(o.high_fraction >= 0.0 && o.high_fraction <= 1.0)) {
    throw InvalidInput(c10::str(kTahWhat, ": high_fraction must be in [0, 1], got ", o.high_fraction));
  }
  if (!(o.tau >= 0.0 && std::isfinite(o.tau))) {
    throw InvalidInput(c10::str(kTahWhat, ": tau must be finite and >= 0, got ", o.tau));
  }
  CompressedMeta m;
  m.kind = CodecKind::kTah;
  m.dtype = x.scalar_type();
  m.shape = x.sizes().vec();
  m.bits = o.high_bits;
  m.low_bits = o.low_bits;
  m.group_size = g;
  m.meta_format = MetaFormat::kFloat16;
  m.high_tokens = std::llround(o.high_fraction * double(m.num_tokens()));
  try {
    m.validate();
  } catch (const FormatError& e) {
    throw InvalidInput(c10::str(kTahWhat, ": ", e.what()));
  }
  return m;
}

const char* describe_tah(kernels::EncodeStatus s) {
  switch (s) {
    case kernels::EncodeStatus::kNonFinite: return "the input contains NaN or Inf";
    case kernels::EncodeStatus::kMetaOverflow:
      return "a tile's zero or scale does not fit fp16 (values beyond about +-65504)";
    default: return "encode failed";
  }
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

bool bit_of(const uint8_t* section, int64_t i) { return ((section[i / 8] >> (i % 8)) & 1u) != 0; }

void check_zero(const uint8_t* p, int64_t from, int64_t to, const char* what) {
  for (int64_t i = from; i < to; ++i) {
    if (p[i] != 0) throw FormatError(c10::str("payload: tah ", what, " padding at byte ", i, " is not zero"));
  }
}

}  // namespace

CompressedTensor encode_tah(const at::Tensor& x, const TahOptions& options) {
  CompressedMeta m = plan(x, options);
  const at::Tensor input = x.contiguous();
  at::Tensor payload = detail::allocate_payload(m, x.device());

  kernels::TahEncodeArgs args;
  args.input = input.data_ptr();
  args.input_type = detail::float_type_of(x.scalar_type(), kTahWhat);
  args.layout = detail::tah_layout(m);
  args.tau = float(options.tau);
  args.hadamard = options.hadamard;
  args.stochastic = options.stochastic;
  args.key = kernels::make_rng_key(options.seed);
  args.payload = payload.data_ptr<uint8_t>();
  const kernels::EncodeStatus status =
      x.is_cuda() ? detail::cuda::tah_encode(x.device(), args) : kernels::tah_encode_cpu(args);
  if (status != kernels::EncodeStatus::kOk) throw InvalidInput(c10::str(kTahWhat, ": ", describe_tah(status)));
  return CompressedTensor(std::move(m), std::move(payload));
}

void detail::decode_tah(const CompressedTensor& ct, at::Tensor& out) {
  kernels::TahDecodeArgs args;
  args.payload = ct.payload().data_ptr<uint8_t>();
  args.layout = tah_layout(ct.meta());
  args.output = out.data_ptr();
  args.output_type = float_type_of(ct.meta().dtype, "decode");
  if (out.is_cuda()) {
    cuda::tah_decode(out.device(), args);
  } else if (!kernels::tah_decode_cpu(args)) {
    throw FormatError(c10::str("decode: the tah token map does not hold ", args.layout.high_tokens, " high tokens"));
  }
}

void detail::check_tah_payload(const CompressedMeta& meta, const uint8_t* payload) {
  const kernels::TahLayout L = tah_layout(meta);
  const int64_t tiles = L.num_tiles();
  const uint8_t* flags = payload + L.flags_offset();
  for (int64_t i = 0; i < tiles; ++i) {
    const float zero = kernels::fp16_to_float(load_u16(payload + 4 * i));
    const uint16_t scale = load_u16(payload + 4 * i + 2);
    if (!std::isfinite(zero)) throw FormatError(c10::str("payload: tah tile ", i, " has a non-finite zero"));
    // Sign bit clear and below fp16 +Inf: a finite, non-negative scale.
    if (scale >= 0x7c00u) throw FormatError(c10::str("payload: tah tile ", i, " has a negative or non-finite scale"));
    const uint8_t pivot = payload[L.pivots_offset() + i];
    if (bit_of(flags, i) ? pivot >= L.group_size : pivot != 0) {
      throw FormatError(c10::str("payload: tah tile ", i, " has pivot ", int(pivot), " (tile size ", L.group_size,
                                 bit_of(flags, i) ? ")" : ", tile not transformed)"));
    }
  }
  check_zero(payload, 4 * tiles, L.pivots_offset(), "parameter");
  check_zero(payload, L.pivots_offset() + tiles, L.flags_offset(), "pivot");
  for (int64_t i = tiles; i < 8 * (L.map_offset() - L.flags_offset()); ++i) {
    if (bit_of(flags, i)) throw FormatError(c10::str("payload: tah tile-flag padding bit ", i, " is set"));
  }
  const uint8_t* map = payload + L.map_offset();
  int64_t ones = 0;
  for (int64_t w = 0; w < L.map_words(); ++w) ones += __builtin_popcountll(load_u64(map + 8 * w));
  for (int64_t t = L.num_tokens; t < 64 * L.map_words(); ++t) {
    if (bit_of(map, t)) throw FormatError(c10::str("payload: tah token-map padding bit ", t, " is set"));
  }
  if (ones != L.high_tokens) {
    throw FormatError(c10::str("payload: the tah token map holds ", ones, " high tokens, the header says ",
                               L.high_tokens));
  }
}

}  // namespace actkit
