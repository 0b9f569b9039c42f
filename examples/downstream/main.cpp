// Compresses a batch of activations to 2 bits per value, ships it through
// the byte format and decodes it back.
#include <ATen/ATen.h>

#include <cstdio>

#include "actkit/core/pergroup_codec.h"
#include "actkit/core/version.h"

int main() {
  const at::Tensor activations = at::randn({32, 64, 28, 28});

  actkit::PerGroupOptions options;
  options.bits = 2;
  options.seed = 42;
  const actkit::CompressedTensor compressed = actkit::encode_per_group(activations, options);

  // What would travel to another process or to disk.
  const std::vector<uint8_t> wire = compressed.serialize();
  const at::Tensor restored = actkit::CompressedTensor::deserialize(wire).decode();

  const double ratio = double(activations.nbytes()) / double(compressed.byte_size());
  const double rms = (restored - activations).pow(2).mean().sqrt().item<double>();
  std::printf("actkit %s: %lld values, %.2f bits each -> %.1fx smaller, rms error %.3f\n", actkit::kVersion,
              static_cast<long long>(activations.numel()), 8.0 * double(compressed.byte_size()) / double(activations.numel()),
              ratio, rms);
  return restored.sizes() == activations.sizes() ? 0 : 1;
}
