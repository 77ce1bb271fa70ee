// Note [Fused element-wise kernels on a GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The CUDA form of Note [Fused element-wise kernels] (src/kernels/fused_kernels.h): the same
// operations, the same per-element formulas (src/kernels/fused_formulas.h, shared line for
// line with the CPU's scalar loops), fp32 arithmetic whatever the dtype, results rounded once
// (RMSNorm's output twice, Note [RMSNorm's rounding]). The layout of the work:
//   - the norms' forward and input gradient: one warp per row, lanes striding over the
//     columns (coalesced), the row's sums by a butterfly of shuffles (every lane ends with the
//     same bits); a lane reads back only the elements it wrote, so no barrier is needed;
//   - the column sums (LayerNorm's weight and bias gradients, the bias gradient of GELU): a
//     block of kColumnTile columns x kColumnLanes lanes per column takes column_partial_rows
//     rows, each lane every kColumnLanes-th row, the lanes' sums added in lane order into one
//     fp32 partial per block; a second kernel adds a column's partials with one warp (lane l
//     takes partials l, l + 32, ... in order, then the butterfly). No atomics, so the results
//     are the same bits run after run (the engines' bitwise comparisons between stages hold on
//     a GPU as on a CPU), and they depend on the row count only;
//   - bias + GELU forward: element-wise over a grid-stride loop.
// Against the CPU kernels the results differ by summation order, by nvcc's contraction of
// multiply-adds into FMAs and by expf (up to 2 ulp): a few fp32 ulps, or one rounding of a
// 16-bit dtype. Checked against them by tests/test_cuda_kernels.cpp's CudaKernels tests
// (scripts/gpu-check.sh tier 1), which have not yet run on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/fused_kernels.cuh"
#include "kernels/fused_formulas.h"

namespace zero::cuda_kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;        // warps (rows) per block of the row kernels
constexpr int kColumnsPerSumBlock = 8;  // warps (columns) per block of sum_partials_kernel
constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// The butterfly: every lane ends with the same sum (a + b and b + a are the same bits).
__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// sigmoid at GELU's argument, with the device's expf (within 2 ulp; the CPU's within 1).
__device__ inline float gelu_sigmoid(float v) {
  return 1.0f / (1.0f + expf(kernels::formula::gelu_exponent(v)));
}

// One warp per row: h = x + a (rounded, stored), mean and rstd, y = LN(h) w + b (or RMSNorm).
template <typename T, bool kRms>
__global__ void residual_norm_forward_kernel(const T* x, const T* a, const T* weight,
                                             const T* bias, T* sum, T* y, float* mean_out,
                                             float* rstd_out, int64_t rows, int64_t width,
                                             float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp: row is the same for its lanes
  const int64_t at = row * width;
  const T* h = a != nullptr ? sum + at : x + at;
  float total = 0.0f;
  for (int64_t k = lane; k < width; k += kWarp) {
    if (a != nullptr) {
      const T hk = from_float<T>(to_float(x[at + k]) + to_float(a[at + k]));
      sum[at + k] = hk;
      total += to_float(hk);
    } else {
      total += to_float(x[at + k]);
    }
  }
  const float inv_width = 1.0f / static_cast<float>(width);
  const float mean = kRms ? 0.0f : warp_sum(total) * inv_width;
  float squares = 0.0f;
  for (int64_t k = lane; k < width; k += kWarp) {
    const float d = to_float(h[k]) - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(warp_sum(squares) * inv_width + eps);
  if (lane == 0) {
    if (!kRms) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  for (int64_t k = lane; k < width; k += kWarp) {
    float xhat = (to_float(h[k]) - mean) * rstd;
    if (kRms) xhat = to_float(from_float<T>(xhat));  // Note [RMSNorm's rounding]
    const float scaled = xhat * to_float(weight[k]);
    y[at + k] = from_float<T>(kRms ? scaled : scaled + to_float(bias[k]));
  }
}

// One warp per row: dh = LN'(dy) + dh_residual, rounded once.
template <typename T, bool kRms>
__global__ void residual_norm_input_grad_kernel(const T* grad_y, const T* grad_sum, const T* h,
                                                const float* mean, const float* rstd,
                                                const T* weight, T* grad_input, int64_t rows,
                                                int64_t width) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int64_t at = row * width;
  const float row_mean = kRms ? 0.0f : mean[row];
  const float row_rstd = rstd[row];
  float sum_dyw = 0.0f, sum_dyw_xhat = 0.0f;
  for (int64_t k = lane; k < width; k += kWarp) {
    const float xhat = (to_float(h[at + k]) - row_mean) * row_rstd;
    const float dyw = to_float(grad_y[at + k]) * to_float(weight[k]);
    sum_dyw += dyw;
    sum_dyw_xhat += dyw * xhat;
  }
  const float inv_width = 1.0f / static_cast<float>(width);
  const float mean_dyw = kRms ? 0.0f : warp_sum(sum_dyw) * inv_width;
  const float mean_dyw_xhat = warp_sum(sum_dyw_xhat) * inv_width;
  for (int64_t k = lane; k < width; k += kWarp) {
    const float xhat = (to_float(h[at + k]) - row_mean) * row_rstd;
    const float dyw = to_float(grad_y[at + k]) * to_float(weight[k]);
    float dx = kernels::formula::norm_input_grad(dyw, xhat, row_rstd, mean_dyw, mean_dyw_xhat);
    if (grad_sum != nullptr) dx += to_float(grad_sum[at + k]);
    grad_input[at + k] = from_float<T>(dx);
  }
}

// The block's lanes' sums, added in lane order, to its partial (row blockIdx.y of partials).
// Every thread of the block must call it (a barrier).
__device__ inline void store_column_partial(float value, float* partials, int64_t column,
                                            int64_t width) {
  __shared__ float lanes[kColumnLanes][kColumnTile];
  lanes[threadIdx.y][threadIdx.x] = value;
  __syncthreads();
  if (threadIdx.y == 0 && column < width) {
    float total = 0.0f;
    for (int lane = 0; lane < kColumnLanes; ++lane) total += lanes[lane][threadIdx.x];
    partials[static_cast<int64_t>(blockIdx.y) * width + column] = total;
  }
}

// The norm's weight and bias gradients, one partial per block of rows (Note above).
template <typename T, bool kRms>
__global__ void norm_parameter_partials_kernel(const T* grad_y, const T* h, const float* mean,
                                               const float* rstd, float* weight_partials,
                                               float* bias_partials, int64_t rows,
                                               int64_t width, int64_t partial_rows) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * partial_rows;
  const int64_t end = begin + partial_rows < rows ? begin + partial_rows : rows;
  float dw = 0.0f, db = 0.0f;
  if (column < width) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kColumnLanes) {
      const float dy = to_float(grad_y[row * width + column]);
      const float row_mean = kRms ? 0.0f : mean[row];
      const float xhat = (to_float(h[row * width + column]) - row_mean) * rstd[row];
      dw += dy * xhat;
      db += dy;
    }
  }
  store_column_partial(dw, weight_partials, column, width);
  if (!kRms) {
    __syncthreads();  // the shared lanes are reused
    store_column_partial(db, bias_partials, column, width);
  }
}

// out[c] = the partials of column c added in a fixed order, rounded once: one warp per column,
// lane l adds partials l, l + 32, ... in order, then the warp's butterfly.
template <typename T>
__global__ void sum_partials_kernel(const float* partials, int64_t count, int64_t width,
                                    T* out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t column =
      static_cast<int64_t>(blockIdx.x) * kColumnsPerSumBlock + threadIdx.x / kWarp;
  if (column >= width) return;  // the whole warp
  float total = 0.0f;
  for (int64_t p = lane; p < count; p += kWarp) total += partials[p * width + column];
  total = warp_sum(total);
  if (lane == 0) out[column] = from_float<T>(total);
}

template <typename T>
__global__ void bias_gelu_forward_kernel(const T* u, const T* bias, T* out, int64_t count,
                                         int64_t width) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float v = to_float(u[i]) + to_float(bias[i % width]);
    out[i] = from_float<T>(v * gelu_sigmoid(v));
  }
}

// du = dg gelu'(u + b) stored, and the bias gradient's partials (of du before its rounding,
// as the CPU kernel sums).
template <typename T>
__global__ void bias_gelu_backward_kernel(const T* grad_out, const T* u, const T* bias,
                                          T* grad_u, float* bias_partials, int64_t rows,
                                          int64_t width, int64_t partial_rows) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * partial_rows;
  const int64_t end = begin + partial_rows < rows ? begin + partial_rows : rows;
  float db = 0.0f;
  if (column < width) {
    const float b = to_float(bias[column]);
    for (int64_t row = begin + threadIdx.y; row < end; row += kColumnLanes) {
      const int64_t at = row * width + column;
      const float v = to_float(u[at]) + b;
      const float g =
          to_float(grad_out[at]) * kernels::formula::gelu_derivative(v, gelu_sigmoid(v));
      grad_u[at] = from_float<T>(g);
      db += g;
    }
  }
  store_column_partial(db, bias_partials, column, width);
}

unsigned blocks_for(int64_t count, int64_t per_block) {
  return static_cast<unsigned>((count + per_block - 1) / per_block);
}

dim3 column_grid(int64_t rows, int64_t width) {
  return dim3(blocks_for(width, kColumnTile), static_cast<unsigned>(column_partials(rows)));
}

template <typename T>
void sum_partials(const float* partials, int64_t rows, int64_t width, void* out,
                  cudaStream_t stream) {
  sum_partials_kernel<T><<<blocks_for(width, kColumnsPerSumBlock), kColumnsPerSumBlock * kWarp,
                           0, stream>>>(partials, column_partials(rows), width,
                                        static_cast<T*>(out));
}

template <typename T>
void launch_norm_forward(const NormForward& p, cudaStream_t stream) {
  const dim3 grid(blocks_for(p.rows, kRowsPerBlock));
  const dim3 block(kRowsPerBlock * kWarp);
  const auto* x = static_cast<const T*>(p.x);
  const auto* a = static_cast<const T*>(p.a);
  const auto* w = static_cast<const T*>(p.weight);
  const auto* b = static_cast<const T*>(p.bias);
  auto* h = static_cast<T*>(p.sum);
  auto* y = static_cast<T*>(p.normalized);
  if (p.rms) {
    residual_norm_forward_kernel<T, true>
        <<<grid, block, 0, stream>>>(x, a, w, b, h, y, p.mean, p.rstd, p.rows, p.width, p.eps);
  } else {
    residual_norm_forward_kernel<T, false>
        <<<grid, block, 0, stream>>>(x, a, w, b, h, y, p.mean, p.rstd, p.rows, p.width, p.eps);
  }
}

template <typename T>
void launch_norm_backward(const NormBackward& p, cudaStream_t stream) {
  const auto* dy = static_cast<const T*>(p.grad_normalized);
  const auto* dh = static_cast<const T*>(p.grad_sum);
  const auto* h = static_cast<const T*>(p.sum);
  const auto* w = static_cast<const T*>(p.weight);
  auto* gi = static_cast<T*>(p.grad_input);
  const bool rms = p.mean == nullptr;
  const dim3 rows_grid(blocks_for(p.rows, kRowsPerBlock));
  const dim3 rows_block(kRowsPerBlock * kWarp);
  const dim3 columns_block(kColumnTile, kColumnLanes);
  const int64_t partial_rows = column_partial_rows(p.rows);
  if (rms) {
    residual_norm_input_grad_kernel<T, true>
        <<<rows_grid, rows_block, 0, stream>>>(dy, dh, h, p.mean, p.rstd, w, gi, p.rows, p.width);
    norm_parameter_partials_kernel<T, true><<<column_grid(p.rows, p.width), columns_block, 0,
                                              stream>>>(dy, h, p.mean, p.rstd, p.weight_partials,
                                                        nullptr, p.rows, p.width, partial_rows);
  } else {
    residual_norm_input_grad_kernel<T, false>
        <<<rows_grid, rows_block, 0, stream>>>(dy, dh, h, p.mean, p.rstd, w, gi, p.rows, p.width);
    norm_parameter_partials_kernel<T, false><<<column_grid(p.rows, p.width), columns_block, 0,
                                               stream>>>(dy, h, p.mean, p.rstd,
                                                         p.weight_partials, p.bias_partials,
                                                         p.rows, p.width, partial_rows);
    sum_partials<T>(p.bias_partials, p.rows, p.width, p.grad_bias, stream);
  }
  sum_partials<T>(p.weight_partials, p.rows, p.width, p.grad_weight, stream);
}

template <typename T>
void launch_gelu_forward(const GeluForward& p, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t count = p.rows * p.width;
  // Enough blocks to fill any current GPU several times over; the loop strides past them.
  const int64_t blocks = count < int64_t{kThreads} * 8192 ? (count + kThreads - 1) / kThreads
                                                          : int64_t{8192};
  bias_gelu_forward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const T*>(p.u), static_cast<const T*>(p.bias), static_cast<T*>(p.out), count,
      p.width);
}

template <typename T>
void launch_gelu_backward(const GeluBackward& p, cudaStream_t stream) {
  bias_gelu_backward_kernel<T><<<column_grid(p.rows, p.width), dim3(kColumnTile, kColumnLanes),
                                 0, stream>>>(
      static_cast<const T*>(p.grad_out), static_cast<const T*>(p.u),
      static_cast<const T*>(p.bias), static_cast<T*>(p.grad_u), p.bias_partials, p.rows,
      p.width, column_partial_rows(p.rows));
  sum_partials<T>(p.bias_partials, p.rows, p.width, p.grad_bias, stream);
}

// fn(T{}) for the element type; the launch's error (or an earlier one of this thread's).
template <typename Fn>
cudaError_t with_element(Element element, Fn&& fn) {
  switch (element) {
    case Element::kFloat: fn(float{}); break;
    case Element::kBFloat16: fn(__nv_bfloat16{}); break;
    case Element::kHalf: fn(__half{}); break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t residual_norm_forward(Element element, const NormForward& args, cudaStream_t stream) {
  if (args.rows == 0 || args.width == 0) return cudaSuccess;
  return with_element(element, [&](auto t) { launch_norm_forward<decltype(t)>(args, stream); });
}

cudaError_t residual_norm_backward(Element element, const NormBackward& args,
                                   cudaStream_t stream) {
  if (args.rows == 0 || args.width == 0) return cudaSuccess;
  return with_element(element, [&](auto t) { launch_norm_backward<decltype(t)>(args, stream); });
}

cudaError_t bias_gelu_forward(Element element, const GeluForward& args, cudaStream_t stream) {
  if (args.rows == 0 || args.width == 0) return cudaSuccess;
  return with_element(element, [&](auto t) { launch_gelu_forward<decltype(t)>(args, stream); });
}

cudaError_t bias_gelu_backward(Element element, const GeluBackward& args, cudaStream_t stream) {
  if (args.rows == 0 || args.width == 0) return cudaSuccess;
  return with_element(element, [&](auto t) { launch_gelu_backward<decltype(t)>(args, stream); });
}

}  // namespace zero::cuda_kernels
