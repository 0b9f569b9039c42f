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

    w, h, left, right, top, bottom = 900, 480, 70, 230, 30, 45
    xs = [p[1] for p in points]
    lo_y = min(p[2] - p[3] for p in points)
    hi_y = max(p[2] + p[3] for p in points)
    hi_y = hi_y if hi_y > lo_y else lo_y + 1
    x_hi = max(xs) * 1.05
    x = lambda v: left + (w - left - right) * v / x_hi
    y = lambda v: top + (h - top - bottom) * (1 - (v - lo_y) / (hi_y - lo_y))
    colors = ["#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
              "#bcbd22", "#393b79", "#ad494a", "#637939"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{left}" y="18" font-size="13">validation loss against bytes sent across the boundaries, '
             f'mean of {len(seeds)} seeds (bars: their spread)</text>']
    for k in range(5):
        v = lo_y + (hi_y - lo_y) * k / 4
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
        mv = x_hi * k / 4
        parts.append(f'<text x="{x(mv):.1f}" y="{h - bottom + 16}" text-anchor="middle">{mv:.0f}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">MB sent (both directions)</text>')
    for i, (label, mb, loss, sd, warm) in enumerate(points):
        c = colors[i % len(colors)]
        hollow = c if warm > 0 else "white"
        parts.append(f'<line x1="{x(mb):.1f}" x2="{x(mb):.1f}" y1="{y(loss - sd):.1f}" y2="{y(loss + sd):.1f}" '
                     f'stroke="{c}"/><circle cx="{x(mb):.1f}" cy="{y(loss):.1f}" r="4" fill="{hollow}" stroke="{c}"/>')
        ly = top + 16 * i
        parts.append(f'<circle cx="{w - right + 18}" cy="{ly}" r="4" fill="{hollow}" stroke="{c}"/>'
                     f'<text x="{w - right + 28}" y="{ly + 4}">{label}</text>')
    parts.append(f'<text x="{w - right + 10}" y="{top + 16 * len(points) + 10}">filled: a full-precision start</text>')
    parts.append("</svg>")
    print("\n".join(parts))


if __name__ == "__main__":
    main()
