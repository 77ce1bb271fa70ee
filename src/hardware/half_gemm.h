// fp16 (and bf16) GEMMs at the speed of the best kernel the CPU has.
//
// Note [fp16 GEMMs on CPUs without fp16 arithmetic]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// ATen's CPU GEMM for c10::Half is vectorized where the CPU computes in fp16 (avx512_fp16, or
// AMX-FP16 through oneDNN); elsewhere mm/addmm, above all with a transposed operand as every
// backward has, fall to a scalar loop with fp32 arithmetic (fp16_dot_with_fp32_arith): on AMD
// Zen 4 (avx512_bf16, no avx512_fp16) a gpt2-tiny fp16 step ran 15x the fp32 step, 94 % of it
// there. On such CPUs zero runs an fp16 GEMM as an fp32 GEMM on converted copies of its
// operands, then rounds the result to fp16 once: products accumulated in fp32 and one
// rounding, the arithmetic the scalar loop does too, so results agree with ATen's to fp16
// rounding (the summation order differs). The copies are transient; what autograd saves for
// the backward stays fp16 (addmm below).
// Operations that multiply inside and do more than one GEMM compute fp16 inputs on any CPU in
// fp32 and round their results to fp16 once (computes_in_fp32 below): GPT-2's attention (SDPA,
// whose CPU kernels multiply fp16 blocks) and the fused LM head (whose every block of logits
// would be rounded to fp16 only to be widened again for its log-softmax and next GEMM). Measured
// on a Xeon with avx512_fp16, where ATen's fp16 GEMMs run at the fp32 rate: the gpt2-tiny step
// took 1.33-1.47x the fp32 step with both in fp16, 1.03-1.19x with both in fp32, by either
// GEMM path (docs/benchmarks.md); attention keeps fp32 q, k, v and output for its backward
// (Note [GPT-2 activation memory] counts them).
//   - path(kHalf): kViaFp32 on CPUs without avx512_fp16 and amx_fp16, kNative on the others
//     (where the two paths measured alike: decided by the flags, so every run of a job computes
//     the same bits); ZERO_FP16_GEMM=native|fp32 (src/common/env.h) chooses instead.
//   - path(kBFloat16) the same way by the bf16 flags: an fp32 GEMM of widened bf16 operands is
//     exactly a bf16 GEMM's arithmetic (bf16 products are exact in fp32, accumulated in fp32,
//     rounded once), and on CPUs without avx512_bf16 and amx_bf16 (AVX2-only ones, where ATen's
//     bf16 GEMMs ran 10-45x slower than fp32) it is the fast one; bf16 attention and LM head
//     then compute in fp32 too. With avx512_bf16 but no AMX the faster path depends on the CPU
//     (AMD Zen 4: bf16 faster than fp32; a Xeon VM without AMX: ATen's bf16 at half the fp32
//     rate, its gpt2-tiny step 1.9x fp32's, 1.09x via fp32): the native path stays there,
//     because a measured choice sat too near its line on that Xeon (a probe ratio of 1.30-1.39,
//     where a run and its resumed run could choose differently and lose bitwise resumption).
//     ZERO_BF16_GEMM=fp32 takes the fp32 path on such a CPU (docs/config.md).
//   - Only 16-bit CPU tensors take the fp32 path; every other dtype and device calls ATen as
//     is, so fp32 results, and 16-bit ones on the native path, keep their bits.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "zero/export.h"

namespace zero::half_gemm {

enum class Path { kNative, kViaFp32 };

/// The path `dtype` (fp16 or bf16) CPU GEMMs take in this process (decided on first use per
/// dtype; set_path replaces it).
ZERO_INTERNAL_API Path path(at::ScalarType dtype = at::kHalf);
/// For tests and benchmarks: every later call for `dtype` takes `path`.
ZERO_INTERNAL_API void set_path(Path path, at::ScalarType dtype = at::kHalf);
/// "via fp32" | "native".
ZERO_INTERNAL_API const char* path_name(Path path);

/// Whether GEMMs on `t` go via fp32 (16-bit, on the CPU, its path() kViaFp32).
ZERO_INTERNAL_API bool via_fp32(const at::Tensor& t);
/// Whether an operation that multiplies inside (attention, the fused LM head) computes `t` in
/// fp32 and rounds its results once: on the CPU, fp16 whatever its path, bf16 on the fp32 path.
ZERO_INTERNAL_API bool computes_in_fp32(const at::Tensor& t);
/// The same for a tensor of `dtype` on the CPU (the memory planner's question).
ZERO_INTERNAL_API bool computes_in_fp32(at::ScalarType dtype);

/// What to pass for an operand used in many GEMMs (the LM head's weight, once per block of
/// rows): its fp32 copy when fp16 CPU GEMMs go via fp32, else `t` itself. The functions below
/// take the path by their first operand and accept the other already converted.
ZERO_INTERNAL_API at::Tensor operand(const at::Tensor& t);

/// a @ b (at::mm), by path() for 16-bit CPU operands.
ZERO_INTERNAL_API at::Tensor mm(const at::Tensor& a, const at::Tensor& b);
/// out = a @ b (at::mm_out).
ZERO_INTERNAL_API void mm_out(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
/// out = beta * self + alpha * (a @ b) (at::addmm_out; `out` may be `self`).
ZERO_INTERNAL_API void addmm_out(const at::Tensor& out, const at::Tensor& self,
                                 const at::Tensor& a, const at::Tensor& b, double beta,
                                 double alpha);
/// bias + x @ weight (at::addmm with autograd; at::mm when `bias` is undefined): x [N, in],
/// weight [in, out] (a transposed view is fine), bias [out]. On the fp32 path an autograd
/// function of its own, whose backward runs its GEMMs in fp32 too and which saves x and weight
/// as they are (fp16), not their fp32 copies.
ZERO_INTERNAL_API at::Tensor addmm(const at::Tensor& bias, const at::Tensor& x,
                                   const at::Tensor& weight);

}  // namespace zero::half_gemm
