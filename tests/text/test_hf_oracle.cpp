// Hugging Face folders against transformers itself. tests/oracle/hf_reference.py
// builds small random-initialised models of every family the loader knows
// (GPT-2, BERT for sequence classification, ViT for image classification, a
// Llama with grouped-query attention, an untied head and Llama 3's rope
// scaling, a Llama with attention_bias (q, k, v and o biased), a Qwen2 with
// q/k/v biases and a tied head, a Mistral whose sliding window is shorter
// than the sequence, a Qwen3 with its per-head q/k norms), perturbs every
// parameter and saves each with save_pretrained, with its fp32 logits and
// fp64 gradients. ACTkit loads each folder and must give transformers'
// logits; its L0 gradients must be as close to the fp64 ones as
// transformers' own fp32 gradients are; at L3 the loss is unchanged and the
// gradient within the quantizer's noise; and a folder written back by
// save_hf_folder must load in transformers with ACTkit's logits.
//
// Needs transformers at test time (the wheel world's .venv); skips without it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "actkit/app/generate.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/app/train_driver.h"
#include "actkit/process/process.h"
#include "actkit/converters/convert.h"
#include "actkit/converters/safetensors.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "test_paths.h"
#include "test_util.h"

#ifndef ACTKIT_ORACLE_PYTHON
#error "tests/CMakeLists.txt defines ACTKIT_ORACLE_PYTHON"
#endif
#ifndef ACTKIT_HF_SCRIPT
#error "tests/CMakeLists.txt defines ACTKIT_HF_SCRIPT (tests/oracle/hf_reference.py)"
#endif

using namespace actkit;

namespace {

constexpr int kNoTransformers = 2;  // the script's exit status without transformers

std::string python() { return test::oracle_python(ACTKIT_ORACLE_PYTHON); }
double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  return test::max_relative_error(actual, expected);
}

// The reference folders, made once for the whole suite.
class HfOracle : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (python().empty()) {
      skip_ = "no python3 found at configure time";
      return;
    }
    dir_ = new test::TempDir();
    const ProcessResult r =
        run_process({python(), ACTKIT_HF_SCRIPT, "make", "--out", dir_->path(), "--tokenizer",
                          std::string(ACTKIT_TOKENIZER_FIXTURES) + "/qwen2"},
                         ChildOutput::kCapture);
    if (r.exit_status == kNoTransformers) {
      skip_ = "transformers is not installed for " + python();
    } else if (r.exit_status != 0) {
      made_ = "hf_reference.py make failed: " + r.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(made_.empty()) << made_;
  }
  static std::string folder(const std::string& name) { return dir_->path() + "/" + name; }

  static inline test::TempDir* dir_ = nullptr;
  static inline std::string skip_, made_;
};

struct Reference {
  std::map<std::string, at::Tensor> t;
  at::Tensor input, labels, logits;
};

Reference reference(const std::string& folder) {
  Reference r;
  r.t = read_safetensors(folder + "/reference.safetensors");
  r.input = r.t.at("input");
  r.logits = r.t.at("logits");
  if (r.t.count("labels") != 0) r.labels = r.t.at("labels");
  return r;
}

// Gradients of the model's training loss on the reference batch, under the
// folder's names.
std::map<std::string, at::Tensor> hf_gradients(ZooModel& model, const HfModelInfo& info, const Reference& r,
                                               double* loss) {
  model.zero_grad();
  const at::Tensor out = model.forward(r.input);
  const at::Tensor l = model.loss(r.input, out, r.labels);
  *loss = l.item<double>();
  l.backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : model.named_parameters()) {
    if (p.value().grad().defined()) grads[p.key()] = p.value().grad();
  }
  return hf_named(info, grads);
}

// The reference's gradients of one precision ("grad64." or "grad32."), by
// the folder's names.
std::map<std::string, at::Tensor> reference_gradients(const Reference& r, const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [key, g] : r.t) {
    if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = g;
  }
  return out;
}

// One relative error over every gradient the reference holds:
// |actual - fp64| / |fp64| over all of them concatenated.
double gradient_error(const std::map<std::string, at::Tensor>& actual, const Reference& r) {
  std::vector<at::Tensor> a, e;
  for (const auto& [name, g64] : reference_gradients(r, "grad64.")) {
    if (name.find("token_type_embeddings") != std::string::npos) continue;  // folded into the positions
    auto it = actual.find(name);
    EXPECT_NE(it, actual.end()) << "no gradient for " << name;
    if (it == actual.end()) continue;
    const at::Tensor& got = it->second;
    EXPECT_EQ(got.sizes(), g64.sizes()) << name;
    a.push_back(got.to(at::kDouble).flatten());
    e.push_back(g64.flatten());
  }
  const at::Tensor aa = at::cat(a), ee = at::cat(e);
  return (aa - ee).norm().item<double>() / ee.norm().item<double>();
}

TEST_P(HfOracle, LogitsGradientsAndRoundTripMatchTransformers) {
  const std::string name = GetParam();
  const Reference r = reference(folder(name));
  const HfModelInfo info = read_hf_config(folder(name));
  HfLoadReport report;
  std::shared_ptr<ZooModel> model = load_hf_model(info, &report);
  EXPECT_TRUE(report.fresh.empty()) << report.fresh.front();
  model->eval();
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(r.input);
  }
  ASSERT_EQ(logits.sizes(), r.logits.sizes());
  EXPECT_LT(relative_error(logits, r.logits), 1e-5) << "logits of " << info.architecture;

  // L0 gradients: as close to fp64 as transformers' own fp32 ones (with
  // room for a different summation order, never for a misplaced tensor).
  double loss = 0;
  const auto ours = hf_gradients(*model, info, r, &loss);
  const double loss64 = r.t.at("loss64").item<double>();
  EXPECT_NEAR(loss, loss64, 1e-5 * std::abs(loss64));
  const double ours_error = gradient_error(ours, r);
  const double theirs = gradient_error(reference_gradients(r, "grad32."), r);
  EXPECT_LT(ours_error, std::max(8 * theirs, 1e-6)) << "transformers' fp32 gradient error: " << theirs;
  RecordProperty("gradient_error_fp32", c10::str(ours_error));
  RecordProperty("gradient_error_transformers_fp32", c10::str(theirs));

  // L3 compresses what backward reads, never what forward computes: the
  // loss is unchanged. At 8 bits the gradient is the fp64 one up to the
  // rounding noise of test_converter.cpp's bound (10% of the whole
  // gradient's norm, far below a wrong backward's error).
  {
    std::shared_ptr<ZooModel> l3 = load_hf_model(read_hf_config(folder(name)));
    l3->eval();
    convert(*l3, "L3:bits=8", 1);
    double loss3 = 0;
    const auto g3 = hf_gradients(*l3, info, r, &loss3);
    EXPECT_NEAR(loss3, loss64, 1e-5 * std::abs(loss64));
    EXPECT_LT(gradient_error(g3, r), 0.10);
  }

  // Written back, the folder loads in transformers with our logits.
  test::TempDir out;
  save_hf_folder(*model, read_hf_config(folder(name)), out.path() + "/model");
  const std::string mine = out.path() + "/ours.safetensors", theirs_file = out.path() + "/theirs.safetensors";
  write_safetensors(mine, {{"input", r.input}});
  const ProcessResult check = run_process(
      {python(), ACTKIT_HF_SCRIPT, "check", "--folder", out.path() + "/model", "--input", mine, "--out", theirs_file},
      ChildOutput::kCapture);
  ASSERT_EQ(check.exit_status, 0) << check.output;
  const at::Tensor reloaded = read_safetensors(theirs_file).at("logits");
  ASSERT_EQ(reloaded.sizes(), logits.sizes());
  EXPECT_LT(relative_error(reloaded, logits), 1e-5) << "transformers' logits of ACTkit's folder";
}

INSTANTIATE_TEST_SUITE_P(Families, HfOracle,
                         ::testing::Values("gpt2", "bert", "vit", "llama", "llama-bias", "qwen2", "mistral", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');  // gtest names are identifiers
                           return name;
                         });

// What a newcomer does: fine-tune a save_pretrained folder at L3 on text its
// own tokenizer cuts, write it back, generate with the result, and load the
// result in transformers, which must compute the logits generate reports.
class HfNewcomer : public HfOracle {};

TEST_F(HfNewcomer, FineTunesAtL3GeneratesAndTransformersLoadsTheResult) {
  test::TempDir work;
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "Fortune " + std::to_string(i) + ": a computer lets you make more mistakes faster than any other "
            "invention, with the possible exception of handguns and tequila.\n";
  }
  const std::string corpus = work.path() + "/text.txt";
  files::write_file_atomic(corpus, text.data(), text.size());
  app::TrainConfig t;
  t.run.model.init = folder("qwen2-tokenized");
  t.run.level = level_preset("L3");
  t.run.data.path = corpus;
  t.run.model.shape.seq_len = 32;
  t.batch = 4;
  t.run.data.train_limit = 32;
  t.run.lr = 3e-3;
  t.run.checkpoint.save_hf = work.path() + "/tuned";
  const app::TrainResult trained = app::run_training(t, nullptr);
  EXPECT_EQ(trained.steps, 8);
  EXPECT_TRUE(std::isfinite(trained.final_validation_loss));

  app::GenerateConfig g;
  g.init = t.run.checkpoint.save_hf;
  g.prompt = "A computer lets you";
  g.max_new_tokens = 6;
  const app::GenerateResult r = app::generate(g, nullptr);
  ASSERT_FALSE(r.prompt_tokens.empty());
  EXPECT_FALSE(r.tokens.empty());
  ASSERT_EQ(int64_t(r.last_logits.size()), read_hf_config(t.run.checkpoint.save_hf).options.vocab_size);

  const std::string input = work.path() + "/prompt.safetensors", theirs = work.path() + "/theirs.safetensors";
  write_safetensors(input, {{"input", at::tensor(r.prompt_tokens, at::kLong).unsqueeze(0)}});
  const ProcessResult check = run_process(
      {python(), ACTKIT_HF_SCRIPT, "check", "--folder", t.run.checkpoint.save_hf, "--input", input, "--out", theirs},
      ChildOutput::kCapture);
  ASSERT_EQ(check.exit_status, 0) << check.output;
  const at::Tensor logits = read_safetensors(theirs).at("logits");  // (1, T, V)
  const at::Tensor last = logits.select(0, 0).select(0, logits.size(1) - 1);
  const at::Tensor ours = at::tensor(r.last_logits, at::kFloat);
  EXPECT_LT(relative_error(ours, last), 1e-5) << "transformers' logits of the fine-tuned folder";
}

}  // namespace
