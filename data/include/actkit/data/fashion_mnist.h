// Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist
// package (gzip-compressed; decompressed in memory).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace actkit {

// The package's install location.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageDataset {
  at::Tensor images;  // (N, 1, 28, 28) float, normalized with the training set's mean/std
  at::Tensor labels;  // (N) int64 in [0, 10)
};

// Loads the training ("train") or test ("t10k") split from `dir`. With
// `limit` > 0, keeps the first `limit` examples. Throws actkit::InvalidInput
// if the directory or a file is missing (naming the package to install) and
// actkit::FormatError for a truncated or malformed file.
ImageDataset load_fashion_mnist(const std::string& dir, const std::string& split, int64_t limit = 0);

// A synthetic stand-in of the same shape: random images whose class is a
// fixed random linear function of the pixels (so it can be learned).
ImageDataset synthetic_images(int64_t n, int64_t classes, int64_t channels, int64_t size, uint64_t seed);

}  // namespace actkit
