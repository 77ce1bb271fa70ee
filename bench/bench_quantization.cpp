// Block quantization (Note [Block quantization], src/quant/): the loops at each SIMD level
// this CPU runs against the ATen operations, on one thread.
//
//   build/bench/bench_quantization [--values N] [--rounds R]
//
// For fp32 and bf16 rows, int8 blocks of 256 (qwZ) and int4 blocks of 128 (qgZ), it times
// quantize_rows and dequantize_rows (into rows of the input's dtype) over N values (default
// 16 M: out of cache, as in a step), each kernel in turn, R rounds (default 7), so that a
// noisy machine's slow phases hit every kernel alike. Prints a markdown table of the median
// time per call and the rate in input values per nanosecond, and the CPU beside it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "quant/block_quantization.h"
#include "zero/gemm_rates.h"

namespace {

using zero::BlockQuantization;
using zero::QuantizationKernel;
using zero::SimdLevel;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double seconds(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Block quantization kernels: loops per SIMD level against ATen"};
  int64_t values = int64_t{16} << 20;
  int rounds = 7;
  app.add_option("--values", values, "values per call")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds over the kernels")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(1);

  std::vector<QuantizationKernel> kernels{{true, SimdLevel::kScalar}};
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (static_cast<int>(level) <= static_cast<int>(zero::simd_level())) kernels.push_back({false, level});
  }
  const zero::GemmRates& cpu = zero::measured_gemm_rates();
  std::string flags;
  for (const std::string& f : cpu.isa_flags()) flags += (flags.empty() ? "" : " ") + f;
  std::printf("CPU: %s (%s), 1 thread, %lld values per call, median of %d rounds\n\n",
              cpu.cpu_model().c_str(), flags.c_str(), static_cast<long long>(values), rounds);
  std::printf("| rows | format | kernel | quantize ms | values/ns | dequantize ms | values/ns |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|\n");

  // One row per 1 M values, as the engine's gathers have one row per rank.
  const int64_t row = int64_t{1} << 20;
  const int64_t rows = std::max<int64_t>(1, values / row);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = at::randn({rows, row}).to(dtype);
    for (const BlockQuantization& format : {BlockQuantization{8, 256}, BlockQuantization{4, 128}}) {
      at::Tensor records = at::empty({rows, format.record_bytes(row)}, at::kByte);
      at::Tensor back = at::empty({rows, row}, x.options());
      std::vector<std::vector<double>> quantize(kernels.size()), dequantize(kernels.size());
      for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms up
        for (size_t k = 0; k < kernels.size(); ++k) {
          const double q = seconds([&] { zero::quantize_rows(x, records, format, kernels[k]); });
          const double d = seconds([&] { zero::dequantize_rows(records, back, format, kernels[k]); });
          if (round > 0) {
            quantize[k].push_back(q);
            dequantize[k].push_back(d);
          }
        }
      }
      for (size_t k = 0; k < kernels.size(); ++k) {
        const double q = median(quantize[k]), d = median(dequantize[k]);
        const double n = static_cast<double>(rows * row);
        std::printf("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f |\n", c10::toString(dtype),
                    format.describe().c_str(), kernels[k].describe().c_str(), q * 1e3, n / q * 1e-9,
                    d * 1e3, n / d * 1e-9);
      }
    }
  }
  return 0;
}
