#!/usr/bin/env bash
# The pipeline figures of docs/benchmarks.md: throughput of each boundary
# codec against the link rate (the fp32 slowdown at each rate is the
# column that says how communication-bound a rate is), 1F1B against GPipe,
# peak memory per stage, and convergence from one pretrained checkpoint.
#
#   scripts/bench-pipeline.sh [throughput|schedules|memory|convergence|all] [OUT_DIR]
#
# Needs build/bin/actkit and python3 (for the tables). Every run writes its
# JSON to OUT_DIR (default build/bench-pipeline); the tables go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="${2:-build/bench-pipeline}"
mkdir -p "$out"
actkit=build/bin/actkit
# One model for every run: GPT-2 shape, 4 blocks of 128, byte vocabulary.
model=(--layers 4 --hidden 128 --heads 4 --seq-len 128)

run() {  # name, then actkit pipeline arguments
  local name=$1
  shift
  "$actkit" pipeline "${model[@]}" "$@" --json "$out/$name.json" > "$out/$name.log" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
}

codecs=("fp32:--codec fp32" "fp16:--codec fp16" "directq fw4/bw8:--codec directq --fw-bits 4 --bw-bits 8"
        "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6")
rates=(unlimited 50Mbps 25Mbps 12Mbps 8Mbps 5Mbps)

if [[ $what == throughput || $what == all ]]; then
  for rate in "${rates[@]}"; do
    for entry in "${codecs[@]}"; do
      name="tp-${entry%%:*}-$rate"
      name=${name//[ \/]/_}
      # shellcheck disable=SC2086
      run "$name" --stages 2 --micro-batches 4 --micro-batch-size 4 --schedule 1f1b --data synthetic --steps 8 \
        --validation-batches 1 --bandwidth "$rate" ${entry#*:}
    done
  done
  python3 - "$out" "${rates[@]}" <<'PY'
import json, sys
out, rates = sys.argv[1], sys.argv[2:]
codecs = ["fp32", "fp16", "directq fw4/bw8", "tah fw3-4/bw6"]
def load(c, r):
    name = f"tp-{c}-{r}".replace(" ", "_").replace("/", "_")
    return json.load(open(f"{out}/{name}.json"))
base = {c: load(c, "unlimited")["tokens_per_s"] for c in codecs}
print("| link | fp32 slowdown | " + " | ".join(f"{c} tokens/s" for c in codecs) + " | tah ÷ fp32 | tah ÷ its unthrottled |")
print("| --- " * (len(codecs) + 4) + "|")
for r in rates:
    tps = {c: load(c, r)["tokens_per_s"] for c in codecs}
    slow = base["fp32"] / tps["fp32"]
    t = "tah fw3-4/bw6"
    print(f"| {r} | {slow:.2f}× | " + " | ".join(f"{tps[c]:.0f}" for c in codecs) +
          f" | {tps[t] / tps['fp32']:.2f}× | {tps[t] / base[t]:.2f}× |")
ratios = {c: load(c, "unlimited")["compression_ratio"] for c in codecs}
print("\ncompression ratio (fp32 bytes ÷ bytes sent, both directions): " +
      ", ".join(f"{c} {ratios[c]:.2f}×" for c in codecs))
PY
fi

if [[ $what == schedules || $what == all ]]; then
  for s in gpipe 1f1b; do
    for rate in unlimited 12Mbps; do
      run "sched-$s-$rate" --stages 4 --micro-batches 8 --micro-batch-size 2 --schedule $s --data synthetic \
        --steps 6 --validation-batches 1 --codec tah --fw-bits 4 --bw-bits 6 --bandwidth $rate
    done
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| schedule | unthrottled tokens/s | 12 Mbit/s tokens/s |")
print("| --- | --- | --- |")
for s in ["gpipe", "1f1b"]:
    a = json.load(open(f"{out}/sched-{s}-unlimited.json"))["tokens_per_s"]
    b = json.load(open(f"{out}/sched-{s}-12Mbps.json"))["tokens_per_s"]
    print(f"| {s} | {a:.0f} | {b:.0f} |")
PY
fi

if [[ $what == memory || $what == all ]]; then
  for s in gpipe 1f1b; do
    for level in L0 L3; do
      run "mem-$s-$level" --stages 4 --micro-batches 8 --micro-batch-size 4 --schedule $s --data synthetic \
        --steps 2 --validation-batches 1 --level $level
    done
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| schedule | level | peak memory per stage (MiB) |")
print("| --- | --- | --- |")
for s in ["gpipe", "1f1b"]:
    for level in ["L0", "L3"]:
        p = json.load(open(f"{out}/mem-{s}-{level}.json"))["peak_memory_bytes"]
        print(f"| {s} | {level} | " + " / ".join(f"{b / 2**20:.1f}" for b in p) + " |")
PY
fi

if [[ $what == convergence || $what == all ]]; then
  # Pretrain once (fp32, one process), then fine-tune from it with 4 stages.
  if [[ ! -f $out/pretrained.pt ]]; then
    "$actkit" train --model gpt2 --layers 4 --hidden 128 --heads 4 --seq-len 128 --level L0 --epochs 1 \
      --train-limit 4000 --batch 16 --seed 1 --no-compare --save "$out/pretrained.pt" --json "$out/pretrain.json" \
      > "$out/pretrain.log" 2>&1
  fi
  finetune=("fp32:--codec fp32" "directq fw2/bw8:--codec directq --fw-bits 2 --bw-bits 8"
            "directq fw4/bw8:--codec directq --fw-bits 4 --bw-bits 8" "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6")
  for entry in "${finetune[@]}"; do
    name="ft-${entry%%:*}"
    name=${name//[ \/]/_}
    # shellcheck disable=SC2086
    run "$name" --stages 4 --micro-batches 4 --micro-batch-size 4 --schedule 1f1b --data fortunes --steps 150 \
      --lr 3e-4 --seed 2 --validation-batches 32 --init "$out/pretrained.pt" ${entry#*:}
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
pre = json.load(open(f"{out}/pretrain.json"))
print(f"pretrained: validation loss {pre['final_validation_loss']:.4f}\n")
print("| boundary codec | final validation loss | ÷ fp32 | final train loss |")
print("| --- | --- | --- | --- |")
base = None
for c in ["fp32", "directq fw2/bw8", "directq fw4/bw8", "tah fw3-4/bw6"]:
    j = json.load(open(f"{out}/ft-{c.replace(' ', '_').replace('/', '_')}.json"))
    base = base or j["val_loss"]
    print(f"| {c} | {j['val_loss']:.4f} | {j['val_loss'] / base:.4f} | {j['final_train_loss']:.4f} |")
PY
fi
