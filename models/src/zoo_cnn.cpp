// torchvision-equivalent CNNs: same module tree and parameter names.
#include <torch/torch.h>

#include "actkit/layers/fused.h"
#include "actkit/models/zoo.h"
#include "actkit/layers/branch_point.h"
#include "zoo_registry.h"

namespace actkit {
namespace {

namespace nn = torch::nn;

bool small_images(const ModelOptions& o) { return o.image_size <= 64; }

// A Sequential with a plain Tensor forward, so that it can sit inside another
// Sequential (torchvision nests them); convert() edits it like any Sequential.
class SubSequentialImpl : public nn::SequentialImpl {
 public:
  using nn::SequentialImpl::SequentialImpl;
  at::Tensor forward(const at::Tensor& x) { return forward_fused(*this, x); }
};
TORCH_MODULE(SubSequential);

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t padding = 0, int64_t groups = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(padding).groups(groups).bias(false));
}

// ---------------------------------------------------------------- ResNet --

class BasicBlockImpl : public ReplaceableModule {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride, nn::Sequential downsample, int64_t /*groups*/,
                 int64_t /*base_width*/)
      : ReplaceableModule("BasicBlock"),
        conv1_(add_slot("conv1", conv(in, planes, 3, stride, 1))),
        bn1_(add_slot("bn1", nn::BatchNorm2d(planes))),
        relu_(add_slot("relu", nn::ReLU(nn::ReLUOptions(true)))),
        conv2_(add_slot("conv2", conv(planes, planes, 3, 1, 1))),
        bn2_(add_slot("bn2", nn::BatchNorm2d(planes))),
        downsample_(downsample) {
    if (downsample_) register_module("downsample", downsample_);
  }

  at::Tensor forward(const at::Tensor& input) {
    const auto x = branch_point(input);  // branch, shortcut (see branch_point.h)
    at::Tensor out = relu_.forward(conv_bn(conv1_, bn1_, x[0]));
    out = conv_bn(conv2_, bn2_, out);
    out = residual_add(out, downsample_ ? forward_fused(*downsample_, x[1]) : x[1]);
    return relu_.forward(out);
  }

 private:
  nn::AnyModule &conv1_, &bn1_, &relu_, &conv2_, &bn2_;
  nn::Sequential downsample_;
};

class BottleneckImpl : public ReplaceableModule {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride, nn::Sequential downsample, int64_t groups,
                 int64_t base_width)
      : ReplaceableModule("Bottleneck"),
        conv1_(add_slot("conv1", conv(in, width(planes, groups, base_width), 1))),
        bn1_(add_slot("bn1", nn::BatchNorm2d(width(planes, groups, base_width)))),
        conv2_(add_slot("conv2", conv(width(planes, groups, base_width), width(planes, groups, base_width), 3,
                                      stride, 1, groups))),
        bn2_(add_slot("bn2", nn::BatchNorm2d(width(planes, groups, base_width)))),
        conv3_(add_slot("conv3", conv(width(planes, groups, base_width), planes * kExpansion, 1))),
        bn3_(add_slot("bn3", nn::BatchNorm2d(planes * kExpansion))),
        relu_(add_slot("relu", nn::ReLU(nn::ReLUOptions(true)))),
        downsample_(downsample) {
    if (downsample_) register_module("downsample", downsample_);
  }

  at::Tensor forward(const at::Tensor& input) {
    const auto x = branch_point(input);  // branch, shortcut (see branch_point.h)
    at::Tensor out = relu_.forward(conv_bn(conv1_, bn1_, x[0]));
    out = relu_.forward(conv_bn(conv2_, bn2_, out));
    out = conv_bn(conv3_, bn3_, out);
    out = residual_add(out, downsample_ ? forward_fused(*downsample_, x[1]) : x[1]);
    return relu_.forward(out);
  }

 private:
  static int64_t width(int64_t planes, int64_t groups, int64_t base_width) {
    return planes * base_width / 64 * groups;
  }
  nn::AnyModule &conv1_, &bn1_, &conv2_, &bn2_, &conv3_, &bn3_, &relu_;
  nn::Sequential downsample_;
};

template <typename Block>
class ResNetImpl : public ZooModel {
 public:
  ResNetImpl(const std::string& name, std::vector<int64_t> blocks, const ModelOptions& o, int64_t base_width = 64)
      : ZooModel(name, Task::kClassification), base_width_(base_width), small_(small_images(o)),
        conv1_(add_slot("conv1", small_ ? conv(o.in_channels, 64, 3, 1, 1) : conv(o.in_channels, 64, 7, 2, 3))),
        bn1_(add_slot("bn1", nn::BatchNorm2d(64))),
        relu_(add_slot("relu", nn::ReLU(nn::ReLUOptions(true)))),
        maxpool_(add_slot("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)))) {
    num_classes_ = o.num_classes;
    in_channels_ = o.in_channels;
    layers_.push_back(register_module("layer1", make_layer(64, blocks[0], 1)));
    layers_.push_back(register_module("layer2", make_layer(128, blocks[1], 2)));
    layers_.push_back(register_module("layer3", make_layer(256, blocks[2], 2)));
    layers_.push_back(register_module("layer4", make_layer(512, blocks[3], 2)));
    avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    fc_ = &add_slot("fc", nn::Linear(512 * Block::kExpansion, o.num_classes));
  }

  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor out = relu_.forward(conv_bn(conv1_, bn1_, x));
    if (!small_) out = maxpool_.forward(out);
    // Moved in, so each stage's input is released once its first block is done.
    for (auto& layer : layers_) out = layer->forward(std::move(out));
    return fc_->forward(avgpool_->forward(out).flatten(1));
  }

 private:
  nn::Sequential make_layer(int64_t planes, int64_t blocks, int64_t stride) {
    nn::Sequential downsample{nullptr};
    if (stride != 1 || inplanes_ != planes * Block::kExpansion) {
      downsample = nn::Sequential(conv(inplanes_, planes * Block::kExpansion, 1, stride),
                                  nn::BatchNorm2d(planes * Block::kExpansion));
    }
    nn::Sequential layer;
    layer->push_back(std::make_shared<Block>(inplanes_, planes, stride, downsample, 1, base_width_));
    inplanes_ = planes * Block::kExpansion;
    for (int64_t i = 1; i < blocks; ++i) {
      layer->push_back(std::make_shared<Block>(inplanes_, planes, 1, nn::Sequential{nullptr}, 1, base_width_));
    }
    return layer;
  }

  int64_t inplanes_ = 64;
  int64_t base_width_;
  bool small_;
  nn::AnyModule &conv1_, &bn1_, &relu_, &maxpool_;
  std::vector<nn::Sequential> layers_;
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::AnyModule* fc_ = nullptr;
};

// ------------------------------------------------------------------- VGG --

class VGGImpl : public ZooModel {
 public:
  VGGImpl(const std::string& name, const std::vector<int64_t>& cfg, const ModelOptions& o)
      : ZooModel(name, Task::kClassification) {
    num_classes_ = o.num_classes;
    in_channels_ = o.in_channels;
    int64_t channels = o.in_channels;
    int64_t size = o.image_size;
    for (int64_t v : cfg) {
      if (v == 0) {  // "M": 2x2 max pooling, skipped once the map is 1x1
        if (size >= 2) {
          features_->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
          size /= 2;
        }
        continue;
      }
      features_->push_back(nn::Conv2d(nn::Conv2dOptions(channels, v, 3).padding(1)));
      features_->push_back(nn::BatchNorm2d(v));
      features_->push_back(nn::ReLU(nn::ReLUOptions(true)));
      channels = v;
    }
    register_module("features", features_);
    const int64_t pooled = small_images(o) ? 1 : 7;
    avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(pooled));
    classifier_ = register_module(
        "classifier", nn::Sequential(nn::Linear(512 * pooled * pooled, 4096), nn::ReLU(nn::ReLUOptions(true)),
                                     nn::Dropout(0.5), nn::Linear(4096, 4096), nn::ReLU(nn::ReLUOptions(true)),
                                     nn::Dropout(0.5), nn::Linear(4096, o.num_classes)));
  }

  at::Tensor forward(const at::Tensor& x) override {
    return classifier_->forward(avgpool_->forward(forward_fused(*features_, x)).flatten(1));
  }

 private:
  nn::Sequential features_;
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Sequential classifier_{nullptr};
};

// -------------------------------------------------------------- DenseNet --

class DenseLayerImpl : public ReplaceableModule {
 public:
  DenseLayerImpl(int64_t in, int64_t growth, int64_t bn_size)
      : ReplaceableModule("DenseLayer"),
        norm1_(add_slot("norm1", nn::BatchNorm2d(in))),
        relu1_(add_slot("relu1", nn::ReLU(nn::ReLUOptions(true)))),
        conv1_(add_slot("conv1", conv(in, bn_size * growth, 1))),
        norm2_(add_slot("norm2", nn::BatchNorm2d(bn_size * growth))),
        relu2_(add_slot("relu2", nn::ReLU(nn::ReLUOptions(true)))),
        conv2_(add_slot("conv2", conv(bn_size * growth, growth, 3, 1, 1))) {}

  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor bottleneck = conv1_.forward(relu1_.forward(norm1_.forward(x)));
    return conv2_.forward(relu2_.forward(norm2_.forward(bottleneck)));
  }

 private:
  nn::AnyModule &norm1_, &relu1_, &conv1_, &norm2_, &relu2_, &conv2_;
};
TORCH_MODULE(DenseLayer);

class DenseBlockImpl : public torch::nn::Module {
 public:
  DenseBlockImpl(int64_t layers, int64_t in, int64_t growth, int64_t bn_size) : torch::nn::Module("DenseBlock") {
    for (int64_t i = 0; i < layers; ++i) {
      layers_.push_back(register_module("denselayer" + std::to_string(i + 1),
                                        DenseLayer(in + i * growth, growth, bn_size)));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    std::vector<at::Tensor> features{x};
    for (auto& layer : layers_) features.push_back(layer->forward(at::cat(features, 1)));
    return at::cat(features, 1);
  }

 private:
  std::vector<DenseLayer> layers_;
};
TORCH_MODULE(DenseBlock);

class DenseNetImpl : public ZooModel {
 public:
  DenseNetImpl(const std::string& name, int64_t growth, std::vector<int64_t> blocks, int64_t init, const ModelOptions& o)
      : ZooModel(name, Task::kClassification) {
    num_classes_ = o.num_classes;
    in_channels_ = o.in_channels;
    const bool small = small_images(o);
    features_->push_back("conv0", small ? conv(o.in_channels, init, 3, 1, 1) : conv(o.in_channels, init, 7, 2, 3));
    features_->push_back("norm0", nn::BatchNorm2d(init));
    features_->push_back("relu0", nn::ReLU(nn::ReLUOptions(true)));
    if (!small) features_->push_back("pool0", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    int64_t channels = init;
    for (size_t i = 0; i < blocks.size(); ++i) {
      features_->push_back("denseblock" + std::to_string(i + 1), DenseBlock(blocks[i], channels, growth, 4));
      channels += blocks[i] * growth;
      if (i + 1 != blocks.size()) {
        SubSequential transition;
        transition->push_back("norm", nn::BatchNorm2d(channels));
        transition->push_back("relu", nn::ReLU(nn::ReLUOptions(true)));
        transition->push_back("conv", conv(channels, channels / 2, 1));
        transition->push_back("pool", nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(2)));
        features_->push_back("transition" + std::to_string(i + 1), transition);
        channels /= 2;
      }
    }
    features_->push_back("norm5", nn::BatchNorm2d(channels));
    register_module("features", features_);
    relu_ = &add_slot("relu", nn::ReLU(nn::ReLUOptions(true)));
    classifier_ = &add_slot("classifier", nn::Linear(channels, o.num_classes));
  }

  at::Tensor forward(const at::Tensor& x) override {
    const at::Tensor f = relu_->forward(forward_fused(*features_, x));
    return classifier_->forward(at::adaptive_avg_pool2d(f, {1, 1}).flatten(1));
  }

 private:
  nn::Sequential features_;
  nn::AnyModule* relu_ = nullptr;
  nn::AnyModule* classifier_ = nullptr;
};

// ------------------------------------------------------------ MobileNetV2 --

SubSequential conv_bn_relu6(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups = 1) {
  return SubSequential(conv(in, out, k, stride, (k - 1) / 2, groups), nn::BatchNorm2d(out),
                       nn::ReLU6(nn::ReLU6Options(true)));
}

class InvertedResidualImpl : public torch::nn::Module {
 public:
  InvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expand)
      : torch::nn::Module("InvertedResidual"), use_residual_(stride == 1 && in == out) {
    const int64_t hidden = in * expand;
    if (expand != 1) conv_->push_back(conv_bn_relu6(in, hidden, 1, 1));
    conv_->push_back(conv_bn_relu6(hidden, hidden, 3, stride, hidden));
    conv_->push_back(conv(hidden, out, 1));
    conv_->push_back(nn::BatchNorm2d(out));
    register_module("conv", conv_);
  }

  at::Tensor forward(const at::Tensor& x) { return use_residual_ ? x + conv_->forward(x) : conv_->forward(x); }

 private:
  bool use_residual_;
  SubSequential conv_;
};
TORCH_MODULE(InvertedResidual);

class MobileNetV2Impl : public ZooModel {
 public:
  MobileNetV2Impl(const std::string& name, const ModelOptions& o)
      : ZooModel(name, Task::kClassification) {
    num_classes_ = o.num_classes;
    in_channels_ = o.in_channels;
    // t (expansion), c (channels), n (repeats), s (stride of the first)
    const int64_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                    {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    features_->push_back(conv_bn_relu6(o.in_channels, 32, 3, small_images(o) ? 1 : 2));
    int64_t channels = 32;
    for (const auto& s : settings) {
      for (int64_t i = 0; i < s[2]; ++i) {
        features_->push_back(InvertedResidual(channels, s[1], i == 0 ? s[3] : 1, s[0]));
        channels = s[1];
      }
    }
    features_->push_back(conv_bn_relu6(channels, 1280, 1, 1));
    register_module("features", features_);
    classifier_ = register_module("classifier", nn::Sequential(nn::Dropout(0.2), nn::Linear(1280, o.num_classes)));
  }

  at::Tensor forward(const at::Tensor& x) override {
    return classifier_->forward(at::adaptive_avg_pool2d(forward_fused(*features_, x), {1, 1}).flatten(1));
  }

 private:
  nn::Sequential features_;
  nn::Sequential classifier_{nullptr};
};

std::vector<int64_t> vgg_config(const std::string& name) {
  // 0 marks a max pooling ("M" in torchvision).
  if (name == "vgg11_bn") return {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
  return {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
}

}  // namespace

std::vector<ModelEntry> detail::cnn_models() {
  // A ResNet with `blocks` per stage; `width` is the bottleneck width of the first stage.
  const auto resnet = [](std::vector<int64_t> blocks, bool bottleneck, int64_t width = 64) {
    return [=](const std::string& name, const ModelOptions& o) -> std::shared_ptr<ZooModel> {
      if (bottleneck) return std::make_shared<ResNetImpl<BottleneckImpl>>(name, blocks, o, width);
      return std::make_shared<ResNetImpl<BasicBlockImpl>>(name, blocks, o, width);
    };
  };
  const auto vgg = [](const std::string& name, const ModelOptions& o) -> std::shared_ptr<ZooModel> {
    return std::make_shared<VGGImpl>(name, vgg_config(name), o);
  };
  const Task c = Task::kClassification;
  const InputKind images = InputKind::kImages;
  return {
      {"resnet18", c, images, "ResNet-18 (torchvision names)", resnet({2, 2, 2, 2}, false)},
      {"resnet34", c, images, "ResNet-34", resnet({3, 4, 6, 3}, false)},
      {"resnet50", c, images, "ResNet-50", resnet({3, 4, 6, 3}, true)},
      {"resnet101", c, images, "ResNet-101", resnet({3, 4, 23, 3}, true)},
      {"resnet152", c, images, "ResNet-152", resnet({3, 8, 36, 3}, true)},
      {"wide_resnet50_2", c, images, "Wide ResNet-50-2", resnet({3, 4, 6, 3}, true, 128)},
      {"vgg11_bn", c, images, "VGG-11 with batch norm", vgg},
      {"vgg16_bn", c, images, "VGG-16 with batch norm", vgg},
      {"densenet121", c, images, "DenseNet-121",
       [](const std::string& name, const ModelOptions& o) -> std::shared_ptr<ZooModel> {
         return std::make_shared<DenseNetImpl>(name, 32, std::vector<int64_t>{6, 12, 24, 16}, 64, o);
       }},
      {"mobilenet_v2", c, images, "MobileNetV2",
       [](const std::string& name, const ModelOptions& o) -> std::shared_ptr<ZooModel> {
         return std::make_shared<MobileNetV2Impl>(name, o);
       }},
  };
}

}  // namespace actkit
