#include "bpe/pre_tokenizer.h"

#include <stdexcept>
#include <utility>

#include "actkit/core/errors.h"
#include "bpe/byte_level.h"
#include "bpe/unicode.h"

namespace actkit::text {
namespace {

// GPT-2's pattern: the ByteLevel pre-tokenizer's with use_regex, fixed by
// the tokenizers package and so not written in tokenizer.json.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::unique_ptr<icu::RegexPattern> compile(const std::string& pattern, bool literal) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where{};
  std::unique_ptr<icu::RegexPattern> regex(
      icu::RegexPattern::compile(to_utf16(pattern), literal ? UREGEX_LITERAL : 0, where, status));
  if (U_FAILURE(status)) {
    throw std::invalid_argument("pattern '" + pattern + "' is refused by ICU (" + u_errorName(status) +
                                " at offset " + std::to_string(where.offset) + ")");
  }
  return regex;
}

// Cuts each piece at the pattern's matches, keeping both the matches and the
// text between them, as the tokenizers package's Split (Isolated) does with
// Oniguruma's search: an empty match right where the previous match ended
// is passed over, and empty pieces are dropped.
std::vector<icu::UnicodeString> isolate(const icu::RegexPattern& regex, const std::vector<icu::UnicodeString>& pieces,
                                        const std::string& source) {
  UErrorCode status = U_ZERO_ERROR;
  const std::unique_ptr<icu::RegexMatcher> matcher(regex.matcher(status));
  matcher->setTimeLimit(PreTokenizer::kMatchTimeLimit, status);
  matcher->setStackLimit(PreTokenizer::kMatchStackLimit, status);
  if (U_FAILURE(status)) throw InvalidInput(std::string("ICU regex matcher: ") + u_errorName(status));
  std::vector<icu::UnicodeString> out;
  out.reserve(pieces.size() * 2);
  for (const icu::UnicodeString& piece : pieces) {
    matcher->reset(piece);
    int32_t done = 0;
    int32_t last_end = -1;
    while (matcher->find(status)) {
      const int32_t start = matcher->start(status);
      const int32_t end = matcher->end(status);
      if (start == end && start == last_end) continue;
      if (done < start) out.emplace_back(piece, done, start - done);
      if (start < end) out.emplace_back(piece, start, end - start);
      done = end;
      last_end = end;
    }
    if (U_FAILURE(status)) {
      const bool limit = status == U_REGEX_TIME_OUT || status == U_REGEX_STACK_OVERFLOW;
      throw InvalidInput(source + ": pre-tokenizer pattern '" + to_utf8(regex.pattern()) + "' gave up on the text (" +
                         u_errorName(status) +
                         (limit ? "): it backtracks past the limits a match may use" : ")"));
    }
    if (done < piece.length()) out.emplace_back(piece, done, piece.length() - done);
  }
  return out;
}

}  // namespace

PreTokenizer::PreTokenizer(const std::vector<PreTokenizerStep>& steps, std::string source)
    : source_(std::move(source)) {
  for (const PreTokenizerStep& s : steps) {
    Step step;
    if (s.kind == PreTokenizerStep::Kind::kSplit) {
      step.regex = compile(s.pattern, s.literal);
    } else {
      step.add_prefix_space = s.add_prefix_space;
      if (s.use_regex) step.regex = compile(kByteLevelPattern, false);
    }
    steps_.push_back(std::move(step));
  }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  std::vector<icu::UnicodeString> pieces{to_utf16(text)};
  for (const Step& step : steps_) {
    if (step.add_prefix_space) {
      for (icu::UnicodeString& p : pieces) {
        if (!p.startsWith(icu::UnicodeString(u' '))) p.insert(0, u' ');
      }
    }
    if (step.regex) pieces = isolate(*step.regex, pieces, source_);
  }
  for (const icu::UnicodeString& p : pieces) words.push_back(bytes_to_symbols(to_utf8(p)));
}

}  // namespace actkit::text
