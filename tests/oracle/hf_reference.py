#!/usr/bin/env python3
"""Hugging Face transformers as the oracle of ACTkit's folder loader.

  hf_reference.py make --out DIR
      For each case (below) builds a small random-initialised transformers
      model, perturbs every parameter (so a swapped weight and bias, or a
      misplaced query and key, changes the output), saves it with
      save_pretrained into DIR/<case>/ and writes DIR/<case>/reference.safetensors:
        input           the batch (token ids, or images)
        labels          classifier labels (classifiers only)
        logits          the eval-mode fp32 output
        loss64          the training loss in fp64 (ACTkit's definition: mean
                        next-token cross entropy, or cross entropy on labels)
        grad64.<name>   d loss64 / d parameter, fp64, under the folder's names
        grad32.<name>   the same from the fp32 model: transformers' own error
      With --tokenizer DIR (a folder holding tokenizer.json), also
      DIR/qwen2-tokenized/: a Qwen2 over that tokenizer's vocabulary, with
      the tokenizer files copied, for the fine-tune-and-generate test.
  hf_reference.py check --folder DIR --input FILE --out FILE
      Loads DIR with transformers' Auto class for its architecture and
      writes its eval-mode logits on FILE's input to --out.

Exit status 2 when transformers or safetensors is missing (the tests skip).
"""
import argparse
import json
import os
import sys

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover
    print("hf_reference: %s" % e, file=sys.stderr)
    sys.exit(2)

VOCAB = 96
SEQ = 12
BATCH = 2


def cases():
    t = transformers
    common = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    return {
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "bert": (t.BertForSequenceClassification,
                 t.BertConfig(vocab_size=VOCAB, max_position_embeddings=32, type_vocab_size=2, num_labels=3,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)),
        "vit": (t.ViTForImageClassification,
                t.ViTConfig(image_size=16, patch_size=4, num_channels=3, num_labels=5, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, **common)),
        # Grouped-query attention, an untied head, Llama 3's rope scaling.
        "llama": (t.LlamaForCausalLM,
                  t.LlamaConfig(vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64,
                                tie_word_embeddings=False, rms_norm_eps=1e-5,
                                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
                                **common)),
        # attention_bias: biases on q, k, v and o.
        "llama-bias": (t.LlamaForCausalLM,
                       t.LlamaConfig(vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64,
                                     tie_word_embeddings=False, attention_bias=True, **common)),
        # Mistral: grouped-query attention and a sliding window of 5 tokens, shorter than the 12 of the batch.
        "mistral": (t.MistralForCausalLM,
                    t.MistralConfig(vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64,
                                    tie_word_embeddings=False, sliding_window=5, **common)),
        # Qwen3: q and k normalized per head before the rotation, head_dim 16 (not hidden / heads), a tied head.
        "qwen3": (t.Qwen3ForCausalLM,
                  t.Qwen3Config(vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64, head_dim=16,
                                tie_word_embeddings=True, **common)),
        # Qwen2: q/k/v biases, a tied head.
        "qwen2": (t.Qwen2ForCausalLM,
                  t.Qwen2Config(vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64,
                                tie_word_embeddings=True, rope_theta=1000000.0, **common)),
    }


def batch(name, cfg, g):
    if name == "vit":
        x = torch.randn(BATCH, 3, cfg.image_size, cfg.image_size, generator=g)
        return x, torch.randint(0, cfg.num_labels, (BATCH,), generator=g)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, cfg.num_labels, (BATCH,), generator=g) if name == "bert" else None
    return x, labels


def logits_of(model, name, x):
    out = model(pixel_values=x) if name == "vit" else model(input_ids=x)
    return out.logits


def loss_of(model, name, x, labels):
    logits = logits_of(model, name, x)
    if labels is not None:
        return torch.nn.functional.cross_entropy(logits, labels)
    v = logits.size(-1)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), x[:, 1:].reshape(-1))


def grads(model, name, x, labels, dtype):
    m = model.to(dtype)
    m.zero_grad()
    loss = loss_of(m, name, x.to(dtype) if name == "vit" else x, labels)
    loss.backward()
    named = {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    return loss.detach(), named


def make_tokenized(out, tokenizer_dir):
    import shutil
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    torch.manual_seed(99)
    cfg = transformers.Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=128, tie_word_embeddings=True)
    folder = os.path.join(out, "qwen2-tokenized")
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(tokenizer_dir, name)):
            shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(folder, name))


def make(out):
    for i, (name, (cls, cfg)) in enumerate(sorted(cases().items())):
        torch.manual_seed(1000 + i)
        model = cls(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        folder = os.path.join(out, name)
        model.save_pretrained(folder)
        g = torch.Generator().manual_seed(7 + i)
        x, labels = batch(name, cfg, g)
        with torch.no_grad():
            ref = {"input": x, "logits": logits_of(model, name, x).float().contiguous()}
        if labels is not None:
            ref["labels"] = labels
        _, g32 = grads(model, name, x, labels, torch.float32)
        loss64, g64 = grads(model, name, x, labels, torch.float64)
        model.float()
        # The folder's names: a tied head's gradient belongs to the embedding.
        saved = set(load_file(os.path.join(folder, "model.safetensors")).keys())
        ref["loss64"] = loss64.reshape(1)
        for n, grad in g64.items():
            if n in saved:
                ref["grad64." + n] = grad.contiguous()
                ref["grad32." + n] = g32[n].contiguous()
        save_file(ref, os.path.join(folder, "reference.safetensors"))
    print(json.dumps({"cases": sorted(cases().keys())}))


def check(folder, input_file, out):
    with open(os.path.join(folder, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    cls = getattr(transformers, arch)
    model = cls.from_pretrained(folder).eval()
    x = load_file(input_file)["input"]
    name = "vit" if "ViT" in arch else "lm"
    with torch.no_grad():
        logits = logits_of(model, name, x).float().contiguous()
    save_file({"logits": logits}, out)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--tokenizer", help="a folder with tokenizer.json: also make qwen2-tokenized")
    c = sub.add_parser("check")
    c.add_argument("--folder", required=True)
    c.add_argument("--input", required=True)
    c.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    if a.cmd == "make":
        make(a.out)
        if a.tokenizer:
            make_tokenized(a.out, a.tokenizer)
    else:
        check(a.folder, a.input, a.out)


if __name__ == "__main__":
    main()
