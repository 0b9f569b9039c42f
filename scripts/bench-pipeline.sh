#!/usr/bin/env bash
# The pipeline figures of docs/benchmarks.md: throughput of each boundary
# codec against the link rate (the fp32 slowdown at each rate is the
# column that says how communication-bound a rate is), 1F1B against GPipe,
# peak memory per stage, and convergence from one pretrained checkpoint;
# for AQ-SGD, throughput over a set of examples seen every step, fine-tuning
# for several epochs over a small set, and the buffer store on files
# against memory.
#
#   [RATES="unlimited R1 R2 ..."] scripts/bench-pipeline.sh [throughput|schedules|memory|convergence|
#                              aqsgd-throughput|gpipe-throughput|gpipe-target|gradient-target|in-flight|
#                              aqsgd-convergence|aqsgd-store|pretrain|all] [OUT_DIR]
#
# `pretrain` only makes OUT_DIR/pretrained, a train checkpoint folder (scripts/bench-dp.sh uses it).
# `gpipe-target` measures at one rate, RATE8 (default 4.5Mbps): where fp32
# runs about 8x slower than unthrottled on the machine at hand;
# `gradient-target` the same for 1F1B at RATE8_1F1B (default 5Mbps).
#
# Needs build/bin/actkit and python3 (for the tables). Every run writes its
# JSON to OUT_DIR (default build/bench-pipeline); the tables go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out="${2:-build/bench-pipeline}"
mkdir -p "$out"
actkit=${ACTKIT:-build/bin/actkit}  # a copy keeps a long sweep off a binary being rebuilt
# One model for every run: GPT-2 shape, 4 blocks of 128, byte vocabulary.
model=(--layers 4 --hidden 128 --heads 4 --seq-len 128)

run() {  # name, then actkit pipeline arguments
  local name=$1
  shift
  "$actkit" pipeline "${model[@]}" "$@" --json "$out/$name.json" > "$out/$name.log" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$out/$name.log"; exit 1; }
}

# Every codec of the array named $2 at every rate: 2 stages, $schedule
# (1F1B unless a section says otherwise), $micro_batches micro-batches of
# $micro_batch_size (4 of 4 unless a section says otherwise), 8 steps; runs
# named $1-<codec>-<rate>; the rest of the arguments go to every run.
schedule=1f1b
micro_batches=4
micro_batch_size=4
rate_sweep() {
  local prefix=$1 entry name rate
  local -n entries=$2
  shift 2
  for rate in "${rates[@]}"; do
    for entry in "${entries[@]}"; do
      name="$prefix-${entry%%:*}-$rate"
      name=${name//[ \/]/_}
      # shellcheck disable=SC2086
      run "$name" --stages 2 --micro-batches "$micro_batches" --micro-batch-size "$micro_batch_size" \
        --schedule "$schedule" --data synthetic \
        --steps 8 --validation-batches 1 --bandwidth "$rate" "$@" ${entry#*:}
    done
  done
}

codecs=("fp32:--codec fp32" "fp16:--codec fp16" "directq fw4/bw8:--codec directq --fw-bits 4 --bw-bits 8"
        "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6")
# From about 1.2x to 10x slower than unthrottled for fp32 on the 2-core
# build machine of 2026-11-25, 10 Mbit/s near the 8x of the targets. How
# slow a rate is depends on how fast the machine computes: RATES="unlimited
# 8Mbps 4Mbps ..." replaces the list (the first must be unlimited).
read -r -a rates <<< "${RATES:-unlimited 300Mbps 50Mbps 20Mbps 10Mbps 8Mbps}"
[[ ${rates[0]} == unlimited ]] || { echo "RATES must start with unlimited"; exit 1; }

if [[ $what == throughput || $what == all ]]; then
  rate_sweep tp codecs
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

pretrain() {  # once (fp32, one process): the checkpoint every fine-tuning run starts from
  if [[ ! -f $out/pretrained/model.pt ]]; then
    "$actkit" train --model gpt2 --layers 4 --hidden 128 --heads 4 --seq-len 128 --level L0 --epochs 1 \
      --train-limit 4000 --batch 16 --seed 1 --no-compare --save "$out/pretrained" --json "$out/pretrain.json" \
      > "$out/pretrain.log" 2>&1
  fi
}

if [[ $what == pretrain ]]; then
  pretrain
fi

if [[ $what == convergence || $what == all ]]; then
  # Pretrain once (fp32, one process), then fine-tune from it with 4 stages.
  pretrain
  finetune=("fp32:--codec fp32" "directq fw2/bw8:--codec directq --fw-bits 2 --bw-bits 8"
            "directq fw4/bw8:--codec directq --fw-bits 4 --bw-bits 8" "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6")
  for entry in "${finetune[@]}"; do
    name="ft-${entry%%:*}"
    name=${name//[ \/]/_}
    # shellcheck disable=SC2086
    run "$name" --stages 4 --micro-batches 4 --micro-batch-size 4 --schedule 1f1b --data fortunes --steps 150 \
      --lr 3e-4 --seed 2 --validation-batches 32 --init "$out/pretrained" ${entry#*:}
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

aqsgd_codecs=("fp32:--codec fp32" "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6"
              "aqsgd fw2/bw6:--codec aqsgd --fw-bits 2 --bw-bits 6" "aqsgd fw3/bw6:--codec aqsgd --fw-bits 3 --bw-bits 6"
              "aqsgd fw4/bw6:--codec aqsgd --fw-bits 4 --bw-bits 6" "aqsgd fw2/bw8:--codec aqsgd --fw-bits 2 --bw-bits 8"
              "aqsgd fw3/bw8:--codec aqsgd --fw-bits 3 --bw-bits 8" "aqsgd fw4/bw8:--codec aqsgd --fw-bits 4 --bw-bits 8")

# The table of a rate sweep named $1 over the codecs of the array named $2:
# each cell tokens/s (÷ fp32 at that rate, ÷ the codec's own unthrottled).
ratio_table() {
  local -n names=$2
  local labels=()
  for entry in "${names[@]}"; do labels+=("${entry%%:*}"); done
  python3 - "$out" "$1" "${#labels[@]}" "${labels[@]}" "${rates[@]}" <<'PY'
import json, sys
out, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
codecs, rates = sys.argv[4:4 + n], sys.argv[4 + n:]
def load(c, r):
    name = f"{prefix}-{c}-{r}".replace(" ", "_").replace("/", "_")
    return json.load(open(f"{out}/{name}.json"))
base = {c: load(c, "unlimited")["tokens_per_s"] for c in codecs}
print("| link | fp32 slowdown | " + " | ".join(codecs) + " |")
print("| --- " * (len(codecs) + 2) + "|")
for r in rates:
    tps = {c: load(c, r)["tokens_per_s"] for c in codecs}
    cells = [f"{tps['fp32']:.0f}"] + [f"{tps[c]:.0f} ({tps[c] / tps['fp32']:.2f}×, {tps[c] / base[c]:.2f}×)"
                                      for c in codecs[1:]]
    print(f"| {r} | {base['fp32'] / tps['fp32']:.2f}× | " + " | ".join(cells) + " |")
print("\ncompression ratio (fp32 bytes ÷ bytes sent, both directions, unthrottled run): " +
      ", ".join(f"{c} {load(c, 'unlimited')['compression_ratio']:.2f}×" for c in codecs))
PY
}

if [[ $what == aqsgd-throughput || $what == all ]]; then
  # 16 examples, all of them every step: after step 0 (full precision, and
  # not timed) every message is a delta.
  rate_sweep aqtp aqsgd_codecs --train-limit 16 --warmup-epochs 0
  ratio_table aqtp aqsgd_codecs
fi

if [[ $what == gpipe-throughput || $what == all ]]; then
  # The papers' schedule: all forwards, then all backwards, so each
  # direction's transfers overlap the computation of the same phase, and
  # 16 micro-batches of one sequence, so that the fill and drain of the
  # two phases (and the tied embedding's gradient) are a small part of the
  # step. The same 16 examples every step: AQ-SGD sends deltas from step 1.
  # Rates for fp32 from about 1.3x to 10x slower on the 2-core build
  # machine of 2026-11-26; RATES replaces them.
  gpipe_codecs=("fp32:--codec fp32" "directq fw4/bw8:--codec directq --fw-bits 4 --bw-bits 8"
                "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6"
                "aqsgd fw2/bw6:--codec aqsgd --fw-bits 2 --bw-bits 6"
                "aqsgd fw3/bw6:--codec aqsgd --fw-bits 3 --bw-bits 6"
                "aqsgd fw4/bw6:--codec aqsgd --fw-bits 4 --bw-bits 6"
                "aqsgd fw2/bw8:--codec aqsgd --fw-bits 2 --bw-bits 8"
                "aqsgd fw3/bw8:--codec aqsgd --fw-bits 3 --bw-bits 8"
                "aqsgd fw4/bw8:--codec aqsgd --fw-bits 4 --bw-bits 8")
  saved_rates=("${rates[@]}")
  read -r -a rates <<< "${RATES:-unlimited 100Mbps 30Mbps 12Mbps 6Mbps 4.5Mbps 3.5Mbps}"
  [[ ${rates[0]} == unlimited ]] || { echo "RATES must start with unlimited"; exit 1; }
  schedule=gpipe micro_batches=16 micro_batch_size=1
  rate_sweep gtp gpipe_codecs --train-limit 16 --warmup-epochs 0
  ratio_table gtp gpipe_codecs
  schedule=1f1b micro_batches=4 micro_batch_size=4 rates=("${saved_rates[@]}")
fi

# The target's point measured with care: each codec of the array named $2
# unthrottled and at $3, 16 steps, three rounds with every run of a round
# interleaved, so that a slow spell of the machine falls on every codec
# alike; runs named $1-<codec>-<rate>-r<round>, the rest of the arguments
# go to every run. Then the table: ratios are taken within a round and the
# table gives their medians. The ceiling column is fp32's slowdown times the
# codec's own unthrottled speed over fp32's: what the codec would reach if
# every transfer were hidden behind computation.
target_point() {
  local prefix=$1 rate8=$3 round rate entry name
  local -n target_entries=$2
  shift 3
  for round in 1 2 3; do
    for rate in unlimited "$rate8"; do
      for entry in "${target_entries[@]}"; do
        name="$prefix-${entry%%:*}-$rate-r$round"
        name=${name//[ \/]/_}
        # shellcheck disable=SC2086
        run "$name" --stages 2 --micro-batches 16 --micro-batch-size 1 --data synthetic \
          --train-limit 16 --warmup-epochs 0 --steps 16 --validation-batches 1 --bandwidth "$rate" "$@" ${entry#*:}
      done
    done
  done
  local labels=()
  for entry in "${target_entries[@]}"; do labels+=("${entry%%:*}"); done
  python3 - "$out" "$prefix" "$rate8" "${labels[@]}" <<'PY'
import json, statistics, sys
out, prefix, rate, codecs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def tps(c, r, k):
    name = f"{prefix}-{c}-{r}-r{k}".replace(" ", "_").replace("/", "_")
    return json.load(open(f"{out}/{name}.json"))["tokens_per_s"]
rounds = [1, 2, 3]
def cell(values, unit=""):
    return f"{statistics.median(values):.2f}{unit} (" + " / ".join(f"{v:.2f}" for v in values) + ")"
slow = [tps("fp32", "unlimited", k) / tps("fp32", rate, k) for k in rounds]
print(f"fp32 slowdown at {rate}: " + cell(slow, "×"))
print(f"\n| codec | unthrottled tokens/s | {rate} tokens/s | ÷ fp32 at {rate} | ÷ its unthrottled | ceiling |")
print("| --- | --- | --- | --- | --- | --- |")
for c in codecs:
    u = [tps(c, "unlimited", k) for k in rounds]
    t = [tps(c, rate, k) for k in rounds]
    vs32 = [t[i] / tps("fp32", rate, k) for i, k in enumerate(rounds)]
    own = [t[i] / u[i] for i in range(len(rounds))]
    ceiling = [slow[i] * u[i] / tps("fp32", "unlimited", k) for i, k in enumerate(rounds)]
    print(f"| {c} | {statistics.median(u):.0f} | {statistics.median(t):.0f} | {cell(vs32, '×')} | {cell(own, '×')} | "
          f"{statistics.median(ceiling):.2f}× |")
PY
}

if [[ $what == gpipe-target || $what == all ]]; then
  # GPipe as in gpipe-throughput, at the rate where fp32 is about 8x slower
  # than unthrottled (RATE8, default 4.5Mbps on the build machine of
  # 2026-11-26).
  target_codecs=("fp32:--codec fp32" "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6"
                 "aqsgd fw2/bw6:--codec aqsgd --fw-bits 2 --bw-bits 6"
                 "aqsgd fw3/bw6:--codec aqsgd --fw-bits 3 --bw-bits 6")
  target_point gtg target_codecs "${RATE8:-4.5Mbps}" --schedule gpipe
fi

if [[ $what == gradient-target || $what == all ]]; then
  # Gradients below 6 bits where fp32 is about 8x slower (RATE8_1F1B,
  # default 5Mbps on the build machine of 2026-11-28): 1F1B, 16 micro-batches
  # of one sequence, stochastic rounding in both directions (docs/fidelity.md
  # measures their losses). The compressed runs hold 16 micro-batches in
  # flight (--in-flight 16: stage s holds up to 16 - s, GPipe's memory in
  # 1F1B's order), which hides the two link crossings of each
  # micro-batch's round trip; 2-bit gradients are measured at 4 in flight
  # too. fp32 runs at the default (2) and at 16: more in flight only
  # queues more on its saturated link.
  gradient_codecs=("fp32:--codec fp32" "fp32 if16:--codec fp32 --in-flight 16")
  for b in 8 6 4 3 2; do
    gradient_codecs+=("aqsgd fw2/bw$b:--codec aqsgd --fw-bits 2 --bw-bits $b --stochastic --in-flight 16")
  done
  gradient_codecs+=("aqsgd fw2/bw2 if4:--codec aqsgd --fw-bits 2 --bw-bits 2 --stochastic --in-flight 4"
                    "tah fw3-4/bw2:--codec tah --fw-bits 4 --bw-bits 2 --stochastic --in-flight 16")
  target_point grt gradient_codecs "${RATE8_1F1B:-5Mbps}" --schedule 1f1b
fi

if [[ $what == in-flight || $what == all ]]; then
  # Tokens/s against how many micro-batches stage 0 may hold (--in-flight
  # 2, 4, 8, 16) at RATE8_1F1B, without and with link latency (LATENCIES,
  # default "0 20ms"), beside each stage's measured peak memory: at which
  # memory a speed-up holds. 1F1B, 16 micro-batches of one sequence, fp32
  # and AQ-SGD fw2 with 2-bit gradients (stochastic); then GPipe with L3
  # inside the stages against 1F1B at L0 (both AQ-SGD): the schedule that
  # holds every micro-batch, made to fit by compressing inside the stages.
  # One round each. STAGES (default 2) and IN_FLIGHT (default "2 4 8 16";
  # at least STAGES each) change the pipeline.
  rate=${RATE8_1F1B:-5Mbps}
  stages=${STAGES:-2}
  read -r -a latencies <<< "${LATENCIES:-0 20ms}"
  read -r -a in_flight <<< "${IN_FLIGHT:-2 4 8 16}"
  aq="--codec aqsgd --fw-bits 2 --bw-bits 2 --stochastic"
  for lat in "${latencies[@]}"; do
    for k in "${in_flight[@]}"; do
      for entry in "fp32:--codec fp32" "aqsgd:$aq"; do
        # shellcheck disable=SC2086
        run "if-${entry%%:*}-k$k-$lat" --stages "$stages" --micro-batches 16 --micro-batch-size 1 --data synthetic \
          --train-limit 16 --warmup-epochs 0 --steps 16 --validation-batches 1 --bandwidth "$rate" --latency "$lat" \
          --schedule 1f1b --in-flight "$k" ${entry#*:}
      done
    done
    for entry in "gpipe-L3:--schedule gpipe --level L3" "1f1b-L0:--schedule 1f1b --level L0"; do
      # shellcheck disable=SC2086
      run "if-aqsgd-${entry%%:*}-$lat" --stages "$stages" --micro-batches 16 --micro-batch-size 1 --data synthetic \
        --train-limit 16 --warmup-epochs 0 --steps 16 --validation-batches 1 --bandwidth "$rate" --latency "$lat" \
        $aq ${entry#*:}
    done
  done
  python3 - "$out" "$rate" "${in_flight[*]}" "${latencies[@]}" <<'PY'
import json, sys
out, rate, in_flight, latencies = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3].split()], sys.argv[4:]
def load(name):
    return json.load(open(f"{out}/{name}.json"))
mib = lambda b: f"{b / 2**20:.1f}"
print(f"| latency | in flight | fp32 tokens/s | AQ-SGD fw2/bw2 tokens/s | ÷ fp32 at {in_flight[0]} in flight "
      f"| AQ-SGD peak MiB per stage |")
print("| --- | --- | --- | --- | --- | --- |")
for lat in latencies:
    base = load(f"if-fp32-k{in_flight[0]}-{lat}")["tokens_per_s"]
    for k in in_flight:
        f, a = load(f"if-fp32-k{k}-{lat}"), load(f"if-aqsgd-k{k}-{lat}")
        peaks = " / ".join(mib(p) for p in a["peak_memory_bytes"])
        print(f"| {lat} | {k} | {f['tokens_per_s']:.0f} | {a['tokens_per_s']:.0f} | "
              f"{a['tokens_per_s'] / base:.2f}× | {peaks} |")
print(f"\n| latency | AQ-SGD fw2/bw2, schedule and level | tokens/s | peak MiB per stage |")
print("| --- | --- | --- | --- |")
for lat in latencies:
    for s in ("gpipe-L3", "1f1b-L0"):
        j = load(f"if-aqsgd-{s}-{lat}")
        print(f"| {lat} | {s} | {j['tokens_per_s']:.0f} | {' / '.join(mib(p) for p in j['peak_memory_bytes'])} |")
PY
fi

if [[ $what == aqsgd-convergence || $what == all ]]; then
  # Fine-tuning over 400 examples for 6 epochs (25 steps each): AQ-SGD
  # sends its first epoch in full precision, then deltas.
  pretrain
  ft=("fp32:--codec fp32" "directq fw2/bw8:--codec directq --fw-bits 2 --bw-bits 8"
      "directq fw4/bw8:--codec directq --fw-bits 4 --bw-bits 8" "tah fw3-4/bw6:--codec tah --fw-bits 4 --bw-bits 6"
      "aqsgd fw2/bw8:--codec aqsgd --fw-bits 2 --bw-bits 8" "aqsgd fw3/bw8:--codec aqsgd --fw-bits 3 --bw-bits 8"
      "aqsgd fw4/bw8:--codec aqsgd --fw-bits 4 --bw-bits 8")
  for entry in "${ft[@]}"; do
    name="aqft-${entry%%:*}"
    name=${name//[ \/]/_}
    # shellcheck disable=SC2086
    run "$name" --stages 4 --micro-batches 4 --micro-batch-size 4 --schedule 1f1b --data fortunes --train-limit 400 \
      --steps 150 --lr 3e-4 --seed 2 --validation-batches 32 --init "$out/pretrained" ${entry#*:}
  done
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| boundary codec | final validation loss | ÷ fp32 | final train loss |")
print("| --- | --- | --- | --- |")
base = None
for c in ["fp32", "directq fw2/bw8", "directq fw4/bw8", "tah fw3-4/bw6", "aqsgd fw2/bw8", "aqsgd fw3/bw8",
          "aqsgd fw4/bw8"]:
    j = json.load(open(f"{out}/aqft-{c.replace(' ', '_').replace('/', '_')}.json"))
    base = base or j["val_loss"]
    print(f"| {c} | {j['val_loss']:.4f} | {j['val_loss'] / base:.4f} | {j['final_train_loss']:.4f} |")
PY
fi

if [[ $what == aqsgd-store || $what == all ]]; then
  # 256 examples of 128 x 128 fp16 values: 8 MiB of m(ξ) in each of the
  # two stores (sender and receiver side), against a memory tier of 1 MiB
  # per store, or none; 3 epochs, deltas from the second. Three rounds,
  # the tiers interleaved within each, so that a slow spell of the machine
  # falls on every tier alike; the table takes each tier's median step.
  dir="$out/buffers"
  for round in 1 2 3; do
    for budget in unlimited 1MiB 0; do
      rm -rf "$dir"
      run "aqst-$budget-r$round" --stages 2 --micro-batches 4 --micro-batch-size 4 --schedule 1f1b --data synthetic \
        --train-limit 256 --warmup-epochs 0 --steps 48 --validation-batches 1 --codec aqsgd --fw-bits 2 \
        --bw-bits 8 --buffer-dir "$dir" --buffer-memory "$budget"
    done
  done
  for format in fp32 q8 q4; do
    run "aqst-format-$format" --stages 2 --micro-batches 4 --micro-batch-size 4 --data synthetic --train-limit 16 \
      --steps 2 --validation-batches 1 --codec aqsgd --fw-bits 2 --bw-bits 8 --buffer-format $format
  done
  mkdir -p "$dir"
  "$actkit" bench swap --dir "$dir" --size 256MiB --json "$out/aqst-swap.json" > "$out/aqst-swap.log" 2>&1
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rounds = {b: sorted((json.load(open(f"{out}/aqst-{b}-r{r}.json")) for r in (1, 2, 3)),
                    key=lambda j: j["step_time_s"]) for b in ["unlimited", "1MiB", "0"]}
runs = {b: js[1] for b, js in rounds.items()}  # the median round of each tier
base = runs["unlimited"]["step_time_s"]
print("| m(ξ) tier | memory per store | step time (ms), median (rounds) | memory ÷ this | file read / written (MiB) | read / write MB/s over the run | waited (s) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for b, j in runs.items():
    f = j["buffer"]
    each = " / ".join(f"{1000 * x['step_time_s']:.1f}" for x in rounds[b])
    print(f"| {f['tier']} | {b} | {1000 * j['step_time_s']:.1f} ({each}) | {base / j['step_time_s']:.3f} | "
          f"{f['bytes_read'] / 2**20:.1f} / {f['bytes_written'] / 2**20:.1f} | "
          f"{1000 * f['read_gbps']:.1f} / {1000 * f['write_gbps']:.1f} | {f['wait_s']:.3f} |")
print(f"\nm(ξ) stored: {runs['0']['buffer']['bytes_stored'] / 2**20:.1f} MiB over both sides")
sw = json.load(open(f"{out}/aqst-swap.json"))
print("actkit bench swap on the same directory: " + json.dumps(sw)[:600])
print("\n| format | bytes per example and side |")
print("| --- | --- |")
print(f"| fp16 | {runs['unlimited']['buffer']['bytes_per_example']} |")
for f in ["fp32", "q8", "q4"]:
    print(f"| {f} | {json.load(open(f'{out}/aqst-format-{f}.json'))['buffer']['bytes_per_example']} |")
PY
fi
