// data/training_data.h: the one stream of examples `train`, `dp` and the
// pipeline's stages read.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <map>
#include <fstream>
#include <set>

#include "actkit/app/model_defaults.h"
#include "actkit/data/text_corpus.h"
#include "actkit/app/evaluation.h"
#include "actkit/data/training_data.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

using namespace actkit;

namespace {

DataOptions synthetic_images(int64_t n, uint64_t seed = 3) {
  DataOptions o;
  o.set = DataSet::kSynthetic;
  o.train_limit = n;
  o.seed = seed;
  return o;
}

}  // namespace

// Each epoch of the stream is a permutation of the training examples, drawn
// from (seed, epoch) alone: another instance, or a read that starts
// mid-stream (a resumed run, another rank), finds the same ids.
TEST(TrainingData, EveryEpochIsAPermutationTheSameInEveryProcess) {
  const int64_t n = 40;
  auto a = TrainingData::open(synthetic_images(n));
  auto b = TrainingData::open(synthetic_images(n));
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 3; ++e) {
    std::set<int64_t> seen;
    std::vector<int64_t> order;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = a->train_id_at(e * n + i);
      EXPECT_TRUE(id >= 0 && id < n) << id;
      seen.insert(id);
      order.push_back(id);
    }
    EXPECT_EQ(int64_t(seen.size()), n) << "epoch " << e;
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]) << "epochs are shuffled afresh";
  for (int64_t p : {int64_t(77), int64_t(5), int64_t(119), int64_t(0)}) {  // out of order, across epochs
    EXPECT_EQ(b->train_id_at(p), epochs[size_t(p / n)][size_t(p % n)]) << p;
  }
  auto other_seed = TrainingData::open(synthetic_images(n, 4));
  std::vector<int64_t> first;
  for (int64_t i = 0; i < n; ++i) first.push_back(other_seed->train_id_at(i));
  EXPECT_NE(first, epochs[0]);
}

// `actkit dp`: in each epoch the ranks together see every example at most
// once, the same ones every rank order; an epoch leaves out what does not
// fill a step (50 examples, 3 ranks of 4: 4 steps of 12, 2 left out), and
// the next starts a fresh shuffle.
TEST(TrainingData, DataParallelRanksShareAnEpochWithoutOverlap) {
  const int64_t n = 50, batch = 4;
  const int world = 3;
  auto data = TrainingData::open(synthetic_images(n));
  const int64_t per_epoch = data->steps_per_epoch(world, batch);
  ASSERT_EQ(per_epoch, 4);
  std::vector<std::set<int64_t>> epochs(2);
  for (int64_t s = 0; s < 2 * per_epoch; ++s) {
    for (int r = 0; r < world; ++r) {
      const Batch b = data->rank_batch(s, r, world, batch);
      ASSERT_EQ(b.inputs.size(0), batch);
      for (int64_t id : b.example_ids) {
        EXPECT_TRUE(epochs[size_t(s / per_epoch)].insert(id).second) << "example " << id << " twice in an epoch";
      }
    }
  }
  EXPECT_EQ(epochs[0].size(), size_t(48));
  EXPECT_EQ(epochs[1].size(), size_t(48));
  // Epoch 1 begins where the stream's epoch 1 begins.
  EXPECT_EQ(data->rank_batch(per_epoch, 0, world, batch).example_ids.front(), data->train_id_at(n));
  EXPECT_THROW(data->rank_batch(0, 3, world, batch), InvalidInput);
}

// Shares (data-parallel pipelines) are fixed, disjoint sets, each a
// permutation per epoch.
TEST(TrainingData, SharesAreDisjointFixedSets) {
  const int64_t n = 30;
  const int shares = 3;
  auto data = TrainingData::open(synthetic_images(n));
  for (int r = 0; r < shares; ++r) {
    for (int64_t e = 0; e < 2; ++e) {
      std::set<int64_t> ids;
      for (int64_t i = 0; i < n / shares; ++i) ids.insert(data->train_id_at(e * (n / shares) + i, r, shares));
      EXPECT_EQ(int64_t(ids.size()), n / shares);
      for (int64_t id : ids) EXPECT_EQ(id % shares, r);
    }
  }
  EXPECT_THROW(data->train_id_at(0, 3, 3), InvalidInput);
  EXPECT_THROW(data->train_id_at(-1), InvalidInput);
}

// Images: the batch holds the examples its ids name, and the test split's
// ids are its own.
TEST(TrainingData, ImageBatchesHoldTheirExamples) {
  auto data = TrainingData::open(synthetic_images(20));
  EXPECT_FALSE(data->text());
  EXPECT_EQ(data->validation_size(), 1024);
  const Batch b = data->examples({3, 7});
  const Batch one = data->examples({7});
  EXPECT_TRUE(at::equal(b.inputs[1], one.inputs[0]));
  EXPECT_EQ(b.labels[1].item<int64_t>(), one.labels[0].item<int64_t>());
  const Batch test = data->validation_batch(0, 5);
  EXPECT_EQ(test.example_ids.front(), 20);
  EXPECT_THROW(data->examples({3, 20}), InvalidInput);  // one from each split
  EXPECT_THROW(data->examples({5000}), InvalidInput);
}

// Synthetic text: an example is its id's tokens wherever it is drawn; a
// limit of N cycles N examples, none makes every position new; validation
// examples are none of the training ones.
TEST(TrainingData, SyntheticTextExamplesAreTheirIds) {
  DataOptions o;
  o.set = DataSet::kSynthetic;
  o.text = true;
  o.seq_len = 8;
  o.vocab = 50;
  o.seed = 9;
  auto endless = TrainingData::open(o);
  EXPECT_EQ(endless->train_size(), 0);
  EXPECT_EQ(endless->epoch_size(), TrainingData::kEndlessEpoch);
  std::set<int64_t> ids;
  for (int64_t p = 0; p < 100; ++p) EXPECT_TRUE(ids.insert(endless->train_id_at(p)).second);
  o.train_limit = 10;
  auto pool = TrainingData::open(o);
  EXPECT_EQ(pool->train_id_at(3), pool->train_id_at(13));
  const Batch a = pool->examples({4}), b = endless->examples({4});
  EXPECT_TRUE(at::equal(a.inputs, b.inputs)) << "the same id, the same tokens";
  EXPECT_TRUE(at::equal(a.inputs.narrow(1, 1, 7), a.labels.narrow(1, 0, 7))) << "labels are the next tokens";
  EXPECT_LT(a.inputs.max().item<int64_t>(), 50);
  const Batch v = pool->validation_batch(0, 3);
  for (int64_t id : v.example_ids) EXPECT_LT(id, 0);
  EXPECT_THROW(pool->examples({10}), InvalidInput);
}

// The fortunes stream is TextCorpus's, position for position.
TEST(TrainingData, CorpusTextIsTheCorpusStream) {
  const std::string dir = files::temp_directory() + "/actkit-training-data-text";
  files::create_directories(dir);
  {
    std::ofstream out(dir + "/text");
    for (int i = 0; i < 400; ++i) out << "line " << i << " of a small corpus for the tests\n";
  }
  DataOptions o;
  o.set = DataSet::kFortunes;
  o.text = true;
  o.path = dir;
  o.seq_len = 16;
  o.seed = 11;
  auto data = TrainingData::open(o);
  const TextCorpus corpus(dir, 16);
  ASSERT_EQ(data->train_size(), corpus.train_size());
  for (int64_t p : {int64_t(0), int64_t(1), int64_t(57), corpus.train_size() + 3}) EXPECT_EQ(data->train_id_at(p), corpus.train_id_at(p, 11));
  EXPECT_EQ(data->validation_id(2), corpus.validation_id(2));
  const Batch b = data->train_batch(5, 3);
  const auto [inputs, labels] = corpus.examples(b.example_ids);
  EXPECT_TRUE(at::equal(b.inputs, inputs));
  EXPECT_TRUE(at::equal(b.labels, labels));
  files::remove_all(dir);
}

TEST(TrainingData, RefusesASetOfTheWrongKind) {
  DataOptions o;
  o.set = DataSet::kFashionMnist;
  o.text = true;
  EXPECT_THROW(TrainingData::open(o), InvalidInput);
  o.set = DataSet::kFortunes;
  o.text = false;
  EXPECT_THROW(TrainingData::open(o), InvalidInput);
  EXPECT_THROW(parse_data_set("mnist"), InvalidInput);
  EXPECT_EQ(parse_data_set("fashion-mnist"), DataSet::kFashionMnist);
}

// A validation limit keeps the first N held-out examples, the same ones the
// whole split starts with, and an evaluation reads only those; the training
// split does not change. Images and text alike.
TEST(TrainingData, AValidationLimitKeepsTheFirstExamples) {
  for (const bool text : {false, true}) {
    DataOptions o = synthetic_images(16);
    o.text = text;
    o.seq_len = 8;
    const auto all = TrainingData::open(o);
    o.validation_limit = 100;
    const auto first = TrainingData::open(o);
    EXPECT_EQ(first->validation_size(), 100) << text;
    EXPECT_EQ(first->train_size(), all->train_size()) << text;
    const Batch a = all->validation_batch(0, 100), b = first->validation_batch(0, 100);
    EXPECT_TRUE(a.inputs.equal(b.inputs) && a.labels.equal(b.labels)) << text;
    EXPECT_THROW(first->validation_batch(99, 2), InvalidInput) << text;
    EXPECT_EQ(app::evaluation_plan(*first, 4).examples, 100) << text;
    o.validation_limit = 1 << 20;  // more than there are: all of them
    EXPECT_EQ(TrainingData::open(o)->validation_size(), all->validation_size()) << text;
    o.validation_limit = -1;
    EXPECT_THROW(TrainingData::open(o), InvalidInput) << text;
  }
}

// evaluate(): the accuracy counts every test example, the last batch short.
TEST(TrainingData, AccuracyCountsEveryTestExample) {
  auto data = TrainingData::open(synthetic_images(16));
  at::manual_seed(0);
  ModelOptions mo = app::image_model_options();  // a small ViT: 1 block of 32 over 7 x 7 patches
  mo.patch_size = 7;
  mo.layers = 1;
  mo.hidden = 32;
  mo.heads = 2;
  auto model = make_model("vit", mo);
  model->eval();
  int64_t correct = 0;
  {
    torch::NoGradGuard no_grad;
    const Batch all = data->validation_batch(0, data->validation_size());
    correct = model->forward(all.inputs).argmax(1).eq(all.labels).sum().item<int64_t>();
  }
  // Batches of 500 and of 1024 may round differently: a tie could flip one or two.
  EXPECT_NEAR(app::evaluate(*model, *data, 64, at::kCPU), double(correct) / 1024.0, 2.5 / 1024);
  EXPECT_TRUE(model->is_training());
}
