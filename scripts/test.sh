#!/usr/bin/env bash
# Builds ACTkit and runs everything CI checks, in two worlds: Debian's
# LibTorch 1.13 (CPU) and PyPI's torch 2.15 wheel (the LibTorch CUDA users
# link; its CUDA kernels and NCCL group are compiled and linked, and run
# here on the CPU). In each: the unit tests, a downstream project against
# the installed package, and the CLI smoke runs; in the Debian world also
# the longer CLI runs (resumes, kernel-shaped links), the fault-injection
# suite's short form, the checkpoint loaders fuzzed for
# a minute, and the codec, payload, store and layer tests under
# AddressSanitizer + UndefinedBehaviorSanitizer; across the two, the same
# activation bytes.
# It ends with the time of each step, the slowest tests of each world and
# the total against CI's budget of 45 minutes (docs/benchmarks.md has the
# figures of a fresh clone); past the budget it says so, without failing.
#   ACTKIT_WORLDS   the worlds to run (default: "debian wheel"). A world left
#                   out is named as skipped at the end, and the run says it
#                   did not check everything.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t_start=$SECONDS
budget_min=45

# The steps' times: step NAME closes the step before it and opens NAME;
# background NAME LOG CMD... runs CMD beside the steps that follow, its output
# into LOG, until await NAME. The table is printed at the end, and on a
# failure up to the step that failed.
step_names=()
step_times=()
open_step=""
open_since=0
close_step() {
  [ -n "$open_step" ] || return 0
  step_names+=("$open_step")
  step_times+=("$open_since $SECONDS")
  open_step=""
}
step() {
  close_step
  open_step="$*"
  open_since=$SECONDS
  printf '\n== %s (%d s)\n' "$*" $((SECONDS - t_start))
}
declare -A bg_pid bg_since bg_log
background() {
  local name=$1 log=$2
  shift 2
  mkdir -p "$(dirname "$log")"
  rm -f "$log.end"
  printf '\n== %s: started in the background (%d s)\n' "$name" $((SECONDS - t_start))
  # A session of its own, so that a failure elsewhere stops all of it (pip
  # included); it notes when the work ended (seconds since 1970), which
  # await may learn later.
  setsid --wait bash -c 'status=0; "$@" || status=$?; date +%s >"$0.end"; exit $status' "$log" "$@" >"$log" 2>&1 &
  bg_pid[$name]=$!
  bg_since[$name]=$SECONDS
  bg_log[$name]=$log
}
await() {
  local name=$1 status=0 end=$SECONDS ended
  close_step  # what follows is not the open step's time
  wait "${bg_pid[$name]}" || status=$?
  if ended=$(cat "${bg_log[$name]}.end" 2>/dev/null); then
    end=$((SECONDS - ($(date +%s) - ended)))
  fi
  step_names+=("$name (in the background)")
  step_times+=("${bg_since[$name]} $end")
  unset 'bg_pid[$name]'  # quoted so: a name with brackets or quotes is still one key
  printf '\n== %s: took %d s, done at %d s (%d s)\n' "$name" $((end - bg_since[$name])) $((end - t_start)) \
    $((SECONDS - t_start))
  if [ $status -ne 0 ]; then
    cat "${bg_log[$name]}" >&2
    echo "$name failed (exit $status; log: ${bg_log[$name]})" >&2
    exit $status
  fi
  tail -n 5 "${bg_log[$name]}"
}
minutes() { printf '%d.%d' $(($1 / 60)) $(($1 % 60 * 10 / 60)); }
time_table() {
  close_step
  local i start end total=$((SECONDS - t_start))
  printf '\n== time per step (s since the start, minutes)\n'
  printf '%-100s %7s %7s\n' step start min
  for i in "${!step_names[@]}"; do
    read -r start end <<<"${step_times[$i]}"
    printf '%-100s %7d %7s\n' "${step_names[$i]:0:100}" $((start - t_start)) "$(minutes $((end - start)))"
  done
  printf 'total: %s min (CI budget: %d min)\n' "$(minutes $total)" $budget_min
  if ((total > budget_min * 60)); then
    printf '!!! OVER BUDGET: this run took %s min, more than the %d minutes CI may spend (docs/benchmarks.md) !!!\n' \
      "$(minutes $total)" $budget_min
  fi
}
on_exit() {
  local status=$?
  local name
  for name in "${!bg_pid[@]}"; do kill -- "-${bg_pid[$name]}" 2>/dev/null || true; done
  time_table
  if [ $status -ne 0 ]; then
    local failed=setup
    ((${#step_names[@]} == 0)) || failed=${step_names[-1]}
    printf '\nFAILED (exit %d) in: %s\n' $status "$failed"
  fi
}
trap on_exit EXIT

worlds=${ACTKIT_WORLDS:-debian wheel}
for w in $worlds; do
  case $w in debian | wheel) ;; *) echo "ACTKIT_WORLDS: unknown world '$w' (expected debian, wheel)" >&2; exit 2 ;; esac
done
skipped=()
for w in debian wheel; do [[ " $worlds " == *" $w "* ]] || skipped+=("$w"); done

step "layering: every include goes down (docs/architecture.md)"
bash scripts/check-layering.sh
# Free disk first: the builds below need several GB (the wheel world 6 GB
# more), and a full disk shows up as a compiler error.
df -h --output=avail,target . | sed 's/^/disk: /'

# resumes_bit_for_bit NAME CMD...: CMD run 6 steps straight, and run 4 steps,
# saved, then resumed to 6, must end with the same losses (steps 5 and 6, and
# the validation loss). Files go to $b/NAME*.
resumes_bit_for_bit() {
  local name=$1
  shift
  rm -rf "$b/$name-ckpt"
  "$@" --steps 6 --json "$b/$name.json"
  "$@" --steps 4 --save "$b/$name-ckpt"
  "$@" --steps 6 --resume "$b/$name-ckpt" --json "$b/$name-resumed.json"
  RUN="$b/$name" python3 - <<'PY'
import json, os
run = os.environ["RUN"]
a, b = json.load(open(run + ".json")), json.load(open(run + "-resumed.json"))
assert a["train_losses"][4:] == b["train_losses"] and a["val_loss"] == b["val_loss"], (a["train_losses"], b["train_losses"])
PY
}

# smoke B: the CLI smoke runs of the build in folder B.
smoke() {
  local b=$1
  $b/bin/actkit --version
  $b/bin/actkit bench codec --size 16MiB --min-time 0.05 --json $b/bench-codec.json
  grep -q '"memcpy_gbps"' $b/bench-codec.json
  # A --json that is a device or a link is written through, never replaced.
  local nodes
  nodes=$(stat -c %F /dev/stdout /dev/null)
  $b/bin/actkit bench codec --size 1MiB --min-time 0.01 --json /dev/stdout >$b/bench-stdout.txt
  grep -q '"memcpy_gbps"' $b/bench-stdout.txt
  $b/bin/actkit bench codec --size 1MiB --min-time 0.01 --json /dev/null >/dev/null
  [ "$(stat -c %F /dev/stdout /dev/null)" = "$nodes" ] || { echo "a --json path was replaced" >&2; exit 1; }
  $b/bin/actkit convert --model resnet18 --level L3 > $b/convert.txt
  grep -q "QConv2d" $b/convert.txt
  $b/bin/actkit memory --model resnet18 --batch 4 --image-size 32 --levels L0,L3,L4 --nodes 4 --json $b/memory.json
  grep -q '"activation_bytes"' $b/memory.json
  grep -q '"BranchPointBackward"' $b/memory.json
  # The first 1,000 test images: evaluating all 10,000 was 60 of this run's 70 s.
  $b/bin/actkit train --model resnet18 --data fashion-mnist --level L3 --epochs 1 --train-limit 256 \
    --validation-limit 1000 --json $b/train.json
  grep -q '"final_test_accuracy"' $b/train.json
  grep -q '"test_examples": 1000' $b/train.json
  $b/bin/actkit maxbatch --model resnet18 --image-size 16 --budget 170MiB --levels L0,L5 --limit 16 \
    --max-split 32M --json $b/maxbatch.json --plot $b/maxbatch.svg
  grep -q '"max_batch"' $b/maxbatch.json
  grep -q "<svg" $b/maxbatch.svg
  $b/bin/actkit train --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --level L3 --train-limit 64 \
    --batch 8 --save $b/gpt2-pretrained --json $b/train-gpt2.json
  grep -q '"final_validation_loss"' $b/train-gpt2.json
  $b/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
    --micro-batch-size 2 --codec tah --fw-bits 4 --bw-bits 8 --bandwidth 200Mbps --latency 1ms --steps 3 \
    --validation-batches 2 --init $b/gpt2-pretrained --save $b/pipeline-ckpt --json $b/pipeline.json
  # AQ-SGD over the fortunes text: 32 examples, a checkpoint after 3 steps
  # (smoke_long resumes it); m(ξ) on files past a small memory tier.
  rm -rf $b/aqsgd-ckpt
  $b/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
    --micro-batch-size 4 --codec aqsgd --fw-bits 2 --bw-bits 8 --train-limit 32 --warmup-epochs 1 --steps 3 \
    --buffer-memory 64KiB --check-buffers --validation-batches 1 --save $b/aqsgd-ckpt --json $b/aqsgd.json
  grep -q '"tier": "both"' $b/aqsgd.json
  # Data-parallel: 1-bit LAMB on the fortunes text over 3 workers, a
  # checkpoint in the compression stage (smoke_long resumes it).
  rm -rf $b/dp-ckpt
  $b/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 3 --optimizer onebit-lamb \
    --data fortunes --train-limit 96 --batch 4 --steps 6 --warmup-steps 2 --lr 0.01 --bandwidth 200Mbps \
    --save $b/dp-ckpt --json $b/dp.json
  grep -q '"bytes_per_step_compressed"' $b/dp.json
  grep -q '"val_loss"' $b/dp.json
  $b/bin/actkit bench allreduce --workers 3 --size 1MiB --iterations 1 --json $b/bench-allreduce.json
  grep -q '"onebit_vs_fp32"' $b/bench-allreduce.json
  # --backend: an unknown name is refused when parsed; nccl without a GPU
  # (or in a build without NCCL) fails at once, saying why.
  if $b/bin/actkit dp --model gpt2 --workers 2 --data synthetic --steps 1 --backend mpi 2>$b/backend.err; then
    echo "an unknown backend must be refused" >&2
    exit 1
  fi
  grep -q -- "--backend" $b/backend.err || { cat $b/backend.err; echo "the refusal must name --backend" >&2; exit 1; }
  if ! command -v nvidia-smi >/dev/null; then
    if timeout 120 $b/bin/actkit dp --model gpt2 --layers 1 --hidden 64 --heads 2 --seq-len 32 --workers 2 \
      --data synthetic --steps 1 --batch 2 --backend nccl 2>$b/nccl.err; then
      echo "nccl without a GPU must fail" >&2
      exit 1
    fi
    grep -qi "nccl\|GPU" $b/nccl.err || { cat $b/nccl.err; echo "the nccl refusal must say why" >&2; exit 1; }
  fi
  if $b/bin/actkit maxbatch --model resnet18 --budget lots 2>/dev/null; then
    echo "a malformed budget must fail" >&2
    exit 1
  fi
  if $b/bin/actkit train --model no-such-model --train-limit 8 2>/dev/null; then
    echo "a bad model name must fail" >&2
    exit 1
  fi
  # Counts out of range are refused when parsed, naming the flag; an
  # allocation that cannot succeed is a one-line error, not a backtrace.
  local refused flag
  for refused in "dp --model gpt2 --data synthetic --steps 0" "pipeline --dp 2 --dp-warmup-steps -1" \
    "generate --init $b --seed -1" "pipeline --micro-batches 1000000000" "pipeline --steps 1 --vocab 10" \
    "dp --model gpt2 --data synthetic --steps 1 --workers 100000" "pipeline --steps 1 --optimizer adam --stages 2 --dp 60000" \
    "dp --model gpt2 --data synthetic --steps 1 --batch 100000000" "pipeline --steps 1 --micro-batch-size 100000000" \
    "dp --model gpt2 --data synthetic --steps 4 --lr-warmup-steps 4" "train --lr-warmup-steps -1" \
    "pipeline --steps 2 --epochs 1" "train --model gpt2 --data synthetic --save-every 2"; do
    flag=$(grep -o -- '--[a-z-]* [0-9-]*$' <<<"$refused" | cut -d' ' -f1)
    # shellcheck disable=SC2086
    if $b/bin/actkit $refused >/dev/null 2>$b/refused.err; then
      echo "actkit $refused must be refused" >&2
      exit 1
    fi
    grep -q -- "$flag" $b/refused.err || { cat $b/refused.err; echo "the refusal must name $flag" >&2; exit 1; }
  done
  # 600 TB of input: refused before anything is allocated, naming the flag and the figures.
  if $b/bin/actkit memory --model resnet18 --batch 1000000000 --levels L0 >/dev/null 2>$b/oom.err; then
    echo "a batch that cannot fit must fail" >&2
    exit 1
  fi
  grep -q -- "--batch 1000000000: a step needs at least" $b/oom.err && ! grep -q "frame #" $b/oom.err ||
    { cat $b/oom.err; echo "a batch larger than the machine must be one clear line naming it" >&2; exit 1; }
}

# smoke_long B: the longer CLI runs of the build in folder B, after smoke B:
# the benchmarks of the offload and allocator, a level per child process,
# four GPipe stages, the resumes of smoke's checkpoints and runs that must
# continue bit for bit, kernel-shaped links, ResNet-18 data parallel. The
# Debian world runs them; in the wheel world the same library paths run in
# its unit tests (DataParallelRanks.*, Pipeline*.*, Comm.*, Swapping.*,
# MaxBatch.*), and repeating them here cost minutes of CI time.
smoke_long() {
  local b=$1
  # maxbatch with each level in a child process (what L5 on CUDA needs): the
  # parent merges their results.
  $b/bin/actkit maxbatch --model resnet18 --image-size 16 --budget 170MiB --levels L0,L5 --limit 8 \
    --fresh-process --json $b/maxbatch-fresh.json
  [ "$(grep -c '"level": "L[05]"' $b/maxbatch-fresh.json)" = 2 ]
  if grep -q '"max_batch": 0,' $b/maxbatch-fresh.json; then
    echo "a level found no batch that fits" >&2
    exit 1
  fi
  $b/bin/actkit bench swap --dir $b --size 64MiB --repeats 1 --json $b/bench-swap.json
  grep -q '"read_gbps"' $b/bench-swap.json
  $b/bin/actkit bench host --device cpu --size 16MiB --chunk 1MiB --repeats 1 --json $b/bench-host.json
  grep -q '"swapper"' $b/bench-host.json
  $b/bin/actkit bench alloc --traces resnet18:4:32:L0,resnet18:4:32:L5 --steps 1 --json $b/bench-alloc.json
  grep -q '"baseline_fragmentation"' $b/bench-alloc.json
  # Four stages under GPipe, from the two-stage checkpoint smoke saved.
  $b/bin/actkit pipeline --stages 4 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 4 \
    --micro-batch-size 2 --schedule gpipe --codec directq --fw-bits 4 --data synthetic --steps 2 \
    --validation-batches 1 --init $b/pipeline-ckpt --json $b/pipeline-4.json
  # The AQ-SGD and data-parallel checkpoints smoke saved, resumed to the end;
  # a checkpoint of 3 workers refused by 2.
  $b/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
    --micro-batch-size 4 --codec aqsgd --fw-bits 2 --bw-bits 8 --train-limit 32 --warmup-epochs 1 --steps 5 \
    --buffer-memory 64KiB --check-buffers --validation-batches 1 --resume $b/aqsgd-ckpt --json $b/aqsgd-resumed.json
  grep -q '"start_step": 3' $b/aqsgd-resumed.json
  $b/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 3 --optimizer onebit-lamb \
    --data fortunes --train-limit 96 --batch 4 --steps 9 --warmup-steps 2 --lr 0.01 --bandwidth 200Mbps \
    --resume $b/dp-ckpt --json $b/dp-resumed.json
  grep -q '"start_step": 6' $b/dp-resumed.json
  if $b/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 2 --data synthetic \
    --optimizer onebit-lamb --steps 9 --warmup-steps 2 --resume $b/dp-ckpt 2>/dev/null; then
    echo "a checkpoint of 3 workers must be refused by 2" >&2
    exit 1
  fi
  # Data-parallel at L3: a run resumed from a checkpoint continues bit for bit
  # (the level's controller state travels with the optimizer's; with a
  # constant learning rate the checkpointed run's shorter length changes nothing).
  resumes_bit_for_bit dpl3 $b/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 2 \
    --optimizer onebit-adam --data fortunes --train-limit 64 --batch 4 --warmup-steps 2 --lr 0.001 \
    --lr-schedule constant --level L3 --bandwidth 200Mbps
  # The two halves together: 2 stages × 2 replicas, TAH-Quant activations,
  # DirectQ gradients, 1-bit Adam across the replicas; a checkpoint after the
  # freeze, and the resumed run must end where the uninterrupted one ends.
  resumes_bit_for_bit pdp $b/bin/actkit pipeline --stages 2 --dp 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 \
    --micro-batches 2 --micro-batch-size 2 --codec tah --optimizer onebit-adam --dp-warmup-steps 3 --lr 1e-3 \
    --train-limit 200 --validation-batches 1 --bandwidth 200Mbps
  # Error feedback on the boundary and tied gradients: the residuals travel
  # in the checkpoint, so the resumed run ends where the uninterrupted one
  # does (without them its gradients, and so its losses, would differ).
  resumes_bit_for_bit feedback $b/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 \
    --micro-batches 2 --micro-batch-size 2 --codec directq --fw-bits 3 --bw-bits 3 --stochastic --grid full \
    --scale channel --bw-feedback --tied-gradient feedback --lr 1e-3 --train-limit 200 --validation-batches 1
  B=$b python3 - <<'PY'
import json, os
f = json.load(open(os.environ["B"] + "/feedback.json"))
assert f["backward_feedback"] and f["tied_gradient"] == "feedback", f
assert f["forward_codec"] == "directq3-sr-channel-full", f["forward_codec"]
a = json.load(open(os.environ["B"] + "/pdp.json"))
assert a["replicas"] == 2 and a["exchange_bytes"] > 0, a
PY
  # AQ-SGD across replicas: each replica reads its own share of the examples,
  # so after the first epoch's full-precision warm-up every micro-batch finds
  # its m(ξ) on both sides and goes as a 2-bit delta (checked every step).
  $b/bin/actkit pipeline --stages 2 --dp 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
    --micro-batch-size 4 --codec aqsgd --fw-bits 2 --optimizer adam --lr 1e-3 --train-limit 64 --steps 12 \
    --check-buffers --validation-batches 1 --json $b/pdp-aqsgd.json
  B=$b python3 - <<'PY'
import json, os
d = os.environ["B"]
a = json.load(open(f"{d}/pdp-aqsgd.json"))
fw = [l for l in a["links"] if l["direction"] == "forward"][0]
# 4 warm-up steps and the validation in fp32, then 8 steps of deltas.
assert fw["fp32_bytes"] > 2 * fw["bytes"], fw
PY
  $b/bin/actkit dp --model resnet18 --workers 2 --optimizer fp16-adam --data fashion-mnist --train-limit 64 \
    --validation-limit 1000 --batch 16 --steps 2 --json $b/dp-resnet.json
  grep -q '"val_accuracy"' $b/dp-resnet.json
  # Kernel-shaped links need a private network namespace (root).
  if unshare -n -m true 2>/dev/null; then
    $b/bin/actkit dp --model gpt2 --layers 1 --hidden 64 --heads 2 --seq-len 32 --workers 2 --data synthetic \
      --optimizer onebit-adam --steps 3 --warmup-steps 1 --batch 4 --link kernel --bandwidth 100Mbps \
      --json $b/dp-kernel.json
    grep -q '"link": "kernel"' $b/dp-kernel.json
    $b/bin/actkit pipeline --stages 3 --layers 1 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
      --micro-batch-size 2 --codec directq --fw-bits 4 --data synthetic --steps 2 --validation-batches 1 \
      --link kernel --bandwidth 100Mbps,50Mbps --latency 2ms --json $b/pipeline-kernel.json
    grep -q '"link": "kernel"' $b/pipeline-kernel.json
    $b/bin/actkit pipeline --stages 2 --dp 2 --layers 1 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
      --micro-batch-size 2 --codec tah --optimizer onebit-adam --dp-warmup-steps 1 --data synthetic --steps 3 \
      --validation-batches 1 --link kernel --bandwidth 50Mbps --latency 2ms --json $b/pipeline-dp-kernel.json
    grep -q '"replicas": 2' $b/pipeline-dp-kernel.json
  fi
}

# sanitizers: the codec, untrusted-payload, I/O engine, store, allocator and
# layer-piece tests again under ASan + UBSan (Debian's LibTorch). At -O0
# (the kernels keep their own -O3), each target as one unit: build and run
# took 274 s on the AMD EPYC (2026-11-29), against 345 s at -O1 in batches of
# eight; the tests themselves take 43 s instead of 20.
sanitizers() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACTKIT_SANITIZE=ON \
    -DACTKIT_BUILD_BENCH=OFF -DACTKIT_BUILD_CLI=OFF -DACTKIT_CUDA_COMPILE_CHECK=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" \
    $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Only the files that hold these tests (tests/CMakeLists.txt).
  cmake --build build-asan --target actkit_sanitizer_tests
  # LibTorch itself is not instrumented and keeps global state alive at exit.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build-asan/bin/actkit_sanitizer_tests --gtest_filter='Serialize.*:Checksum.*:PerGroup.*:DirectQ.*:Tah.*:BoundarySerialize.*:Mask.*:Index.*:BitPack.*:*IoEngine*:*RecordStore*:HostTier.*:StateDict.*:*Policy*:AllocationTrace.*:Layers.*:Fused.*:*Piecewise*:BranchPoint.*:NodeProfile.*:ControllerBudgets.*:Transfers.*:SwapperInFlight.*:BoundaryPayload.*:OneBitCodec.*:CompressedAllreduce.*:DataParallelOptimizer.*:ControllerState.*:*ExampleStore*:AqsgdBoundary.*:PayloadDigests.*:CpuIsa.*'
}

# downstream B PREFIX_PATH: a project built against the package installed from B.
downstream() {
  local b=$1 prefix=$2
  cmake --install "$b" --prefix "$b/install"
  cmake -S examples/downstream -B "$b/downstream" -G Ninja -DCMAKE_PREFIX_PATH="$root/$b/install${prefix:+;$prefix}"
  cmake --build "$b/downstream"
  "$b/downstream/actkit_example"
  # The installed tool finds the installed library wherever the prefix is.
  "$b/install/bin/actkit" --version
}

# slowest_tests B: the ten slowest tests of B's last unit-test run (the
# reports each suite writes, cmake/ActkitTestSuites.cmake), also kept in
# B/slowest-tests.txt for the summary at the end.
slowest_tests() {
  python3 - "$1" <<'PY' | tee "$1/slowest-tests.txt"
import glob, sys
import xml.etree.ElementTree as ET
tests = []
for report in glob.glob(sys.argv[1] + "/test-reports/*.xml"):
    for case in ET.parse(report).getroot().iter("testcase"):
        tests.append((float(case.get("time", 0)), case.get("classname") + "." + case.get("name")))
tests.sort(reverse=True)
print("slowest of %d tests (%.0f s in all):" % (len(tests), sum(t for t, _ in tests)))
for seconds, name in tests[:10]:
    print("  %6.1f s  %s" % (seconds, name))
PY
}

if [[ " $worlds " == *" debian "* ]]; then
  step "install: the Debian packages"
  ACTKIT_TORCH=debian ACTKIT_SETUP=install bash scripts/setup.sh
fi
if [[ " $worlds " == *" wheel "* ]]; then
  # pip's download and unpacking wait on the network and the disk: they go
  # on beside the Debian world's build and tests.
  background "[wheel] install: torch 2.15 and the oracle's wheels into .venv" "$root/build-logs/wheel-install.log" \
    env ACTKIT_TORCH=wheel ACTKIT_SETUP=install bash scripts/setup.sh
fi

for world in $worlds; do
  if [ "$world" = debian ]; then
    b=build
    label="Debian's LibTorch 1.13"
    prefix=""
  else
    b=build-wheel
    label="PyPI's torch 2.15 wheel"
    await "[wheel] install: torch 2.15 and the oracle's wheels into .venv"
  fi
  # Each target compiles as one unit: that build is also the check that
  # every batching of its sources compiles (CMakeLists.txt).
  step "[$world] build against $label (every target as one unit)"
  ACTKIT_TORCH=$world ACTKIT_SETUP=build ACTKIT_BUILD_DIR=$b ACTKIT_TARGETS=all \
    ACTKIT_CMAKE_ARGS="-DACTKIT_UNITY_BATCH_SIZE=0 ${ACTKIT_CMAKE_ARGS:-}" bash scripts/setup.sh
  if [ "$world" = wheel ]; then
    prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
  fi
  "$b/bin/actkit" --version | tee "$b/version.txt"
  if [ "$world" = wheel ]; then
    grep -q "LibTorch 2.15" "$b/version.txt" || { echo "the wheel world must run on LibTorch 2.15" >&2; exit 1; }
  fi

  # No ACTkit binary may call std::filesystem: the wheel's LibTorch exports
  # its own copy, which such calls bind to (core/include/actkit/core/files.h).
  fs_refs=""
  for f in "$b"/libactkit.so.*.* "$b"/bin/*; do
    refs=$(nm -D --undefined-only "$f") || { echo "nm cannot read $f" >&2; exit 1; }
    fs_refs+=$(grep 'St10filesystem' <<<"$refs" || true)
  done
  if [ -n "$fs_refs" ]; then
    echo "$fs_refs"
    echo "[$world] ACTkit binaries reference std::filesystem (above)" >&2
    exit 1
  fi

  step "[$world] the CPU kernels' instruction-set variants share no code"
  bash scripts/check-isa-symbols.sh "$b"

  step "[$world] unit tests"
  rm -rf "$b/test-reports"
  ctest --test-dir "$b" --output-on-failure -j "$(nproc)" --timeout 600 -LE faults
  slowest_tests "$b"

  if [ "$world" = debian ]; then
    step "[$world] fault injection, short form: killed ranks and launchers, full disks, damaged checkpoints"
    ctest --test-dir "$b" --output-on-failure -L faults
    step "[$world] the checkpoint loaders fuzzed (libFuzzer, ASan + UBSan), 60 s on two cores at once"
    bash scripts/fuzz.sh 60
  fi

  if [ "$world" = debian ]; then
    step "[$world] sanitizers (ASan + UBSan): codecs, untrusted payloads, I/O engine, stores, allocators, layer pieces"
    sanitizers
  fi

  if [ "$world" = wheel ]; then
    # setup.sh's build installed it into .venv (pip, scikit-build-core).
    step "[$world] the Python package: actkit.compress on real modules (pytest)"
    (cd "$root/python/tests" && "$root/.venv/bin/python" -m pytest -q -p no:cacheprovider .)
  fi

  step "[$world] downstream project against the installed package"
  downstream "$b" "$prefix"

  step "[$world] CLI smoke runs"
  smoke "$b"
  if [ "$world" = debian ]; then
    step "[$world] the longer CLI runs: offload and allocator benchmarks, resumes, kernel-shaped links, ResNet-18 dp"
    smoke_long "$b"
  fi
done

if [[ " $worlds " == *" debian "* && " $worlds " == *" wheel "* ]]; then
  step "across worlds: the same activation bytes under LibTorch 1.13 and 2.15"
  python3 - <<'PY'
import json
a, b = json.load(open("build/memory.json")), json.load(open("build-wheel/memory.json"))
bytes_of = lambda r: {x["level"]: x["activation_bytes"] for x in r["levels"]}
deb, whl = bytes_of(a), bytes_of(b)
# What ACTkit keeps is the same; one thing LibTorch keeps is not: 1.13's
# MeanBackward1 (the global average pool) saves its whole input, 2.x only its
# size. At L0 the last ReLU holds that tensor anyway; above L0 the ReLU keeps
# a 1-bit mask, so 1.13 holds the last feature map in addition: ResNet-18,
# batch 4 at 32x32 -> 4 x 512 x 4 x 4 fp32.
last_feature_map = 4 * 512 * 4 * 4 * 4
for level in deb:
    extra = 0 if level == "L0" else last_feature_map
    assert deb[level] - whl[level] == extra, (level, deb[level], whl[level])
print("activation bytes per level (Debian's 1.13, the wheel's 2.15):", [(l, deb[l], whl[l]) for l in deb])
PY
fi

close_step
for world in $worlds; do
  b=build
  [ "$world" = debian ] || b=build-wheel
  printf '\n[%s] ' "$world"
  cat "$b/slowest-tests.txt"
done
if ((${#skipped[@]})); then
  printf '\n!!! SKIPPED WORLDS: %s (ACTKIT_WORLDS=%s): this run did NOT check them !!!\n' "${skipped[*]}" "$worlds"
  echo "checks passed in: $worlds"
else
  echo "all checks passed (both worlds)"
fi
