#include "actkit/core/enum_names.h"
#include "actkit/pipeline/aqsgd_boundary.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cstring>

#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/checksum.h"
#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/core/codecs/raw_codec.h"

namespace actkit::pipeline {
namespace {

// Group size of the compressed buffer formats: the per-group codec's
// default, fine enough that one outlier channel spoils few values.
constexpr int kBufferGroup = 256;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

namespace {
constexpr EnumName<BufferFormat> kBufferFormatNames[] = {
    {BufferFormat::kFp16, "fp16"}, {BufferFormat::kFp32, "fp32"}, {BufferFormat::kQ8, "q8"}, {BufferFormat::kQ4, "q4"}};
}  // namespace

BufferFormat parse_buffer_format(const std::string& name) { return parse_enum(kBufferFormatNames, name, "buffer format"); }

const char* to_string(BufferFormat f) { return enum_name(kBufferFormatNames, f); }

AqsgdBoundary::AqsgdBoundary(const std::string& file, const BufferOptions& options, const BoundaryCodec& codec,
                             std::vector<int64_t> row_shape, int64_t resume_step)
    : options_(options), codec_(codec), row_shape_(std::move(row_shape)) {
  if (codec_.kind != BoundaryCodec::kAqsgd) throw InvalidInput("AqsgdBoundary: the codec is not aqsgd");
  if (options_.dir.empty()) throw InvalidInput("aqsgd: no buffer directory given");
  if (options_.prefetch_depth < 0) throw InvalidInput("aqsgd: the prefetch depth must be >= 0");
  ExampleStoreOptions so;
  so.path = options_.dir + "/" + file;
  so.memory_budget = options_.memory_budget;
  so.engine = options_.engine;
  store_ = resume_step >= 0 ? std::make_unique<ExampleStore>(so, resume_step) : std::make_unique<ExampleStore>(so);
}

bool AqsgdBoundary::sends_delta(int64_t step, const std::vector<int64_t>& ids) const {
  if (step < options_.warmup_steps) return false;
  for (int64_t id : ids) {
    if (!store_->contains(id)) return false;
  }
  return true;
}

int64_t AqsgdBoundary::bytes_per_example() const {
  const int64_t n = numel_of(row_shape_);
  switch (options_.format) {
    case BufferFormat::kFp16: return 2 * n;
    case BufferFormat::kFp32: return 4 * n;
    case BufferFormat::kQ8:
    case BufferFormat::kQ4: {
      PerGroupOptions o;
      o.bits = options_.format == BufferFormat::kQ8 ? 8 : 4;
      o.group_size = kBufferGroup;
      return int64_t(encode_per_group(at::zeros({n}), o).serialize().size());
    }
  }
  return 0;
}

at::Tensor AqsgdBoundary::load(int64_t id) {
  const std::vector<uint8_t> b = store_->get(id);
  const int64_t n = numel_of(row_shape_);
  auto wrong = [&](size_t expected) {
    throw FormatError(c10::str("aqsgd buffer of example ", id, " in ", store_->path(), ": ", b.size(),
                               " bytes, expected ", expected));
  };
  switch (options_.format) {
    case BufferFormat::kFp16: {
      if (b.size() != size_t(2 * n)) wrong(size_t(2 * n));
      at::Tensor h = at::empty(row_shape_, at::kHalf);
      std::memcpy(h.data_ptr(), b.data(), b.size());
      return h.to(at::kFloat);
    }
    case BufferFormat::kFp32: {
      if (b.size() != size_t(4 * n)) wrong(size_t(4 * n));
      at::Tensor f = at::empty(row_shape_, at::kFloat);
      std::memcpy(f.data_ptr(), b.data(), b.size());
      return f;
    }
    case BufferFormat::kQ8:
    case BufferFormat::kQ4: {
      const CompressedTensor ct = CompressedTensor::deserialize(b);
      if (ct.numel() != n) wrong(size_t(bytes_per_example()));
      return ct.decode().to(at::kFloat).reshape(row_shape_);
    }
  }
  return {};
}

at::Tensor AqsgdBoundary::gather(const std::vector<int64_t>& ids) {
  std::vector<at::Tensor> rows;
  rows.reserve(ids.size());
  for (int64_t id : ids) rows.push_back(load(id));
  return at::stack(rows);
}

at::Tensor AqsgdBoundary::store_rows(const at::Tensor& m, const std::vector<int64_t>& ids, uint64_t seed) {
  uint32_t crc = 0;
  std::vector<at::Tensor> kept;
  kept.reserve(ids.size());
  for (size_t b = 0; b < ids.size(); ++b) {
    const at::Tensor row = m[int64_t(b)].contiguous();
    std::vector<uint8_t> bytes;
    at::Tensor value;
    if (options_.format == BufferFormat::kFp16 || options_.format == BufferFormat::kFp32) {
      const at::Tensor t = row.to(options_.format == BufferFormat::kFp16 ? at::kHalf : at::kFloat).contiguous();
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      bytes.assign(p, p + t.nbytes());
      value = t.to(at::kFloat);
    } else {
      PerGroupOptions o;
      o.bits = options_.format == BufferFormat::kQ8 ? 8 : 4;
      o.group_size = kBufferGroup;
      o.seed = seed ^ (uint64_t(ids[b]) * 0x9E3779B97F4A7C15ull);  // the same on both sides
      const CompressedTensor ct = encode_per_group(row.reshape({-1}), o);
      bytes = ct.serialize();
      value = ct.decode().to(at::kFloat).reshape(row_shape_);
    }
    // The store's content_checksum of the value: q8/q4 values end with
    // their own CRC-32C, over which a plain CRC-32C is the same for every value.
    const uint32_t value_sum = store_->put(ids[b], std::move(bytes));
    crc = crc32c(&value_sum, sizeof(value_sum), crc);
    kept.push_back(value);
  }
  last_checksum_ = crc;
  return at::stack(kept);
}

std::vector<uint8_t> AqsgdBoundary::send(const at::Tensor& a, const std::vector<int64_t>& ids, int64_t step,
                                         uint64_t seed) {
  std::vector<int64_t> shape{int64_t(ids.size())};
  shape.insert(shape.end(), row_shape_.begin(), row_shape_.end());
  if (a.sizes().vec() != shape) {
    throw InvalidInput(c10::str("aqsgd: activation of shape ", a.sizes(), " for ", ids.size(), " examples of ",
                                row_shape_));
  }
  const at::Tensor x = a.detach().to(at::kFloat).contiguous();
  if (!sends_delta(step, ids)) {
    std::vector<uint8_t> payload = encode_raw(x, at::kFloat).serialize();
    store_rows(x, ids, seed);
    return payload;
  }
  const at::Tensor m = gather(ids);
  DirectQOptions o;
  o.bits = codec_.bits;
  o.per_channel = true;
  o.grid = codec_.grid;
  o.stochastic = codec_.stochastic;
  o.seed = seed;
  std::vector<uint8_t> payload = encode_directq(x - m, o).serialize();
  // The receiver's arithmetic exactly: decode the bytes that travel.
  const at::Tensor delta = CompressedTensor::deserialize(payload).decode().to(at::kFloat);
  store_rows(m + delta, ids, seed);
  return payload;
}

at::Tensor AqsgdBoundary::receive(const std::vector<uint8_t>& payload, const std::vector<int64_t>& ids, int64_t step,
                                  uint64_t seed, const std::string& where) {
  const bool delta = sends_delta(step, ids);
  std::vector<int64_t> shape{int64_t(ids.size())};
  shape.insert(shape.end(), row_shape_.begin(), row_shape_.end());
  at::Tensor x;
  try {
    const CompressedTensor ct = CompressedTensor::deserialize(payload);
    if (ct.shape() != shape) {
      throw FormatError(c10::str("holds a tensor of shape ", ct.shape(), " where ", shape, " was expected"));
    }
    const CodecKind expected = delta ? CodecKind::kDirectQ : CodecKind::kRaw;
    if (ct.kind() != expected) {
      throw FormatError(c10::str("holds a ", to_string(ct.kind()), " payload where aqsgd expects ",
                                 delta ? "a DirectQ delta" : "full-precision activations",
                                 " (the two sides' buffers or warm-up disagree)"));
    }
    x = ct.decode().to(at::kFloat);
  } catch (const FormatError& e) {
    throw FormatError(c10::str(where, ": ", e.what()));
  }
  if (!delta) {
    store_rows(x, ids, seed);
    return x;
  }
  return store_rows(gather(ids) + x, ids, seed);
}

}  // namespace actkit::pipeline
