#!/usr/bin/env python3
"""Writes tests/oracle/fixtures/tokenizers/: small tokenizers in the layouts of
Hugging Face model folders, and the ids the reference libraries give for hard
strings and whole fortune files, read by tests/text/test_tokenizer.cpp. They are
committed, so that the unit tests check the C++ tokenizers against the
reference without Python at test time; run this again only to regenerate them:

    .venv/bin/python tests/oracle/make_tokenizer_fixtures.py

(needs the `tokenizers` and `sentencepiece` packages, and Debian's fortunes).

Folders:
  gpt2/           byte-level BPE, ByteLevel pre-tokenizer with its own regex,
                  merges as "a b" strings, added tokens with lstrip, rstrip and
                  single_word
  qwen2/          NFC, Split(Qwen2's pattern, Isolated) + ByteLevel(use_regex
                  false), special tokens after the vocabulary, a normalized
                  added token written decomposed
  llama3/         Split(Llama 3's pattern) + ByteLevel, ignore_merges with
                  vocabulary entries no merge reaches, config.json's ids
  sentencepiece/  tokenizer.model (BPE with byte fallback, as Llama 2's)
expected.json: per tokenizer its vocabulary size, eos/bos ids, and for every
hard string the ids and their decoding (byte-level ones: also the decoding of
every prefix of one string's ids); for whole fortune files (not trained
on) the count and the FNV-1a digest of the ids (each as int64 little-endian),
with the file's own size and digest so that another version of the file is
recognised.
"""
import io
import json
import pathlib
import struct
import unicodedata

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = pathlib.Path(__file__).resolve().parent / "fixtures" / "tokenizers"
FORTUNES = pathlib.Path("/usr/share/games/fortunes")
TRAIN_FILES = ["cookie", "computers", "science", "people"]
TEST_FILES = ["law", "linux", "wisdom", "knghtbrd", "pets", "fortunes"]

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Strings where tokenizers differ in the details: Unicode classes, combining
# marks and NFC, case-insensitive contractions, whitespace runs, digits,
# special tokens inside text.
HARD = [
    "",
    "Hello, world!",
    "I'll've done it; you'd've too. She's, they're, we've, I'm, it'd",
    "I'LL'VE SHOUTED IT'S DONE, WE'D'VE SEEN",
    "\u0130stanbul'S \u0130 \u0131 I'\u017f KELVIN'\u212a",
    "  leading spaces",
    "trailing spaces   ",
    "   ",
    " ",
    "\t\ttabs\tand\tmore\t",
    "line one\r\nline two\r\n\r\n\nthree\n",
    "a\n\n\n  b \n",
    "\u00a0non-breaking\u2009thin\u3000ideographic\u0085next\u000bvertical",
    "1234567890123456789 3.14159 1,000,000 \u0661\u0662\u0663 \uff14\uff15\uff16 \u00bd",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u4e2d\u6587\u6587\u672c\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1e9\U0001f1ea \u2764\ufe0f",
    "e\u0301 caf\u00e9 cafe\u0301 A\u030a \u212b \ufb01 \u1e9b\u0323",
    "\u00dcn\u00efc\u00f6d\u00e9 \u00f1 \u00df \u00f8 \u0142 \u03a9\u03bc\u03ad\u03b3\u03b1 \u0416\u0443\u043a",
    "\u0000\u0001\u007f control \u200b zero-width",
    "\ud7ff\ue000\U0010ffff",
    "mixed<|endoftext|>special<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    " <|endoftext|> ",
    "<|endoftext",
    "<|begin_of_text|>Hi<|eot_id|>",
    "the <mask> sat on<mask>  the <sep>   mat <sep>",
    "say hello world now, sayhello world, hello worlds",
    "les \u00e9tudes, les e\u0301tudes",
    " xyzzyplugh unreachable Unreachable xyzzyplughs",
    "a" * 300,
    "=" * 200,
    " " * 50 + "x",
    "x" + "\n" * 20,
    "The quick brown fox jumps over the lazy dog. " * 5,
    "what's up?! ...--- ~~~ ### @@@ $$$ 100% (yes) [no] {maybe}",
    "Don't   stop\t\n  believin'",
]


# The string whose every prefix of ids is decoded (multi-byte characters cut
# anywhere): the emoji.
PREFIX_STRING = 15


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<q", i) for i in ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def fnv1a_bytes(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def training_text():
    texts = [(FORTUNES / f).read_text(encoding="utf-8") for f in TRAIN_FILES]
    # Some text beyond ASCII, so that merges join multi-byte characters too.
    texts += [s for s in HARD[4:20] for _ in range(40)]
    return texts


def byte_level_trainer(vocab_size, special_tokens=()):
    return trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def write_folder(name, tok_json, config=None, tokenizer_config=None):
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    if tok_json is not None:
        (folder / "tokenizer.json").write_text(tok_json, encoding="utf-8")
    if tokenizer_config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


def gpt2_style():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train_from_iterator(training_text(), byte_level_trainer(1500, ["<|endoftext|>"]))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False),
                            AddedToken("<sep>", rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("hello world", single_word=True)])
    # GPT-2's own file writes its merges as "a b" strings.
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [f"{a} {b}" for a, b in data["model"]["merges"]]
    text = json.dumps(data, ensure_ascii=False)
    write_folder("gpt2", text, tokenizer_config={"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"})
    return Tokenizer.from_str(text)


def qwen2_style():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(training_text(), byte_level_trainer(1500))
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    # Written decomposed; matched against the NFC text.
    tok.add_tokens([AddedToken("e\u0301tude", normalized=True)])
    text = tok.to_str()
    write_folder("qwen2", text, tokenizer_config={
        "eos_token": {"content": "<|im_end|>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True},
        "bos_token": None})
    return Tokenizer.from_str(text)


def llama3_style():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train_from_iterator(training_text(), byte_level_trainer(1800))
    # Vocabulary entries that no merge reaches: with ignore_merges a
    # pre-token equal to one of them is taken whole.
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for word in ["\u0120xyzzyplugh", "\u0120unreachable", "Unreachable"]:
        assert word not in vocab
        vocab[word] = len(vocab)
    data["model"]["ignore_merges"] = True
    plain = Tokenizer.from_str(json.dumps(data))
    data["model"]["ignore_merges"] = False
    merged = Tokenizer.from_str(json.dumps(data))
    probe = " xyzzyplugh unreachable Unreachable"
    assert plain.encode(probe).ids != merged.encode(probe).ids, "ignore_merges changes nothing here"
    plain.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    text = plain.to_str()
    eot = plain.token_to_id("<|eot_id|>")
    begin = plain.token_to_id("<|begin_of_text|>")
    end = plain.token_to_id("<|end_of_text|>")
    # As Llama 3's instruct models: tokenizer_config.json names no eos, and
    # config.json lists several (the first is the one taken).
    write_folder("llama3", text, tokenizer_config={"bos_token": "<|begin_of_text|>"},
                 config={"bos_token_id": begin, "eos_token_id": [end, eot]})
    return Tokenizer.from_str(text)


def sentencepiece_model():
    folder = write_folder("sentencepiece", None, tokenizer_config={"eos_token": "</s>", "bos_token": "<s>"})
    lines = [line for text in training_text() for line in text.splitlines() if line.strip() and line != "%"]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=800,
                                   model_type="bpe", byte_fallback=True, split_digits=True,
                                   character_coverage=0.9995, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, add_dummy_prefix=True,
                                   allow_whitespace_only_pieces=True, minloglevel=2)
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    expected = {"strings": HARD, "files": {}, "tokenizers": {}}
    for name in TEST_FILES:
        data = (FORTUNES / name).read_bytes()
        expected["files"][name] = {"bytes": len(data), "fnv1a": fnv1a_bytes(data)}

    hf = {"gpt2": (gpt2_style(), False), "qwen2": (qwen2_style(), True), "llama3": (llama3_style(), False)}
    for name, (tok, nfc) in hf.items():
        folder = OUT / name
        config = json.loads((folder / "tokenizer_config.json").read_text())
        model_config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}

        def special(key):
            token = config.get(key)
            if isinstance(token, dict):
                token = token["content"]
            if token is not None:
                return tok.token_to_id(token)
            ids = model_config.get(key + "_id")
            return ids[0] if isinstance(ids, list) else ids

        entry = {"kind": "byte-level BPE", "vocab_size": tok.get_vocab_size(with_added_tokens=True),
                 "eos_id": special("eos_token"), "bos_id": special("bos_token"), "strings": [], "files": {}}
        strip_tokens = ("<mask>", "<sep>", "tude")
        for s in HARD:
            ids = tok.encode(s, add_special_tokens=False).ids
            decoded = tok.decode(ids, skip_special_tokens=False)
            normalized = unicodedata.normalize("NFC", s) if nfc else s
            assert decoded == normalized or any(t in s for t in strip_tokens), (name, s, decoded)
            entry["strings"].append({"ids": ids, "decoded": decoded})
        # Decoding cut inside characters: what becomes U+FFFD.
        ids = tok.encode(HARD[PREFIX_STRING], add_special_tokens=False).ids
        entry["prefix_decodes"] = [tok.decode(ids[:k], skip_special_tokens=False) for k in range(len(ids) + 1)]
        for f in TEST_FILES:
            ids = tok.encode((FORTUNES / f).read_text(encoding="utf-8"), add_special_tokens=False).ids
            entry["files"][f] = {"count": len(ids), "fnv1a": fnv1a(ids)}
        expected["tokenizers"][name] = entry

    sp = sentencepiece_model()
    entry = {"kind": "SentencePiece", "vocab_size": sp.get_piece_size(), "eos_id": sp.piece_to_id("</s>"),
             "bos_id": sp.piece_to_id("<s>"), "strings": [], "files": {}}
    for s in HARD:
        ids = sp.encode(s)
        entry["strings"].append({"ids": ids, "decoded": sp.decode(ids)})
    for f in TEST_FILES:
        ids = sp.encode((FORTUNES / f).read_text(encoding="utf-8"))
        entry["files"][f] = {"count": len(ids), "fnv1a": fnv1a(ids)}
    expected["tokenizers"]["sentencepiece"] = entry

    (OUT / "expected.json").write_text(json.dumps(expected, ensure_ascii=True, indent=1) + "\n")


if __name__ == "__main__":
    main()
