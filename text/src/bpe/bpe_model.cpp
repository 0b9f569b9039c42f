#include "bpe/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <utility>

namespace actkit::text {
namespace {

// Words longer than this, and words past this many, are not cached.
constexpr size_t kCacheWordBytes = 256;
constexpr size_t kCacheWords = 1 << 17;

size_t utf8_length(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// A symbol of a word being merged: a doubly linked list over positions, a
// merged-away symbol marked by `gone`.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool gone;
};

struct Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t result;
  // The lowest rank first, then the leftmost position.
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    merges_[pair_key(vocab_.at(a), vocab_.at(b))] = Merge{uint32_t(rank), vocab_.at(a + b)};
  }
}

std::optional<int32_t> BpeModel::token_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  // The initial symbols: one per character, as the tokenizers package's
  // BPE::merge_word makes them.
  std::vector<int32_t> ids;
  std::optional<int32_t> pending_unk;
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_length(uint8_t(word[i])), word.size() - i);
    ch.assign(word.data() + i, n);
    i += n;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) ids.push_back(*std::exchange(pending_unk, std::nullopt));
      ids.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int32_t> bytes;
      for (const char b : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", unsigned(uint8_t(b)));
        const auto it = vocab_.find(name);
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == ch.size()) {
        // As the tokenizers package: a pending unknown token is not flushed
        // here, and so comes after these bytes.
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (options_.unk_id) {
      if (pending_unk && !options_.fuse_unk) ids.push_back(*pending_unk);
      pending_unk = options_.unk_id;
    }
  }
  if (pending_unk) ids.push_back(*pending_unk);
  if (ids.size() < 2) return ids;

  // Merging, as the tokenizers package's Word::merge_all: a queue of
  // candidate merges by (rank, position); a candidate is stale when the
  // symbols at its position no longer make a pair that merges into its
  // result.
  std::vector<Symbol> symbols(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    symbols[i] = Symbol{ids[i], int32_t(i) - 1, i + 1 < ids.size() ? int32_t(i + 1) : -1, false};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int32_t pos) {
    const Symbol& left = symbols[size_t(pos)];
    if (left.next < 0) return;
    const auto it = merges_.find(pair_key(left.id, symbols[size_t(left.next)].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, pos, it->second.result});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(int32_t(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(top.pos)];
    if (left.gone || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.result != top.result) continue;
    left.id = top.result;
    right.gone = true;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  std::vector<int32_t> out;
  for (const Symbol& s : symbols) {
    if (!s.gone) out.push_back(s.id);
  }
  return out;
}

void BpeModel::encode_word(std::string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = token_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheWords) cache_.emplace(std::move(key), std::move(ids));
  }
}

}  // namespace actkit::text
