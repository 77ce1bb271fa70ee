// Note [Fused element-wise kernels] (src/kernels/fused_kernels.h): bias + GELU and residual add
// + LayerNorm against ATen's composition of the same operations, forward and gradients, in
// fp32, bf16 and fp16; GELU bit for bit at every SIMD level this CPU has; results independent of
// the thread count; the exp they use; GPT-2 trained fused as unfused, and unfused exactly as
// ATen's operations.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/simd_ops.h"
#include "kernels/fused_kernels.h"
#include "kernels/fused_ops.h"
#include "simd_levels.h"
#include "zero/gpt2.h"

namespace zero::test {
namespace {

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype,
                 double scale = 1.0) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, generator, at::TensorOptions().dtype(at::kFloat)).mul_(scale).to(dtype);
}

// Restores fusion as the process had it when a test ends.
struct FusedScope {
  bool saved = fused::enabled();
  explicit FusedScope(bool on) { fused::set_enabled(on); }
  ~FusedScope() { fused::set_enabled(saved); }
};

// |ours - want| <= atol + rtol |want| everywhere, in fp32.
::testing::AssertionResult close(const at::Tensor& ours, const at::Tensor& want, double rtol,
                                 double atol) {
  const at::Tensor o = ours.to(at::kFloat), w = want.to(at::kFloat);
  const at::Tensor excess = (o - w).abs() - (w.abs() * rtol + atol);
  const double worst = excess.max().item<double>();
  if (worst <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "exceeds the tolerance by " << worst << " (max |diff| "
         << (o - w).abs().max().item<double>() << ")";
}

// Relative tolerance of one computation in `dtype` against its fp32 form rounded to it: a few
// units of the dtype's last place (fp32: the kernels' and ATen's orders of summation differ).
double rtol_of(at::ScalarType dtype) {
  return dtype == at::kFloat ? 2e-5 : dtype == at::kBFloat16 ? 2.0 / 128 : 2.0 / 1024;
}

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

TEST(FusedKernels, ExpIsWithinTwoUlpsOfStdExp) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 200000.0f;
    const double want = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst = std::max(worst, std::abs(simd::exp_reference(x) - want) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(simd::exp_reference(-1000.0f), simd::exp_reference(simd::kExpMin));
  EXPECT_TRUE(std::isfinite(simd::exp_reference(1000.0f)));
}

// gelu(u + b) and its gradients against ATen's gelu on the fp32 sum (rounded once to the dtype:
// the fused kernel rounds once where the composition rounds u + b first).
TEST(FusedKernels, BiasGeluMatchesTheComposition) {
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    // 37 x 203: rows across blocks and a tail past the vector width at every level.
    const at::Tensor u0 = randn({37, 203}, 1, dtype, 2.0), b0 = randn({203}, 2, dtype);
    const at::Tensor g = randn({37, 203}, 3, dtype);
    const at::Tensor uw = u0.to(at::kFloat).requires_grad_(true);
    const at::Tensor bw = b0.to(at::kFloat).requires_grad_(true);
    const at::Tensor want = at::gelu(uw + bw, "tanh");
    want.backward(g.to(at::kFloat));
    for (const SimdLevel level : levels()) {
      SCOPED_TRACE(level_name(level));
      const at::Tensor out = kernels::bias_gelu(u0, b0, level);
      ASSERT_EQ(out.scalar_type(), dtype);
      EXPECT_TRUE(close(out, want.detach().to(dtype), rtol_of(dtype), 1e-6));
      const kernels::BiasGeluGrads grads = kernels::bias_gelu_backward(g, u0, b0, level);
      EXPECT_TRUE(close(grads.input, uw.grad().to(dtype), rtol_of(dtype), 1e-5));
      // The bias's gradient is a sum of 37 rows: their rounding errors add up.
      EXPECT_TRUE(close(grads.bias, bw.grad().to(dtype), rtol_of(dtype), 1e-4));
    }
  }
}

TEST(FusedKernels, BiasGeluIsBitwiseTheScalarLoopAtEveryLevel) {
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor u = randn({70, 131}, 4, dtype, 3.0), b = randn({131}, 5, dtype);
    const at::Tensor g = randn({70, 131}, 6, dtype);
    const at::Tensor ref = kernels::bias_gelu(u, b, SimdLevel::kScalar);
    const kernels::BiasGeluGrads ref_grads =
        kernels::bias_gelu_backward(g, u, b, SimdLevel::kScalar);
    for (const SimdLevel level : levels()) {
      SCOPED_TRACE(level_name(level));
      EXPECT_TRUE(at::equal(kernels::bias_gelu(u, b, level), ref));
      const kernels::BiasGeluGrads grads = kernels::bias_gelu_backward(g, u, b, level);
      EXPECT_TRUE(at::equal(grads.input, ref_grads.input));
      EXPECT_TRUE(at::equal(grads.bias, ref_grads.bias));
    }
  }
}

// Extreme inputs: the exp saturates without overflow (gelu -> 0 below, -> v above), in the
// vector lanes as in the tail (35 values: two AVX-512 vectors and three more).
TEST(FusedKernels, BiasGeluAtTheTails) {
  const at::Tensor extremes = at::tensor({-1e4f, -60.0f, -10.0f, 0.0f, 10.0f, 60.0f, 1e4f});
  const at::Tensor u = extremes.repeat({5}).view({1, 35});
  const at::Tensor b = at::zeros({35});
  for (const SimdLevel level : levels()) {
    const at::Tensor out = kernels::bias_gelu(u, b, level);
    EXPECT_TRUE(close(out, at::gelu(u, "tanh"), 1e-6, 1e-30)) << level_name(level);
    EXPECT_TRUE(at::isfinite(kernels::bias_gelu_backward(at::ones_like(u), u, b, level).input)
                    .all()
                    .item<bool>());
  }
}

// {x + a, LN(x + a)} and the gradients of a loss that uses both (so the residual's gradient
// is added), against ATen's add and layer_norm in fp32 on the same 16-bit values.
TEST(FusedKernels, ResidualLayerNormMatchesTheComposition) {
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t C = 203;  // a tail past the vector width at every level
    const at::Tensor x0 = randn({3, 13, C}, 7, dtype), a0 = randn({3, 13, C}, 8, dtype);
    const at::Tensor w0 = randn({C}, 9, dtype).add_(1.0), b0 = randn({C}, 10, dtype, 0.1);
    const at::Tensor gy = randn({3, 13, C}, 11, dtype), gh = randn({3, 13, C}, 12, dtype);
    // The reference: the sum rounded to the dtype (as both forms keep it), then fp32.
    const at::Tensor h_ref = (x0.to(at::kFloat) + a0.to(at::kFloat)).to(dtype).to(at::kFloat);
    const at::Tensor hw = h_ref.clone().requires_grad_(true);
    const at::Tensor ww = w0.to(at::kFloat).requires_grad_(true);
    const at::Tensor bw = b0.to(at::kFloat).requires_grad_(true);
    const at::Tensor y_ref = at::layer_norm(hw, {C}, ww, bw, 1e-5);
    y_ref.backward(gy.to(at::kFloat));
    const at::Tensor dh_ref = hw.grad() + gh.to(at::kFloat);
    for (const SimdLevel level : levels()) {
      SCOPED_TRACE(level_name(level));
      const kernels::ResidualNorm out = kernels::residual_layer_norm(x0, a0, w0, b0, 1e-5, level);
      EXPECT_TRUE(at::equal(out.sum.to(at::kFloat), h_ref));
      EXPECT_TRUE(close(out.normalized, y_ref.detach().to(dtype), rtol_of(dtype), 1e-5));
      const kernels::ResidualNormGrads grads = kernels::residual_layer_norm_backward(
          gy, gh, out.sum, out.mean, out.rstd, w0, level);
      EXPECT_TRUE(close(grads.input, dh_ref.to(dtype), rtol_of(dtype), 1e-4));
      EXPECT_TRUE(close(grads.weight, ww.grad().to(dtype), rtol_of(dtype), 1e-4));
      EXPECT_TRUE(close(grads.bias, bw.grad().to(dtype), rtol_of(dtype), 1e-4));
      // Without a residual gradient: LayerNorm's input gradient alone.
      const kernels::ResidualNormGrads alone = kernels::residual_layer_norm_backward(
          gy, at::Tensor(), out.sum, out.mean, out.rstd, w0, level);
      EXPECT_TRUE(close(alone.input, hw.grad().to(dtype), rtol_of(dtype), 1e-4));
    }
  }
}

// RMSNorm (Llama's), with and without the residual add, against its composition in fp32 on the
// same 16-bit values: y = h / sqrt(mean(h^2) + eps) * w, and the gradients of a loss using h
// and y.
TEST(FusedKernels, ResidualRmsNormMatchesTheComposition) {
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t C = 203;  // a tail past the vector width at every level
    const at::Tensor x0 = randn({3, 13, C}, 27, dtype), a0 = randn({3, 13, C}, 28, dtype);
    const at::Tensor w0 = randn({C}, 29, dtype).add_(1.0);
    const at::Tensor gy = randn({3, 13, C}, 31, dtype), gh = randn({3, 13, C}, 32, dtype);
    for (const bool residual : {true, false}) {
      SCOPED_TRACE(residual ? "x + a" : "x alone");
      const at::Tensor h_ref =
          residual ? (x0.to(at::kFloat) + a0.to(at::kFloat)).to(dtype).to(at::kFloat)
                   : x0.to(at::kFloat);
      const at::Tensor hw = h_ref.clone().requires_grad_(true);
      // A copy even in fp32 (to() would return w0 itself, whose gradient would accumulate).
      const at::Tensor ww = w0.to(at::kFloat).clone().requires_grad_(true);
      const at::Tensor y_ref = hw * at::rsqrt(hw.pow(2).mean(-1, true) + 1e-5) * ww;
      y_ref.backward(gy.to(at::kFloat));
      for (const SimdLevel level : levels()) {
        SCOPED_TRACE(level_name(level));
        const kernels::ResidualNorm out =
            kernels::residual_rms_norm(x0, residual ? a0 : at::Tensor(), w0, 1e-5, level);
        EXPECT_TRUE(at::equal(out.sum.to(at::kFloat), h_ref));
        EXPECT_FALSE(out.mean.defined());
        EXPECT_TRUE(close(out.normalized, y_ref.detach().to(dtype), rtol_of(dtype), 1e-5));
        if (dtype != at::kFloat) {
          // Note [RMSNorm's rounding]: transformers' form, x̂ rounded to the dtype before the
          // scale. Only x̂'s last fp32 bit (the sum's order, rsqrt) may differ, so nearly every
          // element is equal; rounding once instead leaves about a quarter unequal.
          const at::Tensor xhat = (hw * at::rsqrt(hw.pow(2).mean(-1, true) + 1e-5)).detach();
          const at::Tensor hf = (w0 * xhat.to(dtype)).to(dtype);
          const double equal = out.normalized.eq(hf).to(at::kDouble).mean().item<double>();
          EXPECT_GE(equal, 0.995) << "of the elements equal to transformers' rounding";
        }
        const at::Tensor grad_sum = residual ? gh : at::Tensor();
        const kernels::ResidualNormGrads grads =
            kernels::residual_rms_norm_backward(gy, grad_sum, out.sum, out.rstd, w0, level);
        const at::Tensor dh_ref = residual ? hw.grad() + gh.to(at::kFloat) : hw.grad();
        EXPECT_TRUE(close(grads.input, dh_ref.to(dtype), rtol_of(dtype), 1e-4));
        EXPECT_TRUE(close(grads.weight, ww.grad().to(dtype), rtol_of(dtype), 1e-4));
        EXPECT_FALSE(grads.bias.defined());
      }
    }
  }
}

// Fixed row blocks and block-ordered partial sums: the same bits on 1 thread and on 2.
TEST(FusedKernels, ResultsDoNotDependOnTheThreadCount) {
  const int threads = at::get_num_threads();
  const at::Tensor x = randn({300, 256}, 13, at::kFloat), a = randn({300, 256}, 14, at::kFloat);
  const at::Tensor w = randn({256}, 15, at::kFloat), b = randn({256}, 16, at::kFloat);
  const at::Tensor g = randn({300, 256}, 17, at::kFloat);
  const auto run = [&] {
    const kernels::ResidualNorm n = kernels::residual_layer_norm(x, a, w, b, 1e-5);
    const kernels::ResidualNormGrads ng =
        kernels::residual_layer_norm_backward(g, g, n.sum, n.mean, n.rstd, w);
    const kernels::BiasGeluGrads bg = kernels::bias_gelu_backward(g, x, b);
    const kernels::ResidualNorm r = kernels::residual_rms_norm(x, a, w, 1e-5);
    const kernels::ResidualNormGrads rg =
        kernels::residual_rms_norm_backward(g, g, r.sum, r.rstd, w);
    return std::vector<at::Tensor>{n.normalized, ng.input, ng.weight, ng.bias, bg.input, bg.bias,
                                   r.normalized, rg.input, rg.weight};
  };
  at::set_num_threads(1);
  const auto one = run();
  at::set_num_threads(2);
  const auto two = run();
  at::set_num_threads(threads);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i;
}

// The differentiable operations: fused, through autograd, as ATen's composition; unfused,
// ATen's composition itself (the same bits).
TEST(FusedKernels, OperationsThroughAutograd) {
  const at::Tensor x0 = randn({4, 9, 64}, 18, at::kFloat), a0 = randn({4, 9, 64}, 19, at::kFloat);
  const at::Tensor w0 = randn({64}, 20, at::kFloat), b0 = randn({64}, 21, at::kFloat);
  const auto run = [&](bool on) {
    FusedScope scope(on);
    std::vector<at::Tensor> leaves = {x0.clone().requires_grad_(true),
                                      a0.clone().requires_grad_(true),
                                      w0.clone().requires_grad_(true),
                                      b0.clone().requires_grad_(true)};
    const auto [h, y] = fused::residual_layer_norm(leaves[0], leaves[1], leaves[2], leaves[3], 1e-5);
    const at::Tensor g = fused::bias_gelu(y, leaves[3]);
    const auto [rh, ry] = fused::residual_rms_norm(g, leaves[1], leaves[2], 1e-5);
    const at::Tensor r = fused::rms_norm(ry, leaves[2], 1e-6);
    // The fused path is the one taken when on (the autograd nodes are ours), not when off.
    const std::string norm_node = h.grad_fn()->name(), gelu_node = g.grad_fn()->name();
    EXPECT_EQ(norm_node.find("ResidualLayerNorm") != std::string::npos, on) << norm_node;
    EXPECT_EQ(gelu_node.find("BiasGelu") != std::string::npos, on) << gelu_node;
    const std::string rms_node = rh.grad_fn()->name(), plain_node = r.grad_fn()->name();
    EXPECT_EQ(rms_node.find("ResidualRmsNorm") != std::string::npos, on) << rms_node;
    EXPECT_EQ(plain_node.find("RmsNorm") != std::string::npos, on) << plain_node;
    (h.sum() * 0.5 + (g * g).sum() + (rh * rh).sum() * 0.25 + (r * r).sum()).backward();
    std::vector<at::Tensor> out = {h.detach(), g.detach(), rh.detach(), r.detach()};
    for (const at::Tensor& leaf : leaves) out.push_back(leaf.grad());
    return out;
  };
  const auto fused_results = run(true), composed = run(false);
  for (size_t i = 0; i < composed.size(); ++i) {
    EXPECT_TRUE(close(fused_results[i], composed[i], 1e-4, 1e-5)) << i;
  }
  // Unfused is ATen's composition, bit for bit.
  const at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor h = x + a0;
  const at::Tensor g = at::gelu(at::layer_norm(h, {64}, w0, b0, 1e-5) + b0, "tanh");
  EXPECT_TRUE(at::equal(composed[1], g));
}

// GPT-2's loss and gradients with the block's kernels fused and unfused (fp32, bf16, fp16).
TEST(FusedKernels, Gpt2TrainsFusedAsUnfused) {
  auto config = gpt2::GPT2Config::preset("gpt2-tiny");
  config.n_layer = 2;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(0);
    auto model = std::make_shared<gpt2::GPT2Impl>(config);
    model->to(dtype);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(22);
    const at::Tensor tokens = at::randint(0, config.vocab_size, {2, 33}, generator);
    const at::Tensor x = tokens.narrow(1, 0, 32), y = tokens.narrow(1, 1, 32);
    const auto run = [&](bool on) {
      FusedScope scope(on);
      model->zero_grad();
      const at::Tensor loss = model->forward_loss(x, y);
      loss.backward();
      std::vector<at::Tensor> grads;
      for (const auto& p : model->parameters()) grads.push_back(p.grad().reshape({-1}).to(at::kFloat));
      return std::make_pair(loss.item<double>(), at::cat(grads));
    };
    // The model's block takes the fused path for its parameters' dtype.
    EXPECT_TRUE(fused::fuses(at::zeros({2, config.n_embd}, dtype),
                             model->transformer->h[0]->as<gpt2::BlockImpl>()->ln_2->weight));
    const auto [fused_loss, fused_grads] = run(true);
    const auto [loss, grads] = run(false);
    const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_NEAR(fused_loss, loss, tolerance * loss);
    EXPECT_LT((fused_grads - grads).norm().item<double>(), tolerance * grads.norm().item<double>());
  }
}

}  // namespace
}  // namespace zero::test
