// convert() over the model zoo and over plain LibTorch module trees, and
// the state-dict loader.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/converters/convert.h"
#include "actkit/layers/fused.h"
#include "actkit/converters/state_dict.h"
#include "actkit/models/zoo.h"
#include "actkit/core/errors.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;

namespace {

ModelOptions small_options(const std::string& name) {
  ModelOptions o;
  o.num_classes = 10;
  o.image_size = 32;
  if (name.rfind("vit", 0) == 0) o.patch_size = 8;
  o.vocab_size = 101;
  o.max_positions = 32;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  return o;
}

bool small_variant(const std::string& name) {
  return name != "gpt2-small" && name != "bert-base" && name != "vit-b16";
}

std::map<std::string, const void*> storage(const torch::nn::Module& m) {
  std::map<std::string, const void*> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().data_ptr();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value().data_ptr();
  return out;
}

int64_t input_length(const ZooModel& m) { return find_model(m.name()).input == InputKind::kTokens ? 16 : 32; }

}  // namespace

class ZooTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooTest, ConvertsSharingStorageAndTrainsAStep) {
  const std::string name = GetParam();
  if (!small_variant(name)) GTEST_SKIP() << "full-size variant (covered by its configurable sibling)";
  auto model = make_model(name, small_options(name));
  const auto before = storage(*model);
  const ConvertResult result = convert(*model, "L3", 1);
  EXPECT_FALSE(result.report.converted.empty());
  EXPECT_EQ(storage(*model), before) << "convert() must keep every parameter's storage and name";

  at::manual_seed(0);
  const at::Tensor x = model->example_input(4, input_length(*model));
  const at::Tensor labels = model->example_labels(x);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  const at::Tensor out = model->forward(x);
  const at::Tensor loss = model->loss(x, out, labels);
  ASSERT_TRUE(std::isfinite(loss.item<double>()));
  const at::Tensor w0 = model->parameters().front().detach().clone();
  opt.zero_grad();
  loss.backward();
  opt.step();
  result.controller->step();
  EXPECT_FALSE(bitwise_equal(model->parameters().front(), w0)) << "the step changed nothing";
  EXPECT_GT(result.controller->stats().compress_calls, 0);
  EXPECT_EQ(storage(*model), before);
}

// Compression changes what backward reads, never what forward computes: at
// L3 with 8 bits the converted model's loss is the fp32 model's, and its
// gradient is the fp32 gradient up to 8-bit rounding noise. Per element that
// noise has a standard deviation of at most R/(2*255) for a group of range R
// (0.2% of the range); each layer adds it to its input gradient, so the
// relative error of the whole gradient grows with depth: measured 0.8% for
// ResNet-18, 1.5% for ResNet-50, 2.6% for ResNet-101, 7.4% for ResNet-152
// (the deepest). 10% stays far below what a wrong backward gives (of the
// order of the gradient itself).
TEST_P(ZooTest, GradientAtEightBitsIsTheFp32Gradient) {
  const std::string name = GetParam();
  if (!small_variant(name)) GTEST_SKIP() << "full-size variant (covered by its configurable sibling)";
  auto plain = make_model(name, small_options(name));
  auto compressed = make_model(name, small_options(name));
  {
    torch::NoGradGuard no_grad;
    auto from = plain->named_parameters();
    for (const auto& p : compressed->named_parameters()) p.value().copy_(from[p.key()]);
    auto buffers = plain->named_buffers();
    for (const auto& b : compressed->named_buffers()) b.value().copy_(buffers[b.key()]);
  }
  const ConvertResult result = convert(*compressed, "L3:bits=8", 1);
  at::manual_seed(0);
  const at::Tensor x = plain->example_input(4, input_length(*plain));
  const at::Tensor labels = plain->example_labels(x);
  const auto loss_of = [&](ZooModel& m) {
    at::manual_seed(1);  // the same dropout masks in both models
    return m.loss(x, m.forward(x), labels);
  };
  const at::Tensor lp = loss_of(*plain), lc = loss_of(*compressed);
  // The same computation, up to float rounding: a batch norm that normalizes
  // its convolution's output in place may round its last bit differently,
  // and 150 layers deep such differences reach 3e-5 of the loss.
  EXPECT_NEAR(lc.item<double>(), lp.item<double>(), 1e-4 * std::abs(lp.item<double>()));
  lp.backward();
  lc.backward();
  EXPECT_GT(result.controller->stats().compress_calls, 0);
  std::vector<at::Tensor> gp, gc;
  auto compressed_params = compressed->named_parameters();
  for (const auto& p : plain->named_parameters()) {
    if (!p.value().grad().defined()) continue;
    gp.push_back(p.value().grad().flatten());
    gc.push_back(compressed_params[p.key()].grad().flatten());
  }
  const at::Tensor a = at::cat(gp), b = at::cat(gc);
  const double relative = (a - b).norm().item<double>() / a.norm().item<double>();
  EXPECT_LT(relative, 0.10) << "relative error of the whole gradient";
  RecordProperty("relative_gradient_error", std::to_string(relative));
}

INSTANTIATE_TEST_SUITE_P(AllModels, ZooTest, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(Converter, KeepsEachModulesTrainingMode) {
  auto model = make_model("resnet18", small_options("resnet18"));
  model->eval();
  convert(*model, "L3");
  for (const auto& m : model->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  model->train();
  for (const auto& m : model->modules()) EXPECT_TRUE(m->is_training()) << m->name();
}

TEST(Converter, LevelZeroModelIsBitwiseTheOriginal) {
  auto a = make_model("resnet18", small_options("resnet18"));
  auto b = make_model("resnet18", small_options("resnet18"));
  {
    torch::NoGradGuard no_grad;
    auto pa = a->named_parameters();
    for (const auto& p : b->named_parameters()) p.value().copy_(pa[p.key()]);
  }
  convert(*b, "L0");
  const at::Tensor x = a->example_input(3, 32);
  const at::Tensor labels = a->example_labels(x);
  const at::Tensor la = a->loss(x, a->forward(x), labels);
  const at::Tensor lb = b->loss(x, b->forward(x), labels);
  EXPECT_TRUE(bitwise_equal(la, lb));
  la.backward();
  lb.backward();
  auto pa = a->named_parameters();
  for (const auto& p : b->named_parameters()) {
    EXPECT_TRUE(bitwise_equal(p.value().grad(), pa[p.key()].grad())) << p.key();
  }
}

TEST(Converter, PlainLibTorchContainersAreConvertedInPlace) {
  namespace nn = torch::nn;
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)), nn::BatchNorm2d(8), nn::ReLU(),
                     nn::Flatten(), nn::Linear(8 * 8 * 8, 4));
  nn::ModuleList list(nn::Linear(4, 4), nn::GELU());
  net->push_back(nn::Dropout(0.1));
  const auto before = storage(*net);
  const ConvertResult r = convert(*net, "L2");
  EXPECT_EQ(r.report.converted.size(), 5u);  // conv, bn, relu, linear, dropout
  ASSERT_EQ(r.report.kept.size(), 1u);       // flatten
  EXPECT_EQ(r.report.kept[0].path, "3");
  EXPECT_EQ(storage(*net), before);
  const at::Tensor y = net->forward(at::randn({2, 3, 8, 8}).requires_grad_());
  y.sum().backward();
  EXPECT_GT(r.controller->stats().compress_calls, 0);
  const ConvertResult rl = convert(*list, "L2");
  EXPECT_EQ(rl.report.converted.size(), 2u);
  EXPECT_NE(list[0]->name().find("QLinear"), std::string::npos);
}

TEST(Converter, FixedMembersAreReportedNotSilentlyDropped) {
  struct Custom : torch::nn::Module {
    Custom() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
    torch::nn::Linear fc{nullptr};
  };
  Custom m;
  const ConvertResult r = convert(m, "L3");
  EXPECT_TRUE(r.report.converted.empty());
  ASSERT_EQ(r.report.kept.size(), 1u);
  EXPECT_NE(r.report.kept[0].reason.find("fixed member"), std::string::npos);
  EXPECT_NE(r.report.to_string().find("fc"), std::string::npos);
}

TEST(Converter, ConvertingTwiceIsHarmlessAndReportsLevels) {
  auto model = make_model("resnet18", small_options("resnet18"));
  const ConvertResult first = convert(*model, "L1");
  bool bn_marked_fp32 = false;
  for (const auto& e : first.report.converted) {
    if (e.path == "bn1") bn_marked_fp32 = e.reason.find("fp32 at L1") != std::string::npos;
  }
  EXPECT_TRUE(bn_marked_fp32);
  const ConvertResult second = convert(*model, "L3");
  EXPECT_TRUE(second.report.converted.empty());
}

TEST(Zoo, UnknownModelsAndBadOptionsAreClearErrors) {
  EXPECT_THROW(make_model("resnet19"), InvalidInput);
  ModelOptions o = small_options("gpt2");
  o.heads = 5;
  EXPECT_THROW(make_model("gpt2", o), InvalidInput);
  o = small_options("vit");
  o.image_size = 30;
  EXPECT_THROW(make_model("vit", o), InvalidInput);
}

TEST(Zoo, ResNetHasTorchvisionParameterNames) {
  auto model = make_model("resnet50");
  const auto params = model->named_parameters();
  for (const char* name : {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer1.0.downsample.0.weight",
                           "layer1.0.downsample.1.bias", "layer4.2.bn3.weight", "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(params.contains(name)) << name;
  }
  EXPECT_TRUE(model->named_buffers().contains("layer2.3.bn2.running_var"));
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(count, 25557032);  // torchvision resnet50
}

TEST(Zoo, TorchvisionParameterCounts) {
  auto count = [](const std::string& name) {
    int64_t n = 0;
    for (const auto& p : make_model(name)->parameters()) n += p.numel();
    return n;
  };
  EXPECT_EQ(count("resnet18"), 11689512);
  EXPECT_EQ(count("mobilenet_v2"), 3504872);
  EXPECT_EQ(count("densenet121"), 7978856);
  EXPECT_EQ(count("vgg11_bn"), 132868840);
}

TEST(StateDict, SaveAndLoadRoundTripIntoAConvertedModel) {
  auto a = make_model("resnet18", small_options("resnet18"));
  auto b = make_model("resnet18", small_options("resnet18"));
  convert(*b, "L3");
  const std::string path = ::testing::TempDir() + "actkit_state_dict.pt";
  save_state_dict(*a, path);
  const LoadReport r = load_state_dict(*b, path);
  EXPECT_TRUE(r.missing.empty());
  EXPECT_TRUE(r.unexpected.empty());
  auto pa = a->named_parameters();
  for (const auto& p : b->named_parameters()) EXPECT_TRUE(bitwise_equal(p.value(), pa[p.key()])) << p.key();
  auto ba = a->named_buffers();
  for (const auto& p : b->named_buffers()) EXPECT_TRUE(bitwise_equal(p.value(), ba[p.key()])) << p.key();
  std::remove(path.c_str());
}

TEST(StateDict, BadFilesAndShapesAreFormatErrors) {
  auto model = make_model("resnet18", small_options("resnet18"));
  const std::string path = ::testing::TempDir() + "actkit_bad_state.pt";
  {
    std::ofstream out(path, std::ios::binary);
    out << "not a torch file";
  }
  EXPECT_THROW(load_state_dict(*model, path), FormatError);
  EXPECT_THROW(load_state_dict(*model, path + ".missing"), FormatError);
  auto other = make_model("resnet18", ModelOptions{});  // 1000 classes: fc shape differs
  save_state_dict(*other, path);
  EXPECT_THROW(load_state_dict(*model, path), FormatError);
  auto r34 = make_model("resnet34", small_options("resnet34"));
  save_state_dict(*r34, path);
  EXPECT_THROW(load_state_dict(*model, path), FormatError);  // strict: unexpected keys
  std::remove(path.c_str());
}

TEST(Zoo, FusedCrossEntropyMatchesATen) {
  const at::Tensor logits = at::randn({12, 7}, at::kDouble);
  at::Tensor targets = at::randint(0, 7, {12}, at::kLong);
  targets[3] = -100;
  targets[8] = -100;
  const at::Tensor a = logits.clone().requires_grad_();
  const at::Tensor b = logits.clone().requires_grad_();
  const at::Tensor la = fused_cross_entropy(a, targets);
  const at::Tensor lb = at::cross_entropy_loss(b, targets, {}, at::Reduction::Mean, -100);
  EXPECT_NEAR(la.item<double>(), lb.item<double>(), 1e-12);
  la.backward();
  lb.backward();
  EXPECT_LT((a.grad() - b.grad()).abs().max().item<double>(), 1e-12);
  EXPECT_THROW(fused_cross_entropy(logits, targets.narrow(0, 0, 5)), InvalidInput);
}

// forward_fused runs Conv -> BatchNorm pairs through conv_bn: a converted
// pair normalizes the convolution's output in place (one activation-sized
// tensor less at the peak) and computes what the separate modules compute.
TEST(Fused, ConvBatchNormPairsRunInPlace) {
  namespace nn = torch::nn;
  const auto make = [] {
    torch::manual_seed(3);
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(8, 32, 3).padding(1)), nn::BatchNorm2d(32),
                          nn::ReLU(nn::ReLUOptions(true)));
  };
  nn::Sequential plain = make();
  nn::Sequential converted = make();
  // Small pieces keep the convolution's own workspace below the pair's peak.
  convert(*converted, "L2:bits=8,chunk_bytes=256K");
  const at::Tensor x = at::randn({16, 8, 24, 24}).requires_grad_();
  const at::Tensor ref = plain->forward(x);
  EXPECT_TRUE(bitwise_equal(forward_fused(*plain, x), ref)) << "plain modules: exactly the Sequential's forward";

  const int64_t activation = 16 * 32 * 24 * 24 * 4;
  int64_t peak_separate = 0, peak_fused = 0;
  at::Tensor fused;
  {
    ScopedCpuTracking tracking;
    tracking.tracker().reset_peak();
    const int64_t base = tracking.tracker().current_bytes();
    const at::Tensor separate = converted->forward(x);
    peak_separate = tracking.tracker().peak_bytes() - base;
  }
  {
    ScopedCpuTracking tracking;
    tracking.tracker().reset_peak();
    const int64_t base = tracking.tracker().current_bytes();
    fused = forward_fused(*converted, x);
    peak_fused = tracking.tracker().peak_bytes() - base;
  }
  EXPECT_LE(peak_fused, peak_separate - activation * 3 / 4) << peak_fused << " vs " << peak_separate;
  EXPECT_LT(((fused - ref).norm() / ref.norm()).item<double>(), 1e-5);
  fused.sum().backward();
  ASSERT_TRUE(x.grad().defined());
}
