// The vector instruction set zero's hand-written loops (the reduction kernels of src/comm, the
// fused optimizer of src/optim) may use on this CPU, decided once at run time: one build runs
// on every x86-64 CPU and uses what each one has.
#pragma once

namespace zero {

enum class SimdLevel {
  kScalar,  // no AVX2 (or not x86-64): plain loops
  kAvx2,    // AVX2 with F16C (16-bit conversions)
  kAvx512,  // AVX-512 F, BW and VL with F16C
};

/// This CPU's level (cached after the first call; thread-safe).
SimdLevel simd_level();

}  // namespace zero
