#include "actkit/core/enum_names.h"
#include "actkit/pipeline/boundary_codec.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"
#include "actkit/core/codecs/raw_codec.h"

namespace actkit::pipeline {

namespace {

std::vector<uint8_t> encode_fp32(const at::Tensor& x, const BoundaryCodec&, uint64_t) {
  return encode_raw(x, at::kFloat).serialize();
}

std::vector<uint8_t> encode_fp16(const at::Tensor& x, const BoundaryCodec&, uint64_t) {
  return encode_raw(x, at::kHalf).serialize();
}

// directq, and aqsgd's deltas (AqsgdBoundary keeps the state).
std::vector<uint8_t> encode_directq_codec(const at::Tensor& x, const BoundaryCodec& codec, uint64_t seed) {
  DirectQOptions o;
  o.bits = codec.bits;
  o.stochastic = codec.stochastic;
  o.per_channel = codec.per_channel;
  o.grid = codec.grid;
  o.seed = seed;
  return encode_directq(x, o).serialize();
}

std::vector<uint8_t> encode_tah_codec(const at::Tensor& x, const BoundaryCodec& codec, uint64_t seed) {
  TahOptions o;
  o.group_size = codec.tah_group;
  o.high_bits = codec.bits;
  o.low_bits = codec.bits - 1;
  o.high_fraction = codec.tah_high_fraction;
  o.stochastic = codec.stochastic;
  o.seed = seed;
  return encode_tah(x, o).serialize();
}

std::string name_only(const BoundaryCodec& c) { return to_string(c.kind); }

std::string describe_directq(const BoundaryCodec& c) {
  return c10::str("directq", c.bits, c.stochastic ? "-sr" : "", c.per_channel ? "-channel" : "",
                  c.grid == DirectQGrid::kFull ? "-full" : "");
}

std::string describe_tah(const BoundaryCodec& c) {
  return c10::str("tah", c.bits, "/", c.bits - 1, c.stochastic ? "-sr" : "", "-g", c.tah_group, "-p",
                  c.tah_high_fraction);
}

std::string describe_aqsgd(const BoundaryCodec& c) {
  return c10::str("aqsgd", c.bits, c.stochastic ? "-sr" : "", c.grid == DirectQGrid::kFull ? "-full" : "");
}

// The boundary codecs, one entry each: the name (the enum table of
// core/enum_names.h), what the codec quantizes with, how it names its
// settings and how it encodes. A new codec is one entry here, its Kind, its
// encoder in core/ and, if it keeps state across steps, a StageBoundaries
// kind (stage_boundaries.h).
struct CodecEntry {
  BoundaryCodec::Kind value;
  const char* name;
  bool quantizes;      // takes `bits` (2..8) and rounds (stochastic rounding applies)
  bool directq_grid;   // DirectQ's grid and scales (directq, and aqsgd's deltas)
  bool per_channel;    // one scale per hidden channel by default (the authors' delta quantizer)
  std::string (*describe)(const BoundaryCodec& codec);
  std::vector<uint8_t> (*encode)(const at::Tensor& x, const BoundaryCodec& codec, uint64_t seed);
};
constexpr CodecEntry kCodecs[] = {
    {BoundaryCodec::kFp32, "fp32", false, false, false, name_only, encode_fp32},
    {BoundaryCodec::kFp16, "fp16", false, false, false, name_only, encode_fp16},
    {BoundaryCodec::kDirectQ, "directq", true, true, false, describe_directq, encode_directq_codec},
    {BoundaryCodec::kTah, "tah", true, false, false, describe_tah, encode_tah_codec},
    {BoundaryCodec::kAqsgd, "aqsgd", true, true, true, describe_aqsgd, encode_directq_codec},
};

const CodecEntry& entry_of(BoundaryCodec::Kind kind) {
  for (const CodecEntry& e : kCodecs) {
    if (e.value == kind) return e;
  }
  throw InvalidInput(c10::str("boundary codec ", int(kind), ": no such codec"));
}

}  // namespace

const char* to_string(BoundaryCodec::Kind kind) { return enum_name(kCodecs, kind); }

std::string BoundaryCodec::describe() const { return entry_of(kind).describe(*this); }

BoundaryCodec parse_boundary_codec(const std::string& name, int bits) {
  BoundaryCodec c;
  c.kind = parse_enum(kCodecs, name, "codec");
  const CodecEntry& e = entry_of(c.kind);
  if (!e.quantizes) return c;
  if (bits < 2 || bits > 8) throw InvalidInput(c10::str(name, ": bits must be in 2..8, got ", bits));
  c.bits = bits;
  c.per_channel = e.per_channel;
  return c;
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
  const bool compressed = entry_of(fw).quantizes;
  const bool fw_directq = entry_of(fw).directq_grid;
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
  return entry_of(codec.kind).encode(x, codec, seed);
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
