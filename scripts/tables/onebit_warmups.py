#!/usr/bin/env python3
"""The 1-bit warm-up sweep of scripts/bench-dp.sh onebit-warmups, as a
Markdown table on stdout.

    python3 scripts/tables/onebit_warmups.py OUT_DIR ADAM_LR "SEED ..." WARMUP ...

Reads OUT_DIR's `actkit dp --json` results: the full-precision twins
n156-lamb-s<seed> and n156-adam-lr<ADAM_LR>-s<seed>, and for each warm-up W
n156-olamb-w<W>-s<seed> and n156-oadam-lr<ADAM_LR>-w<W>-s<seed> (a warm-up
whose runs are missing is left out). Each 1-bit run's validation loss over
its twin's of the same seed, less 1; the mean, its spread and the paired t
(|t| > 2.78 is significant at 5 % for n = 5, 3.18 for 4, 4.30 for 3); the back-offs; the bytes
against the twin's (fp32) and counted as the 1-bit Adam paper does (the
warm-up at fp16: half its bytes, against an fp16 run). Standard library only."""
import json
import math
import os
import statistics
import sys


def load(out, name):
    path = f"{out}/{name}.json"
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def main():
    out, lr, seeds, warmups = sys.argv[1], sys.argv[2], sys.argv[3].split(), sorted(int(w) for w in sys.argv[4:])
    families = [("1-bit LAMB", "n156-lamb-s{s}", "n156-olamb-w{w}-s{s}"),
                (f"1-bit Adam (lr {lr})", f"n156-adam-lr{lr}-s{{s}}", f"n156-oadam-lr{lr}-w{{w}}-s{{s}}")]
    print("| optimizer | warm-up (share of 156) | ÷ twin, per seed | mean ÷ twin | t (paired) | within 2 % | back-offs "
          "| bytes vs fp32 | the paper's count |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for family, twin_name, name in families:
        twins = [load(out, twin_name.format(s=s)) for s in seeds]
        for w in warmups:
            runs = [load(out, name.format(w=w, s=s)) for s in seeds]
            if any(r is None for r in runs) or any(t is None for t in twins):
                continue
            # A diverged run (or twin) is shown, counted as not within 2 %, and left out of the mean.
            finite = [math.isfinite(r["val_loss"]) and math.isfinite(t["val_loss"]) for r, t in zip(runs, twins)]
            ratios = [100 * (r["val_loss"] / t["val_loss"] - 1) for r, t, f in zip(runs, twins, finite) if f]
            mean = statistics.fmean(ratios) if ratios else float("nan")
            sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
            t = mean / (sd / len(ratios) ** 0.5) if sd > 0 else float("nan")
            within = sum(1 for x in ratios if x <= 2)
            backoffs = sum(r["backoffs"] for r in runs)
            sent = statistics.fmean(r["bytes_total"] for r in runs)
            fp32 = statistics.fmean(t["bytes_total"] for t in twins)
            # The paper's count: the warm-up at fp16 as well (half its bytes), against fp16 all the way.
            warm = statistics.fmean(r["bytes_per_step_warmup"] * r["warmup_steps_run"] for r in runs)
            paper = (fp32 / 2) / (warm / 2 + (sent - warm))
            shown = iter(ratios)
            per_seed = " / ".join(f"{next(shown):+.2f} %" if f else "diverged" for f in finite)
            print(f"| {family} | {w} ({100 * w / 156:.0f} %) | {per_seed} | {mean:+.2f} % ± {sd:.2f} | {t:.2f} | "
                  f"{within} of {len(runs)} | {backoffs} | {fp32 / sent:.2f}× | {paper:.2f}× |")


if __name__ == "__main__":
    main()
