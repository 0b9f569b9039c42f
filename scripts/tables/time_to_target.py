#!/usr/bin/env python3
"""Time to a validation loss over a slow link: scripts/bench-fidelity.sh
time-to-target. A Markdown table on stderr, validation loss against
training seconds (mean over the seeds at each evaluation) as SVG on stdout.

    python3 scripts/tables/time_to_target.py OUT_DIR "SEED ..." LABEL ...

Reads OUT_DIR/ft-<label>-s<seed>.json (`actkit pipeline --json` with
--eval-every: `evaluations`, each a step, the training steps' seconds by
then, `train_s`, and `val_loss`). The first label is the reference (fp32):
the targets are its own final loss of the same seed, and within 0.5, 1 and
2 % of it. A run reaches a target between two evaluations at the time
interpolated linearly between them; in brackets, fp32's time to the same
target over this run's, per seed, averaged. Standard library only."""
import json
import statistics
import sys

from svg_axes import COLORS, Axes

MARGINS = (0.02, 0.01, 0.005, 0.0)


def load(out, label, seed):
    with open(f"{out}/ft-{label.replace(' ', '_')}-s{seed}.json") as f:
        return json.load(f)


def time_to(curve, target):
    """Training seconds at which `curve` (train_s, loss) first reaches `target`, or None."""
    before = None
    for t, loss in curve:
        if loss <= target:
            if before is None or before[1] <= target:
                return t
            t0, l0 = before
            return t0 + (t - t0) * (l0 - target) / (l0 - loss)
        before = (t, loss)
    return None


def shown(label):
    """A label as the table and the plot show it: without the section's "ttt " (run names keep it)."""
    return label[4:] if label.startswith("ttt ") else label


def spread(values, digits):
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} ± {sd:.{digits}f}"


def main():
    out, seeds, labels = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
    runs = {label: [load(out, label, s) for s in seeds] for label in labels}
    curves = {label: [[(e["train_s"], e["val_loss"]) for e in j["evaluations"]] for j in js]
              for label, js in runs.items()}
    ref = labels[0]
    finals = [j["val_loss"] for j in runs[ref]]
    head = " | ".join(f"to fp32's final + {100 * m:g} %" if m else "to fp32's final" for m in MARGINS)
    print(f"| setting | full-precision steps | validation loss | vs fp32 | training s, whole run | {head} |",
          file=sys.stderr)
    print("| --- " * (5 + len(MARGINS)) + "|", file=sys.stderr)
    for label in labels:
        js, cs = runs[label], curves[label]
        losses = [j["val_loss"] for j in js]
        vs = [100 * (l / f - 1) for l, f in zip(losses, finals)]
        whole = [c[-1][0] for c in cs]
        cells = []
        for m in MARGINS:
            times = [time_to(c, f * (1 + m)) for c, f in zip(cs, finals)]
            reached = [t for t in times if t is not None]
            ref_times = [time_to(c, f * (1 + m)) for c, f in zip(curves[ref], finals)]
            speedups = [r / t for r, t in zip(ref_times, times) if r is not None and t is not None and t > 0]
            if not reached:
                cells.append(f"not reached (0 of {len(times)})")
                continue
            cell = f"{spread(reached, 0)} s"
            if label != ref and speedups:
                cell += f" ({statistics.fmean(speedups):.2f}×)"
            if len(reached) < len(times):
                cell += f" ({len(reached)} of {len(times)} seeds)"
            cells.append(cell)
        exact = "all" if js[0].get("codec") == "fp32" else js[0].get("full_precision_steps", 0)
        print(f"| {shown(label)} | {exact} | {spread(losses, 4)} | "
              f"{spread(vs, 2) if label != ref else ''}{' %' if label != ref else ''} | {spread(whole, 0)} | "
              f"{' | '.join(cells)} |", file=sys.stderr)

    # The curves: mean time and mean loss over the seeds at each evaluation.
    mean_curves = []
    for label in labels:
        cs = curves[label]
        n = min(len(c) for c in cs)
        mean_curves.append((label, [(statistics.fmean(c[i][0] for c in cs), statistics.fmean(c[i][1] for c in cs))
                                    for i in range(n)]))
    points = [p for _, c in mean_curves for p in c]
    f_mean = statistics.fmean(finals)
    ax = Axes(max(p[0] for p in points) * 1.05, min(min(p[1] for p in points), f_mean) - 0.005,
              min(max(p[1] for p in points), f_mean * 1.06))
    x, y, right_x = ax.x, ax.y, ax.legend_x()
    parts = ax.frame(f"validation loss against training seconds over the slow link, mean of {len(seeds)} seeds",
                     "training seconds (the steps' own; validations not counted)")
    for m in (0.01, 0.0):
        v = f_mean * (1 + m)
        parts.append(f'<line x1="{ax.left}" x2="{right_x}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#888" '
                     f'stroke-dasharray="4 3"/><text x="{right_x + 4}" y="{y(v) + 4:.1f}" fill="#888">'
                     f'fp32 final{f" + {100 * m:g} %" if m else ""}</text>')
    for i, (label, c) in enumerate(mean_curves):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{x(t):.1f},{y(l):.1f}" for t, l in c)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        parts.append(f'<text x="{right_x + 4}" y="{ax.top + 40 + 16 * i}" fill="{color}">{shown(label)}</text>')
    parts.append("</svg>")
    print("\n".join(parts))


if __name__ == "__main__":
    main()
