#!/usr/bin/env bash
# TAH-Quant's CPU encoder at another revision against the working tree's,
# in one run: each kernel (kernels/cpu/tah_cpu.cpp, and today its variant
# files) is compiled with the kernel flags and -march=native into the same
# small driver, and the two
# drivers take turns, three rounds, on one thread. Each round times a
# single-thread memcpy, the token entropies alone and the whole encode of a
# 42 x 512 x 768 fp32 activation, Gaussian and with outlier channels (every
# 128th channel 20x larger, as `actkit bench codec`'s tah-outl rows), and
# prints a digest of the payloads, which must agree between the two.
#
#   scripts/compare-tah-kernel.sh REVISION [OUT_DIR]
#
# Needs g++ and libtbb-dev (scripts/setup.sh installs both) and git; the
# other kernel headers come from the working tree, so REVISION must be one
# whose tah_cpu.cpp builds against them and alone (dc245c4 or earlier: later
# ones split it into a driver and variant files).
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/compare-tah-kernel.sh REVISION [OUT_DIR]}"
out="${2:-build/compare-tah-kernel}"
mkdir -p "$out"
git show "$rev:kernels/cpu/tah_cpu.cpp" > "$out/tah_cpu_old.cpp"
cat > "$out/driver.cpp" <<'CPP'
#include <tbb/global_control.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "actkit/kernels/tah.h"

using namespace actkit::kernels;

template <typename F>
double gbps(double bytes, F&& f) {  // best of the repetitions within 0.7 s
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(700));
  return bytes / best / 1e9;
}

int main() {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  const int64_t T = 42 * 512, C = 768;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> gauss(size_t(T * C)), outl(size_t(T * C)), dst(size_t(T * C));
  for (size_t i = 0; i < gauss.size(); ++i) {
    gauss[i] = normal(rng);
    outl[i] = gauss[i] * (i % C % 128 == 0 ? 20.0f : 1.0f);
  }
  TahLayout L;
  L.num_tokens = T;
  L.channels = C;
  L.group_size = 64;
  L.high_bits = 4;
  L.low_bits = 3;
  L.high_tokens = (T * 4 + 2) / 5;
  std::vector<uint8_t> payload(static_cast<size_t>(L.total_bytes()));
  std::vector<float> entropy(static_cast<size_t>(T));
  const double bytes = double(T * C) * 4;
  const double memcpy_gbps = gbps(bytes, [&] { std::memcpy(dst.data(), gauss.data(), size_t(bytes)); });
  uint64_t digest = 1469598103934665603ull;
  for (const auto* x : {&gauss, &outl}) {
    const double entropy_gbps =
        gbps(bytes, [&] { tah_entropy_cpu(x->data(), FloatType::kFloat32, T, C, entropy.data()); });
    TahEncodeArgs a;
    a.input = x->data();
    a.layout = L;
    a.payload = payload.data();
    const double encode_gbps = gbps(bytes, [&] {
      std::memset(payload.data(), 0, payload.size());
      if (tah_encode_cpu(a) != EncodeStatus::kOk) std::abort();
    });
    for (uint8_t b : payload) digest = (digest ^ b) * 1099511628211ull;
    std::printf("%s %.3f %.3f %.3f\n", x == &gauss ? "gaussian" : "outliers", memcpy_gbps, entropy_gbps,
                encode_gbps);
  }
  std::printf("digest %016llx\n", static_cast<unsigned long long>(digest));
}
CPP
flags=(-std=c++17 -O3 -march=native -fopenmp-simd -ffp-contract=off -fno-trapping-math -Ikernels/include
       -Ikernels/cpu)
g++ "${flags[@]}" "$out/driver.cpp" "$out/tah_cpu_old.cpp" -o "$out/old" -ltbb
# Since the kernels choose their instruction set at run time, the working
# tree's TAH driver needs the dispatcher and the variant files; they are built
# here as the one (scalar-named) variant with the same -march=native as the old
# side, so both sides get the same instructions.
g++ "${flags[@]}" -DACTKIT_CPU_ISA=isa_scalar "$out/driver.cpp" kernels/cpu/tah_cpu.cpp kernels/cpu/cpu_isa.cpp \
  kernels/cpu/isa/*.cpp -o "$out/new" -ltbb
for round in 1 2 3; do
  "$out/old" > "$out/old-r$round.txt"
  "$out/new" > "$out/new-r$round.txt"
done
python3 - "$out" "$rev" <<'PY'
import statistics, sys
out, rev = sys.argv[1], sys.argv[2]
def rounds(kernel):
    runs = []
    for r in (1, 2, 3):
        lines = open(f"{out}/{kernel}-r{r}.txt").read().split("\n")
        runs.append({l.split()[0]: l.split()[1:] for l in lines if l})
    return runs
old, new = rounds("old"), rounds("new")
digests = {run["digest"][0] for run in old + new}
assert len(digests) == 1, f"the payloads differ: {digests}"
print(f"payload digest {digests.pop()} from both kernels")
print(f"| input | kernel | memcpy GB/s | entropies GB/s | encode GB/s | encode ÷ memcpy |")
print("| --- | --- | --- | --- | --- | --- |")
for name in ("gaussian", "outliers"):
    enc = {}
    for kernel, runs in ((rev, old), ("working tree", new)):
        med = [statistics.median(float(run[name][i]) for run in runs) for i in range(3)]
        enc[kernel] = med[2]
        print(f"| {name} | {kernel} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {med[2] / med[0]:.3f} |")
    print(f"| {name} | speed-up | | | {enc['working tree'] / enc[rev]:.2f}x | |")
PY
