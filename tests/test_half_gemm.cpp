// Note [fp16 GEMMs on CPUs without fp16 arithmetic] (src/hardware/half_gemm.h): the fp32 path
// gives one rounding of the fp32 product (bitwise), agrees with ATen's fp16 kernels to fp16
// rounding, leaves fp32 alone, and trains GPT-2 in fp16 as the native path does; fp16 attention
// and the fused LM head on a CPU compute in fp32 and round once; bf16 by either path.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "hardware/half_gemm.h"
#include "models/lm_head_loss.h"
#include "zero/gpt2.h"

namespace zero::test {
namespace {

using half_gemm::Path;

// Restores the process's path when a test ends.
struct PathScope {
  Path saved = half_gemm::path();
  explicit PathScope(Path path) { half_gemm::set_path(path); }
  ~PathScope() { half_gemm::set_path(saved); }
};

at::Tensor half_randn(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, generator, at::TensorOptions().dtype(at::kFloat)).mul_(0.3).to(at::kHalf);
}

// ATen's fp16 result and ours: fp16 rounding of sums of 128 products apart at most.
void expect_fp16_close(const at::Tensor& ours, const at::Tensor& aten) {
  ASSERT_EQ(ours.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::allclose(ours.to(at::kFloat), aten.to(at::kFloat), /*rtol=*/4e-3, /*atol=*/4e-3))
      << (ours.to(at::kFloat) - aten.to(at::kFloat)).abs().max().item<float>();
}

TEST(HalfGemm, ViaFp32IsOneRoundingOfTheFp32Product) {
  const at::Tensor a = half_randn({48, 128}, 1), b = half_randn({128, 40}, 2);
  // Every transpose a backward meets: a^T b^T, a b^T, a^T b.
  const at::Tensor at_ = half_randn({128, 48}, 3), bt = half_randn({40, 128}, 4);
  const std::vector<std::pair<at::Tensor, at::Tensor>> cases = {
      {a, b}, {at_.t(), b}, {a, bt.t()}, {at_.t(), bt.t()}};
  for (const auto& [x, y] : cases) {
    const at::Tensor expected = at::mm(x.to(at::kFloat), y.to(at::kFloat)).to(at::kHalf);
    at::Tensor ours, native;
    {
      PathScope scope(Path::kViaFp32);
      ours = half_gemm::mm(x, y);
    }
    {
      PathScope scope(Path::kNative);
      native = half_gemm::mm(x, y);
    }
    EXPECT_TRUE(at::equal(ours, expected));
    expect_fp16_close(ours, native);
    EXPECT_TRUE(at::equal(native, at::mm(x, y)));
  }
}

TEST(HalfGemm, OutVariantsMatchAten) {
  PathScope scope(Path::kViaFp32);
  const at::Tensor a = half_randn({32, 64}, 5), b = half_randn({24, 64}, 6);
  at::Tensor out = at::empty({32, 24}, at::kHalf);
  half_gemm::mm_out(out, a, b.t());
  expect_fp16_close(out, at::mm(a, b.t()));
  // beta 0 ignores whatever `out` holds (NaN here); beta 1 adds to it.
  out.fill_(std::numeric_limits<float>::quiet_NaN());
  half_gemm::addmm_out(out, out, a, b.t(), /*beta=*/0, /*alpha=*/0.5);
  expect_fp16_close(out, at::mm(a, b.t()).mul(0.5));
  const at::Tensor base = half_randn({32, 24}, 7);
  at::Tensor sum = base.clone();
  half_gemm::addmm_out(sum, sum, a, b.t(), /*beta=*/1, /*alpha=*/2);
  expect_fp16_close(sum, at::addmm(base, a, b.t(), 1, 2));
}

TEST(HalfGemm, AddmmForwardAndGradients) {
  const at::Tensor x0 = half_randn({64, 96}, 8), w0 = half_randn({96, 80}, 9),
                   b0 = half_randn({80}, 10), g = half_randn({64, 80}, 11);
  struct Result {
    at::Tensor y, gx, gw, gb;
  };
  const auto run = [&](Path path) {
    PathScope scope(path);
    at::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
               b = b0.clone().requires_grad_();
    at::Tensor y = half_gemm::addmm(b, x, w);
    y.backward(g);
    return Result{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const Result ours = run(Path::kViaFp32), native = run(Path::kNative);
  expect_fp16_close(ours.y, native.y);
  expect_fp16_close(ours.gx, native.gx);
  expect_fp16_close(ours.gw, native.gw);
  expect_fp16_close(ours.gb, native.gb);
  // Each one rounding of its fp32 computation.
  const at::Tensor gf = g.to(at::kFloat);
  EXPECT_TRUE(at::equal(ours.y, at::addmm(b0.to(at::kFloat), x0.to(at::kFloat), w0.to(at::kFloat)).to(at::kHalf)));
  EXPECT_TRUE(at::equal(ours.gx, at::mm(gf, w0.to(at::kFloat).t()).to(at::kHalf)));
  EXPECT_TRUE(at::equal(ours.gw, at::mm(x0.to(at::kFloat).t(), gf).to(at::kHalf)));
  EXPECT_TRUE(at::equal(ours.gb, gf.sum(0).to(at::kHalf)));
  // Without a bias: the product alone, through a transposed weight as the tied head's.
  PathScope scope(Path::kViaFp32);
  const at::Tensor wt = half_randn({80, 96}, 12);
  EXPECT_TRUE(at::equal(half_gemm::addmm({}, x0, wt.t()),
                        at::mm(x0.to(at::kFloat), wt.to(at::kFloat).t()).to(at::kHalf)));
}

TEST(HalfGemm, Fp32KeepsItsBits) {
  PathScope scope(Path::kViaFp32);
  const at::Tensor a = half_randn({16, 32}, 13).to(at::kFloat);
  const at::Tensor b = half_randn({32, 8}, 14).to(at::kFloat);
  const at::Tensor bias = half_randn({8}, 15).to(at::kFloat);
  EXPECT_TRUE(at::equal(half_gemm::mm(a, b), at::mm(a, b)));
  EXPECT_TRUE(at::equal(half_gemm::addmm(bias, a, b), at::addmm(bias, a, b)));
}

// bf16 by either path: ATen's kernels as they are, or one bf16 rounding of the fp32 product
// (which is a bf16 GEMM's arithmetic), forward and gradients; the two within bf16 rounding.
TEST(HalfGemm, Bf16ByEitherPath) {
  const Path chosen = half_gemm::path(at::kBFloat16);
  const at::Tensor x0 = half_randn({64, 96}, 16).to(at::kBFloat16);
  const at::Tensor w0 = half_randn({96, 80}, 17).to(at::kBFloat16);
  const at::Tensor b0 = half_randn({80}, 18).to(at::kBFloat16);
  const at::Tensor g = half_randn({64, 80}, 19).to(at::kBFloat16);
  std::vector<at::Tensor> results[2];
  for (const Path path : {Path::kNative, Path::kViaFp32}) {
    half_gemm::set_path(path, at::kBFloat16);
    EXPECT_EQ(half_gemm::via_fp32(x0), path == Path::kViaFp32);
    EXPECT_EQ(half_gemm::computes_in_fp32(x0), path == Path::kViaFp32);
    at::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
               b = b0.clone().requires_grad_();
    const at::Tensor y = half_gemm::addmm(b, x, w);
    y.backward(g);
    results[static_cast<int>(path)] = {y.detach(), x.grad(), w.grad(), b.grad(),
                                       half_gemm::mm(x0, w0)};
  }
  half_gemm::set_path(chosen, at::kBFloat16);
  const auto& native = results[static_cast<int>(Path::kNative)];
  const auto& ours = results[static_cast<int>(Path::kViaFp32)];
  EXPECT_TRUE(at::equal(native[0], at::addmm(b0, x0, w0)));
  EXPECT_TRUE(at::equal(native[4], at::mm(x0, w0)));
  const at::Tensor xf = x0.to(at::kFloat), wf = w0.to(at::kFloat), gf = g.to(at::kFloat);
  EXPECT_TRUE(at::equal(ours[0], at::addmm(b0.to(at::kFloat), xf, wf).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(ours[1], at::mm(gf, wf.t()).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(ours[2], at::mm(xf.t(), gf).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(ours[4], at::mm(xf, wf).to(at::kBFloat16)));
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(at::allclose(ours[i].to(at::kFloat), native[i].to(at::kFloat), 2e-2, 2e-2)) << i;
  }
}

// The fused LM head in fp16 is its fp32 computation on the widened inputs with the loss and
// gradients rounded once (bitwise), whatever the GEMM path, and within fp16 rounding of the
// fp16 composition it replaces (logits in fp16, then cross-entropy in fp32).
TEST(HalfGemm, FusedHeadInFp16IsItsFp32ComputationRoundedOnce) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(23);
  const at::Tensor targets = at::randint(0, 1000, {40}, generator);
  struct Result {
    at::Tensor loss, grad_hidden, grad_weight;
  };
  const auto run = [&](const at::Tensor& h0, const at::Tensor& w0, bool fused) {
    const at::Tensor h = h0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
    const at::Tensor loss =
        fused ? gpt2::lm_head_cross_entropy(h, w, targets, /*block_rows=*/16)
              : at::cross_entropy_loss(at::mm(h, w.t()).to(at::kFloat), targets);
    loss.backward();
    return Result{loss.detach(), h.grad(), w.grad()};
  };
  // fp16 by either GEMM path; bf16 where its GEMMs go via fp32 (the note).
  const std::vector<std::pair<at::ScalarType, Path>> cases = {
      {at::kHalf, Path::kNative}, {at::kHalf, Path::kViaFp32}, {at::kBFloat16, Path::kViaFp32}};
  for (const auto& [dtype, path] : cases) {
    SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + half_gemm::path_name(path));
    const Path chosen = half_gemm::path(dtype);
    half_gemm::set_path(path, dtype);
    const at::Tensor hidden = half_randn({40, 64}, 21).to(dtype);
    const at::Tensor weight = half_randn({1000, 64}, 22).to(dtype);
    const Result wide = run(hidden.to(at::kFloat), weight.to(at::kFloat), true);
    const Result ours = run(hidden, weight, true);
    EXPECT_TRUE(at::equal(ours.loss, wide.loss));
    EXPECT_TRUE(at::equal(ours.grad_hidden, wide.grad_hidden.to(dtype)));
    EXPECT_TRUE(at::equal(ours.grad_weight, wide.grad_weight.to(dtype)));
    const Result composed = run(hidden, weight, false);
    half_gemm::set_path(chosen, dtype);
    const double tolerance = dtype == at::kHalf ? 1.0 : 8.0;  // bf16: 3 fewer mantissa bits
    EXPECT_NEAR(ours.loss.item<double>(), composed.loss.item<double>(),
                2e-3 * tolerance * composed.loss.item<double>());
    EXPECT_TRUE(at::allclose(ours.grad_hidden.to(at::kFloat), composed.grad_hidden.to(at::kFloat),
                             4e-3 * tolerance, 4e-3 * tolerance));
    EXPECT_TRUE(at::allclose(ours.grad_weight.to(at::kFloat), composed.grad_weight.to(at::kFloat),
                             4e-3 * tolerance, 4e-3 * tolerance));
  }
}

// GPT-2's attention in fp16 computes in fp32 (rounded once): its output and gradients within
// fp16 rounding of the same module in fp32.
TEST(HalfGemm, AttentionInFp16IsTheFp32AttentionRounded) {
  auto config = gpt2::GPT2Config::preset("gpt2-tiny");
  config.dropout = 0.0;
  torch::manual_seed(3);
  gpt2::Attention wide(config);
  for (auto& p : wide->parameters()) p.detach().normal_(0.0, 0.05);
  gpt2::Attention half(config);
  half->to(at::kHalf);
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < half->parameters().size(); ++i) {
      half->parameters()[i].copy_(wide->parameters()[i]);
      wide->parameters()[i].copy_(half->parameters()[i]);  // the fp16 values, exactly
    }
  }
  const at::Tensor x = half_randn({2, 24, config.n_embd}, 31);
  const at::Tensor xw = x.to(at::kFloat).requires_grad_(true), xh = x.clone().requires_grad_(true);
  const at::Tensor yw = wide->forward(xw), yh = half->forward(xh);
  ASSERT_EQ(yh.scalar_type(), at::kHalf);
  expect_fp16_close(yh, yw.to(at::kHalf));
  const at::Tensor g = half_randn({2, 24, config.n_embd}, 32);
  yw.backward(g.to(at::kFloat));
  yh.backward(g);
  expect_fp16_close(xh.grad(), xw.grad().to(at::kHalf));
}

// GPT-2 in fp16 (Conv1D, the fused LM head, the tied head's logits): the fp32 path gives the
// native path's loss and gradients to fp16 rounding.
TEST(HalfGemm, Gpt2TrainsAsTheNativePathDoes) {
  auto config = gpt2::GPT2Config::preset("gpt2-tiny");
  config.n_layer = 2;
  config.dropout = 0.0;
  torch::manual_seed(0);
  auto model = std::make_shared<gpt2::GPT2Impl>(config);
  model->to(at::kHalf);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(16);
  const at::Tensor tokens = at::randint(0, config.vocab_size, {2, 33}, generator);
  const at::Tensor x = tokens.narrow(1, 0, 32), y = tokens.narrow(1, 1, 32);
  struct Result {
    double loss;
    at::Tensor grads;
    at::Tensor logits;
  };
  const auto run = [&](Path path) {
    PathScope scope(path);
    model->zero_grad();
    at::Tensor loss = model->forward_loss(x, y);
    loss.backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().reshape({-1}).to(at::kFloat));
    at::NoGradGuard no_grad;
    return Result{loss.item<double>(), at::cat(grads), model->forward(x).to(at::kFloat)};
  };
  const Result ours = run(Path::kViaFp32), native = run(Path::kNative);
  EXPECT_NEAR(ours.loss, native.loss, 2e-3 * native.loss);
  EXPECT_LT((ours.grads - native.grads).norm().item<double>(), 2e-2 * native.grads.norm().item<double>());
  EXPECT_LT((ours.logits - native.logits).abs().max().item<double>(), 2e-2);
}

}  // namespace
}  // namespace zero::test
