"""The 1-bit LAMB / 1-bit Adam table of docs/fidelity.md from scripts/bench-dp.sh onebit's runs.

    python3 scripts/tables/onebit_table.py OUT_DIR ADAM_LR SEED...

Each 1-bit run against its full-precision twin of the same seed: validation loss, the ratio with its spread and a
paired t statistic over the seeds, the volume counted two ways, and from the traces how the relative update of the
tied embedding and the median tensor change at the freeze.
"""

import json
import math
import statistics
import sys

T_CRIT = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31}  # two-sided 5 %, df = n - 1


def load(out, name):
    with open("%s/%s.json" % (out, name)) as f:
        return json.load(f)


def trace(out, name):
    with open("%s/%s.trace.json" % (out, name)) as f:
        return json.load(f)


def finite(x):
    return x is not None and math.isfinite(x)


def spread(values):
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), sd


def jump(t, freeze, column):
    """Relative update of one tensor (or the median tensor, column None): the
    mean over the 3 steps after the freeze against the 3 before."""
    steps = {s["step"]: s for s in t["steps"]}

    def at(step):
        r = steps[step]["update_ratio"]
        return statistics.median(r) if column is None else r[column]
    before = statistics.fmean(at(s) for s in range(freeze - 2, freeze + 1))
    after = statistics.fmean(at(s) for s in range(freeze + 1, freeze + 4))
    return after / before if before > 0 else float("nan")


def main():
    out, adam_lr, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
    pairs = [("LAMB", "n156-lamb-s%s", "1-bit LAMB", "n156-olamb-w26-s%s"),
             ("Adam (lr %s)" % adam_lr, "n156-adam-lr%s-s%%s" % adam_lr,
              "1-bit Adam", "n156-oadam-lr%s-w26-s%%s" % adam_lr)]
    first = load(out, pairs[0][1] % seeds[0])
    print("global batch %d, %d steps, seeds %s\n" % (first["global_batch"], first["steps"], " ".join(seeds)))
    print("| optimizer | warm-up | validation loss | ÷ twin, per seed | mean ÷ twin | t (paired) | bytes in all | "
          "vs fp32 | vs fp16 | the paper's count | embedding ‖Δx‖/‖x‖ at the freeze | median tensor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for twin_label, twin_name, label, name in pairs:
        try:
            twins = [load(out, twin_name % s) for s in seeds]
            runs = [load(out, name % s) for s in seeds]
        except OSError as e:
            print("| %s | missing: %s |" % (label, e.filename))
            continue
        fp32_bytes = twins[0]["bytes_total"]
        tm, tsd = spread([t["val_loss"] for t in twins])
        print("| %s | 0 | %.4f ± %.4f | 1 | | | %d | 1.00× | 0.50× | | | |" % (twin_label, tm, tsd, fp32_bytes))
        diverged = [s for s, r in zip(seeds, runs) if not finite(r["val_loss"])]
        kept = [(r, t) for r, t in zip(runs, twins) if finite(r["val_loss"])]
        ratios = [r["val_loss"] / t["val_loss"] - 1 for r, t in kept]
        m, sd = spread(ratios)
        t_stat = m / (sd / math.sqrt(len(ratios))) if sd > 0 else float("inf")
        significant = abs(t_stat) > T_CRIT.get(len(ratios), 2.0)
        rm, rsd = spread([r["val_loss"] for r, _ in kept])
        r0 = runs[0]
        warm, steps = r0["warmup_steps"], r0["steps"]
        # Means over the seeds: a back-off's second warm-up sends fp32 again.
        total = statistics.fmean(r["bytes_total"] for r in runs)
        warm_bytes = statistics.fmean(r["bytes_per_step_warmup"] * r.get("warmup_steps_run", warm) for r in runs)
        # The paper's count: the warm-up at fp16 as well, against fp16 all the way.
        paper = (fp32_bytes / 2) / (warm_bytes / 2 + (total - warm_bytes))
        tw = trace(out, name % seeds[0])
        emb = tw["parameters"].index("wte.weight")
        twin_trace = trace(out, twin_name % seeds[0])
        per_seed = " / ".join("%+.2f %%" % (100 * (r["val_loss"] / t["val_loss"] - 1)) if finite(r["val_loss"])
                              else "diverged" for r, t in zip(runs, twins))
        if diverged:
            per_seed += " (seed %s diverged; mean and t over the others)" % ", ".join(diverged)
        backed = ["seed %s: %d" % (s, r["backoffs"]) for s, r in zip(seeds, runs) if r.get("backoffs", 0) > 0]
        if backed:
            per_seed += " (back-offs to the warm-up, %s)" % ", ".join(backed)
        print("| %s | %d | %.4f ± %.4f | %s | %+.2f %% ± %.2f | %.2f%s | %d | %.2f× | %.2f× | %.2f× | %.1f× (twin %.1f×) | "
              "%.1f× (twin %.1f×) |" % (
                  label, warm, rm, rsd, per_seed, 100 * m, 100 * sd, t_stat,
                  "" if significant else " (not significant at n = %d)" % len(ratios), total, fp32_bytes / total,
                  fp32_bytes / 2 / total, paper, jump(tw, warm, emb), jump(twin_trace, warm, emb),
                  jump(tw, warm, None), jump(twin_trace, warm, None)))
        print("", end="")
    try:
        tw = trace(out, pairs[0][3] % seeds[0])
        r_end = sorted(tw["steps"][-1]["r"])
        at_min = sum(1 for r in r_end if r <= 0.5 + 1e-9)
        print("\n1-bit LAMB's r at the last step, seed %s, over its %d tensors: median %.3f, range %.3f–%.3f, %d at r_min "
              "(0.5); masked momentum elements (no warm-up gradient): %d." % (
                  seeds[0], len(r_end), statistics.median(r_end), r_end[0], r_end[-1], at_min,
                  load(out, pairs[0][3] % seeds[0])["masked_elements"]))
    except (OSError, KeyError, IndexError):
        pass
    print("\n(÷ twin: the 1-bit run's validation loss over its twin's, less 1. t: the mean of those over its standard "
          "error; |t| above %.2f is significant at 5 %% for n = %d. The paper's count sends the warm-up at fp16 too and "
          "compares with fp16 all the way. ‖Δx‖/‖x‖: mean over the 3 steps after the freeze ÷ the 3 before, seed %s.)"
          % (T_CRIT.get(len(seeds), 2.0), len(seeds), seeds[0]))


if __name__ == "__main__":
    main()
