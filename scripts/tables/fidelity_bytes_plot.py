#!/usr/bin/env python3
"""Validation loss against the bytes the boundaries sent, one point per
setting (mean over the seeds, with the seeds' spread as a bar), as SVG on
stdout, and a Markdown table on stderr: the equal-bytes view of
scripts/bench-fidelity.sh controls.

    python3 scripts/tables/fidelity_bytes_plot.py OUT_DIR "SEED ..." LABEL ...

Reads OUT_DIR/ft-<label>-s<seed>.json (`actkit pipeline --json`: val_loss,
boundary_bytes, full_precision_steps). The first label is the reference
(fp32). Standard library only."""
import json
import statistics
import sys

from svg_axes import COLORS, Axes


def load(out, label, seed):
    with open(f"{out}/ft-{label.replace(' ', '_')}-s{seed}.json") as f:
        return json.load(f)


def main():
    out, seeds, labels = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
    points = []
    for label in labels:
        js = [load(out, label, s) for s in seeds]
        loss = [j["val_loss"] for j in js]
        mb = statistics.fmean(j["boundary_bytes"] for j in js) / 1e6
        sd = statistics.stdev(loss) if len(loss) > 1 else 0.0
        points.append((label, mb, statistics.fmean(loss), sd, js[0].get("full_precision_steps", 0)))
    ref = points[0][2]
    print("| setting | MB sent (both directions) | full-precision steps | validation loss | ÷ fp32 |", file=sys.stderr)
    print("| --- | --- | --- | --- | --- |", file=sys.stderr)
    for label, mb, loss, sd, warm in points:
        print(f"| {label} | {mb:.1f} | {warm} | {loss:.4f} ± {sd:.4f} | {100 * (loss / ref - 1):+.2f} % |",
              file=sys.stderr)

    xs = [p[1] for p in points]
    ax = Axes(max(xs) * 1.05, min(p[2] - p[3] for p in points), max(p[2] + p[3] for p in points))
    x, y, right_x, top = ax.x, ax.y, ax.legend_x(), ax.top
    parts = ax.frame(f"validation loss against bytes sent across the boundaries, mean of {len(seeds)} seeds "
                     f"(bars: their spread)", "MB sent (both directions)")
    for i, (label, mb, loss, sd, warm) in enumerate(points):
        c = COLORS[i % len(COLORS)]
        hollow = c if warm > 0 else "white"
        parts.append(f'<line x1="{x(mb):.1f}" x2="{x(mb):.1f}" y1="{y(loss - sd):.1f}" y2="{y(loss + sd):.1f}" '
                     f'stroke="{c}"/><circle cx="{x(mb):.1f}" cy="{y(loss):.1f}" r="4" fill="{hollow}" stroke="{c}"/>')
        ly = top + 16 * i
        parts.append(f'<circle cx="{right_x + 18}" cy="{ly}" r="4" fill="{hollow}" stroke="{c}"/>'
                     f'<text x="{right_x + 28}" y="{ly + 4}">{label}</text>')
    parts.append(f'<text x="{right_x + 10}" y="{top + 16 * len(points) + 10}">filled: a full-precision start</text>')
    parts.append("</svg>")
    print("\n".join(parts))


if __name__ == "__main__":
    main()
