#!/usr/bin/env bash
# The fidelity figures of docs/fidelity.md: the papers' claims against a
# baseline as strong as the method, on text the model never saw.
#
#   [SEEDS="1 2 3"] [FW_BITS="2 3 4"] [STEPS=150] scripts/bench-fidelity.sh \
#       [corpora|overlap|pretrain|finetune|gradients|tied|controls|actnn|speed-setting|time-to-target|summary|all]
#       [OUT_DIR]
#
# * corpora: two disjoint texts from Debian's fortunes, each shuffled by
#   fortune with a fixed seed: the pretraining text (every file but the
#   computing ones and the ASCII art) and the fine-tuning text (computers,
#   linux, perl; `overlap` says exactly how much of it pretraining read).
# * overlap: which fine-tuning fortunes the pretraining run also read
#   verbatim, and its bytes from computing files (scripts/tables/fortune_overlap.py).
# * pretrain: one checkpoint, fp32, one process, on the pretraining text.
# * finetune: from that checkpoint, 2-stage 1F1B fine-tuning on 400
#   examples of the fine-tuning text for 6 epochs (the regime where AQ-SGD
#   sends deltas), validated on the fine-tuning text's last 5 % (never
#   trained on), for every codec below, each seed; fp32 and fp16 once per
#   seed. Codecs, at each of FW_BITS (gradients DirectQ-8, as the papers):
#     directq, one scale per tensor and per channel, round-to-nearest and
#     stochastic; per channel on the full 2^b grid, stochastic;
#     tah, tiles of 32 (the paper's) and 64 (its code's), round-to-nearest,
#     and tiles of 32 stochastic;
#     aqsgd (per channel), round-to-nearest and stochastic; the full grid,
#     stochastic.
# * gradients: aqsgd fw2, stochastic, with gradients at 8 bits, and at each
#   of BW_BITS (default "4 3 2") without and with error feedback (per
#   micro-batch residual); at 2 bits also per channel with error feedback.
# * tied: aqsgd fw2 with 4-bit gradients, the tied embedding's gradient
#   through that codec (as every boundary gradient), with error feedback,
#   and uncompressed.
#
# * actnn: ResNet-18 on Fashion-MNIST for one epoch at L0 and L3, each
#   seed: ActNN's claim, test accuracy paired by seed.
# * controls: DirectQ per channel and TAH-Quant at 2 and 4 bits with and
#   without AQ-SGD's full-precision first epoch, beside AQ-SGD: equal starts,
#   and validation loss against bytes sent (scripts/tables/fidelity_bytes_plot.py).
# * speed-setting: fp32 and aqsgd fw2 with 2-bit gradients in the micro-
#   batching scripts/bench-pipeline.sh gradient-target times (16 of 1).
# * time-to-target: validation loss against training time over a slow link
#   (RATE, default 5Mbps each way), AQ-SGD's full-precision first epoch
#   included: fp32, AQ-SGD fw2 with 8- and 2-bit gradients and DirectQ fw4
#   per channel, in the speed setting's micro-batching at 1F1B's own memory,
#   validated every 15 steps (scripts/tables/time_to_target.py).
# * summary: the tables of docs/fidelity.md (scripts/tables/fidelity_summary.py).
#
# Tables (mean ± sample standard deviation over the seeds) go to stdout and
# OUT_DIR/<section>.md; learning curves (training loss, mean over the seeds)
# to OUT_DIR/<section>.svg. A run whose JSON exists is not run again, so an
# interrupted sweep goes on where it stopped; OUT_DIR/settings records
# STEPS and the model, and another STEPS in the same OUT_DIR is refused. Needs build/bin/actkit (or
# ACTKIT=path: a copy keeps a long sweep off a binary being rebuilt) and
# python3.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="${2:-build/bench-fidelity}"
mkdir -p "$out"
actkit=${ACTKIT:-build/bin/actkit}
read -r -a seeds <<< "${SEEDS:-1 2 3}"
read -r -a fw_bits <<< "${FW_BITS:-2 3 4}"
steps=${STEPS:-150}
fortunes=${FORTUNES:-/usr/share/games/fortunes}
model=(--layers 4 --hidden 128 --heads 4 --seq-len 128)
settings="steps=$steps model=${model[*]} fortunes=$fortunes"
if [[ -f $out/settings && $(cat "$out/settings") != "$settings" ]]; then
  echo "$out holds runs of other settings ($(cat "$out/settings")); give another OUT_DIR" >&2
  exit 2
fi
echo "$settings" > "$out/settings"

corpora() {  # $out/pretrain.txt and $out/finetune.txt, once
  [[ -f $out/pretrain.txt && -f $out/finetune.txt ]] && return
  python3 - "$fortunes" "$out" <<'PY'
import os, random, sys
src, out = sys.argv[1], sys.argv[2]
finetune = {"computers", "linux", "perl"}
skip = {"art", "ascii-art"}  # pictures, not text
names = sorted(n for n in os.listdir(src) if "." not in n and os.path.isfile(os.path.join(src, n)))
def fortunes(files):
    items = []
    for n in files:
        text = open(os.path.join(src, n), encoding="utf-8", errors="replace").read()
        items += [f.strip("\n") for f in text.split("\n%\n") if f.strip()]
    random.Random(0).shuffle(items)
    return "\n%\n".join(items) + "\n"
ft = [n for n in names if n in finetune]
pre = [n for n in names if n not in finetune and n not in skip]
assert len(ft) == len(finetune), ft
open(os.path.join(out, "pretrain.txt"), "w").write(fortunes(pre))
open(os.path.join(out, "finetune.txt"), "w").write(fortunes(ft))
print(f"pretraining text: {len(pre)} files; fine-tuning text: {', '.join(ft)}")
PY
}

overlap() {  # how unseen the fine-tuning text is (docs/fidelity.md)
  corpora
  python3 scripts/tables/fortune_overlap.py "$fortunes" "$out" 8000 400 128 | tee "$out/overlap.md"
}

pretrain() {
  corpora
  [[ -f $out/pretrained/model.pt ]] && return
  "$actkit" train --model gpt2 "${model[@]}" --data-path "$out/pretrain.txt" --level L0 --epochs 1 \
    --train-limit 8000 --batch 16 --seed 1 --no-compare --save "$out/pretrained" --json "$out/pretrain.json" \
    > "$out/pretrain.log" 2>&1 || { echo "pretraining failed:"; tail -5 "$out/pretrain.log"; exit 1; }
}

# Micro-batches of a step, and their size: 4 of 4 unless a section says
# otherwise. Validation is 64 sequences of the held-out text whatever the size.
micro_batches=4
micro_batch_size=4
run() {  # name, then actkit pipeline arguments; skipped when its JSON exists (a rerun resumes the sweep)
  local name=$1
  shift
  [[ -f $out/$name.json ]] && return
  "$actkit" pipeline "${model[@]}" --stages 2 --micro-batches "$micro_batches" --micro-batch-size "$micro_batch_size" \
    --schedule 1f1b \
    --data fortunes --data-path "$out/finetune.txt" --train-limit 400 --steps "$steps" --lr 3e-4 \
    --validation-batches $((64 / micro_batch_size)) --init "$out/pretrained" "$@" --json "$out/$name.json" > "$out/$name.log" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
}

# Runs every "label:arguments" entry of the array named $2 for every seed,
# as ft-<label>-s<seed> (a label names one setting in every section, so a
# run two sections share runs once), and writes the table and curves named $1.
sweep() {
  local table=$1 entry label seed
  local -n entries=$2
  for seed in "${seeds[@]}"; do
    for entry in "${entries[@]}"; do
      label=${entry%%:*}
      # shellcheck disable=SC2086
      run "ft-${label// /_}-s$seed" --seed "$seed" ${entry#*:}
    done
  done
  local labels=()
  for entry in "${entries[@]}"; do labels+=("${entry%%:*}"); done
  python3 scripts/tables/fidelity_table.py --runs ft "$out" "$table" "${seeds[*]}" "${labels[@]}" | tee "$out/$table.md"
}

if [[ $what == corpora ]]; then corpora; fi
if [[ $what == pretrain ]]; then pretrain; fi

if [[ $what == finetune || $what == all ]]; then
  pretrain
  ft=("fp32:--codec fp32" "fp16:--codec fp16")
  for b in "${fw_bits[@]}"; do
    dq="--codec directq --fw-bits $b --bw-bits 8"
    aq="--codec aqsgd --fw-bits $b --bw-bits 8"
    ft+=("directq$b tensor:$dq" "directq$b tensor sr:$dq --stochastic"
         "directq$b channel:$dq --scale channel" "directq$b channel sr:$dq --scale channel --stochastic"
         "directq$b channel sr full:$dq --scale channel --stochastic --grid full"
         "tah$b g32:--codec tah --fw-bits $b --bw-bits 8 --tah-tile 32"
         "tah$b g32 sr:--codec tah --fw-bits $b --bw-bits 8 --tah-tile 32 --stochastic"
         "tah$b g64:--codec tah --fw-bits $b --bw-bits 8 --tah-tile 64"
         "aqsgd$b:$aq" "aqsgd$b sr:$aq --stochastic" "aqsgd$b sr full:$aq --stochastic --grid full")
  done
  sweep finetune ft
fi

if [[ $what == gradients || $what == all ]]; then
  pretrain
  # aqsgd2 sr is aqsgd fw2 with DirectQ-8 gradients, stochastic: the finetune section's run.
  gr=("fp32:--codec fp32" "aqsgd2 sr:--codec aqsgd --fw-bits 2 --bw-bits 8 --stochastic")
  for b in ${BW_BITS:-4 3 2}; do
    aq="--codec aqsgd --fw-bits 2 --bw-bits $b --stochastic"
    gr+=("aqsgd2 sr bw$b:$aq" "aqsgd2 sr bw$b ef:$aq --bw-feedback")
    [[ $b == 2 ]] && gr+=("aqsgd2 sr bw$b channel ef:$aq --bw-feedback --bw-scale channel")
  done
  sweep gradients gr
fi

if [[ $what == tied || $what == all ]]; then
  pretrain
  # The tied gradient at 4 bits (it goes with the boundary gradients' codec).
  aq="--codec aqsgd --fw-bits 2 --bw-bits 4 --stochastic"
  td=("fp32:--codec fp32" "aqsgd2 sr bw4:$aq" "aqsgd2 sr bw4 tied ef:$aq --tied-gradient feedback"
      "aqsgd2 sr bw4 tied fp32:$aq --tied-gradient fp32")
  sweep tied td
fi

if [[ $what == actnn || $what == all ]]; then
  # ActNN's claim: ResNet-18 on Fashion-MNIST, one epoch, L0 against L3 (2
  # bits on average), each seed changing the weights, the data order and
  # the rounding; the test accuracy over the 10 000 test images.
  # ACTNN_LIMIT=N trains on the first N images instead of all 60 000 (an
  # epoch at L3 takes about 20 minutes on the 2-core build machine).
  limit=${ACTNN_LIMIT:-0}
  for seed in "${seeds[@]}"; do
    for level in L0 L3; do
      [[ -f $out/actnn-$level-s$seed.json ]] && continue
      "$actkit" train --model resnet18 --data fashion-mnist --level "$level" --epochs 1 --batch 64 --seed "$seed" \
        --train-limit "$limit" \
        --no-compare --json "$out/actnn-$level-s$seed.json" > "$out/actnn-$level-s$seed.log" 2>&1 ||
        { echo "run actnn $level seed $seed failed:"; tail -5 "$out/actnn-$level-s$seed.log"; exit 1; }
    done
  done
  python3 - "$out" "${seeds[*]}" <<'PY' | tee "$out/actnn.md"
import json, statistics, sys
out, seeds = sys.argv[1], sys.argv[2].split()
runs = {lv: [json.load(open(f"{out}/actnn-{lv}-s{s}.json")) for s in seeds] for lv in ("L0", "L3")}
def spread(v, scale=1, digits=2):
    return f"{scale * statistics.fmean(v):.{digits}f} ± {scale * (statistics.stdev(v) if len(v) > 1 else 0):.{digits}f}"
print(f"{runs['L0'][0]['train_examples']} training images, one pass, batch 64\n")
print(f"| level | test accuracy ({len(seeds)} seeds) | final train loss | activation bytes of a step |")
print("| --- | --- | --- | --- |")
for lv, js in runs.items():
    print(f"| {lv} | {spread([j['final_test_accuracy'] for j in js], 100)} % | "
          f"{spread([j['final_train_loss'] for j in js], 1, 4)} | {js[0]['activation_bytes']} |")
d = [a["final_test_accuracy"] - b["final_test_accuracy"] for a, b in zip(runs["L3"], runs["L0"])]
t = statistics.fmean(d) / (statistics.stdev(d) / len(d) ** 0.5) if len(d) > 1 and statistics.stdev(d) > 0 else float("nan")
print(f"\nL3 − L0, paired by seed: {', '.join(f'{100 * x:+.2f}' for x in d)} points; mean {100 * statistics.fmean(d):+.2f}, "
      f"t = {t:.2f} (|t| > 4.30 is significant at 5 % for n = 3)")
PY
fi

if [[ $what == controls || $what == all ]]; then
  pretrain
  # Equal starts: DirectQ (per channel) and TAH-Quant given AQ-SGD's
  # full-precision first epoch (--warmup-epochs 1, 25 steps), beside their
  # runs without it and AQ-SGD's; then validation loss against the bytes
  # the boundaries sent (OUT_DIR/controls-bytes.svg).
  ct=("fp32:--codec fp32")
  for b in 2 4; do
    dq="--codec directq --fw-bits $b --bw-bits 8 --scale channel"
    th="--codec tah --fw-bits $b --bw-bits 8 --tah-tile 32"
    ct+=("aqsgd$b:--codec aqsgd --fw-bits $b --bw-bits 8" "directq$b channel:$dq" "directq$b channel warm:$dq --warmup-epochs 1"
         "tah$b g32:$th" "tah$b g32 warm:$th --warmup-epochs 1")
  done
  sweep controls ct
  labels=()
  for entry in "${ct[@]}"; do labels+=("${entry%%:*}"); done
  python3 scripts/tables/fidelity_bytes_plot.py "$out" "${seeds[*]}" "${labels[@]}" > "$out/controls-bytes.svg"
fi

if [[ $what == speed-setting || $what == all ]]; then
  pretrain
  # The setting whose throughput scripts/bench-pipeline.sh gradient-target
  # measures: 16 micro-batches of one sequence, stage 0 running all 16
  # forwards ahead; fp32 against AQ-SGD fw2 with 2-bit gradients, both
  # stochastic (the same examples per step as 4 of 4).
  micro_batches=16
  micro_batch_size=1
  sp=("fp32 m16x1:--codec fp32"
      "aqsgd2 sr bw2 m16x1:--codec aqsgd --fw-bits 2 --bw-bits 2 --stochastic --in-flight 16")
  sweep speed-setting sp
  micro_batches=4
  micro_batch_size=4
fi

if [[ $what == time-to-target || $what == all ]]; then
  pretrain
  # How long each codec takes to reach a validation loss over a slow link,
  # counting everything AQ-SGD's speed figures leave out: its first epoch
  # in full precision. 16 micro-batches of one sequence, 2 in flight
  # (1F1B's own memory), the emulated link at RATE each way; validated
  # every 15 steps (--eval-every), whose time the curve does not count
  # (train_s is the steps' own). fp32 runs at 2 in flight, its fastest.
  micro_batches=16
  micro_batch_size=1
  link="--bandwidth ${RATE:-5Mbps} --in-flight 2 --eval-every 15"
  tt=("ttt fp32:--codec fp32 $link"
      "ttt aqsgd2:--codec aqsgd --fw-bits 2 --bw-bits 8 $link"
      "ttt aqsgd2 sr bw2:--codec aqsgd --fw-bits 2 --bw-bits 2 --stochastic $link"
      "ttt directq4 channel:--codec directq --fw-bits 4 --bw-bits 8 --scale channel $link")
  sweep time-to-target tt
  labels=()
  for entry in "${tt[@]}"; do labels+=("${entry%%:*}"); done
  python3 scripts/tables/time_to_target.py "$out" "${seeds[*]}" "${labels[@]}" > "$out/time-to-target-curve.svg" \
    2> "$out/time-to-target-times.md"
  cat "$out/time-to-target-times.md"
  micro_batches=4
  micro_batch_size=4
fi

if [[ $what == overlap || $what == all ]]; then
  overlap
fi

if [[ $what == summary || $what == all ]]; then
  # The tables of docs/fidelity.md, from whichever runs above exist.
  python3 scripts/tables/fidelity_summary.py "$out" "${seeds[*]}" "${fw_bits[*]}" | tee "$out/summary.md"
fi
