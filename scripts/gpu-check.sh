#!/usr/bin/env bash
# GPU verification in one go, for a machine with a PyTorch 2.x CUDA wheel and
# no package registry (H100/H200 device machines).
#
#   bash scripts/gpu-check.sh fetch   on a Debian 12 build machine: downloads
#                                     the .deb files the GPU machine lacks
#                                     into .deb/ (git-ignored; carry it over)
#   bash scripts/gpu-check.sh [STEP...]
#                                     on the GPU machine: unpacks .deb/,
#                                     configures against the wheel's LibTorch,
#                                     builds, then runs the steps named (all
#                                     when none is): cuda-tests cuda-alloc
#                                     nccl codec host l4 memory maxbatch
#                                     maxbatch-l5 swap tests (also: maxbatch152,
#                                     sanitize, pieces, train, backtraces). Each
#                                     step has its own time limit, so a slow
#                                     or failing one cannot hide the others;
#                                     a table of what passed comes last.
#                                     Logs and JSON go to
#                                     build-gpu/out, and as one archive,
#                                     gpu-check.tar.gz, to $OUT when set.
#                                     GPU_CHECK_SECONDS (default 570) bounds
#                                     the whole run: later steps get what is
#                                     left, so the table always comes back.
#                                     TESTS_SECONDS caps the `tests` step.
#                                     comm/, pipeline/ and optim/ (c10d)
#                                     build against the carried Gloo
#                                     headers (comm/src/process_group.h
#                                     says why that is safe); set
#                                     GPU_DISTRIBUTED=OFF to leave them out.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

debs=(libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libhwloc15 libgtest-dev libgmock-dev
      libbenchmark-dev libbenchmark1debian libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9
      liburing-dev liburing2 dataset-fashion-mnist
      libgloo-dev)  # headers only: the wheels ship c10d's but not Gloo's (comm/src/process_group.h)

if [ "${1:-}" = "fetch" ]; then
  mkdir -p .deb
  (cd .deb && apt-get download "${debs[@]}")
  ls -la .deb
  exit 0
fi

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(cuda-tests cuda-alloc nccl codec host l4 memory maxbatch maxbatch-l5 swap tests)
out="$root/build-gpu/out"
rm -rf "$out" && mkdir -p "$out"
deadline=${GPU_CHECK_SECONDS:-570}
pack() { [ -n "${OUT:-}" ] && tar -czf "$OUT/gpu-check.tar.gz" -C "$root/build-gpu" out; }
trap pack EXIT
summary=()
note() { summary+=("$(printf '%-12s %s' "$1" "$2")"); }

# The Debian packages go into a folder of their own (never into /); their
# pkg-config files are pointed at it.
deb_root="$root/.deb/root"
if compgen -G ".deb/*.deb" >/dev/null; then
  rm -rf "$deb_root" && mkdir -p "$deb_root"
  for f in .deb/*.deb; do dpkg -x "$f" "$deb_root"; done
  # Some .pc files name their folders absolutely (liburing: includedir=/usr/include).
  find "$deb_root" -name '*.pc' -exec sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$deb_root/usr#" {} +
fi
export LD_LIBRARY_PATH="$deb_root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$deb_root/usr/lib/x86_64-linux-gnu/pkgconfig:$deb_root/usr/share/pkgconfig"

python=${PYTHON:-python3}
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
{
  echo "torch $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.compiled_with_cxx11_abi())')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$nvcc" --version | tail -n 2
  c++ --version | head -n 1
  cmake --version | head -n 1
  echo "cores $(nproc), $(free -g | awk '/Mem/ {print $2}') GiB"
} 2>&1 | tee "$out/machine.txt"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
keep_going=()
command -v ninja >/dev/null && keep_going=(-- -k 0)
t0=$SECONDS
# A cache from an earlier call on a warm machine may hold pkg-config results
# from before the .pc files were re-pointed: configure afresh (objects stay).
rm -f build-gpu/CMakeCache.txt
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deb_root/usr" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DACTKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ACTKIT_CUDA_ARCH:-90}" -DACTKIT_DISTRIBUTED="${GPU_DISTRIBUTED:-ON}" \
  ${ACTKIT_CXX_STANDARD:+-DCMAKE_CXX_STANDARD=$ACTKIT_CXX_STANDARD} >"$out/configure.log" 2>&1
configure_rc=$?
tail -n 15 "$out/configure.log"
if [ $configure_rc -ne 0 ]; then echo "configure FAILED (see configure.log)"; exit 1; fi
cmake --build build-gpu -j "$(nproc)" "${keep_going[@]}" >"$out/build.log" 2>&1
build_rc=$?
allocator_errors=$(grep -E "error" "$out/build.log" | grep -E "cuda_allocator|cuda_vmm_backing")
if [ $build_rc -ne 0 ] && [ -n "$allocator_errors" ]; then
  # The CUDA allocator builds against LibTorch's pluggable-allocator API,
  # which moves between releases: keep the rest of the check alive.
  head -n 20 <<< "$allocator_errors"
  note cuda-alloc "BUILD FAILED: rebuilt with -DACTKIT_CUDA_ALLOCATOR=OFF (see build.log)"
  cp "$out/build.log" "$out/build-with-cuda-allocator.log"
  cmake build-gpu -DACTKIT_CUDA_ALLOCATOR=OFF >>"$out/configure.log" 2>&1
  cmake --build build-gpu -j "$(nproc)" "${keep_going[@]}" >"$out/build.log" 2>&1
  build_rc=$?
fi
note build "$([ $build_rc -eq 0 ] && echo ok || echo FAILED) ($((SECONDS - t0)) s)"
if [ $build_rc -ne 0 ]; then
  grep -E "error|Error" "$out/build.log" | head -n 60
  printf '%s\n' "${summary[@]}"
  exit 1
fi
bin=build-gpu/bin

# run STEP SECONDS CMD...: runs one step under a time limit, logs it to
# $out/STEP.log and notes how it ended.
run() {
  local step=$1 limit=$2 t=$SECONDS
  shift 2
  local left=$((deadline - SECONDS - 15))
  [ $left -lt "$limit" ] && limit=$left
  if [ "$limit" -le 0 ]; then note "$step" "skipped (no time left)"; return; fi
  timeout "$limit" "$@" >"$out/$step.log" 2>&1
  local rc=$?
  local how=ok
  [ $rc -ne 0 ] && how="FAILED rc=$rc"
  [ $rc -eq 124 ] && how="TIMED OUT"
  note "$step" "$how ($((SECONDS - t)) s)"
  tail -n 25 "$out/$step.log"
}

for step in "${steps[@]}"; do
  echo "== $step"
  case $step in
    cuda-tests)
      run cuda-tests 300 $bin/actkit_tests --gtest_brief=1 \
        --gtest_filter='CudaEquality.*:Half.*:Transfers.Cuda*:SwapperInFlight.Cuda*:Swapping.L4TrainsLikeL3OnTheDevice' ;;
    cuda-alloc)
      # The L5 allocator over CUDA virtual memory: its own program, since it
      # replaces LibTorch's CUDA allocator for the process.
      run cuda-alloc 240 $bin/actkit_cuda_allocator_tests --gtest_brief=1 ;;
    maxbatch-l5)
      run maxbatch-r50-l5 560 $bin/actkit maxbatch --model resnet50 --image-size 224 --device cuda \
        --levels L5 --steps "${MAXBATCH_STEPS:-2}" --json "$out/maxbatch-r50-l5-cuda.json" ;;
    codec)
      run codec-cuda 240 $bin/actkit bench codec --device cuda --size 1GiB --json "$out/codec-cuda.json" ;;
    memory)
      run memory-r50 300 $bin/actkit memory --model resnet50 --batch 64 --image-size 224 \
        --device cuda --levels L0,L1,L2,L3,L4 --json "$out/memory-r50-cuda.json" ;;
    l4)
      # L4's copies overlap compute (copy stream, read-ahead): step time
      # against L3, with prefetch=0 (about synchronous) in the same run.
      run l4-r50 300 $bin/actkit memory --model resnet50 --batch 64 --image-size 224 --device cuda \
        --levels L3,L4,L4:prefetch=0,L4:prefetch=16,L3 --json "$out/l4-r50-cuda.json" ;;
    train)
      # The Fashion-MNIST recipe of docs/benchmarks.md on the device, L0 and
      # L3: accuracy as on the CPU, and the step times.
      mnist="$deb_root/usr/share/datasets/fashion-mnist"
      [ -d "$mnist" ] || mnist=/usr/share/datasets/fashion-mnist
      for level in L0 L3; do
        run train-$level 150 $bin/actkit train --model resnet18 --data fashion-mnist --data-dir "$mnist" --level $level \
          --epochs 1 --train-limit 10000 --seed 1 --device cuda --no-compare --json "$out/train-$level-cuda.json"
      done ;;
    maxbatch)
      run maxbatch-r50 560 $bin/actkit maxbatch --model resnet50 --image-size 224 --device cuda \
        --levels "${MAXBATCH_LEVELS:-L0,L3,L4}" --steps "${MAXBATCH_STEPS:-2}" --json "$out/maxbatch-r50-cuda.json" --plot "$out/maxbatch-r50-cuda.svg" ;;
    maxbatch152)
      run maxbatch-r152 ${MAXBATCH152_SECONDS:-560} $bin/actkit maxbatch --model resnet152 --image-size 224 --device cuda \
        --levels "${MAXBATCH_LEVELS:-L0,L3,L4}" --steps "${MAXBATCH_STEPS:-2}" --json "$out/maxbatch-r152-cuda.json" ;;
    sanitize)
      # Out-of-bounds or misaligned accesses in the CUDA kernels.
      run sanitize 300 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/actkit_tests --gtest_brief=1 \
        --gtest_filter='CudaEquality.*' ;;
    pieces)
      # What working through the batch in pieces costs on the device: the
      # default (auto: 1/32 of device memory) against whole-batch layers and
      # the CPU's 16M pieces.
      run pieces 400 $bin/actkit memory --model resnet50 --batch 64 --image-size 224 --device cuda \
        --levels L0,L1,L1:chunk_bytes=0,L1:chunk_bytes=16M,L3,L3:chunk_bytes=0,L3:chunk_bytes=16M --json "$out/pieces-r50-cuda.json" ;;
    host)
      # Device <-> page-locked host memory, pageable memory and the L4 swapper.
      run host 240 $bin/actkit bench host --device cuda --size 4GiB --chunk 4MiB --json "$out/host-cuda.json" ;;
    swap)
      run swap 300 $bin/actkit bench swap --dir "${SWAP_DIR:-/tmp}" --size 4GiB --repeats 3 --json "$out/swap.json" ;;
    tests)
      # Through CTest, one process per test suite: a crash names its suite
      # and hides no other suite (the rest of its own suite does not run:
      # BACKTRACE_TESTS below, or the program with --gtest_filter, for those).
      run tests "${TESTS_SECONDS:-560}" ctest --test-dir build-gpu -j "$(nproc)" --timeout 300 --output-on-failure ;;
    nccl)
      # The NCCL group on this machine's GPU (a group of one: NCCL refuses two
      # ranks on one GPU), and the Gloo tests of comm/ beside it.
      run nccl 240 $bin/actkit_tests --gtest_brief=1 --gtest_filter='NcclGroup.*:Comm.*:GroupConfig.*' ;;
   backtraces)
      # Where the tests that crash under this LibTorch crash: the
      # std::filesystem symbols libtorch_cpu exports (pytorch#133437), then
      # a backtrace of each test named in BACKTRACE_TESTS (cuda-gdb also
      # debugs host code; the image has no gdb).
      lib=$(dirname "$torch_prefix")/../lib/libtorch_cpu.so
      echo "std::filesystem symbols defined in $(basename "$lib"): $(nm -D --defined-only "$lib" 2>/dev/null |
        grep -c '_ZNSt10filesystem')" | tee "$out/filesystem-symbols.txt"
      for t in ${BACKTRACE_TESTS:-StateDict.ReadsWhatSaveStateDictWrites Engines/IoEngineTest.RejectsBadRequests/ThreadsBuffered AllocationTrace.RecordsARealStepAndReplaysIt}; do
        run "bt-${t//[\/.]/-}" 120 cuda-gdb -batch -ex run -ex bt -ex quit --args $bin/actkit_tests --gtest_filter="$t"
      done ;;
    *) echo "unknown step $step" ;;
  esac
done

echo
echo "== summary ($(head -n 2 "$out/machine.txt" | tail -n 1))"
printf '%s\n' "${summary[@]}"
