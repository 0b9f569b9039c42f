// A byte-level text corpus for the language models: by default the English
// of Debian's `fortunes` package (about 2.5 MB under
// /usr/share/games/fortunes). Tokens are bytes (a vocabulary of 256), or a
// model's own tokenizer's ids (text/tokenizer.h; each file tokenized on its
// own, then concatenated); example i is the window of seq_len + 1 tokens
// starting at token i * seq_len
// (inputs: its first seq_len bytes, labels: its last seq_len), so an
// example's id is its index and stays the same from run to run. The last
// 5 % of the examples are the validation set; they hold text no training
// example holds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "actkit/data/share_shuffle.h"

namespace actkit {

class Tokenizer;

constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

class TextCorpus {
 public:
  // Reads every regular file of `path` (a directory, in name order; index
  // files *.dat and links skipped) or `path` itself. `train_limit` > 0
  // keeps only the first that many training examples. Throws InvalidInput
  // for seq_len < 1; IoError naming the path (and, for the default, the
  // package to install) when nothing can be read, or when the text makes
  // fewer than 2 examples. `tokenizer` (may be null: bytes) is used only
  // while constructing.
  TextCorpus(const std::string& path, int64_t seq_len, int64_t train_limit = 0, const Tokenizer* tokenizer = nullptr);

  int64_t seq_len() const { return seq_len_; }
  int64_t tokens() const { return int64_t(tokens_.size()); }
  int64_t train_size() const { return train_size_; }
  int64_t validation_size() const { return validation_size_; }

  // Examples `ids` as (inputs, labels): int64 tensors (ids.size(), seq_len).
  // Validation examples have ids train_size() ... (see validation_ids).
  // Throws InvalidInput for an id outside the corpus.
  std::pair<at::Tensor, at::Tensor> examples(const std::vector<int64_t>& ids) const;

  // The training example at `position` of an endless stream of epochs, each
  // a shuffle of the training examples seeded by (seed, epoch): the same
  // stream in every process. With `shares` > 1 the stream is share `share`'s
  // alone: the ids share, share + shares, ... (train_size() / shares of
  // them, so every share's epoch has the same length), shuffled per epoch by
  // (seed, epoch, share). Each data-parallel replica reading its own share
  // sees the same examples every epoch (AQ-SGD's per-example buffers need
  // that). Throws InvalidInput for a negative position, share outside
  // [0, shares), or shares above train_size().
  int64_t train_id_at(int64_t position, uint64_t seed, int share = 0, int shares = 1) const;
  // Validation example i (0 <= i < validation_size()).
  int64_t validation_id(int64_t i) const;

 private:
  std::vector<int32_t> tokens_;
  int64_t seq_len_;
  int64_t train_size_ = 0, validation_size_ = 0, validation_first_ = 0;
  ShareShuffle shuffle_;
};

}  // namespace actkit
