// GPT-2 training throughput on one CUDA GPU (issue 13; docs/benchmarks.md, "CUDA"), in one run:
//   peak      the GPU's bf16 GEMM rate, measured (8192^3 products, after warm-up): the MFU
//             denominator;
//   zero      zero's engine at world size 1 over NCCL: ZeRO stage --stage, bf16 parameters and
//             compute, fp32 master weights, AdamW on the device (fused kernels);
//   libtorch  the same model trained by plain libtorch: fp32 parameters, bf16 autocast,
//             clipping at 1.0, torch::optim::AdamW (PyTorch's Python baselines, plain and
//             FSDP2, are bench/pytorch_gpt2_cuda.py).
// The two alternate --rounds times. Each prints tokens/s and MFU, counting 6N + 12 L d T FLOPs
// per token (N parameters, L layers, d width, T tokens of context), as llm.c and nanoGPT do.
// Usage: mpirun -np 1 bench_cuda [--model gpt2] [--batch 16] [--seq 1024] [--steps 20]
//        [--warmup 3] [--rounds 2] [--stage 2] [--profile STEPS]
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <CLI/CLI.hpp>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cuda_bench_common.h"
#include "kernel_profile.h"
#include "zero/comm_mpi.h"
#include "zero/comm_nccl.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/gpt2.h"

namespace {

using zero::bench::Clock;
using zero::bench::seconds_since;

struct Options {
  std::string model = "gpt2";
  int64_t batch = 16;
  int64_t seq = 1024;
  int steps = 20;
  int warmup = 3;
  int rounds = 2;
  int stage = 2;
  int profile = 0;  // steps of zero's run profiled kernel by kernel (0: none)
};

// Mean seconds per step over `steps` steps after `warmup`.
template <typename Step>
double time_steps(int warmup, int steps, const Step& step) {
  for (int i = 0; i < warmup; ++i) step();
  c10::cuda::device_synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  c10::cuda::device_synchronize();
  return seconds_since(start) / steps;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"GPT-2 training throughput on one CUDA GPU: zero against plain libtorch"};
  app.add_option("--model", o.model, "GPT-2 preset");
  app.add_option("--batch", o.batch, "sequences per step");
  app.add_option("--seq", o.seq, "tokens per sequence");
  app.add_option("--steps", o.steps, "timed steps per run");
  app.add_option("--warmup", o.warmup, "untimed steps per run");
  app.add_option("--rounds", o.rounds, "alternations of the two runs");
  app.add_option("--stage", o.stage, "zero's ZeRO stage");
  app.add_option("--profile", o.profile,
                 "then profile this many of zero's steps: GPU time per kernel, GPU busy share");
  CLI11_PARSE(app, argc, argv);
  try {
    if (zero::cuda_device_count() == 0) {
      std::printf("bench_cuda: no CUDA device; nothing measured\n");
      return 0;
    }
    auto mpi = zero::make_mpi_communicator();
    auto comm = zero::make_nccl_communicator(*mpi);
    const zero::gpt2::GPT2Config shape = zero::gpt2::GPT2Config::named(o.model);
    const double n_params = static_cast<double>(shape.num_parameters());
    const double flops_per_token = zero::bench::flops_per_token(shape, o.seq);
    const double tokens = static_cast<double>(o.batch * o.seq);
    const double peak = zero::bench::bf16_gemm_peak_flops();
    std::printf("bench_cuda model=%s params=%.1fM batch=%lld seq=%lld bf16_gemm_peak_tflops=%.1f\n",
                o.model.c_str(), n_params / 1e6, static_cast<long long>(o.batch),
                static_cast<long long>(o.seq), peak / 1e12);
    // This rank's GPU (its local rank's), as zero-train takes it.
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(zero::default_cuda_device()));
    const at::Tensor data =
        at::randint(0, shape.vocab_size, {o.batch, o.seq + 1}, at::TensorOptions().dtype(at::kLong))
            .to(gpu);
    const at::Tensor x = data.narrow(1, 0, o.seq).contiguous();
    const at::Tensor y = data.narrow(1, 1, o.seq).contiguous();
    auto report = [&](const char* what, double seconds) {
      const double rate = tokens / seconds;
      std::printf("bench_cuda run=%s stage=%d ms_per_step=%.1f tokens_per_s=%.0f mfu=%.3f\n", what,
                  o.stage, seconds * 1e3, rate, rate * flops_per_token / peak);
      std::fflush(stdout);
    };
    const std::string config_json =
        "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.batch) +
        ", \"gradient_clipping\": 1.0, \"bf16\": {\"enabled\": true}, \"optimizer\": "
        "{\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4, \"weight_decay\": 0.1}}, "
        "\"zero_optimization\": {\"stage\": " + std::to_string(o.stage) + "}}";
    for (int round = 0; round < o.rounds; ++round) {
      {
        torch::manual_seed(0);
        auto model = std::make_shared<zero::gpt2::GPT2Impl>(shape);
        model->to(gpu);
        auto engine = zero::initialize(
            model, zero::parse_config(config_json, comm->size(), "bench_cuda"), comm);
        const auto step = [&] {
          engine->backward(model->forward_loss(x, y));
          engine->step();
        };
        report("zero", time_steps(o.warmup, o.steps, step));
        if (o.profile > 0 && round == o.rounds - 1) {
          const zero::bench::KernelBreakdown breakdown = zero::bench::profile_kernels(
              o.profile, step, [] { c10::cuda::device_synchronize(); }, c10::DeviceType::CUDA);
          zero::bench::print_kernel_breakdown(
              ("bench_cuda stage=" + std::to_string(o.stage)).c_str(), breakdown, o.profile);
        }
      }
      {
        torch::manual_seed(0);
        auto model = std::make_shared<zero::gpt2::GPT2Impl>(shape);
        model->to(gpu);
        torch::optim::AdamW optimizer(model->parameters(),
                                      torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
        report("libtorch", time_steps(o.warmup, o.steps, [&] {
                 optimizer.zero_grad();
                 at::Tensor loss;
                 {
                   at::autocast::set_autocast_enabled(at::kCUDA, true);
                   at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
                   loss = model->forward_loss(x, y);
                   at::autocast::set_autocast_enabled(at::kCUDA, false);
                   at::autocast::clear_cache();
                 }
                 loss.backward();
                 torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
                 optimizer.step();
               }));
      }
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_cuda: %s\n", error.what());
    return 1;
  }
}
