// The compressed layers under test, each beside the plain LibTorch module it
// wraps: one list for every layer test (exactness, unbiasedness).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actkit/core/controller.h"
#include "actkit/layers/modules.h"

namespace actkit::test {

struct LayerCase {
  std::string name;
  LayerKind kind = LayerKind::kConv;
  std::function<std::shared_ptr<torch::nn::Module>()> make_plain;
  // The compressed module around a plain one (the controller decides what it saves).
  std::function<std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>, std::shared_ptr<Controller>)>
      wrap;
  // forward() of either module.
  std::function<at::Tensor(torch::nn::Module&, const at::Tensor&)> call;
  std::vector<int64_t> input_shape;
  bool lossless = false;  // saves masks / indices / nothing: gradients exact at any bits
};

template <typename Q, typename Plain>
LayerCase layer_case(std::string name, LayerKind kind, std::function<std::shared_ptr<Plain>()> make,
                     std::vector<int64_t> shape, bool lossless = false) {
  LayerCase c;
  c.name = std::move(name);
  c.kind = kind;
  c.make_plain = [make] { return std::static_pointer_cast<torch::nn::Module>(make()); };
  c.wrap = [kind](std::shared_ptr<torch::nn::Module> plain, std::shared_ptr<Controller> ctrl) {
    return std::static_pointer_cast<torch::nn::Module>(
        std::make_shared<Q>(std::dynamic_pointer_cast<Plain>(plain), std::move(ctrl), "layer", kind));
  };
  c.call = [](torch::nn::Module& m, const at::Tensor& x) {
    if (auto* q = dynamic_cast<Q*>(&m)) return q->forward(x);
    return dynamic_cast<Plain&>(m).forward(x);
  };
  c.input_shape = std::move(shape);
  c.lossless = lossless;
  return c;
}

// Every compressed layer, small shapes (odd sizes, groups and strides where
// the layer has them).
inline std::vector<LayerCase> all_layer_cases() {
  namespace nn = torch::nn;
  using K = LayerKind;
  return {
      layer_case<QConv1dImpl, nn::Conv1dImpl>(
          "Conv1d", K::kConv, [] { return std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(4, 6, 3).padding(1)); },
          {5, 4, 33}),
      layer_case<QConv2dImpl, nn::Conv2dImpl>(
          "Conv2d", K::kConv,
          [] { return std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).groups(2)); },
          {5, 4, 17, 15}),
      layer_case<QConv3dImpl, nn::Conv3dImpl>(
          "Conv3d", K::kConv, [] { return std::make_shared<nn::Conv3dImpl>(nn::Conv3dOptions(3, 4, 3).padding(1)); },
          {3, 3, 6, 7, 5}),
      layer_case<QConvTranspose2dImpl, nn::ConvTranspose2dImpl>(
          "ConvTranspose2d", K::kConv,
          [] {
            return std::make_shared<nn::ConvTranspose2dImpl>(
                nn::ConvTranspose2dOptions(4, 3, 3).stride(2).padding(1).output_padding(1));
          },
          {4, 4, 9, 8}),
      layer_case<QLinearImpl, nn::LinearImpl>(
          "Linear", K::kLinear, [] { return std::make_shared<nn::LinearImpl>(40, 24); }, {6, 7, 40}),
      layer_case<QBatchNorm1dImpl, nn::BatchNorm1dImpl>(
          "BatchNorm1d", K::kNorm, [] { return std::make_shared<nn::BatchNorm1dImpl>(12); }, {16, 12, 5}),
      layer_case<QBatchNorm2dImpl, nn::BatchNorm2dImpl>(
          "BatchNorm2d", K::kNorm,
          [] { return std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(6).momentum(c10::nullopt)); },
          {8, 6, 9, 9}),
      layer_case<QLayerNormImpl, nn::LayerNormImpl>(
          "LayerNorm", K::kNorm, [] { return std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({32})); },
          {4, 9, 32}),
      layer_case<QReLUImpl, nn::ReLUImpl>(
          "ReLU", K::kActivation, [] { return std::make_shared<nn::ReLUImpl>(); }, {6, 5, 33}, true),
      layer_case<QGELUImpl, nn::GELUImpl>(
          "GELU", K::kActivation, [] { return std::make_shared<nn::GELUImpl>(); }, {6, 5, 33}),
      layer_case<QSiLUImpl, nn::SiLUImpl>(
          "SiLU", K::kActivation, [] { return std::make_shared<nn::SiLUImpl>(); }, {6, 5, 33}),
      layer_case<QDropoutImpl, nn::DropoutImpl>(
          "Dropout", K::kActivation, [] { return std::make_shared<nn::DropoutImpl>(0.3); }, {6, 5, 33}, true),
      layer_case<QSoftmaxImpl, nn::SoftmaxImpl>(
          "Softmax", K::kActivation, [] { return std::make_shared<nn::SoftmaxImpl>(-1); }, {6, 5, 33}),
      layer_case<QMaxPool2dImpl, nn::MaxPool2dImpl>(
          "MaxPool2d", K::kActivation,
          [] { return std::make_shared<nn::MaxPool2dImpl>(nn::MaxPool2dOptions(3).stride(2).padding(1)); },
          {4, 3, 15, 16}, true),
      layer_case<QAvgPool2dImpl, nn::AvgPool2dImpl>(
          "AvgPool2d", K::kActivation,
          [] { return std::make_shared<nn::AvgPool2dImpl>(nn::AvgPool2dOptions(2).stride(2)); }, {4, 3, 16, 16},
          true),
  };
}

}  // namespace actkit::test
