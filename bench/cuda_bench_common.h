// What the CUDA benchmarks share (bench_cuda, bench_offload_cuda): the measured bf16 GEMM peak
// that MFU is taken against, timing, and the FLOPs of a GPT-2 training token.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>

#include <chrono>

#include "zero/gpt2.h"

namespace zero::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The GPU's bf16 GEMM rate in FLOP/s: 8192^3 products after warm-up (the MFU denominator).
inline double bf16_gemm_peak_flops() {
  const at::TensorOptions options = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  const int64_t n = 8192;
  const at::Tensor a = at::randn({n, n}, options), b = at::randn({n, n}, options);
  for (int i = 0; i < 3; ++i) (void)at::matmul(a, b);
  c10::cuda::device_synchronize();
  const int reps = 10;
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) (void)at::matmul(a, b);
  c10::cuda::device_synchronize();
  return 2.0 * n * n * n * reps / seconds_since(start);
}

/// Training FLOPs per token as llm.c and nanoGPT count them: 6N + 12 L d T (N parameters, L
/// layers, d width, T tokens of context); a checkpointed block's recompute is not counted.
inline double flops_per_token(const gpt2::GPT2Config& shape, int64_t seq) {
  return 6.0 * static_cast<double>(shape.num_parameters()) +
         12.0 * static_cast<double>(shape.n_layer * shape.n_embd * seq);
}

}  // namespace zero::bench
