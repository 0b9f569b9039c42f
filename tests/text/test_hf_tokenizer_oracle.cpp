// The prompt `actkit generate` gives a model against transformers' own
// tokenizer of the folder: tests/oracle/hf_tokenizer_reference.py makes
// tiny Llama folders over the tokenizer fixtures (a byte-level tokenizer.json
// whose post-processor adds nothing, one with Llama 3's TemplateProcessing,
// a tokenizer.model with add_bos_token false and true, and Llama 2's layout:
// a Metaspace tokenizer.json beside its tokenizer.model) and writes
// AutoTokenizer(folder)(prompt)["input_ids"] for several prompts; generate
// must start from exactly those ids: a BOS where and only where transformers
// puts one, a second one before a prompt that already starts with it.
//
// Needs transformers (and protobuf, with which it reads tokenizer.model) at
// test time; skips without them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "actkit/app/generate.h"
#include "actkit/process/process.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"
#include "test_paths.h"
#include "test_util.h"

#ifndef ACTKIT_ORACLE_PYTHON
#error "tests/CMakeLists.txt defines ACTKIT_ORACLE_PYTHON"
#endif
#ifndef ACTKIT_HF_TOKENIZER_SCRIPT
#error "tests/CMakeLists.txt defines ACTKIT_HF_TOKENIZER_SCRIPT (tests/oracle/hf_tokenizer_reference.py)"
#endif

using namespace actkit;

namespace {

constexpr int kMissingPackages = 2;  // the script's exit status without transformers or protobuf

// The folders and expected ids, made once for the suite.
class HfTokenizerOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string python = test::oracle_python(ACTKIT_ORACLE_PYTHON);
    if (python.empty()) {
      skip_ = "no python3 found at configure time";
      return;
    }
    dir_ = new test::TempDir();
    const ProcessResult r = run_process(
        {python, ACTKIT_HF_TOKENIZER_SCRIPT, "make", "--fixtures", ACTKIT_TOKENIZER_FIXTURES, "--out", dir_->path()},
        ChildOutput::kCapture);
    if (r.exit_status == kMissingPackages) {
      skip_ = "transformers or protobuf is not installed for " + python + ": " + r.output;
    } else if (r.exit_status != 0) {
      made_ = "hf_tokenizer_reference.py make failed: " + r.output;
    } else {
      const std::string text = files::read_small_file(dir_->path() + "/expected.json", uint64_t(1) << 20);
      expected_ = new nlohmann::json(nlohmann::json::parse(text));
    }
  }
  static void TearDownTestSuite() {
    delete expected_;
    expected_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(made_.empty()) << made_;
  }

  // generate's prompt ids for every prompt of `folder` equal transformers'.
  static void expect_prompts_as_transformers(const std::string& folder) {
    ASSERT_TRUE(expected_->contains(folder)) << folder;
    for (const nlohmann::json& item : (*expected_)[folder]) {
      app::GenerateConfig g;
      g.init = dir_->path() + "/" + folder;
      g.prompt = item["prompt"].get<std::string>();
      g.max_new_tokens = 1;
      const app::GenerateResult r = app::generate(g, nullptr);
      EXPECT_EQ(r.prompt_tokens, item["ids"].get<std::vector<int64_t>>()) << folder << ", prompt \"" << g.prompt << "\"";
    }
  }

  static inline test::TempDir* dir_ = nullptr;
  static inline nlohmann::json* expected_ = nullptr;
  static inline std::string skip_, made_;
};

// GPT-2's byte-level tokenizer.json in a Llama folder whose
// tokenizer_config.json names a bos_token: its ByteLevel post-processor adds
// none, and nor may generate.
TEST_F(HfTokenizerOracle, AByteLevelPostProcessorAddsNoBos) { expect_prompts_as_transformers("byte-level"); }

// Llama 3's Sequence[ByteLevel, TemplateProcessing("<|begin_of_text|> $A")]:
// one BOS before every prompt, a second before one that starts with it.
TEST_F(HfTokenizerOracle, ATemplateAddsItsBosEvenTwice) { expect_prompts_as_transformers("template"); }

// tokenizer.model alone: tokenizer_config.json's add_bos_token decides.
TEST_F(HfTokenizerOracle, ASentencePieceFolderAddsBosOnlyWithAddBosToken) {
  expect_prompts_as_transformers("spm-no-bos");
  expect_prompts_as_transformers("spm-bos");
}

// Llama 2's layout: a Metaspace tokenizer.json (which ACTkit does not read)
// beside the tokenizer.model it describes, read instead; the JSON's
// TemplateProcessing still adds the BOS.
TEST_F(HfTokenizerOracle, AMetaspaceTokenizerJsonFallsBackToTheTokenizerModel) {
  EXPECT_EQ(load_tokenizer(dir_->path() + "/metaspace")->kind(), "SentencePiece");
  expect_prompts_as_transformers("metaspace");
}

}  // namespace
