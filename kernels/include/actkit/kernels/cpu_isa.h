// Which instruction set the CPU kernels run on. Every CPU kernel is built
// once per instruction set (kernels/cpu/isa/) and the best one the processor
// and the OS support is taken at the first call, so one binary runs on any
// x86-64 (and on other architectures, the scalar build only).
//
// The environment variable ACTKIT_CPU_KERNELS=scalar|avx2|avx512 (or auto)
// forces a path, for tests and measurements; a path this machine cannot run
// falls back to the best one it can, with one line on stderr. Every path
// writes the same bytes (tests/kernels/test_cpu_isa.cpp).
#pragma once

#include <cstdint>

namespace actkit::kernels {

enum class CpuIsa : uint8_t {
  kScalar = 0,  // the architecture's baseline (x86-64: SSE2), vectorized by the compiler
  kAvx2 = 1,    // AVX2, FMA, F16C, BMI2 (x86-64-v3), 256-bit vectors
  kAvx512 = 2,  // AVX-512 F/BW/CD/DQ/VL (x86-64-v4), 512-bit vectors
};

// The path the kernels take in this process (decided once, thread-safe).
CpuIsa cpu_isa();
// Whether this build has the path and this machine can run it.
bool cpu_isa_supported(CpuIsa isa);
// "scalar", "avx2", "avx512".
const char* cpu_isa_name(CpuIsa isa);
// Parses a name as above; false for anything else ("auto" included).
bool parse_cpu_isa(const char* name, CpuIsa* out);

}  // namespace actkit::kernels
