// The CUDA fused kernels' launchers (Note [Fused element-wise kernels on a GPU],
// fused_kernels.cu): raw pointers and a stream, no libtorch, so that nvcc compiles them without
// torch's headers (one CUDA source whatever the torch version) and the C++ side
// (src/cuda/fused_kernels_cuda.cpp) owns tensors, allocation and checks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace zero::cuda_kernels {

enum class Element { kFloat, kBFloat16, kHalf };

/// Threads per column in a column-sum block (the block is kColumnTile x kColumnLanes).
constexpr int kColumnLanes = 8;
constexpr int kColumnTile = 32;
/// At most this many fp32 partials per column (the workspace is [partials, width]).
constexpr int64_t kMaxColumnPartials = 1024;

/// Rows of one fp32 column partial in the backward kernels' column sums: partial p sums rows
/// [p * partial_rows, (p + 1) * partial_rows). Fixed by the row count alone, so that the sums'
/// order (and their bits) depends on nothing else: at least 32 rows (4 per lane), a multiple
/// of kColumnLanes, and few enough partials.
inline int64_t column_partial_rows(int64_t rows) {
  int64_t per = (rows + kMaxColumnPartials - 1) / kMaxColumnPartials;
  if (per < 4 * kColumnLanes) per = 4 * kColumnLanes;
  return (per + kColumnLanes - 1) / kColumnLanes * kColumnLanes;
}
inline int64_t column_partials(int64_t rows) {
  const int64_t per = column_partial_rows(rows);
  return rows <= 0 ? 1 : (rows + per - 1) / per;
}

struct NormForward {
  const void* x;       // [rows, width]
  const void* a;       // [rows, width] or null (RMSNorm of x alone: h is x)
  const void* weight;  // [width]
  const void* bias;    // [width] or null (RMSNorm)
  void* sum;           // h = x + a [rows, width]; unused without a
  void* normalized;    // [rows, width]
  float* mean;         // [rows] or null (RMSNorm)
  float* rstd;         // [rows]
  int64_t rows, width;
  float eps;
  bool rms;
};
cudaError_t residual_norm_forward(Element element, const NormForward& args, cudaStream_t stream);

struct NormBackward {
  const void* grad_normalized;  // [rows, width]
  const void* grad_sum;         // [rows, width] or null: the gradient reaching h by the residual
  const void* sum;              // h
  const float* mean;            // null: RMSNorm
  const float* rstd;
  const void* weight;
  void* grad_input;             // [rows, width]
  float* weight_partials;       // workspace [column_partials(rows), width]
  float* bias_partials;         // the same, or null (RMSNorm)
  void* grad_weight;            // [width]
  void* grad_bias;              // [width] or null (RMSNorm)
  int64_t rows, width;
};
cudaError_t residual_norm_backward(Element element, const NormBackward& args,
                                   cudaStream_t stream);

struct GeluForward {
  const void* u;     // [rows, width]
  const void* bias;  // [width]
  void* out;         // [rows, width]
  int64_t rows, width;
};
cudaError_t bias_gelu_forward(Element element, const GeluForward& args, cudaStream_t stream);

struct GeluBackward {
  const void* grad_out;  // [rows, width]
  const void* u;
  const void* bias;
  void* grad_u;          // [rows, width]
  float* bias_partials;  // workspace [column_partials(rows), width]
  void* grad_bias;       // [width]
  int64_t rows, width;
};
cudaError_t bias_gelu_backward(Element element, const GeluBackward& args, cudaStream_t stream);

}  // namespace zero::cuda_kernels
