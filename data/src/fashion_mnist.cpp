#include "actkit/data/fashion_mnist.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <zlib.h>

#include <vector>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit {
namespace {

// Normalization of Fashion-MNIST's training images.
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

std::vector<uint8_t> gunzip_file(const std::string& path) {
  if (!files::exists(path)) {
    throw InvalidInput(c10::str("missing ", path, " (install Debian's dataset-fashion-mnist package, or pass ",
                                "--data-dir)"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw InvalidInput(c10::str("cannot open ", path));
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(f, chunk.data(), unsigned(chunk.size()));
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      throw FormatError(c10::str(path, ": corrupt gzip data (", msg, ")"));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(f);
  return out;
}

uint32_t big_endian(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | uint32_t(b[at + 3]);
}

// Validates an IDX header and returns the dimensions.
std::vector<int64_t> idx_dims(const std::vector<uint8_t>& b, uint32_t magic, size_t rank, const std::string& path) {
  const size_t header = 4 + 4 * rank;
  if (b.size() < header) throw FormatError(c10::str(path, ": truncated IDX header"));
  if (big_endian(b, 0) != magic) throw FormatError(c10::str(path, ": not an IDX file of the expected type"));
  std::vector<int64_t> dims;
  size_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    dims.push_back(int64_t(big_endian(b, 4 + 4 * i)));
    count *= size_t(dims.back());
  }
  if (b.size() != header + count) {
    throw FormatError(c10::str(path, ": holds ", b.size() - header, " data bytes, the header says ", count));
  }
  return dims;
}

}  // namespace

ImageDataset load_fashion_mnist(const std::string& dir, const std::string& split, int64_t limit) {
  if (split != "train" && split != "t10k") throw InvalidInput("fashion-mnist split must be train or t10k");
  if (!files::is_directory(dir)) {
    throw InvalidInput(c10::str("no Fashion-MNIST directory at ", dir,
                                " (install Debian's dataset-fashion-mnist package, or pass --data-dir)"));
  }
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  const std::vector<uint8_t> images = gunzip_file(images_path);
  const std::vector<uint8_t> labels = gunzip_file(labels_path);
  const auto idims = idx_dims(images, 0x00000803, 3, images_path);
  const auto ldims = idx_dims(labels, 0x00000801, 1, labels_path);
  if (idims[0] != ldims[0]) throw FormatError(c10::str(split, ": ", idims[0], " images but ", ldims[0], " labels"));
  const int64_t n = limit > 0 ? std::min(limit, idims[0]) : idims[0];

  ImageDataset d;
  d.images = at::from_blob(const_cast<uint8_t*>(images.data()) + 16, {n, 1, idims[1], idims[2]}, at::kByte)
                 .to(at::kFloat)
                 .div_(255.0f)
                 .sub_(kMean)
                 .div_(kStd);
  d.labels = at::from_blob(const_cast<uint8_t*>(labels.data()) + 8, {n}, at::kByte).to(at::kLong);
  if (d.labels.max().item<int64_t>() >= 10) throw FormatError(c10::str(labels_path, ": a label is not in 0..9"));
  return d;
}

ImageDataset synthetic_images(int64_t n, int64_t classes, int64_t channels, int64_t size, uint64_t seed) {
  at::manual_seed(int64_t(seed) + 1);
  ImageDataset d;
  d.images = at::randn({n, channels, size, size});
  // Labels from a smooth projection of the images, so the task is learnable.
  const at::Tensor pooled = at::adaptive_avg_pool2d(d.images, {4, 4}).flatten(1);
  const at::Tensor proj = at::randn({pooled.size(1), classes});
  d.labels = pooled.matmul(proj).argmax(1);
  return d;
}

}  // namespace actkit
