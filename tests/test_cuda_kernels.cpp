// Note [Fused element-wise kernels on a GPU] (src/cuda/kernels/fused_kernels.cu): the CUDA
// kernels against the CPU kernels (their reference: Note [Fused element-wise kernels], tested
// against ATen in tests/test_fused_kernels.cpp) on copies of the same inputs, forward and
// gradients, in fp32, bf16 and fp16, at widths and row counts that exercise the kernels' edges
// (a width under a warp, one not a multiple of 32, over 4096; row counts around the column
// partials' blocks and their cap); the same bits run after run; through autograd against ATen's
// composition on the GPU (LayerNorm, RMSNorm and GELU); no rows; a stream other than the
// default; GPT-2's loss and gradients fused as composed; attention on a fused SDPA backend
// without layout copies. Tolerances: fp32 1e-5 relative (summation order, FMAs), bf16 and
// fp16 one rounding of the dtype (a sum that lands the other side of a rounding boundary);
// column sums over R rows, accumulated in fp32 whatever the dtype, 1e-6 R more (about 16
// times fp32's accumulated rounding), stated per check.
// Without a GPU the GPU tests skip; what needs none (the kernels registered by linking, the
// column partials' plan) runs everywhere.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/fused_kernels_cuda.h"
#include "cuda/kernels/fused_kernels.cuh"
#include "kernels/device_kernels.h"
#include "kernels/fused_kernels.h"
#include "kernels/fused_ops.h"
#include "zero/comm_nccl.h"
#include "zero/gpt2.h"

namespace zero::test {
namespace {

// Skips without a GPU; with one, the kernels must be registered (else the test stops here).
#define ZERO_REQUIRE_CUDA()                                                                  \
  do {                                                                                       \
    if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: needs a GPU";       \
    ASSERT_NE(kernels::cuda_kernels(), nullptr) << "no CUDA kernels registered";             \
  } while (0)

// This process's GPU, as the programs pick it (zero::cuda_device_for_local_rank).
at::Device gpu() {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(default_cuda_device()));
}

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return {1e-2, 1e-2};  // 2^-8 relative: one bf16 rounding
    case at::kHalf: return {2e-3, 2e-3};      // 2^-11
    default: return {1e-5, 1e-5};
  }
}

// The GPU result against the reference (a CPU tensor), in fp32, within `roundings` of the
// dtype's tolerance, plus 1e-6 per row summed (`summed_rows`: a column sum's fp32 rounding).
void expect_close(const at::Tensor& gpu_result, const at::Tensor& reference, const char* what,
                  double roundings = 1.0, int64_t summed_rows = 0) {
  ASSERT_TRUE(gpu_result.defined() && reference.defined()) << what;
  ASSERT_EQ(gpu_result.sizes(), reference.sizes()) << what;
  ASSERT_EQ(gpu_result.scalar_type(), reference.scalar_type()) << what;
  const Tolerance t = tolerance_of(reference.scalar_type());
  const at::Tensor got = gpu_result.cpu().to(at::kFloat), want = reference.to(at::kFloat);
  const at::Tensor excess = (got - want).abs() -
                            (want.abs() * t.rtol + t.atol) * roundings -
                            1e-6 * static_cast<double>(summed_rows);
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": largest difference " << (got - want).abs().max().item<double>()
      << " at magnitude " << want.abs().max().item<double>();
}

at::Tensor random(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, generator).to(dtype);
}

// random() on this process's GPU; a leaf that requires grad.
at::Tensor on_gpu(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  return random(std::move(shape), seed, dtype).to(gpu());
}
at::Tensor leaf_on_gpu(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  return on_gpu(std::move(shape), seed, dtype).requires_grad_(true);
}

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf};
// {rows, width}: under a warp wide, not a multiple of 32, GPT-2's width, a partial's edge, the
// partials' cap (40000 rows: 40 per partial, 1000 partials), wider than 4096.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {5, 33}, {37, 768}, {1030, 64}, {40000, 40}, {3, 4100}};

// After ZERO_REQUIRE_CUDA(), which asserts that it is there.
const kernels::DeviceKernels& table() { return *kernels::cuda_kernels(); }

TEST(CudaKernels, RegisteredByLinkingLibzeroCuda) {
  // No GPU needed: the table is registered when libzero_cuda (here, its object) is loaded.
  const kernels::DeviceKernels* k = kernels::cuda_kernels();
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k, &cuda_fused_kernels());
  EXPECT_FALSE(k->supported(at::ones({4})));  // a CPU tensor is not theirs
  EXPECT_FALSE(k->supported(at::Tensor()));
}

TEST(CudaKernels, ColumnPartialsCoverEveryRowOnce) {
  for (int64_t rows = 0; rows < 300000; rows = rows < 100 ? rows + 1 : rows * 5 / 4 + 7) {
    const int64_t per = cuda_kernels::column_partial_rows(rows);
    const int64_t partials = cuda_kernels::column_partials(rows);
    EXPECT_EQ(per % cuda_kernels::kColumnLanes, 0) << rows;
    EXPECT_GE(per, 4 * cuda_kernels::kColumnLanes) << rows;
    EXPECT_LE(partials, cuda_kernels::kMaxColumnPartials) << rows;
    EXPECT_GE(partials, 1) << rows;
    if (rows > 0) {
      EXPECT_GE(partials * per, rows) << rows;       // every row in a partial
      EXPECT_LT((partials - 1) * per, rows) << rows;  // and no partial empty
    }
  }
}

TEST(CudaKernels, ResidualLayerNormMatchesTheCpuKernels) {
  ZERO_REQUIRE_CUDA();
  const at::Device device = gpu();
  for (const at::ScalarType dtype : kDtypes) {
    for (const auto& [rows, width] : kShapes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(rows) + " x " +
                   std::to_string(width));
      const at::Tensor x = random({rows, width}, 1, dtype), a = random({rows, width}, 2, dtype);
      const at::Tensor w = random({width}, 3, dtype), b = random({width}, 4, dtype);
      const at::Tensor gy = random({rows, width}, 5, dtype), gh = random({rows, width}, 6, dtype);
      const kernels::ResidualNorm want = kernels::residual_layer_norm(x, a, w, b, 1e-5);
      const kernels::ResidualNorm got = table().residual_norm(
          x.to(device), a.to(device), w.to(device), b.to(device), 1e-5, /*rms=*/false);
      expect_close(got.sum, want.sum, "h = x + a");
      expect_close(got.normalized, want.normalized, "LayerNorm(h)");
      expect_close(got.mean, want.mean, "mean");
      expect_close(got.rstd, want.rstd, "rstd");
      for (const bool residual_gradient : {true, false}) {
        const at::Tensor grad_sum = residual_gradient ? gh : at::Tensor();
        const kernels::ResidualNormGrads want_grads = kernels::residual_layer_norm_backward(
            gy, grad_sum, want.sum, want.mean, want.rstd, w);
        const kernels::ResidualNormGrads got_grads = table().residual_norm_backward(
            gy.to(device), residual_gradient ? gh.to(device) : at::Tensor(), got.sum, got.mean,
            got.rstd, w.to(device), /*rms=*/false);
        expect_close(got_grads.input, want_grads.input, "dh");
        expect_close(got_grads.weight, want_grads.weight, "dweight", 1.0, rows);
        expect_close(got_grads.bias, want_grads.bias, "dbias", 1.0, rows);
      }
    }
  }
}

TEST(CudaKernels, RmsNormMatchesTheCpuKernels) {
  ZERO_REQUIRE_CUDA();
  const at::Device device = gpu();
  for (const at::ScalarType dtype : kDtypes) {
    for (const auto& [rows, width] : kShapes) {
      for (const bool residual : {true, false}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(rows) + " x " +
                     std::to_string(width) + (residual ? " with a residual" : " alone"));
        const at::Tensor x = random({rows, width}, 11, dtype);
        const at::Tensor a = residual ? random({rows, width}, 12, dtype) : at::Tensor();
        const at::Tensor w = random({width}, 13, dtype), gy = random({rows, width}, 14, dtype);
        const kernels::ResidualNorm want = kernels::residual_rms_norm(x, a, w, 1e-6);
        const kernels::ResidualNorm got =
            table().residual_norm(x.to(device), residual ? a.to(device) : at::Tensor(),
                                  w.to(device), at::Tensor(), 1e-6, /*rms=*/true);
        EXPECT_FALSE(got.mean.defined());
        if (residual) expect_close(got.sum, want.sum, "h = x + a");
        // RMSNorm rounds twice (Note [RMSNorm's rounding]): up to two roundings apart.
        expect_close(got.normalized, want.normalized, "RMSNorm(h)", 2.0);
        expect_close(got.rstd, want.rstd, "rstd");
        const kernels::ResidualNormGrads want_grads =
            kernels::residual_rms_norm_backward(gy, at::Tensor(), want.sum, want.rstd, w);
        const kernels::ResidualNormGrads got_grads =
            table().residual_norm_backward(gy.to(device), at::Tensor(), got.sum, at::Tensor(),
                                           got.rstd, w.to(device), /*rms=*/true);
        expect_close(got_grads.input, want_grads.input, "dh");
        expect_close(got_grads.weight, want_grads.weight, "dweight", 1.0, rows);
        EXPECT_FALSE(got_grads.bias.defined());
      }
    }
  }
}

TEST(CudaKernels, BiasGeluMatchesTheCpuKernels) {
  ZERO_REQUIRE_CUDA();
  const at::Device device = gpu();
  for (const at::ScalarType dtype : kDtypes) {
    for (const auto& [rows, width] : kShapes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(rows) + " x " +
                   std::to_string(width));
      const at::Tensor u = random({rows, width}, 21, dtype), b = random({width}, 22, dtype);
      const at::Tensor g = random({rows, width}, 23, dtype);
      expect_close(table().bias_gelu(u.to(device), b.to(device)), kernels::bias_gelu(u, b),
                   "gelu(u + b)");
      const kernels::BiasGeluGrads want = kernels::bias_gelu_backward(g, u, b);
      const kernels::BiasGeluGrads got =
          table().bias_gelu_backward(g.to(device), u.to(device), b.to(device));
      expect_close(got.input, want.input, "du");
      expect_close(got.bias, want.bias, "dbias", 1.0, rows);
    }
  }
}

TEST(CudaKernels, TheSameBitsEveryRun) {
  ZERO_REQUIRE_CUDA();
  const int64_t rows = 5000, width = 768;
  const at::ScalarType bf16 = at::kBFloat16;
  const at::Tensor x = on_gpu({rows, width}, 31, bf16), a = on_gpu({rows, width}, 32, bf16);
  const at::Tensor w = on_gpu({width}, 33, bf16), b = on_gpu({width}, 34, bf16);
  const at::Tensor gy = on_gpu({rows, width}, 35, bf16);
  std::vector<at::Tensor> first;
  for (int run = 0; run < 3; ++run) {
    const kernels::ResidualNorm n = table().residual_norm(x, a, w, b, 1e-5, false);
    const kernels::ResidualNormGrads g =
        table().residual_norm_backward(gy, gy, n.sum, n.mean, n.rstd, w, false);
    const kernels::BiasGeluGrads gelu = table().bias_gelu_backward(gy, x, w);
    const std::vector<at::Tensor> results = {n.normalized, g.input, g.weight, g.bias,
                                             gelu.input, gelu.bias};
    if (run == 0) {
      first = results;
      continue;
    }
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_TRUE(at::equal(results[i], first[i])) << "result " << i << " of run " << run;
    }
  }
}

// `pass` (forward and backward of the models' calls, returning the outputs to compare) run
// fused and then composed, each from cleared gradients: {fused, composed}, each the outputs
// followed by the leaves' gradients. Fusion is left on.
std::vector<std::vector<at::Tensor>> fused_and_composed(
    const std::vector<at::Tensor>& leaves, const std::function<std::vector<at::Tensor>()>& pass) {
  std::vector<std::vector<at::Tensor>> results;
  for (const bool fused : {true, false}) {
    fused::set_enabled(fused);
    EXPECT_EQ(fused::fuses(leaves[0], leaves[0]), fused);
    for (const at::Tensor& t : leaves) t.mutable_grad() = at::Tensor();
    results.push_back(pass());
    for (const at::Tensor& t : leaves) results.back().push_back(t.grad());
  }
  fused::set_enabled(true);
  return results;
}

// The models' calls (kernels/fused_ops.h) on GPU tensors through autograd, fused against ATen's
// composition on the same GPU: the fused path is taken (the table is there) and its gradients
// reach every input.
TEST(CudaKernels, AutogradOnTheGpuMatchesAtensComposition) {
  ZERO_REQUIRE_CUDA();
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t rows = 300, width = 96;
    const at::Tensor x = leaf_on_gpu({rows, width}, 41, dtype);
    const at::Tensor a = leaf_on_gpu({rows, width}, 42, dtype);
    const at::Tensor w = leaf_on_gpu({width}, 43, dtype), b = leaf_on_gpu({width}, 44, dtype);
    const at::Tensor u = leaf_on_gpu({rows, width}, 45, dtype);
    const at::Tensor gy = on_gpu({rows, width}, 46, dtype), gh = on_gpu({rows, width}, 47, dtype);
    const auto results = fused_and_composed({x, a, u, w, b}, [&] {
      const auto [h, y] = fused::residual_layer_norm(x, a, w, b, 1e-5);
      const at::Tensor g = fused::bias_gelu(u, b);
      torch::autograd::backward({h, y, g}, {gh, gy, gy});
      return std::vector<at::Tensor>{h.detach(), y.detach(), g.detach()};
    });
    const char* names[] = {"h", "y", "gelu", "dx", "da", "du", "dw", "db"};
    for (size_t i = 0; i < results[0].size(); ++i) {
      // ATen rounds u + b to the dtype before GELU (the fused kernel does not): a few roundings.
      expect_close(results[0][i], results[1][i].cpu(), names[i], i >= 5 ? 4.0 : 3.0,
                   i >= 5 ? rows : 0);
    }
  }
}

// Llama's norms (fused::rms_norm, a block's first, and residual_rms_norm, its second) through
// autograd on the GPU against ATen's composition there (HF's LlamaRMSNorm, rounding twice).
TEST(CudaKernels, RmsNormAutogradOnTheGpuMatchesAtensComposition) {
  ZERO_REQUIRE_CUDA();
  for (const at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t rows = 300, width = 96;
    const at::Tensor x = leaf_on_gpu({rows, width}, 61, dtype);
    const at::Tensor a = leaf_on_gpu({rows, width}, 62, dtype);
    const at::Tensor w1 = leaf_on_gpu({width}, 63, dtype), w2 = leaf_on_gpu({width}, 64, dtype);
    const at::Tensor g1 = on_gpu({rows, width}, 65, dtype), g2 = on_gpu({rows, width}, 66, dtype);
    const at::Tensor gh = on_gpu({rows, width}, 67, dtype);
    const auto results = fused_and_composed({x, a, w1, w2}, [&] {
      const at::Tensor first = fused::rms_norm(x, w1, 1e-6);
      const auto [h, second] = fused::residual_rms_norm(x, a, w2, 1e-6);
      torch::autograd::backward({first, h, second}, {g1, gh, g2});
      return std::vector<at::Tensor>{first.detach(), h.detach(), second.detach()};
    });
    const char* names[] = {"rms_norm(x)", "h", "rms_norm(h)", "dx", "da", "dw1", "dw2"};
    for (size_t i = 0; i < results[0].size(); ++i) {
      expect_close(results[0][i], results[1][i].cpu(), names[i], 3.0, i >= 5 ? rows : 0);
    }
  }
}

// No rows: nothing launched, zero parameter gradients (the CPU kernels' contract).
TEST(CudaKernels, NoRowsGiveZeroParameterGradients) {
  ZERO_REQUIRE_CUDA();
  const auto options = at::TensorOptions().dtype(at::kFloat).device(gpu());
  const at::Tensor none = at::empty({0, 16}, options), w = at::ones({16}, options);
  const kernels::ResidualNorm n = table().residual_norm(none, none, w, w, 1e-5, false);
  EXPECT_EQ(n.normalized.numel(), 0);
  const kernels::ResidualNormGrads g =
      table().residual_norm_backward(none, none, n.sum, n.mean, n.rstd, w, false);
  EXPECT_EQ(g.weight.count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(g.bias.count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(table().bias_gelu_backward(none, none, w).bias.count_nonzero().item<int64_t>(), 0);
}

// On a stream other than the default (as under a caller's CUDAStreamGuard): the kernels run
// on the current stream, so the results are the default stream's, bit for bit.
TEST(CudaKernels, RunOnTheCurrentStream) {
  ZERO_REQUIRE_CUDA();
  const at::Device device = gpu();
  const int64_t rows = 2000, width = 768;
  const at::Tensor x = on_gpu({rows, width}, 71, at::kBFloat16);
  const at::Tensor a = on_gpu({rows, width}, 72, at::kBFloat16);
  const at::Tensor w = on_gpu({width}, 73, at::kBFloat16);
  const auto run = [&] {
    const kernels::ResidualNorm n = table().residual_norm(x, a, w, w, 1e-5, false);
    const kernels::ResidualNormGrads g =
        table().residual_norm_backward(x, a, n.sum, n.mean, n.rstd, w, false);
    return std::vector<at::Tensor>{n.normalized, g.input, g.weight, table().bias_gelu(x, w)};
  };
  const std::vector<at::Tensor> on_default = run();
  std::vector<at::Tensor> on_side;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, device.index()));
    on_side = run();
    c10::cuda::getCurrentCUDAStream().synchronize();
  }
  for (size_t i = 0; i < on_default.size(); ++i) {
    EXPECT_TRUE(at::equal(on_side[i], on_default[i])) << "result " << i;
  }
}

// GPT-2's attention on the GPU (gpt2.cpp: q, k, v as head views of c_attn's output, the
// output viewed back to [B, T, C]): SDPA takes a fused backend (flash, cuDNN or memory-
// efficient; not the math composition) on those strided views, and its output transposed back
// is contiguous, so neither side copies a layout.
TEST(CudaKernels, AttentionTakesAFusedBackendWithoutLayoutCopies) {
  ZERO_REQUIRE_CUDA();
  const int64_t B = 4, T = 1024, H = 12, D = 64, C = H * D;
  const at::Tensor qkv = on_gpu({B, T, 3 * C}, 51, at::kBFloat16);
  std::vector<at::Tensor> heads = qkv.split(C, /*dim=*/2);
  for (at::Tensor& h : heads) h = h.view({B, T, H, D}).transpose(1, 2);
  const int64_t backend = at::_fused_sdp_choice(heads[0], heads[1], heads[2], std::nullopt,
                                                0.0, /*is_causal=*/true);
  EXPECT_GT(backend, 0) << "SDPA's choice " << backend << " (0: the math composition)";
  const at::Tensor y =
      at::scaled_dot_product_attention(heads[0], heads[1], heads[2], std::nullopt, 0.0, true);
  EXPECT_TRUE(y.transpose(1, 2).is_contiguous()) << "backend " << backend << ": strides "
                                                 << y.strides();
}

TEST(CudaKernels, Gpt2LossAndGradientsFusedAsComposed) {
  ZERO_REQUIRE_CUDA();
  const at::Device device = gpu();
  const auto config = gpt2::GPT2Config::preset("gpt2-tiny");
  torch::manual_seed(0);
  auto model = std::make_shared<gpt2::GPT2Impl>(config);
  model->to(device);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor tokens = at::randint(0, config.vocab_size, {2, 65}, generator).to(device);
  const at::Tensor ids = tokens.narrow(1, 0, 64).contiguous();
  const at::Tensor targets = tokens.narrow(1, 1, 64).contiguous();
  std::vector<double> losses;
  std::vector<std::vector<at::Tensor>> grads;
  for (const bool fused : {true, false}) {
    fused::set_enabled(fused);
    model->zero_grad();
    const at::Tensor loss = model->forward_loss(ids, targets);
    loss.backward();
    losses.push_back(loss.item<double>());
    grads.emplace_back();
    for (const auto& p : model->parameters()) grads.back().push_back(p.grad().clone());
  }
  fused::set_enabled(true);
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::abs(losses[1]));
  for (size_t i = 0; i < grads[0].size(); ++i) {
    const at::Tensor diff = (grads[0][i] - grads[1][i]).abs().max();
    const at::Tensor scale = grads[1][i].abs().max();
    EXPECT_LE(diff.item<double>(), 1e-4 * scale.item<double>() + 1e-7) << "parameter " << i;
  }
}

}  // namespace
}  // namespace zero::test
