#!/usr/bin/env bash
# Builds ACTkit and runs everything CI checks: the unit tests, the codec and
# payload tests again under AddressSanitizer + UndefinedBehaviorSanitizer, a
# downstream project built against the installed package, and a CLI smoke
# run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

step() { printf '\n== %s\n' "$*"; }

step "layering: every include goes down (docs/architecture.md)"
bash scripts/check-layering.sh

step "setup and build"
# Free disk first: the builds below need a few GB, and a full disk shows up as a compiler error.
df -h --output=avail,target . | sed 's/^/disk: /'
bash scripts/setup.sh

step "unit tests"
ctest --test-dir build --output-on-failure -j "$(nproc)"

step "sanitizers (ASan + UBSan): codecs, untrusted payloads, I/O engine, stores, allocators, layer pieces"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACTKIT_SANITIZE=ON \
  -DACTKIT_BUILD_BENCH=OFF -DACTKIT_BUILD_CLI=OFF -DACTKIT_CUDA_COMPILE_CHECK=OFF
cmake --build build-asan --target actkit_tests
# LibTorch itself is not instrumented and keeps global state alive at exit.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  build-asan/bin/actkit_tests --gtest_filter='Serialize.*:Checksum.*:PerGroup.*:DirectQ.*:Tah.*:BoundarySerialize.*:Mask.*:Index.*:BitPack.*:*IoEngine*:*RecordStore*:HostTier.*:StateDict.*:*Policy*:AllocationTrace.*:Layers.*:Fused.*:*Piecewise*:BranchPoint.*:NodeProfile.*:ControllerBudgets.*:Transfers.*:SwapperInFlight.*:BoundaryPayload.*:OneBitCodec.*:CompressedAllreduce.*:DataParallelOptimizer.*:ControllerState.*:*ExampleStore*:AqsgdBoundary.*'

step "downstream project against the installed package"
cmake --install build --prefix build/install
cmake -S examples/downstream -B build/downstream -G Ninja -DCMAKE_PREFIX_PATH="$root/build/install"
cmake --build build/downstream
build/downstream/actkit_example
# The installed tool finds the installed library wherever the prefix is.
build/install/bin/actkit --version

step "CLI smoke runs"
build/bin/actkit --version
build/bin/actkit bench codec --size 16MiB --min-time 0.05 --json build/bench-codec.json
grep -q '"memcpy_gbps"' build/bench-codec.json
build/bin/actkit convert --model resnet18 --level L3 > build/convert.txt
grep -q "QConv2d" build/convert.txt
build/bin/actkit memory --model resnet18 --batch 4 --image-size 32 --levels L0,L3,L4 --nodes 4 --json build/memory.json
grep -q '"activation_bytes"' build/memory.json && grep -q '"BranchPointBackward"' build/memory.json
build/bin/actkit train --model resnet18 --data fashion-mnist --level L3 --epochs 1 --train-limit 256 \
  --json build/train.json
grep -q '"final_test_accuracy"' build/train.json
build/bin/actkit maxbatch --model resnet18 --image-size 16 --budget 170MiB --levels L0,L5 --limit 16 \
  --max-split 32M --json build/maxbatch.json --plot build/maxbatch.svg
grep -q '"max_batch"' build/maxbatch.json && grep -q "<svg" build/maxbatch.svg
# Each level in a child process (what L5 on CUDA needs): the parent merges their results.
build/bin/actkit maxbatch --model resnet18 --image-size 16 --budget 170MiB --levels L0,L5 --limit 8 \
  --fresh-process --json build/maxbatch-fresh.json
[ "$(grep -c '"level": "L[05]"' build/maxbatch-fresh.json)" = 2 ] && ! grep -q '"max_batch": 0,' build/maxbatch-fresh.json
build/bin/actkit bench swap --dir build --size 64MiB --repeats 1 --json build/bench-swap.json
grep -q '"read_gbps"' build/bench-swap.json
build/bin/actkit bench host --device cpu --size 16MiB --chunk 1MiB --repeats 1 --json build/bench-host.json
grep -q '"swapper"' build/bench-host.json
build/bin/actkit bench alloc --traces resnet18:4:32:L0,resnet18:4:32:L5 --steps 1 --json build/bench-alloc.json
grep -q '"baseline_fragmentation"' build/bench-alloc.json
build/bin/actkit train --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --level L3 --train-limit 64 \
  --batch 8 --save build/gpt2-pretrained.pt --json build/train-gpt2.json
grep -q '"final_validation_loss"' build/train-gpt2.json
build/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
  --micro-batch-size 2 --codec tah --fw-bits 4 --bw-bits 8 --bandwidth 200Mbps --latency 1ms --steps 3 \
  --validation-batches 2 --init build/gpt2-pretrained.pt --save build/pipeline-ckpt --json build/pipeline.json
build/bin/actkit pipeline --stages 4 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 4 \
  --micro-batch-size 2 --schedule gpipe --codec directq --fw-bits 4 --data synthetic --steps 2 \
  --validation-batches 1 --init build/pipeline-ckpt --json build/pipeline-4.json
# AQ-SGD over the fortunes text: 32 examples, a checkpoint after 3 steps, a
# resumed run to step 5; m(ξ) on files past a small memory tier.
rm -rf build/aqsgd-ckpt
build/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
  --micro-batch-size 4 --codec aqsgd --fw-bits 2 --bw-bits 8 --train-limit 32 --warmup-epochs 1 --steps 3 \
  --buffer-memory 64KiB --check-buffers --validation-batches 1 --save build/aqsgd-ckpt --json build/aqsgd.json
build/bin/actkit pipeline --stages 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
  --micro-batch-size 4 --codec aqsgd --fw-bits 2 --bw-bits 8 --train-limit 32 --warmup-epochs 1 --steps 5 \
  --buffer-memory 64KiB --check-buffers --validation-batches 1 --resume build/aqsgd-ckpt --json build/aqsgd-resumed.json
grep -q '"tier": "both"' build/aqsgd.json && grep -q '"start_step": 3' build/aqsgd-resumed.json
# Data-parallel: 1-bit LAMB on the fortunes text over 3 workers, a
# checkpoint in the compression stage, and a resumed run to the end.
rm -rf build/dp-ckpt
build/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 3 --optimizer onebit-lamb \
  --data fortunes --train-limit 96 --batch 4 --steps 6 --warmup-steps 2 --lr 0.01 --bandwidth 200Mbps \
  --save build/dp-ckpt --json build/dp.json
build/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 3 --optimizer onebit-lamb \
  --data fortunes --train-limit 96 --batch 4 --steps 9 --warmup-steps 2 --lr 0.01 --bandwidth 200Mbps \
  --resume build/dp-ckpt --json build/dp-resumed.json
grep -q '"bytes_per_step_compressed"' build/dp.json && grep -q '"val_loss"' build/dp.json
grep -q '"start_step": 6' build/dp-resumed.json
if build/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 2 --data synthetic \
  --optimizer onebit-lamb --steps 9 --warmup-steps 2 --resume build/dp-ckpt 2>/dev/null; then
  echo "a checkpoint of 3 workers must be refused by 2" >&2
  exit 1
fi
# Data-parallel at L3: a run resumed from a checkpoint continues bit for bit
# (the level's controller state travels with the optimizer's; with a
# constant learning rate the checkpointed run's shorter length changes nothing).
rm -rf build/dpl3-ckpt
dpl3="build/bin/actkit dp --model gpt2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --workers 2 --optimizer onebit-adam
  --data fortunes --train-limit 64 --batch 4 --warmup-steps 2 --lr 0.001 --lr-schedule constant --level L3
  --bandwidth 200Mbps"
$dpl3 --steps 6 --json build/dpl3.json
$dpl3 --steps 4 --save build/dpl3-ckpt
$dpl3 --steps 6 --resume build/dpl3-ckpt --json build/dpl3-resumed.json
python3 - <<'PY'
import json
a, b = json.load(open("build/dpl3.json")), json.load(open("build/dpl3-resumed.json"))
assert a["train_losses"][4:] == b["train_losses"] and a["val_loss"] == b["val_loss"], (a["train_losses"], b["train_losses"])
PY
# The two halves together: 2 stages × 2 replicas, TAH-Quant activations,
# DirectQ gradients, 1-bit Adam across the replicas; a checkpoint after the
# freeze, and the resumed run must end where the uninterrupted one ends.
rm -rf build/pdp-ckpt
pdp="build/bin/actkit pipeline --stages 2 --dp 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2
  --micro-batch-size 2 --codec tah --optimizer onebit-adam --dp-warmup-steps 3 --lr 1e-3 --train-limit 200
  --validation-batches 1 --bandwidth 200Mbps"
$pdp --steps 6 --json build/pdp.json
$pdp --steps 4 --save build/pdp-ckpt
$pdp --steps 6 --resume build/pdp-ckpt --json build/pdp-resumed.json
python3 - <<'PY'
import json
a, b = json.load(open("build/pdp.json")), json.load(open("build/pdp-resumed.json"))
assert a["replicas"] == 2 and a["exchange_bytes"] > 0, a
assert a["train_losses"][4:] == b["train_losses"] and a["val_loss"] == b["val_loss"], (a["train_losses"], b["train_losses"])
PY
# AQ-SGD across replicas: each replica reads its own share of the examples,
# so after the first epoch's full-precision warm-up every micro-batch finds
# its m(ξ) on both sides and goes as a 2-bit delta (checked every step).
build/bin/actkit pipeline --stages 2 --dp 2 --layers 2 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
  --micro-batch-size 4 --codec aqsgd --fw-bits 2 --optimizer adam --lr 1e-3 --train-limit 64 --steps 12 \
  --check-buffers --validation-batches 1 --json build/pdp-aqsgd.json
python3 - <<'PY'
import json
a = json.load(open("build/pdp-aqsgd.json"))
fw = [l for l in a["links"] if l["direction"] == "forward"][0]
# 4 warm-up steps and the validation in fp32, then 8 steps of deltas.
assert fw["fp32_bytes"] > 2 * fw["bytes"], fw
PY
build/bin/actkit bench allreduce --workers 3 --size 1MiB --iterations 1 --json build/bench-allreduce.json
grep -q '"onebit_vs_fp32"' build/bench-allreduce.json
build/bin/actkit dp --model resnet18 --workers 2 --optimizer fp16-adam --data fashion-mnist --train-limit 64 \
  --batch 16 --steps 2 --json build/dp-resnet.json
grep -q '"val_accuracy"' build/dp-resnet.json
# Kernel-shaped links need a private network namespace (root).
if unshare -n -m true 2>/dev/null; then
  build/bin/actkit dp --model gpt2 --layers 1 --hidden 64 --heads 2 --seq-len 32 --workers 2 --data synthetic \
    --optimizer onebit-adam --steps 3 --warmup-steps 1 --batch 4 --link kernel --bandwidth 100Mbps \
    --json build/dp-kernel.json
  grep -q '"link": "kernel"' build/dp-kernel.json
  build/bin/actkit pipeline --stages 3 --layers 1 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
    --micro-batch-size 2 --codec directq --fw-bits 4 --data synthetic --steps 2 --validation-batches 1 \
    --link kernel --bandwidth 100Mbps,50Mbps --latency 2ms --json build/pipeline-kernel.json
  grep -q '"link": "kernel"' build/pipeline-kernel.json
  build/bin/actkit pipeline --stages 2 --dp 2 --layers 1 --hidden 64 --heads 2 --seq-len 32 --micro-batches 2 \
    --micro-batch-size 2 --codec tah --optimizer onebit-adam --dp-warmup-steps 1 --data synthetic --steps 3 \
    --validation-batches 1 --link kernel --bandwidth 50Mbps --latency 2ms --json build/pipeline-dp-kernel.json
  grep -q '"replicas": 2' build/pipeline-dp-kernel.json
fi
if build/bin/actkit maxbatch --model resnet18 --budget lots 2>/dev/null; then
  echo "a malformed budget must fail" >&2
  exit 1
fi
if build/bin/actkit train --model no-such-model --train-limit 8 2>/dev/null; then
  echo "a bad model name must fail" >&2
  exit 1
fi
echo "all checks passed"
