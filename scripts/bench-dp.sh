#!/usr/bin/env bash
# The data-parallel figures of docs/benchmarks.md: bytes per step and over
# a run, step time and samples/s of 4 workers against the link rate for
# LAMB / Adam in fp32, fp16 and 1-bit, and convergence of each optimizer
# with the same steps and seed; and the pipeline with replicas, every
# exchange compressed or none.
#
#   scripts/bench-dp.sh [speed|convergence|convergence-resnet|large-batch|onebit|onebit-warmups|pipeline|all]
#                       [OUT_DIR]
#
# Needs build/bin/actkit and python3 (for the tables). Every run writes its
# JSON to OUT_DIR (default build/bench-dp); the tables go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="${2:-build/bench-dp}"
mkdir -p "$out"
actkit=${ACTKIT:-build/bin/actkit}  # a copy keeps a long sweep off a binary being rebuilt
# A GPT-2-shaped model small enough that 4 workers share 2 cores: 2 blocks of
# 128, byte vocabulary, 64 tokens; 0.43 M parameters, 1.7 MB of fp32 gradients.
model=(--model gpt2 --layers 2 --hidden 128 --heads 4 --seq-len 64)

run() {  # name, then actkit dp arguments
  local name=$1
  shift
  "$actkit" dp "${model[@]}" "$@" --json "$out/$name.json" > "$out/$name.log" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
}

speed() {
  # Rates from ~0.1x to ~10x the compute time for the fp32 allreduce.
  local rate opt
  for rate in unlimited 400Mbps 100Mbps 40Mbps 16Mbps; do
    for opt in lamb fp16-lamb onebit-lamb adam fp16-adam onebit-adam; do
      run "speed-$opt-$rate" --workers 4 --optimizer "$opt" --data synthetic --batch 8 --steps 24 \
        --warmup-steps 8 --bandwidth "$rate"
    done
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rates = ["unlimited", "400Mbps", "100Mbps", "40Mbps", "16Mbps"]
print("| rate | optimizer | warm-up step (ms) | compression step (ms) | samples/s | bytes/step warm-up | bytes/step 1-bit | vs fp32 (step) | vs fp16 (step) |")
print("|---|---|---|---|---|---|---|---|---|")
for algo in ["lamb", "adam"]:
    for rate in rates:
        r = {o: json.load(open(f"{out}/speed-{o}-{rate}.json")) for o in [algo, "fp16-" + algo, "onebit-" + algo]}
        base, half = r[algo]["step_time_warmup_s"], r["fp16-" + algo]["step_time_warmup_s"]
        for o, d in r.items():
            step = d["step_time_compressed_s"] or d["step_time_warmup_s"]
            print(f"| {rate} | {o} | {1000*d['step_time_warmup_s']:.0f} | "
                  f"{1000*d['step_time_compressed_s']:.0f} | {d['samples_per_s']:.0f} | "
                  f"{d['bytes_per_step_warmup']} | {d['bytes_per_step_compressed']} | "
                  f"{base/step:.2f}x | {half/step:.2f}x |")
PY
}

# The convergence table of runs PREFIX-<optimizer>: each 1-bit optimizer
# next to its full-precision twin, METRIC (val_loss or val_accuracy).
convergence_table() {
  python3 - "$out" "$1" "$2" <<'PY'
import json, sys
out, prefix, metric = sys.argv[1:4]
name = "validation loss" if metric == "val_loss" else "test accuracy"
print(f"| optimizer | steps | warm-up | final train loss | {name} | bytes in all | vs fp32 bytes |")
print("|---|---|---|---|---|---|---|")
for algo in ["lamb", "adam"]:
    full = json.load(open(f"{out}/{prefix}-{algo}.json"))
    for o in [algo, "onebit-" + algo]:
        d = json.load(open(f"{out}/{prefix}-{o}.json"))
        value = f"{d[metric]:.4f}" if metric == "val_loss" else f"{100 * d[metric]:.2f}%"
        print(f"| {o} | {d['steps']} | {d['warmup_steps']} | {d['final_train_loss']:.4f} | {value} | "
              f"{d['bytes_total']} | {full['bytes_total'] / d['bytes_total']:.2f}x |")
PY
}

# The language model on the fortunes text: 4 workers × 8, two epochs over
# 4096 examples, the paper's 16.7% warm-up.
convergence() {
  local opt
  for opt in lamb onebit-lamb adam onebit-adam; do
    run "conv-$opt" --workers 4 --optimizer "$opt" --data fortunes --train-limit 4096 --batch 8 --epochs 2 \
      --lr 0.003 --warmup-fraction 0.167 --seed 1
  done
  convergence_table conv val_loss
}

# ResNet-18 on Fashion-MNIST: 4 workers × 32 (a global batch of 128), one
# epoch over 8192 examples (64 steps), the paper's 16.7% warm-up; accuracy on
# the 10000 test images. LAMB's pair at a peak rate of 0.003, Adam's at 0.001
# (Adam at 0.003 reaches only 75%).
convergence_resnet() {
  local opt lr
  for opt in lamb onebit-lamb adam onebit-adam; do
    lr=0.003
    [[ $opt == *adam ]] && lr=0.001
    "$actkit" dp --model resnet18 --workers 4 --optimizer "$opt" --data fashion-mnist --train-limit 8192 \
      --batch 32 --epochs 1 --lr "$lr" --warmup-fraction 0.167 --seed 1 --json "$out/resnet-$opt.json" \
      > "$out/resnet-$opt.log" 2>&1 || { echo "run resnet-$opt failed:"; tail -5 "$out/resnet-$opt.log"; exit 1; }
  done
  convergence_table resnet val_accuracy
}

# 1-bit LAMB's regime, as far as 2 cores go: a large global batch by
# gradient accumulation (4 workers × 8 × ACCUMULATE micro-batches, 1024 by
# default, against the paper's 32K-64K), the paper's 16.7% warm-up share,
# each 1-bit optimizer against its full-precision twin at equal steps and
# seeds (SEEDS, default "1 2 3") over STEPS steps (default 80: 2.1
# epochs of the 38 K fortunes examples); LAMB's pair at a peak rate of LR_LAMB
# (default 0.01: the 0.003 of batch 32 scaled by about the square root of
# the batch ratio, as LAMB's paper scales it), Adam's at LR_ADAM (0.003).
# Volume against fp32 and fp16 (an fp16 allreduce sends half of fp32's).
large_batch() {
  local opt lr seed acc=${ACCUMULATE:-32} steps=${STEPS:-80}
  read -r -a lb_seeds <<< "${SEEDS:-1 2 3}"
  for seed in "${lb_seeds[@]}"; do
    for opt in lamb onebit-lamb adam onebit-adam; do
      lr=${LR_LAMB:-0.01}
      [[ $opt == *adam ]] && lr=${LR_ADAM:-0.003}
      # The name holds every setting, so a rerun with others runs anew.
      local name="large-a$acc-n$steps-lr$lr-$opt-s$seed"
      [[ -f $out/$name.json ]] && continue
      run "$name" --workers 4 --optimizer "$opt" --data fortunes --batch 8 --accumulate "$acc" \
        --steps "$steps" --lr "$lr" --warmup-fraction 0.167 --seed "$seed"
    done
  done
  python3 - "$out" "$acc" "$steps" "${LR_LAMB:-0.01}" "${LR_ADAM:-0.003}" "${lb_seeds[@]}" <<'PY'
import json, statistics, sys
out, acc, steps, lr_lamb, lr_adam, seeds = *sys.argv[1:6], sys.argv[6:]
def load(o, s):
    lr = lr_adam if o.endswith("adam") else lr_lamb
    return json.load(open(f"{out}/large-a{acc}-n{steps}-lr{lr}-{o}-s{s}.json"))
def spread(v):
    return f"{statistics.fmean(v):.4f} ± {statistics.stdev(v) if len(v) > 1 else 0:.4f}"
first = load("lamb", seeds[0])
print(f"global batch {first['global_batch']}, {first['steps']} steps, seeds {' '.join(seeds)}\n")
print("| optimizer | warm-up | validation loss | ÷ full-precision twin | bytes in all | vs fp32 bytes | vs fp16 bytes |")
print("|---|---|---|---|---|---|---|")
for algo in ["lamb", "adam"]:
    for o in [algo, "onebit-" + algo]:
        runs = [load(o, s) for s in seeds]
        twin = [load(algo, s) for s in seeds]
        ratio = [r["val_loss"] / t["val_loss"] for r, t in zip(runs, twin)]
        b, fp32 = runs[0]["bytes_total"], twin[0]["bytes_total"]
        print(f"| {o} | {runs[0]['warmup_steps']} | {spread([r['val_loss'] for r in runs])} | {spread(ratio)} | "
              f"{b} | {fp32 / b:.2f}× | {fp32 / 2 / b:.2f}× |")
PY
}

# 1-bit LAMB and 1-bit Adam at the paper's warm-up share, run long enough
# for a 26-step warm-up (16.7 % of 156 steps): 4 workers × batch 8 × 8
# accumulated (a global batch of 256), five seeds, each 1-bit optimizer
# against its full-precision twin of the same seed; Adam's rate swept first
# (with an 8-step rate warm-up) and the best used for both Adams. Every run
# also writes its per-tensor trace (--optimizer-trace). About 25 minutes
# unloaded on the build machine.
# A run that diverges goes on to the end (its loss NaN), so that it is
# counted, not lost; one whose JSON exists is not run again.
traced() {
  local name=$1
  shift
  [[ -f $out/$name.json ]] || run "$name" "$@" --allow-non-finite --optimizer-trace "$out/$name.trace.json"
}
onebit() {
  local s lr best b=(--workers 4 --data fortunes --batch 8 --accumulate 8 --steps 156)
  read -r -a ob_seeds <<< "${SEEDS:-1 2 3 4 5}"
  for s in "${ob_seeds[@]}"; do
    traced "n156-lamb-s$s" "${b[@]}" --optimizer lamb --lr 0.01 --seed "$s"
    traced "n156-olamb-w26-s$s" "${b[@]}" --optimizer onebit-lamb --warmup-steps 26 --lr 0.01 --seed "$s"
  done
  for lr in 0.001 0.003 0.01; do
    traced "n156-adam-lr$lr-s1" "${b[@]}" --optimizer adam --lr "$lr" --lr-warmup-steps 8 --seed 1
  done
  best=$(python3 -c 'import json,sys; print(min(sys.argv[2:], key=lambda lr: json.load(open(f"{sys.argv[1]}/n156-adam-lr{lr}-s1.json"))["val_loss"]))' "$out" 0.001 0.003 0.01)
  for s in "${ob_seeds[@]}"; do
    traced "n156-adam-lr$best-s$s" "${b[@]}" --optimizer adam --lr "$best" --lr-warmup-steps 8 --seed "$s"
    traced "n156-oadam-lr$best-w26-s$s" "${b[@]}" --optimizer onebit-adam --warmup-steps 26 --lr "$best" \
      --lr-warmup-steps 8 --seed "$s"
  done
  # The suspects at 80 steps (seed 1): a 13-step freeze, and a rate warm-up with it and with LAMB alone; and the
  # rate warm-up with the 26-step freeze.
  local short=(--workers 4 --data fortunes --batch 8 --accumulate 8 --steps 80 --lr 0.01 --seed 1)
  traced lamb-s1 "${short[@]}" --optimizer lamb
  traced lamb-lrw8-s1 "${short[@]}" --optimizer lamb --lr-warmup-steps 8
  traced olamb-w13-s1 "${short[@]}" --optimizer onebit-lamb --warmup-steps 13
  traced olamb-w13-lrw8-s1 "${short[@]}" --optimizer onebit-lamb --warmup-steps 13 --lr-warmup-steps 8
  traced n156-olamb-w26-lrw8-s1 "${b[@]}" --optimizer onebit-lamb --warmup-steps 26 --lr 0.01 --lr-warmup-steps 8 \
    --seed 1
  for name in lamb-s1 lamb-lrw8-s1 olamb-w13-s1 olamb-w13-lrw8-s1 n156-lamb-s1 n156-olamb-w26-lrw8-s1; do
    python3 -c 'import json,sys; print(sys.argv[2], json.load(open(sys.argv[1]))["val_loss"])' "$out/$name.json" "$name"
  done
  python3 scripts/tables/onebit_table.py "$out" "$best" "${ob_seeds[@]}"
}

# The 1-bit warm-up swept at onebit's 156 steps: WARMUPS (default "13 52
# 104": 8, 33 and 67 % of the run, beside onebit's 26 = 16.7 %; run in the
# order given), both 1-bit optimizers, every seed, each against onebit's
# full-precision twins (run here when missing); Adam at ADAM_LR (default
# 0.003, the rate onebit's sweep chose). About 1.5 minutes a run unloaded.
onebit_warmups() {
  local s w lr=${ADAM_LR:-0.003} b=(--workers 4 --data fortunes --batch 8 --accumulate 8 --steps 156)
  read -r -a ob_seeds <<< "${SEEDS:-1 2 3 4 5}"
  read -r -a warmups <<< "${WARMUPS:-13 52 104}"
  for s in "${ob_seeds[@]}"; do
    traced "n156-lamb-s$s" "${b[@]}" --optimizer lamb --lr 0.01 --seed "$s"
    traced "n156-adam-lr$lr-s$s" "${b[@]}" --optimizer adam --lr "$lr" --lr-warmup-steps 8 --seed "$s"
  done
  for w in "${warmups[@]}"; do
    for s in "${ob_seeds[@]}"; do
      traced "n156-olamb-w$w-s$s" "${b[@]}" --optimizer onebit-lamb --warmup-steps "$w" --lr 0.01 --seed "$s"
      traced "n156-oadam-lr$lr-w$w-s$s" "${b[@]}" --optimizer onebit-adam --warmup-steps "$w" --lr "$lr" \
        --lr-warmup-steps 8 --seed "$s"
    done
  done
  python3 scripts/tables/onebit_warmups.py "$out" "$lr" "${ob_seeds[*]}" 26 "${warmups[@]}"
}

# End-to-end compression (AQ-SGD §4.3): 2 stages × 2 replicas of the
# pipeline benchmark's GPT-2 (4 blocks of 128, 128-byte sequences),
# fine-tuned for 150 steps from its pretrained checkpoint on 400 fortunes
# examples (so that AQ-SGD sees each again), every exchange in fp32 with
# Adam against every exchange compressed: TAH-Quant or AQ-SGD activations,
# DirectQ 8-bit gradients, 1-bit Adam across the replicas. Convergence over
# three seeds unthrottled (the losses do not depend on the link), then
# throughput at 20 Mbit/s.
pipeline_dp() {
  local pre=build/bench-pipeline/pretrained
  [[ -f $pre/model.pt ]] || scripts/bench-pipeline.sh pretrain
  local configs=("fp32:--codec fp32 --optimizer adam"
                 "tah:--codec tah --fw-bits 4 --bw-bits 8 --optimizer onebit-adam"
                 "aqsgd:--codec aqsgd --fw-bits 4 --bw-bits 8 --optimizer onebit-adam")
  local entry seed rate
  for rate in unlimited 20Mbps; do
    for seed in 2 3 4; do
      [[ $rate == 20Mbps && $seed != 2 ]] && continue
      for entry in "${configs[@]}"; do
        local name="pdp-${entry%%:*}-$rate-s$seed"
        # shellcheck disable=SC2086
        "$actkit" pipeline --stages 2 --dp 2 --micro-batches 4 --micro-batch-size 4 --data fortunes --train-limit 400 \
          --steps 150 --lr 3e-4 --seed "$seed" --validation-batches 32 --init "$pre" --dp-warmup-fraction 0.167 \
          --bandwidth "$rate" --latency 5ms ${entry#*:} --json "$out/$name.json" > "$out/$name.log" 2>&1 ||
          { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
      done
    done
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def load(c, rate, seed):
    return json.load(open(f"{out}/pdp-{c}-{rate}-s{seed}.json"))
names = {"fp32": "all fp32, Adam", "tah": "TAH fw3-4 / DirectQ bw8, 1-bit Adam",
         "aqsgd": "AQ-SGD fw4 / DirectQ bw8, 1-bit Adam"}
print("| exchanges | val loss, seeds 2 / 3 / 4 | mean | ÷ fp32 |")
print("|---|---|---:|---:|")
base = sum(load("fp32", "unlimited", s)["val_loss"] for s in (2, 3, 4)) / 3
for c in names:
    v = [load(c, "unlimited", s)["val_loss"] for s in (2, 3, 4)]
    print(f"| {names[c]} | " + " / ".join(f"{x:.4f}" for x in v) + f" | {sum(v) / 3:.4f} | {sum(v) / 3 / base:.4f} |")
print()
print("| link | exchanges | bytes/step (one replica) | tokens/s | ÷ fp32 | ÷ unthrottled | val loss (seed 2) |")
print("|---|---|---:|---:|---:|---:|---:|")
for rate in ["unlimited", "20Mbps"]:
    for c in names:
        r, f, u = load(c, rate, 2), load("fp32", rate, 2), load(c, "unlimited", 2)
        print(f"| {rate} | {names[c]} | {r['bytes_per_step']:.0f} | {r['tokens_per_s']:.0f} | "
              f"{r['tokens_per_s'] / f['tokens_per_s']:.2f}x | {r['tokens_per_s'] / u['tokens_per_s']:.2f}x | "
              f"{r['val_loss']:.4f} |")
PY
}

case "$what" in
  speed) speed ;;
  convergence) convergence ;;
  convergence-resnet) convergence_resnet ;;
  large-batch) large_batch ;;
  onebit) onebit ;;
  onebit-warmups) onebit_warmups ;;
  pipeline) pipeline_dp ;;
  all) speed; convergence; convergence_resnet; large_batch; onebit; onebit_warmups; pipeline_dp ;;
  *) echo "usage: scripts/bench-dp.sh [speed|convergence|convergence-resnet|large-batch|onebit|onebit-warmups|pipeline|all]" \
          "[OUT_DIR]" >&2
     exit 2 ;;
esac
