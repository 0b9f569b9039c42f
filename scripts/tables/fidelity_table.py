"""The table and learning curves of one sweep of scripts/bench-fidelity.sh.

    python3 scripts/tables/fidelity_table.py [--runs RUNS] OUT_DIR TABLE "SEED ..." LABEL ...

Reads OUT_DIR/RUNS-<label>-s<seed>.json (`actkit pipeline --json`; RUNS
defaults to TABLE, spaces in a label become underscores), prints a
Markdown table (mean ± sample standard deviation over the seeds; the ratio to
fp32 is taken within each seed, then averaged) and writes OUT_DIR/TABLE.svg,
the training loss of each label (mean over the seeds, smoothed over 10 steps).
The first label is the reference (fp32).
"""
import json
import statistics
import sys

from svg_axes import Axes


def spread(values, digits=4):
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def load(out, prefix, label, seed):
    with open(f"{out}/{prefix}-{label.replace(' ', '_')}-s{seed}.json") as f:
        return json.load(f)


def smooth(values, width=10):
    return [statistics.fmean(values[max(0, i - width + 1):i + 1]) for i in range(len(values))]


def svg(path, title, curves):
    """Line plot of {label: [loss per step]}: one polyline each, a legend on the right."""
    w, left, right, top, bottom = 900, 60, 260, 30, 40
    h = max(420, top + 14 * len(curves) + bottom)  # room for every legend entry
    steps = max(len(c) for c in curves.values())
    lo = min(min(c) for c in curves.values())
    hi = max(max(c[min(len(c) - 1, 5):]) for c in curves.values())  # the first steps would squash the rest
    ax = Axes(max(1, steps - 1), lo, hi, w=w, h=h, left=left, right=right, top=top, bottom=bottom)
    x, y = ax.x, ax.y
    # fp16, second in every sweep, in grey beside fp32's black.
    colors = ["#000000", "#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#17becf", "#bcbd22", "#393b79", "#ad494a", "#637939", "#7b4173", "#3182bd"]
    parts = ax.frame(title, "step", x_ticks=False)
    for i, (label, c) in enumerate(curves.items()):
        color = colors[i % len(colors)]
        dash = ' stroke-dasharray="5,3"' if i >= len(colors) else ""
        points = " ".join(f"{x(j):.1f},{y(v):.1f}" for j, v in enumerate(c))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.3"{dash} points="{points}"/>')
        ly = top + 14 * i
        parts.append(f'<line x1="{w - right + 10}" x2="{w - right + 30}" y1="{ly}" y2="{ly}" stroke="{color}" '
                     f'stroke-width="2"{dash}/><text x="{w - right + 35}" y="{ly + 4}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    args = sys.argv[1:]
    runs_prefix = None
    if args[0] == "--runs":
        runs_prefix, args = args[1], args[2:]
    out, prefix, seeds, labels = args[0], args[1], args[2].split(), args[3:]
    runs = {label: [load(out, runs_prefix or prefix, label, s) for s in seeds] for label in labels}
    ref = runs[labels[0]]
    steps = {j["steps"] for js in runs.values() for j in js}
    assert len(steps) == 1, f"runs of different lengths in one table: {sorted(steps)}"
    print(f"\n### {prefix}: {len(seeds)} seeds ({' '.join(seeds)}), {ref[0]['steps']} steps\n")
    print(f"| codec | validation loss | ÷ {labels[0]} | final train loss | compression (both directions) |")
    print("| --- | --- | --- | --- | --- |")
    for label in labels:
        js = runs[label]
        val = [j["val_loss"] for j in js]
        ratio = [j["val_loss"] / r["val_loss"] for j, r in zip(js, ref)]
        train = [j["final_train_loss"] for j in js]
        print(f"| {label} | {spread(val)} | {spread(ratio)} | {spread(train)} | "
              f"{statistics.fmean(j['compression_ratio'] for j in js):.2f}× |")
    curves = {}
    for label in labels:
        per_seed = [j["train_losses"] for j in runs[label]]
        n = min(len(c) for c in per_seed)
        curves[label] = smooth([statistics.fmean(c[i] for c in per_seed) for i in range(n)])
    svg(f"{out}/{prefix}.svg", f"{prefix}: training loss on unseen text, mean of {len(seeds)} seeds", curves)
    print(f"\nlearning curves: {out}/{prefix}.svg")


if __name__ == "__main__":
    main()
