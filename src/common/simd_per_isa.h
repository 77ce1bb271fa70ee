// Includes the loop file named by ZERO_SIMD_LOOPS once per instruction set (no include guard:
// on purpose), in namespaces avx512 and avx2 of the includer's namespace, each with `Ops`
// (common/simd_ops.h) and ZERO_SIMD_TARGET (that instruction set's function attribute) set:
//   #define ZERO_SIMD_LOOPS "optim/adam_kernels_simd.h"
//   #include "common/simd_per_isa.h"
//   #undef ZERO_SIMD_LOOPS
// On other architectures it includes nothing: the includer's scalar loops run.
#if defined(__x86_64__)
namespace avx512 {
using Ops = ::zero::simd::avx512::Ops;
#define ZERO_SIMD_TARGET ZERO_AVX512_TARGET
#include ZERO_SIMD_LOOPS
#undef ZERO_SIMD_TARGET
}  // namespace avx512

namespace avx2 {
using Ops = ::zero::simd::avx2::Ops;
#define ZERO_SIMD_TARGET ZERO_AVX2_TARGET
#include ZERO_SIMD_LOOPS
#undef ZERO_SIMD_TARGET
}  // namespace avx2
#endif  // defined(__x86_64__)
