// The per-element formulas of the fused kernels (Note [Fused element-wise kernels],
// kernels/fused_kernels.h), written once for the CPU kernels' scalar loops and the CUDA kernels
// (src/cuda/kernels/fused_kernels.cu): plain float arithmetic, no includes, so nvcc and the C++
// compiler read the same lines. Each is one expression in the order the CPU's vector loops
// repeat operation for operation (fused_kernels_simd.h): changing one changes bits there too,
// which tests/test_fused_kernels.cpp's vector-against-scalar checks catch.
#pragma once

#if defined(__CUDACC__)
#define ZERO_HOST_DEVICE __host__ __device__
#else
#define ZERO_HOST_DEVICE
#endif

namespace zero::kernels::formula {

// tanh-GELU as v sigmoid(k v (1 + a v^2)): k = 2 sqrt(2 / pi), a = 0.044715 (HF's "gelu_new").
constexpr float kGeluK = 1.5957691216057308f;
constexpr float kGeluA = 0.044715f;

/// The exponent e of GELU's sigmoid s = 1 / (1 + exp(e)) at v (each device takes its own exp).
ZERO_HOST_DEVICE inline float gelu_exponent(float v) {
  const float v2 = v * v;
  const float inner = v * (1.0f + kGeluA * v2);
  return -kGeluK * inner;
}

/// d/dv of v s(v), from v and s = sigmoid at v.
ZERO_HOST_DEVICE inline float gelu_derivative(float v, float s) {
  const float v2 = v * v;
  const float slope = kGeluK * (1.0f + (3.0f * kGeluA) * v2);
  const float ds = (s * (1.0f - s)) * slope;
  return s + v * ds;
}

/// A norm's input gradient at one element: xhat = (h - mean) rstd, dyw = dy w, and the row's
/// means of dyw and dyw xhat (mean_dyw is 0 for RMSNorm, which has no mean to subtract).
ZERO_HOST_DEVICE inline float norm_input_grad(float dyw, float xhat, float rstd, float mean_dyw,
                                              float mean_dyw_xhat) {
  return rstd * ((dyw - mean_dyw) - xhat * mean_dyw_xhat);
}

}  // namespace zero::kernels::formula
