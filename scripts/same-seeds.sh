#!/usr/bin/env bash
# Runs a train, a pipeline (TAH-Quant, with back-propagated feedback), an
# AQ-SGD pipeline and a 1-bit LAMB dp run at fixed seeds and writes their
# per-step losses and bytes to OUT/summary.json. Run it on two builds and
# diff the summaries: a change that should not alter behaviour leaves them
# identical. Usage: scripts/same-seeds.sh ACTKIT_BINARY OUT_DIR
set -euo pipefail
bin=$1 out=$2
mkdir -p "$out"
shape=(--layers 2 --hidden 64 --heads 2 --seq-len 32)
"$bin" train --model gpt2 "${shape[@]}" --level L3 --train-limit 64 --batch 8 --seed 3 --json "$out/train.json" >/dev/null
"$bin" pipeline --stages 2 "${shape[@]}" --micro-batches 2 --micro-batch-size 2 --codec tah --fw-bits 4 --bw-bits 8 \
  --bw-feedback --tied-gradient feedback --steps 4 --validation-batches 2 --seed 3 --json "$out/pipeline.json" >/dev/null
"$bin" pipeline --stages 2 "${shape[@]}" --micro-batches 2 --micro-batch-size 4 --codec aqsgd --fw-bits 2 --bw-bits 8 \
  --train-limit 32 --warmup-epochs 1 --steps 6 --validation-batches 1 --seed 3 --json "$out/aqsgd.json" >/dev/null
"$bin" dp --model gpt2 "${shape[@]}" --workers 2 --optimizer onebit-lamb --data fortunes --train-limit 64 --batch 4 \
  --steps 6 --warmup-steps 2 --lr 0.01 --seed 3 --json "$out/dp.json" >/dev/null
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
# What must not move: losses, evaluations and bytes (times and peak memory,
# which varies by a few bytes run to run, are left out).
keep = ("loss", "losses", "val_loss", "evaluation", "final_validation_loss", "final_train_loss", "bytes",
        "train_losses", "backoffs", "steps")
def pick(x):
    if isinstance(x, dict):
        return {k: pick(v) for k, v in x.items() if any(s in k for s in keep) and "per_s" not in k and "peak" not in k and "_s" != k[-2:]}
    if isinstance(x, list):
        return [pick(v) for v in x]
    return x
summary = {n: pick(json.load(open(f"{out}/{n}.json"))) for n in ("train", "pipeline", "aqsgd", "dp")}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1, sort_keys=True)
print(f"{out}/summary.json")
PY
