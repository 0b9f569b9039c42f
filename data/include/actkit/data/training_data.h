// What the training commands learn from: Fashion-MNIST, the fortunes text,
// or synthetic images or tokens, behind one interface. `actkit train`,
// `actkit dp` and the pipeline's stages all read batches from it by
// position in an endless stream of epochs, so that every process of a run
// (and a resumed run) sees the same examples at the same step.
//
// A data set is a list of training examples, each with a stable id, and a
// list of validation (test) examples. Epoch e of the stream is a shuffle of
// the training examples seeded by (seed, e); with `shares` > 1 the stream
// is share r's alone (the examples r, r + shares, ..., equally many per
// share), so data-parallel replicas see disjoint, fixed sets (AQ-SGD's
// per-example buffers need that). Synthetic text is taken in id order, not
// shuffled: its examples are random already.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actkit {

class Tokenizer;

enum class DataSet {
  kFashionMnist,  // Debian's dataset-fashion-mnist (images)
  kFortunes,      // Debian's fortunes, as bytes (text; data/text_corpus.h)
  kSynthetic,     // images whose class is a random linear function of the pixels, or random tokens
};
const char* to_string(DataSet set);  // "fashion-mnist", "fortunes", "synthetic"
// What a run trains on, for its banner: to_string(set) for the package's
// data; with a --data-path, the path ("the text of PATH", "fashion-mnist
// from PATH").
std::string describe_data(DataSet set, const std::string& path);
// Throws InvalidInput naming the accepted values.
DataSet parse_data_set(const std::string& name);
std::vector<std::string> data_set_names();  // every set's name, for the flag's choices

// Throws InvalidInput when `set` is not of the kind a model reads: text
// (language models) or images (classifiers).
void check_data_kind(DataSet set, bool text);

struct DataOptions {
  DataSet set = DataSet::kSynthetic;
  bool text = false;     // token sequences (language models) or images (classifiers)
  std::string path;      // empty: the Debian package's directory
  int64_t seq_len = 128;  // text: tokens per example
  int64_t vocab = 256;    // synthetic text: tokens drawn from [0, vocab)
  // The first N training examples (0: all). Synthetic images: N examples
  // (0: 4096). Synthetic text: N examples (0: every example new, an endless set).
  int64_t train_limit = 0;
  // The first N validation examples (0: all): what every evaluation reads
  // (images: the test split). Language models also read at most
  // kValidationBatches batches of them.
  int64_t validation_limit = 0;
  uint64_t seed = 0;      // the shuffles and the synthetic draws
  // Text: a model's own tokenizer (text/tokenizer.h); null: bytes.
  std::shared_ptr<const Tokenizer> tokenizer;
};

// Examples as a batch: images (N, 1, 28, 28) float and labels (N) int64, or
// token ids (N, T) and next tokens (N, T), int64; with their ids.
struct Batch {
  at::Tensor inputs, labels;
  std::vector<int64_t> example_ids;
};

class TrainingData {
 public:
  // Opens `options.set` as images or text. Throws InvalidInput for a set
  // that is not of that kind (fashion-mnist text, fortunes images) or a
  // bad option, IoError / InvalidInput when the files are missing (naming
  // the Debian package), FormatError for damaged files.
  static std::unique_ptr<TrainingData> open(const DataOptions& options);
  virtual ~TrainingData() = default;

  virtual bool text() const = 0;
  // Training examples (0: endless, see DataOptions::train_limit).
  virtual int64_t train_size() const = 0;
  virtual int64_t validation_size() const = 0;
  // The id of the training example at `position` (>= 0) of share `share`'s
  // stream. Throws InvalidInput for a negative position, a share outside
  // [0, shares), or more shares than examples.
  virtual int64_t train_id_at(int64_t position, int share = 0, int shares = 1) const = 0;
  // The id of validation example i (0 <= i < validation_size()).
  virtual int64_t validation_id(int64_t i) const = 0;
  // Examples by id (training or validation ids). Throws InvalidInput for an
  // id that is neither.
  virtual Batch examples(const std::vector<int64_t>& ids) const = 0;

  // Examples size of an epoch for step arithmetic: train_size(), or for an
  // endless set kEndlessEpoch.
  static constexpr int64_t kEndlessEpoch = 4096;
  int64_t epoch_size() const { return train_size() > 0 ? train_size() : kEndlessEpoch; }
  // `count` examples from `first` on of share `share`'s stream.
  Batch train_batch(int64_t first, int64_t count, int share = 0, int shares = 1) const;
  // Data parallelism over `world` ranks with `batch` examples each: an
  // epoch is ⌊epoch_size() / (world · batch)⌋ steps (at least 1); step s of
  // epoch e gives rank r the positions e · epoch_size() + (s · world + r) ·
  // batch onward. Every epoch starts a fresh shuffle and leaves out the
  // examples that do not fill a step (a sampler's drop_last).
  int64_t steps_per_epoch(int world, int64_t batch) const;
  Batch rank_batch(int64_t step, int rank, int world, int64_t batch) const;
  // Validation examples first .. first + count - 1.
  Batch validation_batch(int64_t first, int64_t count) const;
};

}  // namespace actkit
