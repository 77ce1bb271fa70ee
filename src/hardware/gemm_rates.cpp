// GEMM rates of this CPU per compute dtype (zero/gemm_rates.h).
#include "zero/gemm_rates.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>

#include "common/dtype_names.h"
#include "common/env.h"
#include "hardware/half_gemm.h"
#include "zero/error.h"

namespace zero {
namespace {

int rate_index(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return 0;
    case at::kBFloat16: return 1;
    case at::kHalf: return 2;
    default: break;
  }
  ZERO_CHECK(false, "GEMM rates are measured for fp32, bf16 and fp16, not ", dtype_name(dtype));
  return 0;
}

// The three GEMM layouts of a training step at one shape: the forward's y = x W (x [128, 256],
// W [256, 512], as a Conv1D holds it), and the backward's dx = dy W^T and dW = x^T dy, whose
// transposed operands take other kernels (on AMD Zen 4 ATen's fp16 and bf16 kernels for them
// were scalar loops while the forward's one was not, so a forward-only probe misjudged the
// step). Each layout is 33.5 MFLOP: ~0.3 ms in fp32 and ~25 ms in a scalar 16-bit loop on one
// core, large enough that the kernel, not the call, is timed. The rate is the layouts' FLOPs
// over the sum of their best times of kRepetitions, after a warm-up (first-call dispatch,
// packing, page faults). 16-bit dtypes run by the path the models' GEMMs take (Note [fp16
// GEMMs on CPUs without fp16 arithmetic]), so the rate is the one a step sees.
// Inputs are deterministic ramps: measuring must not draw from the global generator, whose
// state decides the model's initial weights.
double measure_gflops(at::ScalarType dtype) {
  constexpr int64_t kRows = 128, kIn = 256, kOut = 512;
  constexpr int kRepetitions = 2;
  at::NoGradGuard no_grad;
  const auto ramp = [dtype](int64_t rows, int64_t cols, double from) {
    return at::linspace(from, -from, rows * cols, at::TensorOptions().dtype(at::kFloat))
        .view({rows, cols})
        .to(dtype);
  };
  const at::Tensor x = ramp(kRows, kIn, 1.0), w = ramp(kIn, kOut, -1.0), dy = ramp(kRows, kOut, 0.5);
  const std::function<at::Tensor()> layouts[] = {
      [&] { return half_gemm::mm(x, w); },        // forward
      [&] { return half_gemm::mm(dy, w.t()); },   // input gradient
      [&] { return half_gemm::mm(x.t(), dy); }};  // weight gradient
  double seconds = 0;
  for (const auto& gemm : layouts) {
    at::Tensor out = gemm();  // warm-up
    double best = 1e30;
    for (int i = 0; i < kRepetitions; ++i) {
      const auto start = std::chrono::steady_clock::now();
      out = gemm();
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    seconds += best;
  }
  return 3 * 2.0 * kRows * kIn * kOut / std::max(seconds, 1e-9) / 1e9;
}

}  // namespace

GemmRates::GemmRates() {
  // Linux: the first processor's model name and flags.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::string> flags;
  bool have_model = false, have_flags = false;
  for (std::string line; std::getline(cpuinfo, line) && !(have_model && have_flags);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && !have_model) {
      cpu_model_ = value;
      have_model = true;
    } else if (key == "flags" && !have_flags) {
      std::istringstream words(value);
      for (std::string word; words >> word;) flags.insert(word);
      have_flags = true;
    }
  }
  if (cpu_model_.empty()) cpu_model_ = "unknown CPU";
  for (const char* flag : {"avx2", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16",
                           "amx_fp16"}) {
    if (flags.count(flag)) isa_flags_.emplace_back(flag);
  }
}

double GemmRates::gflops(at::ScalarType dtype) const {
  static std::mutex mutex;
  const int index = rate_index(dtype);
  std::lock_guard<std::mutex> lock(mutex);
  if (rate_[index] == 0) {
    const auto& replaced = env::gemm_rates_override();
    const auto it = replaced.find(dtype_name(dtype));
    rate_[index] = it != replaced.end() ? it->second : measure_gflops(dtype);
  }
  return rate_[index];
}

double GemmRates::slowdown(at::ScalarType dtype) const {
  if (dtype == at::kFloat) return 1.0;
  return gflops(at::kFloat) / gflops(dtype);
}

bool GemmRates::slow(at::ScalarType dtype) const {
  return dtype != at::kFloat && slowdown(dtype) >= kSlowGemmFactor;
}

std::string GemmRates::describe(at::ScalarType dtype) const {
  const std::string name = dtype_name(dtype);
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line.precision(1);
  const double factor = slowdown(dtype);
  line << name << " GEMMs run ";
  if (factor >= 1.0) {
    line << factor << "x slower than fp32";
  } else {
    line << 1.0 / factor << "x faster than fp32";
  }
  line << " on this CPU (" << cpu_model_ << ";";
  for (const auto& flag : isa_flags_) line << " " << flag;
  // The flags that would make this dtype fast, when the CPU lacks them.
  const std::vector<std::string> fast_flags =
      dtype == at::kBFloat16 ? std::vector<std::string>{"avx512_bf16", "amx_bf16"}
      : dtype == at::kHalf   ? std::vector<std::string>{"avx512_fp16", "amx_fp16"}
                             : std::vector<std::string>{};
  std::string missing;
  for (const auto& flag : fast_flags) {
    if (std::find(isa_flags_.begin(), isa_flags_.end(), flag) == isa_flags_.end()) {
      missing += (missing.empty() ? "" : "/") + flag;
    }
  }
  if (!missing.empty()) line << ", no " << missing;
  line << "; " << gflops(dtype) << " vs " << gflops(at::kFloat)
       << " GFLOP/s over a step's forward and backward GEMM layouts";
  const auto& replaced = env::gemm_rates_override();
  if (replaced.count(name) || replaced.count("fp32")) line << ", set by ZERO_GEMM_RATES";
  line << ")";
  return line.str();
}

const GemmRates& measured_gemm_rates() {
  static const GemmRates rates;
  return rates;
}

}  // namespace zero
