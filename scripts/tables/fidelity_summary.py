"""The summary tables of docs/fidelity.md from the runs of scripts/bench-fidelity.sh.

    python3 scripts/tables/fidelity_summary.py OUT_DIR "SEED ..." "FW_BITS ..."

Validation loss ÷ fp32's (per seed, then mean ± sample standard deviation) for each codec
at each forward bit width, and the gradient and tied-gradient frontiers, from
OUT_DIR/ft-<label>-s<seed>.json. A cell is over the seeds whose runs exist
("[n = k]" when that is fewer than asked), and left out when none do.
"""
import json
import os
import statistics
import sys


def main():
    out, seeds, bits = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()

    def load(label, seed):
        path = f"{out}/ft-{label.replace(' ', '_')}-s{seed}.json"
        return json.load(open(path)) if os.path.exists(path) else None

    base = {s: load("fp32", s) for s in seeds}

    def cell(label):
        # The seeds whose run and fp32 run both exist; fewer than asked are named.
        runs = {s: r for s in seeds if (r := load(label, s)) is not None and base[s] is not None}
        if not runs:
            return None
        have = list(runs)
        ratio = [runs[s]["val_loss"] / base[s]["val_loss"] for s in have]
        sd = statistics.stdev(ratio) if len(ratio) > 1 else 0.0
        r, f = runs[have[0]], base[have[0]]
        # Every byte, the tied embedding's gradient included, against fp32's run.
        whole = (f["boundary_bytes"] + f["tied_gradient_bytes"]) / (r["boundary_bytes"] + r["tied_gradient_bytes"])
        n = "" if len(have) == len(seeds) else f" [n = {len(have)}]"
        return f"{100 * (statistics.fmean(ratio) - 1):+.2f} % ± {100 * sd:.2f}{n}", r["compression_ratio"], whole

    fp32 = [base[s]["val_loss"] for s in seeds if base[s]]
    if fp32:
        print(f"fp32 validation loss {statistics.fmean(fp32):.4f} ± {statistics.stdev(fp32) if len(fp32) > 1 else 0:.4f}"
              f" over seeds {' '.join(seeds)}\n")
    rows = [("fp16", "fp16", False), ("DirectQ, per tensor, nearest", "directq{b} tensor", True),
            ("DirectQ, per tensor, stochastic", "directq{b} tensor sr", True),
            ("DirectQ, per channel, nearest", "directq{b} channel", True),
            ("DirectQ, per channel, stochastic", "directq{b} channel sr", True),
            ("DirectQ, per channel, full grid, stochastic", "directq{b} channel sr full", True),
            ("TAH-Quant, tile 32 (b / b−1 bits)", "tah{b} g32", True),
            ("TAH-Quant, tile 32, stochastic", "tah{b} g32 sr", True),
            ("TAH-Quant, tile 64 (b / b−1 bits)", "tah{b} g64", True),
            ("AQ-SGD (per channel), nearest", "aqsgd{b}", True), ("AQ-SGD, stochastic", "aqsgd{b} sr", True),
            ("AQ-SGD, full grid, stochastic", "aqsgd{b} sr full", True)]
    print("| activations (gradients DirectQ-8) | " + " | ".join(f"fw{b}: val loss vs fp32" for b in bits) + " |")
    print("| --- " * (len(bits) + 1) + "|")
    for name, label, per_bits in rows:
        cells = []
        for b in bits:
            c = cell(label.format(b=b)) if per_bits else cell(label)
            cells.append("–" if c is None else f"{c[0]} ({c[1]:.1f}×)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\n(cells: mean ± spread of (loss ÷ fp32's loss − 1) over the seeds; in brackets the compression of the"
          " boundaries' bytes, both directions, fp32 ÷ sent, AQ-SGD's full-precision first epoch included)\n")

    grad = [("8 bits (the papers')", "aqsgd2 sr")]
    for b in ("6", "4", "3", "2"):
        grad += [(f"{b} bits", f"aqsgd2 sr bw{b}"), (f"{b} bits, error feedback", f"aqsgd2 sr bw{b} ef"),
                 (f"{b} bits, per channel, error feedback", f"aqsgd2 sr bw{b} channel ef")]
    grad += [("4 bits, tied gradient with error feedback", "aqsgd2 sr bw4 tied ef"),
             ("4 bits, tied gradient uncompressed", "aqsgd2 sr bw4 tied fp32")]
    print("| AQ-SGD fw2 stochastic; gradients at | val loss vs fp32 | compression: boundaries | and the tied gradient |")
    print("| --- | --- | --- | --- |")
    for name, label in grad:
        c = cell(label)
        if c is not None:
            print(f"| {name} | {c[0]} | {c[1]:.2f}× | {c[2]:.2f}× |")


if __name__ == "__main__":
    main()
