#!/usr/bin/env bash
# The data-parallel figures of docs/benchmarks.md: bytes per step and over
# a run, step time and samples/s of 4 workers against the link rate for
# LAMB / Adam in fp32, fp16 and 1-bit, and convergence of each optimizer
# with the same steps and seed.
#
#   scripts/bench-dp.sh [speed|convergence|all] [OUT_DIR]
#
# Needs build/bin/actkit and python3 (for the tables). Every run writes its
# JSON to OUT_DIR (default build/bench-dp); the tables go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="${2:-build/bench-dp}"
mkdir -p "$out"
actkit=build/bin/actkit
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

convergence() {
  local opt
  for opt in lamb onebit-lamb adam onebit-adam; do
    run "conv-$opt" --workers 4 --optimizer "$opt" --data fortunes --train-limit 4096 --batch 8 --epochs 2 \
      --lr 0.003 --warmup-fraction 0.167 --seed 1
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| optimizer | steps | warm-up | final train loss | validation loss | bytes in all | vs fp32 bytes |")
print("|---|---|---|---|---|---|---|")
for algo in ["lamb", "adam"]:
    full = json.load(open(f"{out}/conv-{algo}.json"))
    for o in [algo, "onebit-" + algo]:
        d = json.load(open(f"{out}/conv-{o}.json"))
        print(f"| {o} | {d['steps']} | {d['warmup_steps']} | {d['final_train_loss']:.4f} | {d['val_loss']:.4f} | "
              f"{d['bytes_total']} | {full['bytes_total']/d['bytes_total']:.2f}x |")
PY
}

case "$what" in
  speed) speed ;;
  convergence) convergence ;;
  all) speed; convergence ;;
  *) echo "usage: scripts/bench-dp.sh [speed|convergence|all] [OUT_DIR]" >&2; exit 2 ;;
esac
