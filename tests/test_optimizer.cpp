// The fused Adam(W) loop of ShardOptimizer (src/optim): every SIMD level this CPU has gives the
// same bits as the scalar reference loop, for every gradient dtype x parameter-copy dtype x
// Adam/AdamW x weight decay x bias correction, on odd lengths and misaligned starts, with
// special values (signed zeros, denormals, huge values, infinities, NaNs with payloads; a NaN
// matches any NaN, see same_bits); the 16-bit copies are c10's conversions; the results agree
// with torch::optim::AdamW / Adam to rounding (not bitwise: see MatchesTorchOptimToRounding);
// the parallel split gives the same bits.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <cmath>
#include <limits>
#include <random>
#include <cstring>
#include <algorithm>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/exact_squares.h"
#include "common/parallel.h"
#include "common/simd_level.h"
#include "engine/engine_core.h"
#include "optim/adagrad_lion.h"
#include "optim/adam_kernels.h"
#include "optim/device_update.h"
#include "optim/shard_optimizer.h"
#include "simd_levels.h"

namespace zero::test {
namespace {

// The same bits (signed zeros included), except that a NaN matches any NaN when `any_nan`.
// Which NaN an operation returns when both operands are NaNs (sign, payload) follows the
// operand order the compiler picks for a commutative add or multiply, in the scalar loop as
// in the vector ones, so no C++ loop can promise the same NaN bits; every other value is
// compared bit for bit. c10::BFloat16 makes every NaN 0x7FC0, so bf16 copies compare exactly.
::testing::AssertionResult same_bits(const at::Tensor& a, const at::Tensor& b,
                                     bool any_nan = true) {
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel()) {
    return ::testing::AssertionFailure() << "different dtype or length";
  }
  const at::ScalarType as_int = a.element_size() == 4 ? at::kInt : at::kShort;
  const at::Tensor x = a.contiguous().view(as_int).to(at::kLong);
  const at::Tensor y = b.contiguous().view(as_int).to(at::kLong);
  at::Tensor differ = x != y;
  if (any_nan) differ = differ & ~(at::isnan(a) & at::isnan(b));
  const at::Tensor where = at::nonzero(differ);
  if (where.numel() == 0) return ::testing::AssertionSuccess();
  const int64_t i = where[0].item<int64_t>();
  std::ostringstream out;
  out << where.numel() << " of " << a.numel() << " differ, first at " << i << ": "
      << a[i].item<float>() << " (0x" << std::hex << (x[i].item<int64_t>() & 0xFFFFFFFF)
      << ") vs " << std::dec << b[i].item<float>() << " (0x" << std::hex
      << (y[i].item<int64_t>() & 0xFFFFFFFF) << ")";
  return ::testing::AssertionFailure() << out.str();
}

// Largest distance in units in the last place between two finite fp32 tensors.
int64_t max_ulps(const at::Tensor& a, const at::Tensor& b) {
  // Map the bits to a monotonic integer line (negative floats mirrored below zero).
  auto line = [](const at::Tensor& t) {
    const at::Tensor bits = t.contiguous().view(at::kInt).to(at::kLong);
    return at::where(bits < 0, -(bits & 0x7FFFFFFF), bits);
  };
  return (line(a) - line(b)).abs().max().item<int64_t>();
}

// A contiguous tensor of `n` elements starting `offset` elements into its storage: a
// misaligned start for the vector loads.
at::Tensor sliced(const at::Tensor& values, int64_t offset) {
  at::Tensor storage = at::zeros({values.numel() + offset}, values.options());
  at::Tensor t = storage.narrow(0, offset, values.numel());
  t.copy_(values);
  return t;
}

// Special fp32 values, as bits: +-0, denormals, the smallest normal, values whose square
// underflows or overflows, the largest finite, infinities, quiet and signalling NaNs with
// payloads and both signs.
const std::vector<uint32_t> kSpecial32 = {
    0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00400000, 0x00800000, 0x1E3CE508,
    0x5F800000, 0xDF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
    0xFFC00000, 0x7FC12345, 0x7F800001, 0xFFA00001, 0x3F800000, 0xBF7FFFFF};

struct Inputs {
  at::Tensor master, grad, m, v;
};

// Ordinary values with special values in about a fifth of the elements (mostly in one operand
// at a time); 16-bit gradients also get random bit patterns in a quarter (every class of
// value, NaN payloads included).
Inputs make_inputs(int64_t n, at::ScalarType grad_type, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  Inputs in;
  in.master = at::randn({n}) * 0.1;
  at::Tensor g = at::randn({n}) * 0.01;
  in.m = at::randn({n}) * 0.001;
  in.v = at::square(at::randn({n}) * 0.001);
  float* operands[] = {g.data_ptr<float>(), in.master.data_ptr<float>(), in.m.data_ptr<float>(),
                       in.v.data_ptr<float>()};
  const uint64_t specials = kSpecial32.size();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = (static_cast<uint64_t>(i) * 7 + seed) % (specials * 5);
    if (k >= specials) continue;
    const uint64_t which = (static_cast<uint64_t>(i) + seed) % 5;
    // 0-3: gradient, master, m, v (negative and NaN v included: sqrt gives NaN); 4: gradient
    // and master both.
    std::memcpy(&operands[which % 4][i], &kSpecial32[k], sizeof(float));
    if (which == 4) std::memcpy(&operands[1][i], &kSpecial32[(k + 3) % specials], sizeof(float));
  }
  in.grad = g.to(grad_type);
  if (grad_type != at::kFloat) {
    at::Tensor bits = at::randint(0, 65536, {n}, at::kInt).to(at::kShort);
    at::Tensor raw = in.grad.view(at::kShort);
    raw.copy_(at::where(at::rand({n}) < 0.25, bits, raw));
  }
  return in;
}

// The master weights rounded by c10's scalar conversions (c10::BFloat16, c10::Half).
at::Tensor c10_rounded(const at::Tensor& master, at::ScalarType type) {
  at::Tensor out = at::empty({master.numel()}, type);
  const float* p = master.data_ptr<float>();
  for (int64_t i = 0; i < master.numel(); ++i) {
    if (type == at::kBFloat16) {
      out.data_ptr<c10::BFloat16>()[i] = c10::BFloat16(p[i]);
    } else {
      out.data_ptr<c10::Half>()[i] = c10::Half(p[i]);
    }
  }
  return out;
}

struct Case {
  OptimizerType type;
  double weight_decay;
  bool bias_correction;
  at::ScalarType grad_type;
  std::optional<at::ScalarType> param_type;
};

std::string describe(const Case& c, int64_t n, int64_t offset) {
  std::ostringstream out;
  out << (c.type == OptimizerType::kAdamW ? "AdamW" : "Adam") << " wd=" << c.weight_decay
      << " bias_correction=" << c.bias_correction << " grad=" << c.grad_type << " param_out="
      << (c.param_type ? c10::toString(*c.param_type) : "none") << " n=" << n
      << " offset=" << offset;
  return out.str();
}

struct State {
  at::Tensor master, m, v, param_out;
};

// `steps` updates of the inputs at `level`, on misaligned copies.
State run(SimdLevel level, const Case& c, const Inputs& in, int64_t offset, int steps,
          double grad_multiplier) {
  OptimizerConfig config;
  config.type = c.type;
  config.lr = 1e-3;
  config.weight_decay = c.weight_decay;
  config.bias_correction = c.bias_correction;
  State s{sliced(in.master, offset), sliced(in.m, offset), sliced(in.v, offset), {}};
  const at::Tensor grad = sliced(in.grad, offset);
  if (c.param_type) s.param_out = sliced(at::zeros({in.master.numel()}, *c.param_type), offset);
  for (int step = 1; step <= steps; ++step) {
    adam_update(level, s.master, grad, s.param_out, s.m, s.v,
                adam_scalars(config, step, grad_multiplier, config.lr));
  }
  return s;
}

TEST(AdamLoop, EveryLevelMatchesTheScalarLoopBitwise) {
  const std::vector<SimdLevel> all = levels();
  std::cout << "SIMD levels tested:";
  for (SimdLevel l : all) std::cout << " " << level_name(l);
  std::cout << std::endl;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {15, 0}, {31, 3}, {32, 0}, {33, 1}, {97, 2}, {1037, 1}};
  uint64_t seed = 1;
  int compared = 0;
  for (OptimizerType type : {OptimizerType::kAdam, OptimizerType::kAdamW}) {
    for (double wd : {0.0, 0.01}) {
      for (bool bc : {true, false}) {
        for (at::ScalarType gt : {at::kFloat, at::kBFloat16, at::kHalf}) {
          for (std::optional<at::ScalarType> pt :
               {std::optional<at::ScalarType>(), std::optional(at::kBFloat16),
                std::optional(at::kHalf)}) {
            const Case c{type, wd, bc, gt, pt};
            for (auto [n, offset] : shapes) {
              const Inputs in = make_inputs(n, gt, ++seed);
              const double multiplier = seed % 2 ? 1.0 : 0.37;
              const State ref = run(SimdLevel::kScalar, c, in, offset, 3, multiplier);
              for (SimdLevel level : all) {
                if (level == SimdLevel::kScalar) continue;
                const State got = run(level, c, in, offset, 3, multiplier);
                const std::string what = describe(c, n, offset) + " level=" + level_name(level);
                ASSERT_TRUE(same_bits(got.master, ref.master)) << what;
                ASSERT_TRUE(same_bits(got.m, ref.m)) << what;
                ASSERT_TRUE(same_bits(got.v, ref.v)) << what;
                if (pt) {
                  ASSERT_TRUE(same_bits(got.param_out, ref.param_out, *pt != at::kBFloat16))
                      << what;
                }
                ++compared;
              }
              // The 16-bit copy is c10's rounding of the master weights (NaN included).
              if (pt) {
                ASSERT_TRUE(
                    same_bits(ref.param_out, c10_rounded(ref.master, *pt), *pt != at::kBFloat16))
                    << describe(c, n, offset);
              }
            }
          }
        }
      }
    }
  }
  if (all.size() == 1) GTEST_SKIP() << "this CPU has no SIMD level beyond the scalar loop";
  EXPECT_GT(compared, 0);
}

// Adagrad's and Lion's loops (optim/adagrad_lion.h) at every level against the scalar loop,
// bit for bit, on the special values of make_inputs (the state taken from its `v`: a sum of
// squares, negative and NaN values included; Lion's momentum from its `m`), every gradient x
// parameter-copy dtype, with and without weight decay.
TEST(AdagradLionLoops, EveryLevelMatchesTheScalarLoopBitwise) {
  const std::vector<SimdLevel> all = levels();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {15, 0}, {33, 1}, {1037, 1}};
  uint64_t seed = 100;
  int compared = 0;
  for (OptimizerType type : {OptimizerType::kAdagrad, OptimizerType::kLion}) {
    for (double wd : {0.0, 0.1}) {
      OptimizerConfig config;
      config.type = type;
      config.weight_decay = wd;
      config.eps = 1e-10;
      config.lr_decay = 0.01;
      config.beta2 = 0.99;
      for (at::ScalarType gt : {at::kFloat, at::kBFloat16, at::kHalf}) {
        for (std::optional<at::ScalarType> pt :
             {std::optional<at::ScalarType>(), std::optional(at::kBFloat16),
              std::optional(at::kHalf)}) {
          for (const auto& shape : shapes) {
            const int64_t n = shape.first, offset = shape.second;
            const Inputs in = make_inputs(n, gt, ++seed);
            auto run_level = [&](SimdLevel level) {
              State st{sliced(in.master, offset), {},
                       sliced(type == OptimizerType::kAdagrad ? in.v : in.m, offset), {}};
              const at::Tensor grad = sliced(in.grad, offset);
              if (pt) st.param_out = sliced(at::zeros({n}, *pt), offset);
              for (int step = 1; step <= 3; ++step) {
                if (type == OptimizerType::kAdagrad) {
                  adagrad_update(level, st.master, grad, st.param_out, st.v,
                                 adagrad_scalars(config, step, 0.37, 0.02));
                } else {
                  lion_update(level, st.master, grad, st.param_out, st.v,
                              lion_scalars(config, 0.37, 1e-3));
                }
              }
              return st;
            };
            const State ref = run_level(SimdLevel::kScalar);
            for (SimdLevel level : all) {
              if (level == SimdLevel::kScalar) continue;
              const State got = run_level(level);
              const std::string what = std::string(type == OptimizerType::kAdagrad ? "Adagrad"
                                                                                  : "Lion") +
                                       " wd=" + std::to_string(wd) + " n=" +
                                       std::to_string(n) + " level=" + level_name(level);
              ASSERT_TRUE(same_bits(got.master, ref.master)) << what;
              ASSERT_TRUE(same_bits(got.v, ref.v)) << what;
              if (pt) {
                ASSERT_TRUE(same_bits(got.param_out, ref.param_out, *pt != at::kBFloat16))
                    << what;
              }
              ++compared;
            }
            if (pt) {
              ASSERT_TRUE(
                  same_bits(ref.param_out, c10_rounded(ref.master, *pt), *pt != at::kBFloat16));
            }
          }
        }
      }
    }
  }
  if (all.size() == 1) GTEST_SKIP() << "this CPU has no SIMD level beyond the scalar loop";
  EXPECT_GT(compared, 0);
}

// The loops against their definitions in ATen operations on ordinary values, 5 steps, to
// rounding (libtorch's kernels fuse multiply-adds):
// Adagrad against torch::optim::Adagrad (lr_decay, an initial accumulator, weight decay),
// Lion against its paper's update; and Lion's sign(0) = 0: an element whose gradient and
// momentum are 0 moves by its weight decay only.
TEST(AdagradLionLoops, MatchTheirDefinitions) {
  constexpr int64_t kN = 1037;
  at::manual_seed(7);
  const at::Tensor p0 = at::randn({kN}) * 0.1;
  std::vector<at::Tensor> grads;
  for (int step = 0; step < 5; ++step) grads.push_back(at::randn({kN}) * 0.01);
  for (at::Tensor& g : grads) g[5] = 0.0f;  // element 5: no gradient, ever
  OptimizerConfig config;
  config.weight_decay = 0.1;
  config.eps = 1e-10;
  config.lr_decay = 0.05;
  config.beta2 = 0.99;
  {
    at::Tensor master = p0.clone(), sum = at::full({kN}, 0.1f);
    at::Tensor reference = p0.clone().requires_grad_(true);
    torch::optim::Adagrad torch_adagrad(
        {reference}, torch::optim::AdagradOptions(0.02).weight_decay(0.1).lr_decay(0.05)
                         .initial_accumulator_value(0.1).eps(1e-10));
    for (int step = 1; step <= 5; ++step) {
      adagrad_update(simd_level(), master, grads[step - 1], {}, sum,
                     adagrad_scalars(config, step, 1.0, 0.02));
      reference.mutable_grad() = grads[step - 1].clone();
      torch_adagrad.step();
    }
    EXPECT_TRUE(at::allclose(master, reference.detach(), 1e-6, 1e-9));
  }
  {
    at::Tensor master = p0.clone(), m = at::zeros({kN});
    at::Tensor p = p0.clone(), mr = at::zeros({kN});
    const double lr = 1e-3;
    for (int step = 1; step <= 5; ++step) {
      lion_update(simd_level(), master, grads[step - 1], {}, m, lion_scalars(config, 1.0, lr));
      const at::Tensor& g = grads[step - 1];
      p.mul_(1.0 - lr * 0.1).add_(mr.mul(0.9).add_(g, 0.1).sign_(), -lr);
      mr.mul_(0.99).add_(g, 0.01);
    }
    // libtorch fuses add_'s multiply-add (FMA) where the loop rounds twice: to rounding, the
    // momentum's near-cancelling sums to an absolute 1e-9 of values ~1e-3.
    EXPECT_TRUE(at::allclose(master, p, 1e-6, 1e-9));
    EXPECT_TRUE(at::allclose(m, mr, 1e-5, 1e-9));
    float expected = p0[5].item<float>();
    for (int step = 0; step < 5; ++step) expected *= static_cast<float>(1.0 - lr * 0.1);
    EXPECT_EQ(master[5].item<float>(), expected) << "sign(0) must be 0";
  }
}

// LAMB's exact sums of squares (common/exact_squares.h): a vector cut into random pieces,
// each summed in a random order and merged in a random order, gives the same buckets and the
// same bits, on values from subnormals to 1e30; the value is the true sum to double rounding;
// an infinity makes it infinite, a NaN NaN.
TEST(ExactSquares, AnySplitAndOrderGivesTheSameBits) {
  std::mt19937_64 rng(42);
  std::vector<float> values;
  std::uniform_real_distribution<double> exponent(-45, 30), unit(-1, 1);
  for (int i = 0; i < 20000; ++i) {
    values.push_back(static_cast<float>(unit(rng) * std::pow(10.0, exponent(rng))));
  }
  values.push_back(std::numeric_limits<float>::denorm_min());
  values.push_back(-std::numeric_limits<float>::max() / 4);
  ExactSquares whole;
  long double reference = 0;
  for (float x : values) {
    whole.add(x);
    reference += static_cast<long double>(x) * static_cast<long double>(x);
  }
  EXPECT_NEAR(static_cast<double>(whole.value() / reference), 1.0, 1e-15);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> shuffled = values;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    std::vector<ExactSquares> pieces(1 + rng() % 7);
    for (float x : shuffled) pieces[rng() % pieces.size()].add(x);
    std::shuffle(pieces.begin(), pieces.end(), rng);
    ExactSquares merged;
    for (const ExactSquares& piece : pieces) merged.merge(piece);
    ASSERT_EQ(merged.words, whole.words) << "trial " << trial;
    const double a = merged.value(), b = whole.value();
    ASSERT_EQ(std::memcmp(&a, &b, sizeof(a)), 0) << "trial " << trial;
  }
  ExactSquares special = whole;
  special.add(std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isinf(special.value()));
  special.add(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(special.value()));
  // Summed in double in another order the sum changes (so the test is not vacuous).
  double forward = 0, backward = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = values[i], y = values[values.size() - 1 - i];
    forward += x * x;
    backward += y * y;
  }
  EXPECT_NE(forward, backward);
}

// torch::optim on the same fp32 tensors (16-bit gradients converted to fp32 first, which is
// exact), ordinary values, several steps. Not bitwise: libtorch's kernels for
// exp_avg.mul_(beta1).add_(grad, 1 - beta1) and addcmul_/addcdiv_ fuse the multiply-add where
// they are vectorized (FMA), which rounds once where this loop (torch's formula) rounds twice;
// the loop agrees with them to rounding (exp_avg_sq to a few ulps), and every level alike.
TEST(AdamLoop, MatchesTorchOptimToRounding) {
  constexpr int64_t kN = 1037;
  constexpr int kSteps = 4;
  for (OptimizerType type : {OptimizerType::kAdam, OptimizerType::kAdamW}) {
    for (double wd : {0.0, 0.01}) {
      for (at::ScalarType gt : {at::kFloat, at::kBFloat16, at::kHalf}) {
        at::manual_seed(42);
        const at::Tensor master0 = at::randn({kN}) * 0.1;
        std::vector<at::Tensor> grads;
        for (int s = 0; s < kSteps; ++s) grads.push_back((at::randn({kN}) * 0.01).to(gt));

        at::Tensor p = master0.clone();
        std::unique_ptr<torch::optim::Optimizer> opt;
        if (type == OptimizerType::kAdamW) {
          opt = std::make_unique<torch::optim::AdamW>(
              std::vector<at::Tensor>{p}, torch::optim::AdamWOptions(1e-3).weight_decay(wd));
        } else {
          opt = std::make_unique<torch::optim::Adam>(
              std::vector<at::Tensor>{p}, torch::optim::AdamOptions(1e-3).weight_decay(wd));
        }
        for (int s = 0; s < kSteps; ++s) {
          p.mutable_grad() = grads[s].to(at::kFloat);
          opt->step();
        }
        at::Tensor torch_m, torch_v;
        auto& state = *opt->state().at(p.unsafeGetTensorImpl());
        if (type == OptimizerType::kAdamW) {
          auto& st = static_cast<torch::optim::AdamWParamState&>(state);
          torch_m = st.exp_avg();
          torch_v = st.exp_avg_sq();
        } else {
          auto& st = static_cast<torch::optim::AdamParamState&>(state);
          torch_m = st.exp_avg();
          torch_v = st.exp_avg_sq();
        }

        OptimizerConfig config;
        config.type = type;
        config.lr = 1e-3;
        config.weight_decay = wd;
        at::Tensor ref_master, ref_m, ref_v;
        for (SimdLevel level : levels()) {
          at::Tensor master = master0.clone();
          at::Tensor m = at::zeros({kN});
          at::Tensor v = at::zeros({kN});
          at::Tensor copy = at::empty({kN}, at::kBFloat16);
          for (int s = 0; s < kSteps; ++s) {
            adam_update(level, master, grads[s], copy, m, v,
                        adam_scalars(config, s + 1, 1.0, config.lr));
          }
          std::ostringstream what;
          what << (type == OptimizerType::kAdamW ? "AdamW" : "Adam") << " wd=" << wd
               << " grad=" << gt << " level=" << level_name(level);
          const int64_t ulps_p = max_ulps(master, p.detach());
          const int64_t ulps_m = max_ulps(m, torch_m);
          const int64_t ulps_v = max_ulps(v, torch_v);
          what << " ulps: master " << ulps_p << " exp_avg " << ulps_m << " exp_avg_sq " << ulps_v;
          if (level == SimdLevel::kScalar) std::cout << what.str() << std::endl;
          EXPECT_LE(ulps_v, 8) << what.str();
          // exp_avg and the master weights can cancel (m * beta1 against (1 - beta1) * g, p
          // against its update), so many ulps of a value near zero: compare them absolutely.
          auto close = [](const at::Tensor& a, const at::Tensor& b) {
            return at::allclose(a, b, 1e-5, 1e-6 * b.abs().max().item<double>());
          };
          EXPECT_TRUE(close(master, p.detach())) << what.str();
          EXPECT_TRUE(close(m, torch_m)) << what.str();
          EXPECT_TRUE(same_bits(copy, c10_rounded(master, at::kBFloat16), false)) << what.str();
          // Every level gives the scalar loop's bits.
          if (level == SimdLevel::kScalar) {
            ref_master = master;
            ref_m = m;
            ref_v = v;
          } else {
            EXPECT_TRUE(same_bits(master, ref_master, false)) << what.str();
            EXPECT_TRUE(same_bits(m, ref_m, false)) << what.str();
            EXPECT_TRUE(same_bits(v, ref_v, false)) << what.str();
          }
        }
      }
    }
  }
}

// ShardOptimizer::update splits a large range over libtorch's threads: the same bits as one
// range through the scalar loop.
TEST(AdamLoop, ParallelUpdateMatchesOneRange) {
  constexpr int64_t kN = 200003;
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  OptimizerConfig config;
  config.type = OptimizerType::kAdamW;
  config.lr = 1e-3;
  config.weight_decay = 0.01;
  const Inputs in = make_inputs(kN, at::kBFloat16, 7);
  ShardOptimizer opt(config);
  State s{in.master.clone(), in.m.clone(), in.v.clone(), at::empty({kN}, at::kHalf)};
  const Case c{config.type, config.weight_decay, true, at::kBFloat16, at::kHalf};
  for (int step = 0; step < 2; ++step) {
    opt.begin_step();
    opt.update(s.master, in.grad, s.param_out, {s.m, s.v}, 0.5, config.lr);
  }
  at::set_num_threads(1);
  const State ref = run(SimdLevel::kScalar, c, in, 0, 2, 0.5);
  at::set_num_threads(threads);
  EXPECT_TRUE(same_bits(s.master, ref.master));
  EXPECT_TRUE(same_bits(s.m, ref.m));
  EXPECT_TRUE(same_bits(s.v, ref.v));
  EXPECT_TRUE(same_bits(s.param_out, ref.param_out));
}

// The update off the CPU (fused_device_update: ATen's fused kernels, what a GPU runs), here on
// CPU tensors, for which ATen has the same fused kernels: every optimizer, with and without
// weight decay and bias correction, fp32 and bf16 gradients, a bf16 copy, a multiplier, over
// several steps, agrees with ShardOptimizer's loop to rounding (relative 1e-5 of each
// tensor's largest value; the fused kernels contract multiply-adds the loop does not); the
// multiplier as a tensor (Note [A step without a device read]) gives the host value's bits.
TEST(DeviceUpdate, FusedKernelsMatchTheLoopToRounding) {
  constexpr int64_t kN = 4099;
  struct Variant {
    OptimizerType type;
    double weight_decay;
    bool bias_correction;
    double momentum;
    bool nesterov;
  };
  const std::vector<Variant> variants = {
      {OptimizerType::kAdamW, 0.01, true, 0, false}, {OptimizerType::kAdam, 0.01, true, 0, false},
      {OptimizerType::kAdamW, 0.0, false, 0, false}, {OptimizerType::kAdam, 0.01, false, 0, false},
      {OptimizerType::kSGD, 0.01, true, 0.9, false}, {OptimizerType::kSGD, 0.0, true, 0.9, true},
      {OptimizerType::kSGD, 0.01, true, 0.0, false}};
  for (const Variant& variant : variants) {
    for (at::ScalarType grad_type : {at::kFloat, at::kBFloat16}) {
      OptimizerConfig config;
      config.type = variant.type;
      config.lr = variant.type == OptimizerType::kSGD ? 0.05 : 1e-3;
      config.weight_decay = variant.weight_decay;
      config.bias_correction = variant.bias_correction;
      config.momentum = variant.momentum;
      config.nesterov = variant.nesterov;
      std::ostringstream what;
      what << static_cast<int>(variant.type) << " wd=" << variant.weight_decay
           << " bc=" << variant.bias_correction << " momentum=" << variant.momentum
           << " nesterov=" << variant.nesterov << " grad=" << grad_type;
      SCOPED_TRACE(what.str());
      at::manual_seed(11);
      const at::Tensor master0 = at::randn({kN}) * 0.1;
      ShardOptimizer loop(config);
      const size_t moments = loop.moment_names().size();
      auto fresh = [&] {
        std::vector<at::Tensor> out;
        for (size_t k = 0; k < moments; ++k) out.push_back(at::zeros({kN}));
        return out;
      };
      at::Tensor loop_master = master0.clone(), fused_master = master0.clone();
      at::Tensor tensor_master = master0.clone();
      std::vector<at::Tensor> loop_moments = fresh(), fused_moments = fresh();
      std::vector<at::Tensor> tensor_moments = fresh();
      at::Tensor loop_copy = at::empty({kN}, at::kBFloat16);
      at::Tensor fused_copy = at::empty({kN}, at::kBFloat16);
      at::Tensor tensor_copy = at::empty({kN}, at::kBFloat16);
      const GradMultiplier on_tensor(at::full({1}, 0.37, at::kDouble));
      for (int64_t step = 1; step <= 4; ++step) {
        const at::Tensor grad = (at::randn({kN}) * 0.01).to(grad_type);
        const at::Tensor before = grad.clone();
        loop.begin_step();
        loop.update(loop_master, grad, loop_copy, loop_moments, 0.37, config.lr);
        fused_device_update(config, step, fused_master, grad, fused_copy, fused_moments, 0.37,
                            config.lr);
        fused_device_update(config, step, tensor_master, grad, tensor_copy, tensor_moments,
                            on_tensor, config.lr);
        EXPECT_TRUE(at::equal(grad, before)) << "the gradient was modified";
      }
      auto close = [](const at::Tensor& a, const at::Tensor& b) {
        return at::allclose(a.to(at::kFloat), b.to(at::kFloat), 1e-5,
                            1e-5 * b.to(at::kFloat).abs().max().item<double>());
      };
      EXPECT_TRUE(close(fused_master, loop_master));
      for (size_t k = 0; k < moments; ++k) EXPECT_TRUE(close(fused_moments[k], loop_moments[k]));
      EXPECT_TRUE(at::equal(fused_copy, fused_master.to(at::kBFloat16)));
      EXPECT_TRUE(at::equal(tensor_master, fused_master));
      for (size_t k = 0; k < moments; ++k) {
        EXPECT_TRUE(at::equal(tensor_moments[k], fused_moments[k]));
      }
      EXPECT_TRUE(at::equal(tensor_copy, fused_copy));
    }
  }
}

// parallel_ranges covers every element once, in contiguous ranges, and really splits over two
// threads (at::parallel_for did not in zero: common/parallel.h); the gradient norm's sum of
// squares, split the same way, gives the same bits on one thread and on two.
TEST(ParallelRanges, CoverEveryElementOnceOnSeveralThreads) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const at::Tensor like = at::empty({1000003}, at::kBFloat16);
  std::vector<int> hits(static_cast<size_t>(like.numel()), 0);
  std::mutex mutex;
  std::set<std::thread::id> workers;
  parallel_ranges(like, 1000, [&](int64_t begin, int64_t end) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      workers.insert(std::this_thread::get_id());
    }
    for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
  });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), like.numel());
  EXPECT_EQ(workers.size(), 2u);
  const at::Tensor values = at::randn({3000017}).to(at::kBFloat16);
  const double two = sum_of_squares(values).item<double>();
  at::set_num_threads(1);
  const double one = sum_of_squares(values).item<double>();
  at::set_num_threads(threads);
  EXPECT_EQ(std::memcmp(&one, &two, sizeof(double)), 0) << one << " vs " << two;
  EXPECT_NEAR(one, values.to(at::kDouble).square().sum().item<double>(), 1e-9 * one);
}

}  // namespace
}  // namespace zero::test
