// The byte-level text corpus: windows, the validation split, the epoch order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "actkit/data/text_corpus.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"
#include "test_paths.h"

namespace actkit {
namespace {

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name + "_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(TextCorpus, ExamplesAreByteWindowsWithNextByteLabels) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + i % 26);
  const TextCorpus c(write_text("corpus_windows", text), 16);
  EXPECT_EQ(c.train_size() + c.validation_size(), (1000 - 1) / 16);
  EXPECT_GE(c.validation_size(), 1);
  const auto [x, y] = c.examples({0, 3});
  ASSERT_EQ(x.sizes(), (c10::IntArrayRef{2, 16}));
  for (int64_t t = 0; t < 16; ++t) {
    EXPECT_EQ(x[1][t].item<int64_t>(), uint8_t(text[size_t(3 * 16 + t)]));
    EXPECT_EQ(y[1][t].item<int64_t>(), uint8_t(text[size_t(3 * 16 + t + 1)]));
  }
  // The validation windows come after every training window.
  EXPECT_GE(c.validation_id(0), c.train_size());
  EXPECT_THROW(c.examples({c.train_size() + c.validation_size()}), InvalidInput);
}

TEST(TextCorpus, EachEpochVisitsEveryTrainingExampleOnce) {
  const TextCorpus c(write_text("corpus_epochs", std::string(4000, 'x')), 32);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < c.train_size(); ++i) seen.insert(c.train_id_at(epoch * c.train_size() + i, 5));
    EXPECT_EQ(int64_t(seen.size()), c.train_size());
    EXPECT_EQ(*seen.rbegin(), c.train_size() - 1);
  }
  // The same order in another process: it depends on the seed alone.
  const TextCorpus again(write_text("corpus_epochs2", std::string(4000, 'x')), 32);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(c.train_id_at(i, 5), again.train_id_at(i, 5));
  bool differs = false;
  for (int64_t i = 0; i < 50; ++i) differs = differs || c.train_id_at(i, 5) != c.train_id_at(i, 6);
  EXPECT_TRUE(differs);
}

// Data-parallel replicas read shares: disjoint fixed sets of examples, each
// visited once per epoch of the share's own length, in an order that
// changes between epochs.
TEST(TextCorpus, SharesAreFixedDisjointSetsVisitedOncePerEpoch) {
  const TextCorpus c(write_text("corpus_shares", std::string(4000, 'x')), 32, 100);
  const int shares = 3;
  const int64_t share_size = 100 / shares;
  std::set<int64_t> all;
  for (int r = 0; r < shares; ++r) {
    std::vector<int64_t> first_epoch;
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::set<int64_t> seen;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < share_size; ++i) {
        const int64_t id = c.train_id_at(epoch * share_size + i, 9, r, shares);
        EXPECT_EQ(id % shares, r);
        EXPECT_LT(id, c.train_size());
        seen.insert(id);
        order.push_back(id);
      }
      EXPECT_EQ(int64_t(seen.size()), share_size);
      if (epoch == 0) {
        first_epoch = order;
        all.insert(seen.begin(), seen.end());
      } else {
        EXPECT_EQ(seen, std::set<int64_t>(first_epoch.begin(), first_epoch.end())) << "share " << r;
        EXPECT_NE(order, first_epoch) << "share " << r << " epoch " << epoch;
      }
    }
  }
  EXPECT_EQ(int64_t(all.size()), shares * share_size);
  EXPECT_THROW(c.train_id_at(0, 9, 3, 3), InvalidInput);
  EXPECT_THROW(c.train_id_at(0, 9, 0, 101), InvalidInput);
}

TEST(TextCorpus, LimitAndErrors) {
  const std::string path = write_text("corpus_limit", std::string(4000, 'x'));
  EXPECT_EQ(TextCorpus(path, 32, 10).train_size(), 10);
  EXPECT_THROW(TextCorpus(path, 0), InvalidInput);
  EXPECT_THROW(TextCorpus(write_text("corpus_short", "tiny"), 32), IoError);
  EXPECT_THROW(TextCorpus("/no/such/corpus", 32), IoError);
}

TEST(TextCorpus, ReadsTheFortunesPackage) {
  if (!files::is_directory(kFortunesDir)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  const TextCorpus c(kFortunesDir, 128);
  EXPECT_GT(c.tokens(), 1000000);  // about 2.5 MB of English, a token a byte
  const auto [x, y] = c.examples({c.train_id_at(0, 1)});
  EXPECT_LT(x.max().item<int64_t>(), 256);
}

// With a model's tokenizer the windows are its ids, in the order the text
// gives them, and labels are the next id.
TEST(TextCorpus, TokenizesWithAModelsTokenizer) {
  const std::unique_ptr<Tokenizer> t = load_tokenizer(std::string(ACTKIT_TOKENIZER_FIXTURES) + "/gpt2");
  std::string text;
  for (int i = 0; i < 60; ++i) text += "The quick brown fox jumps over the lazy dog, " + std::to_string(i) + " times.\n";
  const std::vector<int64_t> ids = t->encode(text);
  const TextCorpus c(write_text("corpus_tokens", text), 16, 0, t.get());
  ASSERT_EQ(c.tokens(), int64_t(ids.size()));
  const auto [x, y] = c.examples({1});
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(x[0][i].item<int64_t>(), ids[size_t(16 + i)]);
    EXPECT_EQ(y[0][i].item<int64_t>(), ids[size_t(17 + i)]);
  }
}

}  // namespace
}  // namespace actkit
