// The boundary between libactkit and its SentencePiece plug-in
// (libactkit_sentencepiece.so), the one place libsentencepiece is linked.
//
// Why a plug-in: Debian's libsentencepiece carries its own copy of protobuf
// (older than the system's) and exports its symbols, while its own calls to
// them go through the global symbol scope. Where LibTorch links the system's
// protobuf (Debian's LibTorch does), loading both as ordinary dependencies
// mixes the two: the system's protobuf binds to sentencepiece's copy and the
// process crashes while loading, before main(); loaded the other way round,
// sentencepiece's parser calls into the system's protobuf and crashes on the
// first model. So libsentencepiece is linked only into this plug-in, which
// libactkit opens on first use with RTLD_LOCAL (nothing else binds to it)
// and RTLD_DEEPBIND (it binds to its own copy first).
//
// Only virtual calls and the one entry point cross the boundary; both sides
// are this project's code, built by one compiler against one libstdc++, and
// no exception crosses it.
#pragma once

#include <string>
#include <vector>

namespace actkit::text {

// One loaded model.
class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  // False, with the library's reason in `error`, where it fails.
  virtual bool encode(const std::string& text, std::vector<int>& ids, std::string& error) const = 0;
  virtual bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const = 0;
  virtual int piece_count() const = 0;
  // The id of `piece`, or -1 when the model has no such piece.
  virtual int piece_id(const std::string& piece) const = 0;
  // The model's own ids, -1 where it has none.
  virtual int eos_id() const = 0;
  virtual int bos_id() const = 0;
};

// The plug-in's entry point: the model serialized in `bytes` (the contents
// of a tokenizer.model), or null with the library's reason in *error.
using LoadSentencePieceModel = SentencePieceModel* (*)(const std::string& bytes, std::string* error);
constexpr const char* kSentencePieceEntryPoint = "actkit_load_sentencepiece_model";
constexpr const char* kSentencePiecePlugin = "libactkit_sentencepiece.so";

}  // namespace actkit::text
