// libactkit_sentencepiece.so: SentencePiece models through Debian's
// libsentencepiece, behind sentencepiece_plugin.h.
#include "sentencepiece/sentencepiece_plugin.h"

#include <sentencepiece_processor.h>

#include <memory>
#include <type_traits>

namespace actkit::text {
namespace {

class Model final : public SentencePieceModel {
 public:
  bool load(const std::string& bytes, std::string& error) {
    const auto status = processor_.LoadFromSerializedProto(bytes);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  bool encode(const std::string& text, std::vector<int>& ids, std::string& error) const override {
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const override {
    const auto status = processor_.Decode(ids, &text);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  int piece_count() const override { return processor_.GetPieceSize(); }
  int piece_id(const std::string& piece) const override {
    // PieceToId answers the unknown piece's id for a piece the model lacks.
    const int id = processor_.PieceToId(piece);
    return id >= 0 && processor_.IdToPiece(id) == piece ? id : -1;
  }
  int eos_id() const override { return processor_.eos_id(); }
  int bos_id() const override { return processor_.bos_id(); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace actkit::text

extern "C" __attribute__((visibility("default"))) actkit::text::SentencePieceModel* actkit_load_sentencepiece_model(
    const std::string& bytes, std::string* error) {
  try {
    auto model = std::make_unique<actkit::text::Model>();
    if (!model->load(bytes, *error)) return nullptr;
    return model.release();
  } catch (const std::exception& e) {  // nothing may cross the boundary
    *error = e.what();
    return nullptr;
  }
}

static_assert(std::is_same_v<decltype(&actkit_load_sentencepiece_model), actkit::text::LoadSentencePieceModel>,
              "the entry point has the type libactkit calls it with");
