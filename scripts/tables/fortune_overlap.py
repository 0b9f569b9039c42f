#!/usr/bin/env python3
"""How unseen the fine-tuning text of docs/fidelity.md is: which of its
fortunes the pretraining run also read, verbatim, and how much of what
pretraining read came from computing files of its own.

  scripts/tables/fortune_overlap.py FORTUNES_DIR OUT_DIR PRETRAIN_EXAMPLES FINETUNE_EXAMPLES SEQ_LEN

Reads OUT_DIR/pretrain.txt and OUT_DIR/finetune.txt (scripts/bench-fidelity.sh
corpora) and cuts them as ACTkit's text corpus does (data/src/text_corpus.cpp):
example i is bytes [i·T, (i + 1)·T] of the text, training uses the first N
examples, validation the last 5 % of the windows. Prints a Markdown table
(standard library only)."""

import os
import sys

COMPUTING = ("linuxcookie", "debian")  # the pretraining files about computing, by name


def fortunes_of(text):
    return [f for f in text.split("\n%\n") if f.strip()]


def main():
    src, out, pre_n, ft_n, seq = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    pre = open(os.path.join(out, "pretrain.txt"), encoding="utf-8").read()
    ft = open(os.path.join(out, "finetune.txt"), encoding="utf-8").read()
    # The corpus reads bytes; the texts are UTF-8 written from the files read with errors="replace".
    pre_b, ft_b = pre.encode(), ft.encode()
    pre_read = pre_b[: pre_n * seq + 1]
    windows = (len(ft_b) - 1) // seq
    val_size = max(1, windows // 20)
    val_first = windows - val_size
    ft_train = (0, ft_n * seq + 1)
    ft_val = (val_first * seq, (val_first + val_size) * seq + 1)

    # Where each fine-tuning fortune lies, and whether pretraining read it.
    rows = {"trained on": [0, 0, 0, 0], "validation": [0, 0, 0, 0], "neither": [0, 0, 0, 0]}
    pos = 0
    for f in fortunes_of(ft):
        fb = f.encode()
        start = ft_b.index(fb, pos)
        pos = start + len(fb)
        mid = start + len(fb) // 2
        where = ("trained on" if ft_train[0] <= mid < ft_train[1] else
                 "validation" if ft_val[0] <= mid < ft_val[1] else "neither")
        rows[where][0] += 1
        if len(fb) >= 20 and fb in pre_read:  # shorter ones ("Ok.") match by chance
            rows[where][1] += 1
            rows[where][2] += len(fb)
        if len(fb) >= 20 and fb in pre_b:
            rows[where][3] += 1

    # Which files the pretraining bytes came from.
    # The pretraining files (scripts/bench-fidelity.sh corpora: all but the fine-tuning ones and the pictures).
    names = sorted(n for n in os.listdir(src) if "." not in n and os.path.isfile(os.path.join(src, n))
                   and n not in ("computers", "linux", "perl", "art", "ascii-art"))
    origin = {}
    for n in names:
        text = open(os.path.join(src, n), encoding="utf-8", errors="replace").read()
        for f in text.split("\n%\n"):
            f = f.strip("\n")
            if f.strip():
                origin.setdefault(f, n)
    by_file = {}
    pos = 0
    for f in fortunes_of(pre):
        fb = f.encode()
        start = pre_b.index(fb, pos)
        pos = start + len(fb)
        if start >= len(pre_read):
            break
        n = origin.get(f.strip("\n"), "?")
        by_file[n] = by_file.get(n, 0) + min(len(fb), len(pre_read) - start)

    print("| fine-tuning fortunes (≥ 20 bytes compared) | fortunes | also in the pretraining bytes read | their bytes "
          "| also in the whole pretraining text |")
    print("| --- | --- | --- | --- | --- |")
    for where, (count, seen, size, anywhere) in rows.items():
        print(f"| {where} | {count} | {seen} ({100 * seen / max(count, 1):.1f} %) | {size} | {anywhere} |")
    print()
    read = sum(by_file.values())
    comp = {n: b for n, b in by_file.items() if n in COMPUTING}
    print(f"Pretraining read {len(pre_read)} bytes ({pre_n} examples of {seq}); from computing files: "
          + (", ".join(f"`{n}` {b} bytes ({100 * b / read:.1f} %)" for n, b in sorted(comp.items())) or "none")
          + ".")


if __name__ == "__main__":
    main()
