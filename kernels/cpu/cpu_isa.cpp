// Choosing the CPU kernels' instruction-set variant (cpu_isa.h).
#include "actkit/kernels/cpu_isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "isa/isa_kernels.h"

namespace actkit::kernels {
namespace {

bool machine_runs(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return true;
#if defined(ACTKIT_CPU_ISA_X86)
    // The compiler runtime's checks include the OS's saving of the vector
    // registers (XCR0). GCC 12 names the levels; elsewhere their features
    // (F16C and MOVBE, which other compilers cannot ask for, come with every
    // processor that has AVX2, FMA and BMI2).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
    case CpuIsa::kAvx2: return __builtin_cpu_supports("x86-64-v3");
    case CpuIsa::kAvx512: return __builtin_cpu_supports("x86-64-v4");
#else
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
             __builtin_cpu_supports("bmi2");
    case CpuIsa::kAvx512:
      return machine_runs(CpuIsa::kAvx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
#else
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512: return false;
#endif
  }
  return false;
}

CpuIsa best_supported() {
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

CpuIsa choose() {
  const char* env = std::getenv("ACTKIT_CPU_KERNELS");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return best_supported();
  CpuIsa wanted;
  if (!parse_cpu_isa(env, &wanted)) {
    std::fprintf(stderr, "actkit: ACTKIT_CPU_KERNELS=%s is not scalar, avx2, avx512 or auto; using %s\n", env,
                 cpu_isa_name(best_supported()));
    return best_supported();
  }
  if (!cpu_isa_supported(wanted)) {
    std::fprintf(stderr, "actkit: ACTKIT_CPU_KERNELS=%s: this machine (or build) cannot run it; using %s\n", env,
                 cpu_isa_name(best_supported()));
    return best_supported();
  }
  return wanted;
}

const cpu::IsaKernels& table_of(CpuIsa isa) {
  switch (isa) {
#if defined(ACTKIT_CPU_ISA_X86)
    case CpuIsa::kAvx512: return isa_avx512::table();
    case CpuIsa::kAvx2: return isa_avx2::table();
#endif
    default: return isa_scalar::table();
  }
}

}  // namespace

bool cpu_isa_supported(CpuIsa isa) { return machine_runs(isa); }

CpuIsa cpu_isa() {
  static const CpuIsa chosen = choose();
  return chosen;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool parse_cpu_isa(const char* name, CpuIsa* out) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (std::strcmp(name, cpu_isa_name(isa)) == 0) {
      *out = isa;
      return true;
    }
  }
  return false;
}

namespace cpu {

const IsaKernels& isa_kernels() {
  static const IsaKernels& chosen = table_of(cpu_isa());
  return chosen;
}

}  // namespace cpu
}  // namespace actkit::kernels
