#include "actkit/data/training_data.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>

#include "actkit/data/fashion_mnist.h"
#include "actkit/data/share_shuffle.h"
#include "actkit/data/text_corpus.h"
#include "actkit/core/enum_names.h"
#include "actkit/core/errors.h"

namespace actkit {
namespace {

// Synthetic sets: the held-out examples (as many as Fashion-MNIST's test
// split holds in a tenth), and the training examples without a limit.
constexpr int64_t kSyntheticValidation = 1024;
constexpr int64_t kSyntheticImages = 4096;

// The first `limit` of `n` examples (0: all n).
int64_t limited(int64_t n, int64_t limit) { return limit > 0 ? std::min(n, limit) : n; }

void check_share(int64_t position, int share, int shares, int64_t examples) {
  if (position < 0) throw InvalidInput(c10::str("training data: position ", position, " (positions count from 0)"));
  if (shares < 1 || share < 0 || share >= shares || (examples > 0 && shares > examples)) {
    throw InvalidInput(c10::str("training data: share ", share, " of ", shares, " of ", examples, " examples"));
  }
}

// Images in memory: ids 0 .. n - 1 are the training split, n .. n + t - 1
// the test split.
class ImageData : public TrainingData {
 public:
  ImageData(ImageDataset train, ImageDataset test, uint64_t seed)
      : train_(std::move(train)), test_(std::move(test)), seed_(seed) {
    if (train_.images.size(0) < 1 || test_.images.size(0) < 1) {
      throw InvalidInput("image data: a split without examples");
    }
  }
  bool text() const override { return false; }
  int64_t train_size() const override { return train_.images.size(0); }
  int64_t validation_size() const override { return test_.images.size(0); }

  int64_t train_id_at(int64_t position, int share, int shares) const override {
    return shuffle_.id_at(train_size(), position, seed_, share, shares);
  }
  int64_t validation_id(int64_t i) const override { return train_size() + i; }

  Batch examples(const std::vector<int64_t>& ids) const override {
    const int64_t n = train_size();
    const bool train = std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return id >= 0 && id < n; });
    const bool test = std::all_of(ids.begin(), ids.end(),
                                  [&](int64_t id) { return id >= n && id < n + validation_size(); });
    if (!train && !test) throw InvalidInput("image data: ids of neither split (or of both) in one batch");
    at::Tensor idx = at::tensor(ids, at::kLong);
    if (!train) idx = idx - n;
    const ImageDataset& d = train ? train_ : test_;
    return {d.images.index_select(0, idx), d.labels.index_select(0, idx), ids};
  }

 private:
  ImageDataset train_, test_;
  uint64_t seed_;
  ShareShuffle shuffle_;
};

// The fortunes (or any) text, as bytes.
class CorpusText : public TrainingData {
 public:
  CorpusText(const std::string& path, int64_t seq_len, int64_t limit, int64_t validation_limit, uint64_t seed,
             const Tokenizer* tokenizer)
      : corpus_(path, seq_len, limit, tokenizer), validation_limit_(validation_limit), seed_(seed) {}
  bool text() const override { return true; }
  int64_t train_size() const override { return corpus_.train_size(); }
  int64_t validation_size() const override { return limited(corpus_.validation_size(), validation_limit_); }
  int64_t train_id_at(int64_t position, int share, int shares) const override {
    return corpus_.train_id_at(position, seed_, share, shares);
  }
  int64_t validation_id(int64_t i) const override {
    if (i >= validation_size()) throw InvalidInput(c10::str("text: no validation example ", i));
    return corpus_.validation_id(i);
  }
  Batch examples(const std::vector<int64_t>& ids) const override {
    auto [inputs, labels] = corpus_.examples(ids);
    return {inputs, labels, ids};
  }

 private:
  TextCorpus corpus_;
  int64_t validation_limit_;
  uint64_t seed_;
};

// Random tokens, example by example: the tokens of id ξ are drawn from (seed,
// ξ) alone, so an example is the same wherever it is drawn. With a limit
// of N the training ids are 0 .. N - 1, taken in turn (share r: r, r +
// shares, ...); without, position p of share r is a new example, id
// p · shares + r. Validation ids are negative.
class SyntheticText : public TrainingData {
 public:
  SyntheticText(int64_t seq_len, int64_t vocab, int64_t limit, int64_t validation_limit, uint64_t seed)
      : seq_len_(seq_len), vocab_(vocab), limit_(limit), validation_size_(limited(kSyntheticValidation, validation_limit)),
        seed_(seed) {
    if (seq_len < 1 || vocab < 2 || limit < 0) {
      throw InvalidInput(c10::str("synthetic text: length ", seq_len, ", vocabulary ", vocab, ", limit ", limit));
    }
  }
  bool text() const override { return true; }
  int64_t train_size() const override { return limit_; }
  int64_t validation_size() const override { return validation_size_; }
  int64_t train_id_at(int64_t position, int share, int shares) const override {
    check_share(position, share, shares, limit_);
    if (limit_ == 0) return position * shares + share;
    return share + (position % (limit_ / shares)) * shares;
  }
  int64_t validation_id(int64_t i) const override {
    if (i < 0 || i >= validation_size_) throw InvalidInput(c10::str("synthetic text: no validation example ", i));
    return -1 - i;
  }
  Batch examples(const std::vector<int64_t>& ids) const override {
    std::vector<at::Tensor> rows;
    for (int64_t id : ids) {
      if (id < -validation_size_ || (limit_ > 0 && id >= limit_)) {
        throw InvalidInput(c10::str("synthetic text: no example ", id));
      }
      at::Generator gen = at::detail::createCPUGenerator(seed_ * 7919u + uint64_t(id) * 104729u + 1);
      rows.push_back(at::randint(0, vocab_, {seq_len_ + 1}, gen, at::kLong));
    }
    const at::Tensor seq = at::stack(rows);
    return {seq.narrow(1, 0, seq_len_).contiguous(), seq.narrow(1, 1, seq_len_).contiguous(), ids};
  }

 private:
  int64_t seq_len_, vocab_, limit_, validation_size_;
  uint64_t seed_;
};

}  // namespace

std::string describe_data(DataSet set, const std::string& path) {
  if (path.empty() || set == DataSet::kSynthetic) return to_string(set);
  return set == DataSet::kFortunes ? c10::str("the text of ", path) : c10::str(to_string(set), " from ", path);
}

namespace {

std::unique_ptr<TrainingData> open_fashion_mnist(const DataOptions& o) {
  const std::string dir = o.path.empty() ? kFashionMnistDir : o.path;
  return std::make_unique<ImageData>(load_fashion_mnist(dir, "train", o.train_limit),
                                     load_fashion_mnist(dir, "t10k", o.validation_limit), o.seed);
}

std::unique_ptr<TrainingData> open_fortunes(const DataOptions& o) {
  return std::make_unique<CorpusText>(o.path.empty() ? kFortunesDir : o.path, o.seq_len, o.train_limit,
                                      o.validation_limit, o.seed, o.tokenizer.get());
}

std::unique_ptr<TrainingData> open_synthetic(const DataOptions& o) {
  if (o.text) return std::make_unique<SyntheticText>(o.seq_len, o.vocab, o.train_limit, o.validation_limit, o.seed);
  const int64_t n = o.train_limit > 0 ? o.train_limit : kSyntheticImages;
  // One draw for both splits, so they share the labelling function (and a
  // validation limit keeps the first examples of the same draw).
  ImageDataset all = synthetic_images(n + kSyntheticValidation, 10, 1, 28, o.seed);
  const int64_t held_out = limited(kSyntheticValidation, o.validation_limit);
  return std::make_unique<ImageData>(ImageDataset{all.images.narrow(0, 0, n), all.labels.narrow(0, 0, n)},
                                     ImageDataset{all.images.narrow(0, n, held_out), all.labels.narrow(0, n, held_out)},
                                     o.seed);
}

// The data sets, one entry each: its name (the enum table of
// core/enum_names.h), the models it serves, and how it opens. A new data
// set is one entry here, its DataSet value and its TrainingData.
struct DataSetEntry {
  DataSet value;
  const char* name;
  bool images, text;  // read by image classifiers, by language models
  std::unique_ptr<TrainingData> (*open)(const DataOptions& options);
};
constexpr DataSetEntry kDataSets[] = {
    {DataSet::kFashionMnist, "fashion-mnist", true, false, open_fashion_mnist},
    {DataSet::kFortunes, "fortunes", false, true, open_fortunes},
    {DataSet::kSynthetic, "synthetic", true, true, open_synthetic},
};

const DataSetEntry& entry_of(DataSet set) {
  for (const DataSetEntry& e : kDataSets) {
    if (e.value == set) return e;
  }
  throw InvalidInput(c10::str("training data: no data set ", int(set)));
}

// "fortunes or synthetic": the sets a kind of model reads.
std::string sets_for(bool text) {
  std::string names;
  std::vector<const char*> fit;
  for (const DataSetEntry& e : kDataSets) {
    if (text ? e.text : e.images) fit.push_back(e.name);
  }
  for (size_t i = 0; i < fit.size(); ++i) names += c10::str(i == 0 ? "" : i + 1 == fit.size() ? " or " : ", ", fit[i]);
  return names;
}

}  // namespace

const char* to_string(DataSet set) { return enum_name(kDataSets, set); }

DataSet parse_data_set(const std::string& name) { return parse_enum(kDataSets, name, "--data"); }

std::vector<std::string> data_set_names() { return enum_names(kDataSets); }

void check_data_kind(DataSet set, bool text) {
  const DataSetEntry& e = entry_of(set);
  if (text ? e.text : e.images) return;
  throw InvalidInput(c10::str("--data ", e.name, " holds ", text ? "images" : "text", ": ",
                              text ? "a language model" : "an image model", " trains on ", sets_for(text)));
}

std::unique_ptr<TrainingData> TrainingData::open(const DataOptions& o) {
  if (o.train_limit < 0 || o.validation_limit < 0) throw InvalidInput("training data: a limit must be >= 0");
  check_data_kind(o.set, o.text);
  return entry_of(o.set).open(o);
}

Batch TrainingData::train_batch(int64_t first, int64_t count, int share, int shares) const {
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < count; ++j) ids.push_back(train_id_at(first + j, share, shares));
  return examples(ids);
}

int64_t TrainingData::steps_per_epoch(int world, int64_t batch) const {
  if (world < 1 || batch < 1) throw InvalidInput(c10::str("training data: ", world, " ranks of batch ", batch));
  return std::max<int64_t>(1, epoch_size() / (int64_t(world) * batch));
}

Batch TrainingData::rank_batch(int64_t step, int rank, int world, int64_t batch) const {
  if (step < 0 || rank < 0 || rank >= world) {
    throw InvalidInput(c10::str("training data: step ", step, " of rank ", rank, " of ", world));
  }
  const int64_t per_epoch = steps_per_epoch(world, batch);
  const int64_t epoch = step / per_epoch, within = step % per_epoch;
  return train_batch(epoch * epoch_size() + (within * world + rank) * batch, batch);
}

Batch TrainingData::validation_batch(int64_t first, int64_t count) const {
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < count; ++j) ids.push_back(validation_id(first + j));
  return examples(ids);
}

}  // namespace actkit
