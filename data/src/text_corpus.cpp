#include "actkit/data/text_corpus.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sys/stat.h>
#include <iterator>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"

namespace actkit {
namespace {

// The tokens of one file: its bytes, or its tokenizer ids.
void append_file(const std::string& file, const Tokenizer* tokenizer, std::vector<int32_t>& tokens) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(c10::str("text corpus: cannot read ", file), errno);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (tokenizer == nullptr) {
    tokens.insert(tokens.end(), reinterpret_cast<const uint8_t*>(text.data()),
                  reinterpret_cast<const uint8_t*>(text.data()) + text.size());
    return;
  }
  std::vector<int64_t> ids;
  try {
    ids = tokenizer->encode(text);
  } catch (const Error& e) {
    throw InvalidInput(c10::str("text corpus: ", file, ": ", e.what()));
  }
  for (int64_t id : ids) tokens.push_back(int32_t(id));
}

}  // namespace

TextCorpus::TextCorpus(const std::string& path, int64_t seq_len, int64_t train_limit, const Tokenizer* tokenizer)
    : seq_len_(seq_len) {
  if (seq_len < 1) throw InvalidInput(c10::str("text corpus: sequence length must be >= 1, got ", seq_len));
  if (!files::exists(path)) {
    throw IoError(c10::str("text corpus: ", path, " does not exist",
                           path == kFortunesDir ? " (install Debian's fortunes package)" : ""),
                  ENOENT);
  }
  if (files::is_directory(path)) {
    // The corpus files in name order: regular files, not links, not the
    // fortunes' .dat indexes.
    std::vector<std::string> names;
    try {
      names = files::list_directory(path);
    } catch (const IoError&) {
      // Unreadable: the corpus is empty, and the size check below says so.
    }
    for (const std::string& name : names) {
      const std::string file = path + "/" + name;
      struct stat st;
      const bool dat = name.size() >= 4 && name.compare(name.size() - 4, 4, ".dat") == 0;
      if (dat || ::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      append_file(file, tokenizer, tokens_);
    }
  } else if (files::is_regular_file(path)) {
    append_file(path, tokenizer, tokens_);
  }
  const int64_t examples = tokens_.size() > size_t(seq_len) ? (int64_t(tokens_.size()) - 1) / seq_len : 0;
  if (examples < 2) {
    throw IoError(c10::str("text corpus: ", path, " holds ", tokens_.size(), tokenizer ? " tokens" : " bytes",
                           ", fewer than two examples of ",
                           seq_len + 1, path == kFortunesDir ? " (install Debian's fortunes package)" : ""),
                  ENOENT);
  }
  // 5 %: a few hundred windows of validation text at the default lengths.
  validation_size_ = std::max<int64_t>(1, examples / 20);
  validation_first_ = examples - validation_size_;
  train_size_ = validation_first_;
  if (train_limit > 0) train_size_ = std::min(train_size_, train_limit);
}

std::pair<at::Tensor, at::Tensor> TextCorpus::examples(const std::vector<int64_t>& ids) const {
  const int64_t n = int64_t(ids.size());
  at::Tensor inputs = at::empty({n, seq_len_}, at::kLong), labels = at::empty({n, seq_len_}, at::kLong);
  int64_t* in = inputs.data_ptr<int64_t>();
  int64_t* out = labels.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t id = ids[size_t(r)];
    const bool train = id >= 0 && id < train_size_;
    const bool validation = id >= validation_first_ && id < validation_first_ + validation_size_;
    if (!train && !validation) throw InvalidInput(c10::str("text corpus: no example ", id));
    const int32_t* window = tokens_.data() + id * seq_len_;
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[r * seq_len_ + t] = window[t];
      out[r * seq_len_ + t] = window[t + 1];
    }
  }
  return {inputs, labels};
}

int64_t TextCorpus::train_id_at(int64_t position, uint64_t seed, int share, int shares) const {
  return shuffle_.id_at(train_size_, position, seed, share, shares);
}

int64_t TextCorpus::validation_id(int64_t i) const {
  if (i < 0 || i >= validation_size_) throw InvalidInput(c10::str("text corpus: no validation example ", i));
  return validation_first_ + i;
}

}  // namespace actkit
