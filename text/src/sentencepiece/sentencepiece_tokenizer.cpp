#include "sentencepiece/sentencepiece_tokenizer.h"

#include <dlfcn.h>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "json_file.h"
#include "bpe/unicode.h"

#if defined(__SANITIZE_ADDRESS__)
#define ACTKIT_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ACTKIT_ADDRESS_SANITIZER 1
#endif
#endif
#ifndef ACTKIT_ADDRESS_SANITIZER
#define ACTKIT_ADDRESS_SANITIZER 0
#endif

namespace actkit::text {
namespace {

// The plug-in: beside the binary this code is part of (libactkit, in the
// build tree and where it is installed), else wherever the loader finds it.
LoadSentencePieceModel load_plugin() {
  std::string beside;
  Dl_info self{};
  if (::dladdr(reinterpret_cast<const void*>(&load_plugin), &self) != 0 && self.dli_fname != nullptr) {
    const std::string dir = files::parent_path(self.dli_fname);
    beside = (dir.empty() ? std::string(".") : dir) + "/" + kSentencePiecePlugin;
  }
  // Out of the global scope, and binding to itself first (sentencepiece_plugin.h).
  int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#if ACTKIT_ADDRESS_SANITIZER
  // AddressSanitizer ends the process on RTLD_DEEPBIND. Without it the
  // plug-in works only where the system's protobuf is not loaded.
  flags &= ~RTLD_DEEPBIND;
  if (::dlsym(RTLD_DEFAULT, "_ZN6google8protobuf11MessageLite14ParseFromArrayEPKvi") != nullptr) {
    throw Error("SentencePiece models cannot be read in an AddressSanitizer build next to the system's protobuf "
                "(libsentencepiece would bind to it; see text/src/sentencepiece/sentencepiece_plugin.h)");
  }
#endif
  // Never unloaded: the models' code lives as long as the process.
  void* library = nullptr;
  if (!beside.empty() && files::exists(beside)) library = ::dlopen(beside.c_str(), flags);
  if (library == nullptr) library = ::dlopen(kSentencePiecePlugin, flags);
  if (library == nullptr) {
    const char* why = ::dlerror();
    throw Error(std::string("SentencePiece models need ") + kSentencePiecePlugin + " (looked for beside libactkit, " +
                beside + ", and on the loader's path): " + (why != nullptr ? why : "not found"));
  }
  const auto entry = reinterpret_cast<LoadSentencePieceModel>(::dlsym(library, kSentencePieceEntryPoint));
  if (entry == nullptr) throw Error(std::string(kSentencePiecePlugin) + " lacks " + kSentencePieceEntryPoint);
  return entry;
}

LoadSentencePieceModel plugin() {
  static const LoadSentencePieceModel entry = load_plugin();  // a failed load throws, and the next call tries again
  return entry;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path) {
  const std::string bytes = read_bounded_file(path);
  std::string error;
  model_.reset(plugin()(bytes, &error));
  if (model_ == nullptr) throw FormatError(path + ": not a SentencePiece model: " + error);
  vocab_size_ = model_->piece_count();
  if (model_->eos_id() >= 0) set_eos_id(model_->eos_id());
  if (model_->bos_id() >= 0) set_bos_id(model_->bos_id());
}

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& utf8) const {
  if (const size_t bad = find_invalid_utf8(utf8); bad != std::string::npos) {
    throw InvalidInput("encode: the text is not UTF-8 (byte " + std::to_string(bad) + ")");
  }
  std::vector<int> ids;
  std::string error;
  if (!model_->encode(utf8, ids, error)) throw InvalidInput("encode: SentencePiece: " + error);
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      throw InvalidInput("decode: id " + std::to_string(id) + " is not a token of this tokenizer (vocabulary size " +
                         std::to_string(vocab_size_) + ")");
    }
    narrow.push_back(int(id));
  }
  std::string text;
  std::string error;
  if (!model_->decode(narrow, text, error)) throw InvalidInput("decode: SentencePiece: " + error);
  return text;
}

std::optional<int64_t> SentencePieceTokenizer::token_id(const std::string& token) const {
  const int id = model_->piece_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace actkit::text
