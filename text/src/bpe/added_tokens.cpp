#include "bpe/added_tokens.h"

#include <algorithm>

#include "bpe/unicode.h"

namespace actkit::text {

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  token_at_node_.push_back(-1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    uint32_t node = 0;
    for (const char c : tokens_[t].content) {
      const uint64_t edge = (uint64_t(node) << 8) | uint8_t(c);
      auto it = edges_.find(edge);
      if (it == edges_.end()) {
        it = edges_.emplace(edge, uint32_t(token_at_node_.size())).first;
        token_at_node_.push_back(-1);
      }
      node = it->second;
    }
    token_at_node_[node] = int32_t(t);
    first_byte_[uint8_t(tokens_[t].content[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t found = -1;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = edges_.find((uint64_t(node) << 8) | uint8_t(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (token_at_node_[node] >= 0) {
      found = token_at_node_[node];
      length = i + 1 - pos;
    }
  }
  return found;
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t done = 0;  // text before this is in `out`
  size_t pos = 0;   // where the search for the next match goes on
  while (pos < text.size() && !tokens_.empty()) {
    if (!first_byte_[uint8_t(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t t = longest_at(text, pos, length);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[size_t(t)];
    size_t start = pos;
    size_t stop = pos + length;
    // The search goes on after this match whether or not it is kept, as
    // the tokenizers package's leftmost-longest iteration does.
    pos = stop;
    if (start < done) continue;  // inside whitespace an earlier rstrip took
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(last_code_point(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(first_code_point(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      // Back over the whitespace before it, but not into an earlier match.
      while (s > done && is_white_space(last_code_point(text.substr(0, s)))) {
        --s;
        while (s > 0 && (uint8_t(text[s]) & 0xC0) == 0x80) --s;
      }
      start = std::max(s, done);
    }
    if (token.rstrip) {
      while (stop < text.size() && is_white_space(first_code_point(text.substr(stop)))) {
        ++stop;
        while (stop < text.size() && (uint8_t(text[stop]) & 0xC0) == 0x80) ++stop;
      }
    }
    if (done < start) out.push_back(Segment{done, start, -1});
    out.push_back(Segment{start, stop, token.id});
    done = stop;
  }
  if (done < text.size()) out.push_back(Segment{done, text.size(), -1});
  return out;
}

}  // namespace actkit::text
