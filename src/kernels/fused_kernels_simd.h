// The fused kernels' row loops (Note [Fused element-wise kernels], fused_kernels.h), written once
// over a vector type and included once per instruction set by fused_kernels.cpp through
// common/simd_per_isa.h (no include guard: on purpose), which sets ZERO_SIMD_TARGET (the
// instruction set's function attribute) and Ops (common/simd_ops.h). The includer defines the
// scalar forms (gelu_sigmoid, the *_tail loops) that finish each row.
// Element-wise steps are the scalar forms' operations in the same order, one IEEE-rounded
// instruction each (no FMA), so GELU's results equal the scalar loop's bit for bit; LayerNorm's
// row sums are taken across lanes (another order than the scalar loop's).

using F = Ops::F;
constexpr int64_t W = Ops::kLanes;

// simd::exp_reference, operation for operation.
[[gnu::always_inline]] ZERO_SIMD_TARGET inline F vexp(F x) {
  x = Ops::min(Ops::max(x, Ops::set1(simd::kExpMin)), Ops::set1(simd::kExpMax));
  const F n = Ops::round(Ops::mul(x, Ops::set1(simd::kLog2e)));
  F r = Ops::sub(x, Ops::mul(n, Ops::set1(simd::kLn2Hi)));
  r = Ops::sub(r, Ops::mul(n, Ops::set1(simd::kLn2Lo)));
  const F r2 = Ops::mul(r, r);
  F y = Ops::set1(simd::kExpP[0]);
  for (int i = 1; i < 6; ++i) y = Ops::add(Ops::mul(y, r), Ops::set1(simd::kExpP[i]));
  y = Ops::add(Ops::add(Ops::mul(y, r2), r), Ops::set1(1.0f));
  return Ops::mul(y, Ops::pow2(n));
}

// gelu_sigmoid (fused_kernels.cpp) over lanes: s = 1 / (1 + exp(-k v (1 + a v^2))).
[[gnu::always_inline]] ZERO_SIMD_TARGET inline F vsigmoid_term(F v) {
  const F v2 = Ops::mul(v, v);
  const F inner = Ops::mul(v, Ops::add(Ops::set1(1.0f), Ops::mul(Ops::set1(kGeluA), v2)));
  const F e = vexp(Ops::mul(Ops::set1(-kGeluK), inner));
  return Ops::div(Ops::set1(1.0f), Ops::add(Ops::set1(1.0f), e));
}

template <typename T>
ZERO_SIMD_TARGET void bias_gelu_rows(const T* u, const T* bias, T* out, int64_t row_begin,
                                     int64_t row_end, int64_t width) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* in = u + row * width;
    T* o = out + row * width;
    int64_t j = 0;
    for (; j + W <= width; j += W) {
      const F v = Ops::add(Ops::load_grad(in + j), Ops::load_grad(bias + j));
      Ops::store_param(o + j, Ops::mul(v, vsigmoid_term(v)));
    }
    bias_gelu_tail(in, bias, o, j, width);
  }
}

// grad_u = grad_out * gelu'(u + bias); grad_bias_partial[j] += grad_u[j] over the rows (fp32).
template <typename T>
ZERO_SIMD_TARGET void bias_gelu_backward_rows(const T* grad_out, const T* u, const T* bias,
                                              T* grad_u, float* grad_bias_partial,
                                              int64_t row_begin, int64_t row_end, int64_t width) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t at = row * width;
    int64_t j = 0;
    for (; j + W <= width; j += W) {
      const F v = Ops::add(Ops::load_grad(u + at + j), Ops::load_grad(bias + j));
      const F s = vsigmoid_term(v);
      const F v2 = Ops::mul(v, v);
      // d/dv [v s] = s + v s (1 - s) k (1 + 3a v^2)
      const F slope = Ops::mul(Ops::set1(kGeluK),
                               Ops::add(Ops::set1(1.0f), Ops::mul(Ops::set1(3.0f * kGeluA), v2)));
      const F ds = Ops::mul(Ops::mul(s, Ops::sub(Ops::set1(1.0f), s)), slope);
      const F derivative = Ops::add(s, Ops::mul(v, ds));
      const F g = Ops::mul(Ops::load_grad(grad_out + at + j), derivative);
      Ops::store_param(grad_u + at + j, g);
      Ops::store(grad_bias_partial + j, Ops::add(Ops::load(grad_bias_partial + j), g));
    }
    bias_gelu_backward_tail(grad_out + at, u + at, bias, grad_u + at, grad_bias_partial, j, width);
  }
}

// Per row: h = x + a (rounded to T, as the unfused sum is; without `a` h is x itself and is
// not written), then LayerNorm of h, or RMSNorm when `rms` (the mean taken as 0, no bias).
template <typename T>
ZERO_SIMD_TARGET void residual_layer_norm_rows(const T* x, const T* a, const T* weight,
                                               const T* bias, T* h, T* y, float* mean_out,
                                               float* rstd_out, int64_t row_begin,
                                               int64_t row_end, int64_t width, float eps,
                                               bool rms) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t at = row * width;
    const T* hr = a != nullptr ? h + at : x + at;  // the row of h
    F sum = Ops::zero();
    int64_t j = 0;
    if (a != nullptr) {
      for (; j + W <= width; j += W) {
        Ops::store_param(h + at + j,
                         Ops::add(Ops::load_grad(x + at + j), Ops::load_grad(a + at + j)));
        sum = Ops::add(sum, Ops::load_grad(h + at + j));  // the stored (rounded) value
      }
      for (int64_t k = j; k < width; ++k) {
        h[at + k] = static_cast<T>(static_cast<float>(x[at + k]) + static_cast<float>(a[at + k]));
      }
    } else if (!rms) {
      for (; j + W <= width; j += W) sum = Ops::add(sum, Ops::load_grad(hr + j));
    }
    float mean = 0;
    if (!rms) {
      float total = Ops::reduce_add(sum);
      for (int64_t k = j; k < width; ++k) total += static_cast<float>(hr[k]);
      mean = total / static_cast<float>(width);
    }
    const F mean_v = Ops::set1(mean);
    F squares = Ops::zero();
    for (j = 0; j + W <= width; j += W) {
      const F d = Ops::sub(Ops::load_grad(hr + j), mean_v);
      squares = Ops::add(squares, Ops::mul(d, d));
    }
    float square_total = Ops::reduce_add(squares);
    for (int64_t k = j; k < width; ++k) {
      const float d = static_cast<float>(hr[k]) - mean;
      square_total += d * d;
    }
    const float rstd = 1.0f / std::sqrt(square_total / static_cast<float>(width) + eps);
    if (mean_out != nullptr) mean_out[row] = mean;
    rstd_out[row] = rstd;
    const F rstd_v = Ops::set1(rstd);
    for (j = 0; j + W <= width; j += W) {
      F xhat = Ops::mul(Ops::sub(Ops::load_grad(hr + j), mean_v), rstd_v);
      if (rms && !std::is_same_v<T, float>) {  // rounded to T first: Note [RMSNorm's rounding]
        Ops::store_param(y + at + j, xhat);
        xhat = Ops::load_grad(y + at + j);
      }
      const F scaled = Ops::mul(xhat, Ops::load_grad(weight + j));
      Ops::store_param(y + at + j,
                       bias != nullptr ? Ops::add(scaled, Ops::load_grad(bias + j)) : scaled);
    }
    layer_norm_output_tail(hr, weight, bias, y + at, mean, rstd, rms, j, width);
  }
}

// Per row: dh = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) + grad_h; the weight's and bias's
// gradients summed into the fp32 partials. RMSNorm (`mean` null): the mean and its term are 0,
// and there is no bias (`grad_bias_partial` null).
template <typename T>
ZERO_SIMD_TARGET void residual_layer_norm_backward_rows(
    const T* grad_y, const T* grad_h, const T* h, const float* mean, const float* rstd,
    const T* weight, T* grad_input, float* grad_weight_partial, float* grad_bias_partial,
    int64_t row_begin, int64_t row_end, int64_t width) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t at = row * width;
    const float row_mean = mean != nullptr ? mean[row] : 0.0f;
    const F mean_v = Ops::set1(row_mean), rstd_v = Ops::set1(rstd[row]);
    F sum_dyw = Ops::zero(), sum_dyw_xhat = Ops::zero();
    int64_t j = 0;
    for (; j + W <= width; j += W) {
      const F dy = Ops::load_grad(grad_y + at + j);
      const F xhat = Ops::mul(Ops::sub(Ops::load_grad(h + at + j), mean_v), rstd_v);
      const F dyw = Ops::mul(dy, Ops::load_grad(weight + j));
      sum_dyw = Ops::add(sum_dyw, dyw);
      sum_dyw_xhat = Ops::add(sum_dyw_xhat, Ops::mul(dyw, xhat));
      Ops::store(grad_weight_partial + j, Ops::add(Ops::load(grad_weight_partial + j), Ops::mul(dy, xhat)));
      if (grad_bias_partial != nullptr) {
        Ops::store(grad_bias_partial + j, Ops::add(Ops::load(grad_bias_partial + j), dy));
      }
    }
    float s1 = Ops::reduce_add(sum_dyw), s2 = Ops::reduce_add(sum_dyw_xhat);
    const int64_t vector_end = j;
    layer_norm_sums_tail(grad_y + at, h + at, weight, row_mean, rstd[row], grad_weight_partial,
                         grad_bias_partial, j, width, s1, s2);
    const float inv_width = 1.0f / static_cast<float>(width);
    const float mean_dyw = mean != nullptr ? s1 * inv_width : 0.0f;
    const F m1 = Ops::set1(mean_dyw), m2 = Ops::set1(s2 * inv_width);
    for (j = 0; j < vector_end; j += W) {
      const F xhat = Ops::mul(Ops::sub(Ops::load_grad(h + at + j), mean_v), rstd_v);
      const F dyw = Ops::mul(Ops::load_grad(grad_y + at + j), Ops::load_grad(weight + j));
      F dx = Ops::mul(rstd_v, Ops::sub(Ops::sub(dyw, m1), Ops::mul(xhat, m2)));
      if (grad_h != nullptr) dx = Ops::add(dx, Ops::load_grad(grad_h + at + j));
      Ops::store_param(grad_input + at + j, dx);
    }
    layer_norm_input_grad_tail(grad_y + at, grad_h == nullptr ? nullptr : grad_h + at, h + at,
                               weight, row_mean, rstd[row], mean_dyw, s2 * inv_width,
                               grad_input + at, vector_end, width);
  }
}
