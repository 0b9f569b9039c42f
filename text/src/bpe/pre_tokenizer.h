// A byte-level tokenizer's pre-tokenizer: the text between added tokens cut
// into the words BPE runs on, by each step's pattern in turn, then each word
// turned into the byte-level alphabet.
//
// The patterns are the tokenizer.json's own, run by ICU's regular
// expressions (the tokenizers package runs them with Oniguruma). The two
// read what these patterns use alike: \s as Unicode's White_Space, \p{L} and
// \p{N}, look-ahead, case-insensitive groups with simple case folding (so
// (?i:'s) takes "'S" and "'ſ" but not "'İ"); the fixtures of
// tests/text/test_tokenizer.cpp check it against the package.
#pragma once

#include <unicode/regex.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace actkit::text {

// One step. kSplit: the pattern's matches become words of their own, and so
// does the text between them (the tokenizers package's Split with behavior
// Isolated, invert false). kByteLevel: the ByteLevel pre-tokenizer, always
// the last step: a space put before each word that does not start with one
// (add_prefix_space), GPT-2's pattern applied as in kSplit (use_regex), then
// the words' bytes mapped to the byte-level alphabet.
struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::string pattern;            // kSplit
  bool literal = false;           // kSplit: `pattern` is a plain string, not a regular expression
  bool add_prefix_space = false;  // kByteLevel
  bool use_regex = true;          // kByteLevel
};

class PreTokenizer {
 public:
  // `steps` ends with its one kByteLevel step; `source` (the file they
  // came from) is named in errors. Throws std::invalid_argument naming the
  // pattern, ICU's error and the offset where ICU refuses it.
  PreTokenizer(const std::vector<PreTokenizerStep>& steps, std::string source);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;

  // Appends the words of `text` (well-formed UTF-8, not empty), in order and
  // in the byte-level alphabet, to `words`. Throws InvalidInput naming the
  // file and the pattern when the expression engine gives up on `text`: a
  // match runs at most kMatchTimeLimit of ICU's steps and kMatchStackLimit
  // of backtracking memory, so a pattern that backtracks without bound
  // ((a+)+$ and the like, from a hostile file) ends in an error, not a hang.
  void split(std::string_view text, std::vector<std::string>& words) const;

  // ICU's time limit per match, in its steps ("on the order of
  // milliseconds" each, by ICU's documentation): the patterns of real
  // tokenizers match a word in microseconds.
  static constexpr int32_t kMatchTimeLimit = 1000;
  static constexpr int32_t kMatchStackLimit = 8 << 20;  // bytes

 private:
  struct Step {
    std::unique_ptr<icu::RegexPattern> regex;  // null: no splitting
    bool add_prefix_space = false;
  };
  std::vector<Step> steps_;
  std::string source_;
};

}  // namespace actkit::text
