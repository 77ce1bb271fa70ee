// Note [Fused element-wise kernels]: each fused kernel against the ATen composition it replaces
// (forward + backward through autograd, at GPT-2's shapes), and GPT-2's forward + backward with
// the kernels fused and unfused, per dtype. Variants interleaved round by round (the shared
// machine's drift hits each alike); medians. --device cuda: the same on this process's GPU
// (Note [Fused element-wise kernels on a GPU]; built where zero_cuda is), each run timed
// between device synchronisations (scripts/gpu-check.sh tier 1).
//
//   bench_fused_kernels [--model gpt2-mini] [--batch 2] [--seq 256] [--rounds 15] [--threads 1]
//                       [--dtypes fp32,bf16,fp16] [--device cpu|cuda]
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/fused_ops.h"
#include "zero/comm_nccl.h"
#include "zero/gemm_rates.h"
#include "zero/gpt2.h"
#include "zero/memory.h"

#ifdef ZERO_BENCH_WITH_CUDA
#include "cuda/fused_kernels_cuda.h"
#endif

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double time_ms(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

struct Case {
  std::string name;
  std::function<void(bool)> run;  // fused or not
  std::vector<double> fused_ms, composed_ms;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fused_kernels"};
  std::string model = "gpt2-mini", dtype_list = "fp32,bf16,fp16";
  int64_t batch = 2, seq = 256;
  int rounds = 15, threads = 1;
  std::string device_name = "cpu";
  app.add_option("--model", model);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--rounds", rounds);
  app.add_option("--threads", threads);
  app.add_option("--dtypes", dtype_list);
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  const bool on_gpu = device_name == "cuda";
  at::Device device(at::kCPU);
  if (on_gpu) {
#ifdef ZERO_BENCH_WITH_CUDA
    // Linked statically: the kernels registered by hand (zero::cuda_support would load the
    // shared libraries, a second copy of zero).
    zero::kernels::register_cuda_kernels(&zero::cuda_fused_kernels());
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "--device cuda: no CUDA device\n");
      return 2;
    }
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(zero::default_cuda_device()));
#else
    std::fprintf(stderr, "--device cuda: this build has no zero_cuda (ZERO_CUDA)\n");
    return 2;
#endif
  }
  at::set_num_threads(threads);
  zero::keep_freed_host_memory();
  const auto config = zero::gpt2::GPT2Config::preset(model);
  const int64_t rows = batch * seq, C = config.n_embd;

  std::vector<Case> cases;
  std::vector<std::shared_ptr<zero::gpt2::GPT2Impl>> models;
  std::stringstream names(dtype_list);
  for (std::string name; std::getline(names, name, ',');) {
    const std::map<std::string, at::ScalarType> dtypes = {
        {"fp32", at::kFloat}, {"bf16", at::kBFloat16}, {"fp16", at::kHalf}};
    if (!dtypes.count(name)) {
      std::fprintf(stderr, "--dtypes: unknown dtype \"%s\" (allowed: fp32, bf16, fp16)\n", name.c_str());
      return 2;
    }
    const at::ScalarType dtype = dtypes.at(name);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1);
    auto make = [&](std::vector<int64_t> shape) {
      return at::randn(shape, generator).to(dtype).to(device).requires_grad_(true);
    };
    const at::Tensor u = make({rows, 4 * C}), fc_bias = make({4 * C}), g = make({rows, 4 * C});
    cases.push_back({"bias + GELU [" + std::to_string(rows) + ", " + std::to_string(4 * C) +
                         "] " + name,
                     [=](bool) {
                       zero::fused::bias_gelu(u, fc_bias).backward(g);
                     },
                     {}, {}});
    const at::Tensor x = make({rows, C}), a = make({rows, C}), w = make({C}), b = make({C});
    const at::Tensor gy = make({rows, C}), gh = make({rows, C});
    cases.push_back({"residual + LayerNorm [" + std::to_string(rows) + ", " + std::to_string(C) +
                         "] " + name,
                     [=](bool) {
                       const auto [h, y] = zero::fused::residual_layer_norm(x, a, w, b, 1e-5);
                       torch::autograd::backward({h, y}, {gh, gy});
                     },
                     {}, {}});
    torch::manual_seed(0);
    auto m = std::make_shared<zero::gpt2::GPT2Impl>(config);
    m->to(device, dtype);
    models.push_back(m);
    auto tokens = at::randint(0, config.vocab_size, {batch, seq + 1}, generator).to(device);
    const at::Tensor ids = tokens.narrow(1, 0, seq).contiguous();
    const at::Tensor targets = tokens.narrow(1, 1, seq).contiguous();
    cases.push_back({model + " forward + backward " + name,
                     [=](bool) {
                       m->zero_grad();
                       m->forward_loss(ids, targets).backward();
                     },
                     {}, {}});
  }
  for (int round = 0; round < rounds + 1; ++round) {  // the first is a warm-up
    for (auto& c : cases) {
      for (const bool on : {true, false}) {
        zero::fused::set_enabled(on);
        if (on_gpu) torch::cuda::synchronize();
        const double ms = time_ms([&] {
          c.run(on);
          if (on_gpu) torch::cuda::synchronize();
        });
        if (round > 0) (on ? c.fused_ms : c.composed_ms).push_back(ms);
      }
    }
  }
  if (on_gpu) {
    std::printf("%s, median of %d rounds\n\n", device.str().c_str(), rounds);
  } else {
    const auto& rates = zero::measured_gemm_rates();
    std::string flags;
    for (const auto& f : rates.isa_flags()) flags += " " + f;
    std::printf("%d thread(s), median of %d rounds; %s;%s\n\n", threads, rounds,
                rates.cpu_model().c_str(), flags.c_str());
  }
  std::printf("| forward + backward | ATen's composition ms | fused ms | saved |\n|---|---|---|---|\n");
  for (const auto& c : cases) {
    const double composed = median(c.composed_ms), fused = median(c.fused_ms);
    std::printf("| %s | %.2f | %.2f | %.1f %% |\n", c.name.c_str(), composed, fused,
                100.0 * (composed - fused) / composed);
  }
  return 0;
}
