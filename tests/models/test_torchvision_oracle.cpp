// The model zoo against torchvision itself. For each zoo CNN,
// tests/oracle/torchvision_reference.py builds torchvision's model with random
// weights and batch-norm statistics, saves model.state_dict() with torch.save
// and its eval-mode output on a fixed 224x224 input; the zoo model must load
// that file strictly (same parameter and buffer names and shapes) and give
// the same output, before and after convert(model, "L3").
//
// Needs python3-torchvision at test time; skips (GTEST_SKIP) without it. The
// interpreter is the one CMake found (ACTKIT_ORACLE_PYTHON), or the
// ACTKIT_ORACLE_PYTHON environment variable when set.
#include <gtest/gtest.h>
#include <torch/torch.h>


#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "actkit/process/process.h"
#include "actkit/converters/convert.h"
#include "actkit/core/errors.h"
#include "actkit/converters/state_dict.h"
#include "actkit/models/zoo.h"
#include "test_util.h"

#ifndef ACTKIT_ORACLE_PYTHON
#error "tests/CMakeLists.txt defines ACTKIT_ORACLE_PYTHON (python3 with torchvision, or empty)"
#endif
#ifndef ACTKIT_ORACLE_SCRIPT
#error "tests/CMakeLists.txt defines ACTKIT_ORACLE_SCRIPT (tests/oracle/torchvision_reference.py)"
#endif

using namespace actkit;
using actkit::test::TempDir;

namespace {

// Eval-mode outputs of the same float32 computation in two implementations
// differ only by summation order; 1e-4 of the output's range leaves room for
// that and none for a misplaced tensor.
constexpr double kMaxRelativeError = 1e-4;

// The reference script's exit status when torch or torchvision is missing.
constexpr int kNoTorchvision = 2;

std::string python() { return test::oracle_python(ACTKIT_ORACLE_PYTHON); }
double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  return test::max_relative_error(actual, expected);
}

class TorchvisionOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchvisionOracle, ZooMatchesTorchvisionBeforeAndAfterConvert) {
  const std::string name = GetParam();
  if (python().empty()) {
    GTEST_SKIP() << "no python3 found at configure time; set ACTKIT_ORACLE_PYTHON to one with torchvision";
  }
  const auto start = std::chrono::steady_clock::now();

  TempDir dir;
  // The reference run's report comes on stdout; its errors go to ours.
  const std::vector<std::string> argv = {python(), ACTKIT_ORACLE_SCRIPT, "--model", name, "--batch", "2",
                                         "--size", "224", "--out", dir.path()};
  ProcessResult reference;
  try {
    reference = run_process(argv, ChildOutput::kCapture);
  } catch (const IoError& e) {
    GTEST_SKIP() << "cannot start " << python() << " (" << e.what() << "); install python3-torchvision "
                 << "(scripts/setup.sh) to compare the zoo with torchvision";
  }
  if (reference.exit_status == kNoTorchvision) {
    GTEST_SKIP() << "python3-torchvision is not available to " << python() << " (its message is above); install "
                 << "it (scripts/setup.sh) to compare the zoo with torchvision";
  }
  ASSERT_TRUE(reference.succeeded()) << python() << " " << ACTKIT_ORACLE_SCRIPT << " failed (status "
                                     << reference.exit_status << ", signal " << reference.signal << "):\n"
                                     << reference.output;
  std::cout << reference.output;

  const auto io = read_state_dict(dir.file(name + "_io.pt"));
  const at::Tensor input = io["input"];
  const at::Tensor expected = io["output"];

  // torchvision's defaults: 1000 classes, 224x224 images (the ImageNet stem).
  auto model = make_model(name);
  load_state_dict(*model, dir.file(name + ".pt"));  // strict: every name and shape must match
  model->eval();

  at::Tensor plain;
  {
    torch::NoGradGuard no_grad;
    plain = model->forward(input);
  }
  ASSERT_EQ(plain.sizes(), expected.sizes());
  const double plain_error = relative_error(plain, expected);
  EXPECT_LE(plain_error, kMaxRelativeError) << name << " differs from torchvision";

  // Compression only changes what is saved for backward; in eval mode the
  // converted model must compute the same output, with or without autograd.
  const ConvertResult converted = convert(*model, "L3");
  ASSERT_FALSE(converted.report.converted.empty());
  // The replacements must keep the eval mode of the modules they wrap, or
  // batch norm would normalize with the batch's statistics.
  std::vector<std::string> training;
  for (const auto& m : model->named_modules()) {
    if (m.value()->is_training()) training.push_back(m.key());
  }
  EXPECT_TRUE(training.empty()) << "convert() put " << training.size() << " modules of an eval-mode " << name
                                << " in training mode, e.g. " << (training.empty() ? "-" : training.front());
  at::Tensor after_no_grad;
  {
    torch::NoGradGuard no_grad;
    after_no_grad = model->forward(input);
  }
  const at::Tensor after_grad = model->forward(input).detach();
  const double no_grad_error = relative_error(after_no_grad, expected);
  const double grad_error = relative_error(after_grad, expected);
  EXPECT_LE(no_grad_error, kMaxRelativeError) << name << " converted to L3 differs from torchvision (no autograd)";
  EXPECT_LE(grad_error, kMaxRelativeError) << name << " converted to L3 differs from torchvision (autograd on)";
  const double converted_error = std::max(no_grad_error, grad_error);

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << name << ": max relative error " << plain_error << " (converted L3: " << converted_error << "), "
            << seconds << " s\n";
  RecordProperty("max_relative_error", std::to_string(plain_error));
  RecordProperty("max_relative_error_l3", std::to_string(converted_error));
}

// Every CNN of the zoo (models/src/zoo_cnn.cpp), by its torchvision name.
INSTANTIATE_TEST_SUITE_P(Zoo, TorchvisionOracle,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                                           "wide_resnet50_2", "vgg11_bn", "vgg16_bn", "densenet121", "mobilenet_v2"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
