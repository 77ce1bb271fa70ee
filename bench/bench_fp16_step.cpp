// GPT-2's forward and backward (the fused LM head included; no optimizer) in fp32, bf16 and
// fp16, fp16 both ways of Note [fp16 GEMMs on CPUs without fp16 arithmetic]: ATen's fp16
// kernels and fp32 GEMMs on converted copies. The four variants' steps interleaved round-robin
// (the shared machine's drift hits each alike); prints the median ms and the ratios to fp32.
//
//   bench_fp16_step [--model gpt2-tiny] [--batch 2] [--seq 256] [--steps 10] [--threads 1]
//                   [--only fp32|bf16|fp16|fp16-via-fp32]   (one variant, e.g. under perf)
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "hardware/half_gemm.h"
#include "zero/gemm_rates.h"
#include "zero/gpt2.h"
#include "zero/memory.h"

namespace {

struct Variant {
  std::string name;
  at::ScalarType dtype;
  zero::half_gemm::Path path;
  std::shared_ptr<zero::gpt2::GPT2Impl> model;
  std::vector<double> ms;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fp16_step"};
  std::string model = "gpt2-tiny";
  int64_t batch = 2, seq = 256;
  int steps = 10, threads = 1;
  app.add_option("--model", model);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps);
  app.add_option("--threads", threads);
  std::string only;
  app.add_option("--only", only, "run one variant")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp16-via-fp32"}));
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);
  zero::keep_freed_host_memory();  // as zero-train: freed blocks reused, not faulted in again
  using zero::half_gemm::Path;
  std::vector<Variant> variants = {{"fp32", at::kFloat, Path::kNative, nullptr, {}},
                                   {"bf16", at::kBFloat16, Path::kNative, nullptr, {}},
                                   {"fp16, ATen's kernels", at::kHalf, Path::kNative, nullptr, {}},
                                   {"fp16, via fp32 GEMMs", at::kHalf, Path::kViaFp32, nullptr, {}}};
  if (!only.empty()) {
    const size_t keep = only == "fp32" ? 0 : only == "bf16" ? 1 : only == "fp16" ? 2 : 3;
    variants = {variants[keep]};
  }
  const auto config = zero::gpt2::GPT2Config::preset(model);
  for (auto& v : variants) {
    torch::manual_seed(0);
    v.model = std::make_shared<zero::gpt2::GPT2Impl>(config);
    v.model->to(v.dtype);
  }
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1);
  for (int step = 0; step < steps + 1; ++step) {  // the first is a warm-up
    const at::Tensor tokens = at::randint(0, config.vocab_size, {batch, seq + 1}, generator);
    const at::Tensor x = tokens.narrow(1, 0, seq).contiguous();
    const at::Tensor y = tokens.narrow(1, 1, seq).contiguous();
    for (auto& v : variants) {
      zero::half_gemm::set_path(v.path);
      v.model->zero_grad();
      const auto start = std::chrono::steady_clock::now();
      v.model->forward_loss(x, y).backward();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (step > 0) v.ms.push_back(ms);
    }
  }
  const auto& rates = zero::measured_gemm_rates();
  std::string flags;
  for (const auto& f : rates.isa_flags()) flags += " " + f;
  std::printf("%s, micro-batch %lld x %lld, %d thread(s), median of %d steps; %s;%s\n\n",
              model.c_str(), static_cast<long long>(batch), static_cast<long long>(seq), threads,
              steps, rates.cpu_model().c_str(), flags.c_str());
  std::printf("| compute | forward + backward ms | vs fp32 |\n|---|---|---|\n");
  const double base = median(variants[0].ms);  // fp32 unless --only
  for (const auto& v : variants) {
    std::printf("| %s | %.1f | %.2fx |\n", v.name.c_str(), median(v.ms), median(v.ms) / base);
  }
  return 0;
}
