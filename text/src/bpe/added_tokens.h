// Finding a tokenizer's added tokens (special tokens such as <|endoftext|>,
// and any others the tokenizer.json lists) in text, as the tokenizers
// package's AddedVocabulary finds them: leftmost-longest matches of their
// content, widened over neighbouring whitespace for lstrip / rstrip, and
// dropped where single_word wants a whole word and the match is not one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actkit::text {

struct AddedToken {
  std::string content;  // what is matched (for a normalized token: its normalized form)
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
};

// A piece of text: [begin, end) of the text split, and the added token it
// is, or -1 for text between added tokens.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Non-empty contents, each once.
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  // `text` (well-formed UTF-8) cut into added tokens and the text between
  // them, in order, covering it all; no empty segment.
  std::vector<Segment> split(std::string_view text) const;

 private:
  // The longest token whose content starts text[pos...], or -1: a walk down
  // a byte trie.
  int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;

  std::vector<AddedToken> tokens_;
  // The trie: (node << 8 | byte) -> child node; node 0 is the root.
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<int32_t> token_at_node_;  // index into tokens_, or -1
  bool first_byte_[256] = {};
};

}  // namespace actkit::text
