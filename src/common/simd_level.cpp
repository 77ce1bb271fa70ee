#include "common/simd_level.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace zero {
namespace {

SimdLevel detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // F16C by CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
  // It needs only the AVX register state, which AVX2 support below already implies.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  if (!f16c || !__builtin_cpu_supports("avx2")) return SimdLevel::kScalar;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return SimdLevel::kAvx512;
  }
  return SimdLevel::kAvx2;
#else
  return SimdLevel::kScalar;
#endif
}

}  // namespace

SimdLevel simd_level() {
  static const SimdLevel level = detect();
  return level;
}

}  // namespace zero
