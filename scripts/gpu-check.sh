#!/usr/bin/env bash
# GPU verification in one go, for a machine with a PyTorch 2.x CUDA wheel and
# no package registry (H100/H200 device machines).
#
#   bash scripts/gpu-check.sh fetch   on a Debian 12 build machine: downloads
#                                     the .deb files the GPU machine lacks
#                                     into .deb/ (git-ignored; carry it over)
#   bash scripts/gpu-check.sh         on the GPU machine: unpacks .deb/,
#                                     configures against the wheel's LibTorch,
#                                     builds, runs the tests (CUDA equality
#                                     included) and the GPU codec benchmark,
#                                     and prints a table. Logs and JSON go to
#                                     $OUT when set, else build-gpu/out.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

debs=(libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libhwloc15 libgtest-dev libgmock-dev
      libbenchmark-dev libbenchmark1debian libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9
      liburing-dev liburing2)

if [ "${1:-}" = "fetch" ]; then
  mkdir -p .deb
  (cd .deb && apt-get download "${debs[@]}")
  ls -la .deb
  exit 0
fi

out="${OUT:-$root/build-gpu/out}"
mkdir -p "$out"
deb_root="$root/.deb/root"
if compgen -G ".deb/*.deb" >/dev/null; then
  rm -rf "$deb_root" && mkdir -p "$deb_root"
  for f in .deb/*.deb; do dpkg -x "$f" "$deb_root"; done
fi
export LD_LIBRARY_PATH="$deb_root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

python=${PYTHON:-python3}
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
echo "torch $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.compiled_with_cxx11_abi())')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deb_root/usr" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DACTKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ACTKIT_CUDA_ARCH:-90}" 2>&1 | tee "$out/configure.log"
cmake --build build-gpu -j "$(nproc)" 2>&1 | tail -n 30 | tee "$out/build.log"

set +e
build-gpu/bin/actkit_tests --gtest_brief=1 2>&1 | tee "$out/tests.log"
tests_rc=${PIPESTATUS[0]}
set -e
build-gpu/bin/actkit --version
build-gpu/bin/actkit bench codec --device cuda --size 1GiB --json "$out/bench-codec-cuda.json" | tee "$out/bench-cuda.txt"
build-gpu/bin/actkit bench codec --json "$out/bench-codec-cpu.json" | tee "$out/bench-cpu.txt"
# Device memory per level and max batch on the real device (issue figures).
build-gpu/bin/actkit memory --model resnet50 --batch 64 --image-size 224 --levels L0,L1,L2,L3,L4 \
  --json "$out/memory-resnet50-cuda.json" | tee "$out/memory-cuda.txt" || true
build-gpu/bin/actkit maxbatch --model resnet50 --image-size 224 --device cuda --levels L0,L3,L4 \
  --json "$out/maxbatch-resnet50-cuda.json" | tee "$out/maxbatch-cuda.txt" || true
build-gpu/bin/actkit bench swap --dir "${SWAP_DIR:-/tmp}" --size 4GiB --repeats 3 \
  --json "$out/bench-swap.json" | tee "$out/bench-swap.txt" || true

echo
echo "== summary"
echo "GPU: $(cat "$out/gpu.txt")"
echo "unit tests (CUDA equality included): $([ "$tests_rc" -eq 0 ] && echo passed || echo FAILED rc=$tests_rc)"
grep -E "^(codec|pergroup|mask|device copy)" "$out/bench-cuda.txt"
exit "$tests_rc"
