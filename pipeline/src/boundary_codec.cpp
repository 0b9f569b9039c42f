#include "actkit/pipeline/boundary_codec.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/boundary_codecs.h"
#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"
#include "actkit/core/raw_codec.h"

namespace actkit::pipeline {

const char* to_string(BoundaryCodec::Kind kind) {
  switch (kind) {
    case BoundaryCodec::kFp16: return "fp16";
    case BoundaryCodec::kDirectQ: return "directq";
    case BoundaryCodec::kTah: return "tah";
    case BoundaryCodec::kAqsgd: return "aqsgd";
    case BoundaryCodec::kFp32: break;
  }
  return "fp32";
}

std::string BoundaryCodec::describe() const {
  switch (kind) {
    case kFp32:
    case kFp16: return to_string(kind);
    case kDirectQ: return c10::str("directq", bits, stochastic ? "-sr" : "", per_channel ? "-channel" : "");
    case kTah: return c10::str("tah", bits, "/", bits - 1, "-g", tah_group, "-p", tah_high_fraction);
    case kAqsgd: return c10::str("aqsgd", bits, stochastic ? "-sr" : "");
  }
  return "?";
}

BoundaryCodec parse_boundary_codec(const std::string& name, int bits) {
  BoundaryCodec c;
  if (name == "fp32") {
    c.kind = BoundaryCodec::kFp32;
    return c;
  }
  if (name == "fp16") {
    c.kind = BoundaryCodec::kFp16;
    return c;
  }
  if (name == "directq" || name == "tah" || name == "aqsgd") {
    if (bits < 2 || bits > 8) throw InvalidInput(c10::str(name, ": bits must be in 2..8, got ", bits));
    c.kind = name == "tah" ? BoundaryCodec::kTah : name == "aqsgd" ? BoundaryCodec::kAqsgd : BoundaryCodec::kDirectQ;
    c.bits = bits;
    c.per_channel = c.kind == BoundaryCodec::kAqsgd;  // the authors' delta quantizer: a scale per hidden channel
    return c;
  }
  throw InvalidInput(c10::str("codec '", name, "': expected fp32, fp16, directq, tah or aqsgd"));
}

BoundaryCodecs boundary_codecs(const std::string& name, int fw_bits, int bw_bits, bool stochastic) {
  BoundaryCodecs c;
  c.forward = parse_boundary_codec(name, fw_bits);
  const bool compressed = c.forward.kind == BoundaryCodec::kDirectQ || c.forward.kind == BoundaryCodec::kTah ||
                          c.forward.kind == BoundaryCodec::kAqsgd;
  c.backward = parse_boundary_codec(compressed ? "directq" : name, bw_bits);
  c.forward.stochastic = stochastic && c.forward.kind != BoundaryCodec::kTah;
  c.backward.stochastic = stochastic && c.backward.kind == BoundaryCodec::kDirectQ;
  return c;
}

std::vector<uint8_t> encode_boundary(const at::Tensor& x, const BoundaryCodec& codec, uint64_t seed) {
  switch (codec.kind) {
    case BoundaryCodec::kFp32: return encode_raw(x, at::kFloat).serialize();
    case BoundaryCodec::kFp16: return encode_raw(x, at::kHalf).serialize();
    case BoundaryCodec::kDirectQ:
    case BoundaryCodec::kAqsgd: {
      DirectQOptions o;
      o.bits = codec.bits;
      o.stochastic = codec.stochastic;
      o.per_channel = codec.per_channel;
      o.seed = seed;
      return encode_directq(x, o).serialize();
    }
    case BoundaryCodec::kTah: {
      TahOptions o;
      o.group_size = codec.tah_group;
      o.high_bits = codec.bits;
      o.low_bits = codec.bits - 1;
      o.high_fraction = codec.tah_high_fraction;
      return encode_tah(x, o).serialize();
    }
  }
  throw InvalidInput("encode_boundary: unknown codec");
}

at::Tensor decode_boundary(const std::vector<uint8_t>& bytes, const std::string& where,
                           const std::vector<int64_t>& expected_shape) {
  try {
    const CompressedTensor ct = CompressedTensor::deserialize(bytes);
    if (!expected_shape.empty() && ct.shape() != expected_shape) {
      throw FormatError(c10::str("holds a tensor of shape ", ct.shape(), " where ", expected_shape, " was expected"));
    }
    return ct.decode().to(at::kFloat);
  } catch (const FormatError& e) {
    throw FormatError(c10::str(where, ": ", e.what()));
  }
}

}  // namespace actkit::pipeline
