#include "actkit/core/enum_names.h"
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
    case kDirectQ:
      return c10::str("directq", bits, stochastic ? "-sr" : "", per_channel ? "-channel" : "",
                      grid == DirectQGrid::kFull ? "-full" : "");
    case kTah:
      return c10::str("tah", bits, "/", bits - 1, stochastic ? "-sr" : "", "-g", tah_group, "-p", tah_high_fraction);
    case kAqsgd: return c10::str("aqsgd", bits, stochastic ? "-sr" : "", grid == DirectQGrid::kFull ? "-full" : "");
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

namespace {
constexpr EnumName<DirectQGrid> kGridNames[] = {{DirectQGrid::kSymmetric, "symmetric"}, {DirectQGrid::kFull, "full"}};
}  // namespace

const char* to_string(DirectQGrid grid) { return enum_name(kGridNames, grid); }

DirectQGrid parse_directq_grid(const std::string& name) { return parse_enum(kGridNames, name, "grid"); }

BoundaryCodecs boundary_codecs(const BoundaryChoice& choice) {
  BoundaryCodecs c;
  c.forward = parse_boundary_codec(choice.codec, choice.fw_bits);
  const BoundaryCodec::Kind fw = c.forward.kind;
  const bool compressed = fw == BoundaryCodec::kDirectQ || fw == BoundaryCodec::kTah || fw == BoundaryCodec::kAqsgd;
  const bool fw_directq = fw == BoundaryCodec::kDirectQ || fw == BoundaryCodec::kAqsgd;
  c.backward = parse_boundary_codec(compressed ? "directq" : choice.codec, choice.bw_bits);
  if (choice.grid != DirectQGrid::kSymmetric && !fw_directq) {
    throw InvalidInput(c10::str("--grid ", to_string(choice.grid), ": only directq and aqsgd activations have a grid"));
  }
  if (choice.fw_per_channel && fw != BoundaryCodec::kDirectQ) {
    throw InvalidInput("--scale channel: only directq activations choose their scales (aqsgd: always per channel)");
  }
  if (choice.bw_per_channel && !compressed) {
    throw InvalidInput("--bw-scale channel: only DirectQ gradients (directq, tah, aqsgd) have scales");
  }
  if (choice.stochastic && !compressed) {
    throw InvalidInput(c10::str("--stochastic: ", choice.codec, " rounds nothing (directq, tah and aqsgd do)"));
  }
  const bool tah_given = choice.tah_group != 0 || choice.tah_high_fraction >= 0;
  if (fw != BoundaryCodec::kTah && tah_given) throw InvalidInput("--tah-tile and --tah-high-share are for --codec tah");
  const int g = choice.tah_group == 0 ? c.forward.tah_group : choice.tah_group;
  if (g < 8 || g > 256 || (g & (g - 1)) != 0) {
    throw InvalidInput(c10::str("--tah-tile: a power of two in 8..256, got ", g));
  }
  const double share = choice.tah_high_fraction < 0 ? c.forward.tah_high_fraction : choice.tah_high_fraction;
  if (!(share <= 1)) throw InvalidInput(c10::str("--tah-high-share: in [0, 1], got ", share));
  c.forward.stochastic = choice.stochastic;
  c.forward.grid = fw_directq ? choice.grid : DirectQGrid::kSymmetric;
  if (fw == BoundaryCodec::kDirectQ) c.forward.per_channel = choice.fw_per_channel;
  c.forward.tah_group = g;
  c.forward.tah_high_fraction = share;
  c.backward.stochastic = choice.stochastic && c.backward.kind == BoundaryCodec::kDirectQ;
  c.backward.per_channel = choice.bw_per_channel && c.backward.kind == BoundaryCodec::kDirectQ;
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
      o.grid = codec.grid;
      o.seed = seed;
      return encode_directq(x, o).serialize();
    }
    case BoundaryCodec::kTah: {
      TahOptions o;
      o.group_size = codec.tah_group;
      o.high_bits = codec.bits;
      o.low_bits = codec.bits - 1;
      o.high_fraction = codec.tah_high_fraction;
      o.stochastic = codec.stochastic;
      o.seed = seed;
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
