// How fast this CPU multiplies matrices in each compute dtype, measured with libtorch's own
// kernels at start-up (a few tens of milliseconds, once per process).
//
// 16-bit GEMMs are not always fast on CPUs: with AVX-512 BF16 or AMX they run at or above the
// fp32 rate, but on an AVX2-only CPU libtorch falls back to kernels 10-45x slower than fp32
// (docs/benchmarks.md). zero uses these rates to resolve `"compute_data_type": "auto"`
// (docs/config.md) and to warn, once, when a config asks for a 16-bit compute dtype that this
// CPU computes slowly.
//
//   const zero::GemmRates& rates = zero::measured_gemm_rates();
//   if (rates.slow(at::kBFloat16)) std::puts(rates.describe(at::kBFloat16).c_str());
//
// The environment variable ZERO_GEMM_RATES (src/common/env.h) replaces measurements, e.g.
// "fp32=80,bf16=8": tests use it to act as a CPU of the other kind.
#pragma once

#include "zero/export.h"

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace zero {

/// A 16-bit dtype counts as slow when its GEMMs run at most 1/kSlowGemmFactor of the fp32
/// rate. The CPUs seen so far are far from it on either side (AVX2: 10-45x slower; AVX-512
/// BF16 / AMX: faster), so ranks measuring with some noise still agree.
constexpr double kSlowGemmFactor = 2.0;

class ZERO_API GemmRates {
 public:
  /// GFLOP/s of a training step's three GEMM layouts (forward x W, backward dy W^T and x^T dy;
  /// 128 rows, 256 x 512 weights) in `dtype` (fp32, bf16 or fp16) on the current libtorch
  /// thread count; measured on first use of each dtype and kept.
  double gflops(at::ScalarType dtype) const;
  /// fp32 rate / `dtype` rate: how many times slower `dtype` computes (below 1: faster).
  double slowdown(at::ScalarType dtype) const;
  /// slowdown(dtype) >= kSlowGemmFactor. Always false for fp32.
  bool slow(at::ScalarType dtype) const;
  /// One line: "bf16 GEMMs run 9.8x slower than fp32 on this CPU (AMD EPYC; avx2 f16c, no
  /// avx512_bf16/amx_bf16; 8.1 vs 79 GFLOP/s)".
  std::string describe(at::ScalarType dtype) const;

  /// The CPU's model name (/proc/cpuinfo) and the instruction-set flags that decide 16-bit
  /// speed which it has (avx2, f16c, avx512f, avx512_bf16, avx512_fp16, amx_bf16, amx_fp16).
  const std::string& cpu_model() const { return cpu_model_; }
  const std::vector<std::string>& isa_flags() const { return isa_flags_; }

 private:
  friend const GemmRates& measured_gemm_rates();
  GemmRates();
  std::string cpu_model_;
  std::vector<std::string> isa_flags_;
  mutable double rate_[3] = {0, 0, 0};  // fp32, bf16, fp16; 0: not measured yet
};

/// This process's rates (thread-safe; each dtype is measured on first use).
ZERO_API const GemmRates& measured_gemm_rates();

}  // namespace zero
