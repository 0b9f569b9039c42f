#include "bpe/byte_level_bpe.h"

#include "actkit/core/errors.h"
#include "bpe/byte_level.h"
#include "bpe/unicode.h"

namespace actkit::text {
namespace {

AddedTokenMatcher matcher(const std::vector<AddedTokenSpec>& tokens, bool normalized, Normalization normalization) {
  std::vector<AddedToken> selected;
  for (const AddedTokenSpec& t : tokens) {
    if (t.normalized != normalized) continue;
    // A normalized token is looked for in its normalized form.
    std::string content = normalized && normalization == Normalization::kNfc ? nfc(t.content) : t.content;
    selected.push_back(AddedToken{std::move(content), t.id, t.single_word, t.lstrip, t.rstrip});
  }
  return AddedTokenMatcher(std::move(selected));
}

}  // namespace

ByteLevelBpe::ByteLevelBpe(ByteLevelBpeSpec spec)
    : normalization_(spec.normalization),
      pre_tokenizer_(spec.pre_tokenizer, spec.source),
      bpe_(spec.vocab, spec.merges, spec.options),
      raw_added_(matcher(spec.added_tokens, false, spec.normalization)),
      normalized_added_(matcher(spec.added_tokens, true, spec.normalization)),
      vocab_size_(spec.vocab_size) {
  // The text of each id: an added token's content (it may also be in the
  // vocabulary, with the same id), else the vocabulary's entry. A normalized
  // added token decodes from its normalized form, as in the tokenizers
  // package (whose ByteLevel decoder then reads a precomposed letter such as
  // U+00E9 as the byte it stands for).
  std::vector<const std::string*> token_of_id(size_t(vocab_size_), nullptr);
  for (const auto& [token, id] : spec.vocab) token_of_id[size_t(id)] = &token;
  for (AddedTokenSpec& t : spec.added_tokens) {
    added_ids_.emplace(t.content, t.id);
    if (t.normalized && normalization_ == Normalization::kNfc) t.content = nfc(t.content);
    token_of_id[size_t(t.id)] = &t.content;
  }
  decoded_at_.reserve(token_of_id.size() + 1);
  has_id_.resize(token_of_id.size());
  for (size_t id = 0; id < token_of_id.size(); ++id) {
    decoded_at_.push_back(uint32_t(decoded_.size()));
    if (token_of_id[id] == nullptr) continue;
    has_id_[id] = true;
    decoded_ += symbols_to_bytes(*token_of_id[id]);
  }
  decoded_at_.push_back(uint32_t(decoded_.size()));
}

std::optional<int64_t> ByteLevelBpe::token_id(const std::string& token) const {
  if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (const auto id = bpe_.token_id(token)) return *id;
  return std::nullopt;
}

void ByteLevelBpe::encode_text(std::string_view text, std::vector<int64_t>& ids,
                               std::vector<std::string>& words) const {
  words.clear();
  pre_tokenizer_.split(text, words);
  for (const std::string& word : words) bpe_.encode_word(word, ids);
}

std::vector<int64_t> ByteLevelBpe::encode(const std::string& utf8) const {
  if (const size_t bad = find_invalid_utf8(utf8); bad != std::string::npos) {
    throw InvalidInput("encode: the text is not UTF-8 (byte " + std::to_string(bad) + ")");
  }
  std::vector<int64_t> ids;
  std::vector<std::string> words;
  std::string normalized;
  for (const Segment& raw : raw_added_.split(utf8)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string_view piece(utf8.data() + raw.begin, raw.end - raw.begin);
    if (normalization_ == Normalization::kNfc) {
      normalized = nfc(piece);
      piece = normalized;
    }
    if (normalized_added_.empty()) {
      encode_text(piece, ids, words);
      continue;
    }
    for (const Segment& s : normalized_added_.split(piece)) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else {
        encode_text(piece.substr(s.begin, s.end - s.begin), ids, words);
      }
    }
  }
  return ids;
}

std::string ByteLevelBpe::decode(const std::vector<int64_t>& ids) const {
  std::string bytes;
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size_ || !has_id_[size_t(id)]) {
      throw InvalidInput("decode: id " + std::to_string(id) + " is not a token of this tokenizer (vocabulary size " +
                         std::to_string(vocab_size_) + ")");
    }
    bytes.append(decoded_, decoded_at_[size_t(id)], decoded_at_[size_t(id) + 1] - decoded_at_[size_t(id)]);
  }
  return utf8_lossy(bytes);
}

}  // namespace actkit::text
