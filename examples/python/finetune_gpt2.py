"""A transformers GPT-2 trained on Debian's fortunes with its saved
activations at 2 bits: the one line is actkit.compress, nothing else of the
loop changes. The model is random-initialised (nothing is downloaded); give
--model DIR to fine-tune a save_pretrained folder instead.

    .venv/bin/python examples/python/finetune_gpt2.py --level L3 --steps 50
"""

import argparse
import glob
import time

import torch
import transformers

import actkit


def fortunes(seq, limit_bytes=4 << 20):
    text = b""
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if not path.endswith(".dat") and not path.endswith(".u8"):
            try:
                with open(path, "rb") as f:
                    text += f.read()
            except (IsADirectoryError, PermissionError):
                pass
        if len(text) > limit_bytes:
            break
    if not text:
        raise SystemExit("no fortunes: install Debian's fortunes package")
    ids = torch.tensor(list(text[:limit_bytes]), dtype=torch.long)  # bytes as tokens: a 256-token vocabulary
    return ids[: len(ids) // seq * seq].view(-1, seq)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", default="L3")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--model", help="a save_pretrained GPT-2 folder (default: a small random one)")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.model:
        model = transformers.GPT2LMHeadModel.from_pretrained(args.model)
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=256, n_positions=args.seq,
                                                                     n_embd=256, n_layer=4, n_head=4))
    data = fortunes(args.seq)
    actkit.compress(model, args.level)  # the one line
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    t0 = time.time()
    for step in range(args.steps):
        batch = data[torch.randint(0, len(data), (args.batch,))]
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 10 == 0:
            print("step %d: loss %.3f" % (step + 1, loss.item()), flush=True)
    s = actkit.stats(model)
    print("level %s: %d steps in %.0f s; activations saved over the run %.1f MiB, packed into %.1f MiB"
          % (args.level, args.steps, time.time() - t0, s["saved_bytes"] / 2 ** 20, s["packed_bytes"] / 2 ** 20))


if __name__ == "__main__":
    main()
