// Compresses a batch of activations to 2 bits per value, ships it through
// the byte format and decodes it back; then trains one step of a zoo model
// at L4 (compressed activations swapped out of device memory), through the
// one target an installed ACTkit exports.
#include <torch/torch.h>

#include <cstdio>

#include "actkit/converters/convert.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/core/version.h"
#include "actkit/models/zoo.h"

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

  actkit::ModelOptions o;
  o.num_classes = 10;
  o.image_size = 32;
  auto model = actkit::make_model("resnet18", o);
  const actkit::ConvertResult converted = actkit::convert(*model, "L4");
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  const at::Tensor x = model->example_input(4, 32);
  const at::Tensor loss = model->loss(x, model->forward(x), model->example_labels(x));
  loss.backward();
  sgd.step();
  converted.controller->step();
  std::printf("one L4 step of resnet18: loss %.3f, %lld activations swapped out\n", loss.item<double>(),
              static_cast<long long>(converted.swapper->stats().swapped_out));
  return restored.sizes() == activations.sizes() && converted.swapper->stats().swapped_out > 0 ? 0 : 1;
}
