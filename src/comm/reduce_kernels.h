// Elementwise reductions of the ring collectives (see Note [MPI ring order] in
// src/comm/mpi_communicator.cpp):
//
//   reduce_into:  dst[i] = op(dst[i], src[i])     for i in [0, n)
//   reduce_to:    out[i] = op(a[i], b[i])         (out may be a or b exactly; else disjoint)
//
// Sum: fp32 and fp64 add natively; bf16 and fp16 convert both operands to fp32, add, and round
// the sum to nearest-even in the 16-bit type (what at::add_ does on bf16/fp16 tensors). The
// addition is commutative, so the operand order does not matter; the ring decides the
// association. Max: the larger value; a NaN in either operand gives NaN.
//
// The family of kernels is chosen once per process from what the CPU supports (AVX-512 for
// the 16-bit sums, AVX2 + F16C otherwise, plain loops as the last resort). The scalar family
// is the reference, plain loops over c10::BFloat16/c10::Half, that every other family must
// match bit for bit (the tests compare them on special values: NaN, infinities, subnormals,
// rounding ties; only NaN payloads may differ).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "zero/comm.h"

namespace zero::comm {

// The dtypes the kernels accept: comm::is_reducible_dtype (comm/collective_call.h).

/// Kernel families, narrowest first. kScalar is the reference: plain loops over c10 types.
enum class KernelFamily { kScalar, kAvx2, kAvx512 };

/// The widest family this CPU runs (AVX-512 F/BW/VL; AVX2 + F16C; else scalar).
KernelFamily best_kernel_family();
const char* kernel_family_name(KernelFamily family);

/// out[i] = op(a[i], b[i]) with the given family (at most best_kernel_family()).
void reduce_to(KernelFamily family, ReduceOp op, c10::ScalarType dtype, void* out,
               const void* a, const void* b, int64_t n);

/// out[i] = op(a[i], b[i]) with the best family. `out` may be `a` or `b`; no other overlap.
inline void reduce_to(ReduceOp op, c10::ScalarType dtype, void* out, const void* a,
                      const void* b, int64_t n) {
  reduce_to(best_kernel_family(), op, dtype, out, a, b, n);
}

/// dst[i] = op(dst[i], src[i]) with the best family.
inline void reduce_into(ReduceOp op, c10::ScalarType dtype, void* dst, const void* src,
                        int64_t n) {
  reduce_to(op, dtype, dst, dst, src, n);
}

}  // namespace zero::comm
