// A BPE model as the tokenizers package runs it: a word's characters are
// looked up in the vocabulary, then the pair of neighbours with the lowest
// merge rank is joined, again and again (ties: the leftmost), until no pair
// of neighbours has a merge.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actkit::text {

struct BpeOptions {
  // A word that is itself in the vocabulary is taken whole, merges or not
  // (Llama 3).
  bool ignore_merges = false;
  // Characters not in the vocabulary: each UTF-8 byte as its "<0xAB>" token
  // when all of them are in the vocabulary ...
  bool byte_fallback = false;
  // ... else the unknown token (consecutive ones fused into one with
  // fuse_unk), else nothing.
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
};

class BpeModel {
 public:
  // `vocab`: token -> id; `merges`: pairs of tokens in rank order, each
  // joined into the token their concatenation spells. The caller has
  // checked that every part and every result is in `vocab` (a merge whose
  // pair appears again later takes the later rank, as in the tokenizers
  // package).
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of `word` (one pre-token, already in the model's
  // alphabet) to `out`.
  void encode_word(std::string_view word, std::vector<int64_t>& out) const;

  // The id of a token of the model's vocabulary.
  std::optional<int32_t> token_id(std::string_view token) const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::vector<int32_t> merge_word(std::string_view word) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  // Words seen before: text repeats its words, and merging is most of the
  // cost. Bounded, as the tokenizers package bounds its cache.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace actkit::text
