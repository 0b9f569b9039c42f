// The tokenizers Hugging Face models ship with, read from the model's own
// folder, so that text becomes the ids the model was trained on.
//
// Two kinds are read (docs/formats.md, "tokenizer.json and tokenizer.model"):
//  * byte-level BPE from tokenizer.json (GPT-2, Llama 3, Qwen2 and their
//    kin), giving the ids of the `tokenizers` package's
//    `Tokenizer.encode(text, add_special_tokens=False)`;
//  * SentencePiece from tokenizer.model (Llama 2, T5, ...), through the
//    reference library, giving the ids of `SentencePieceProcessor.encode`.
//
// Thread safety: a loaded tokenizer is immutable; encode() and decode() may
// be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actkit {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `utf8`. No BOS or EOS is ever added: a tokenizer.json's
  // post-processor (TemplateProcessing, ByteLevel) is not applied, as with
  // add_special_tokens=False; encode_with_special_tokens() applies it. Added tokens (special ones included) written in the
  // text are matched whole, before any other splitting, as the tokenizers
  // package matches them. Throws InvalidInput when `utf8` is not valid
  // UTF-8.
  virtual std::vector<int64_t> encode(const std::string& utf8) const = 0;

  // The ids transformers' tokenizer of the folder gives `utf8`
  // (`tokenizer(text)["input_ids"]`, add_special_tokens=True): encode()'s,
  // with the special tokens the folder's own settings put around one text
  // (see load_tokenizer), a BOS most often. A text that already starts
  // with BOS gets a second one, as in transformers. Throws as encode().
  virtual std::vector<int64_t> encode_with_special_tokens(const std::string& utf8) const = 0;

  // The text of `ids`, special tokens included (written as their content).
  // Byte sequences that are not valid UTF-8 (an id sequence cut inside a
  // character) become U+FFFD, one per maximal invalid subpart, as the
  // tokenizers package decodes them. Throws InvalidInput for an id outside
  // [0, vocab_size()) or one no token has.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;

  // One more than the largest id, added tokens included: every id encode()
  // returns is below it.
  virtual int64_t vocab_size() const = 0;

  // The end- and beginning-of-sequence ids, where the model folder names
  // them (see load_tokenizer).
  virtual std::optional<int64_t> eos_id() const = 0;
  virtual std::optional<int64_t> bos_id() const = 0;

  // What was read, for reports: "byte-level BPE" or "SentencePiece".
  virtual std::string kind() const = 0;
};

// The tokenizer of the Hugging Face model folder `dir`: DIR/tokenizer.json
// (a byte-level BPE) when present, else DIR/tokenizer.model (SentencePiece).
//
// When DIR holds both files and the tokenizer.json is of a kind ACTkit does
// not read (Llama 2's Metaspace BPE, a Unigram), DIR/tokenizer.model is
// read instead: the two describe one tokenizer.
//
// EOS and BOS: the "eos_token" / "bos_token" of DIR/tokenizer_config.json (a
// string or {"content": ...}, looked up among the tokenizer's tokens) when it
// names one; else "eos_token_id" / "bos_token_id" of DIR/config.json (a
// number, or a list whose first entry is taken); else, for SentencePiece, the
// model's own (none where the model disables it).
//
// The special tokens around one text (encode_with_special_tokens), by
// transformers' rule (5.x, TokenizersBackend): with a tokenizer.json, its
// "post_processor" alone decides (tokenizer_config.json's add_bos_token and
// add_eos_token are not read then): null or ByteLevel adds none; a
// TemplateProcessing adds the special tokens of its "single" template before
// and after $A, with the ids of its own table; BertProcessing and
// RobertaProcessing add cls before and sep after; a Sequence applies each
// in turn. Without a tokenizer.json, tokenizer_config.json's add_bos_token
// and add_eos_token (both false when absent) add its bos_token and
// eos_token (the SentencePiece model's own when it names none).
//
// Throws FormatError naming the file for a missing, oversized (over
// 512 MiB), malformed or unsupported tokenizer: a tokenizer.json whose model
// is not BPE or whose pre-tokenizer or decoder is not byte-level (the message
// names what it found) with no tokenizer.model beside it, a post_processor
// of another type or malformed, a merge whose parts or result are not in the
// vocabulary, ids that repeat or are out of range; FormatError naming `dir`
// when it holds neither file; FormatError naming the config file when it is
// malformed or names a token or id the tokenizer lacks. IoError when a file
// that exists cannot be read; Error when a tokenizer.model is to be read and
// the SentencePiece plug-in (libactkit_sentencepiece.so, beside libactkit)
// cannot be loaded.
// `config_json`: the folder's config.json as the caller read it (it is then
// not read again); null: read here.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir, const std::string* config_json = nullptr);

}  // namespace actkit
