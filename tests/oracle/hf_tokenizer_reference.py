#!/usr/bin/env python3
"""transformers as the oracle of the prompts `actkit generate` encodes.

  hf_tokenizer_reference.py make --fixtures DIR --out DIR
      From the tokenizer fixtures in --fixtures (tests/oracle/fixtures/tokenizers)
      makes Llama folders, each a tiny random LlamaForCausalLM with its
      vocabulary covering the tokenizer's, and writes DIR/expected.json:
      {folder: [{"prompt": text, "ids": AutoTokenizer(folder)(text)["input_ids"]}]}.
        byte-level       GPT-2's byte-level tokenizer.json (ByteLevel
                         post-processor) with tokenizer_config.json naming a
                         bos_token: transformers adds none
        template         Llama 3's tokenizer.json with Sequence[ByteLevel,
                         TemplateProcessing("<|begin_of_text|> $A")]
        spm-no-bos       tokenizer.model alone, add_bos_token false
        spm-bos          tokenizer.model alone, add_bos_token true
        metaspace        Llama 2's layout: LlamaTokenizer's own tokenizer.json
                         (Metaspace, byte fallback, TemplateProcessing "<s> $A")
                         beside the tokenizer.model it was made from

Exit status 2 when transformers, tokenizers or protobuf (which transformers
needs to read a tokenizer.model) is missing (the tests skip).
"""
import argparse
import json
import os
import shutil
import sys

try:
    import google.protobuf  # noqa: F401  (transformers reads tokenizer.model with it)
    import torch
    import transformers
    from tokenizers import Tokenizer, processors
except ImportError as e:  # pragma: no cover
    print("hf_tokenizer_reference: %s" % e, file=sys.stderr)
    sys.exit(2)

# Prompts where SentencePiece and the tokenizers package's BPE agree (they
# differ on runs of leading spaces), each folder's own special tokens
# written in the text on top.
PROMPTS = ["Hello world", "Don't stop believing.", "The quick brown fox", "a  b"]


def llama(folder, vocab):
    torch.manual_seed(5)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=True)
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)


def make(fixtures, out):
    folders = {}

    d = os.path.join(out, "byte-level")
    shutil.copytree(os.path.join(fixtures, "gpt2"), d)
    folders["byte-level"] = (d, PROMPTS + ["<|endoftext|>Hello"])

    d = os.path.join(out, "template")
    os.makedirs(d)
    tok = Tokenizer.from_file(os.path.join(fixtures, "llama3", "tokenizer.json"))
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=bos + " $A", pair=bos + " $A " + bos + " $B",
                                      special_tokens=[(bos, tok.token_to_id(bos))])])
    tok.save(os.path.join(d, "tokenizer.json"))
    for name in ("tokenizer_config.json", "config.json"):
        shutil.copy(os.path.join(fixtures, "llama3", name), d)
    folders["template"] = (d, PROMPTS + [bos + "Hello", "x" + bos])

    spm = os.path.join(fixtures, "sentencepiece", "tokenizer.model")
    for name, add in (("spm-no-bos", False), ("spm-bos", True)):
        d = os.path.join(out, name)
        os.makedirs(d)
        shutil.copy(spm, d)
        # LlamaTokenizer, as Llama 2's folders name it: the class whose
        # reading of the model agrees with SentencePiece.
        write_json(os.path.join(d, "tokenizer_config.json"),
                   {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                    "add_bos_token": add, "add_eos_token": False})
        folders[name] = (d, PROMPTS)

    d = os.path.join(out, "metaspace")
    made = transformers.AutoTokenizer.from_pretrained(folders["spm-bos"][0])
    made.save_pretrained(d)
    shutil.copy(spm, d)
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        assert json.load(f)["pre_tokenizer"]["type"] == "Metaspace", "not Llama 2's layout"
    folders["metaspace"] = (d, PROMPTS)

    expected = {}
    for name, (d, prompts) in folders.items():
        tokenizer = transformers.AutoTokenizer.from_pretrained(d)
        # The model's vocabulary covers the tokenizer's, as load_tokenizer's users check.
        llama(d, len(tokenizer) + 8)
        expected[name] = [{"prompt": p, "ids": tokenizer(p)["input_ids"]} for p in prompts]
    write_json(os.path.join(out, "expected.json"), expected)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--fixtures", required=True)
    m.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    make(a.fixtures, a.out)


if __name__ == "__main__":
    main()
