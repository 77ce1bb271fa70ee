// ZeRO-Offload of a GPT-2-shaped model on one CUDA GPU (issue 24; docs/benchmarks.md,
// "ZeRO-Offload on CUDA"): a model whose training state does not fit the GPU trains with the
// optimizer state in host memory (or on NVMe), at world size 1 over NCCL. Prints, per step:
// time, tokens/s and MFU (6N + 12 L d T FLOPs per token, against the measured bf16 GEMM peak;
// a checkpointed block's recompute is not counted), the GPU's peak memory, host RSS, the plan's
// device / host / pinned figures, and where the step's time goes: forward, backward (autograd,
// then the wait for the last gradients to reach the host), the step after backward, the
// copy stream's busy time down and up, the worker's time adding gradients and stepping during
// backward.
// Usage: mpirun -np 1 bench_offload_cuda [--model L32-C4096-H32] [--batch 8] [--seq 1024]
//        [--stage 2] [--offload cpu|nvme|none] [--nvme-path DIR] [--clip 1.0] [--gas 1]
//        [--checkpointing] [--steps 3] [--warmup 1]
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <algorithm>

#include "cuda_bench_common.h"
#include "engine/engine_core.h"
#include "zero/comm_mpi.h"
#include "zero/comm_nccl.h"
#include "zero/config.h"
#include "zero/cuda_support.h"
#include "zero/engine.h"
#include "zero/gpt2.h"
#include "zero/memory_plan.h"
#include "zero/sharded_init.h"

namespace {

using zero::bench::Clock;
using zero::bench::seconds_since;

struct Options {
  std::string model = "L32-C4096-H32";
  int64_t batch = 8;
  int64_t seq = 1024;
  int stage = 2;
  std::string offload = "cpu";
  std::string nvme_path = "/tmp/zero-bench-nvme";
  double clip = 1.0;
  int gas = 1;
  bool checkpointing = false;
  int steps = 3;
  int warmup = 1;
};

double peak_rss_gib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1 << 20);
  }
  return -1;
}

double gib(double bytes) { return bytes / (1 << 30); }

}  // namespace

int main(int argc, char** argv) {
  // Linked to zero_cuda statically: its entry point (which registers the fused CUDA kernels)
  // before anything looks for them, rather than cuda_support()'s dlopen of the shared library.
  (void)zero_cuda_support_v1();
  Options o;
  CLI::App app{"ZeRO-Offload of a large GPT-2 on one CUDA GPU"};
  app.add_option("--model", o.model, "GPT-2 preset or shape L<layers>-C<width>[-H<heads>]");
  app.add_option("--batch", o.batch, "sequences per micro-batch");
  app.add_option("--seq", o.seq, "tokens per sequence");
  app.add_option("--stage", o.stage, "ZeRO stage (1-3 with offload)");
  app.add_option("--offload", o.offload, "offload_optimizer device")
      ->check(CLI::IsMember({"cpu", "nvme", "none"}));
  app.add_option("--nvme-path", o.nvme_path, "swap directory with --offload nvme");
  app.add_option("--clip", o.clip, "gradient_clipping (0: none, the step overlaps backward)");
  app.add_option("--gas", o.gas, "gradient accumulation steps");
  app.add_flag("--checkpointing", o.checkpointing, "checkpoint every block's activations");
  app.add_option("--steps", o.steps, "timed optimizer steps");
  app.add_option("--warmup", o.warmup, "untimed optimizer steps first");
  CLI11_PARSE(app, argc, argv);
  // The CPU optimizer steps on every core (mpirun's OMP_NUM_THREADS=1 would leave it one).
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  try {
    if (zero::cuda_device_count() == 0) {
      std::printf("bench_offload_cuda: no CUDA device; nothing measured\n");
      return 0;
    }
    auto mpi = zero::make_mpi_communicator();
    auto comm = zero::make_nccl_communicator(*mpi);
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(zero::default_cuda_device()));
    zero::gpt2::GPT2Config shape = zero::gpt2::GPT2Config::named(o.model);
    shape.checkpointed_blocks = o.checkpointing ? shape.n_layer : 0;
    std::string offload = "";
    if (o.offload == "cpu") {
      offload = ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}";
    } else if (o.offload == "nvme") {
      offload = ", \"offload_optimizer\": {\"device\": \"nvme\", \"pin_memory\": true, "
                "\"nvme_path\": \"" + o.nvme_path + "\"}";
    }
    const std::string json =
        "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.batch) +
        ", \"gradient_accumulation_steps\": " + std::to_string(o.gas) +
        ", \"gradient_clipping\": " + std::to_string(o.clip) +
        ", \"bf16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
        "{\"lr\": 1e-4, \"weight_decay\": 0.1}}, \"zero_optimization\": {\"stage\": " +
        std::to_string(o.stage) + offload + "}}";
    const zero::Config config = zero::parse_config(json, comm->size(), "bench_offload_cuda");
    zero::PlanModel plan_model =
        shape.plan_model(o.batch, o.seq, config.compute_dtype, /*on_host=*/false);
    const zero::MemoryPlan plan = zero::plan_memory(config, plan_model, zero::PlanTarget::kDevice);
    const double peak = zero::bench::bf16_gemm_peak_flops();
    std::printf("bench_offload_cuda model=%s params=%.2fB layers=%lld width=%lld heads=%lld "
                "stage=%d offload=%s batch=%lldx%lld gas=%d clip=%g checkpointing=%d "
                "bf16_gemm_peak_tflops=%.1f plan_gpu_gib=%.2f plan_host_gib=%.2f "
                "plan_pinned_gib=%.2f\n",
                o.model.c_str(), shape.num_parameters() / 1e9, static_cast<long long>(shape.n_layer),
                static_cast<long long>(shape.n_embd), static_cast<long long>(shape.n_head), o.stage,
                o.offload.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                o.gas, o.clip, o.checkpointing ? 1 : 0, peak / 1e12, gib(plan.device_bytes),
                gib(plan.peak_memory_bytes), gib(plan.pinned_bytes));
    std::fflush(stdout);

    const auto built = Clock::now();
    torch::manual_seed(0);
    std::shared_ptr<zero::gpt2::GPT2Impl> model;
    if (o.stage == 3) {
      zero::ShardedInit sharded(config, comm, gpu);
      model = std::make_shared<zero::gpt2::GPT2Impl>(shape);
      model->to(gpu);
    } else {
      model = std::make_shared<zero::gpt2::GPT2Impl>(shape);
      model->to(gpu, config.param_dtype);
    }
    auto engine = zero::initialize(model, config, comm);
    std::printf("bench_offload_cuda built_s=%.1f\n", seconds_since(built));
    const zero::CudaSupport& cuda = *zero_cuda_support_v1();
    cuda.reset_memory_peaks(gpu.index());

    const at::Tensor data =
        at::randint(0, shape.vocab_size, {o.batch, o.seq + 1}, at::TensorOptions().dtype(at::kLong))
            .to(gpu);
    const at::Tensor x = data.narrow(1, 0, o.seq).contiguous();
    const at::Tensor y = data.narrow(1, 1, o.seq).contiguous();
    double forward_s = 0, backward_s = 0, step_s = 0;
    double first_loss = 0, last_loss = 0;
    auto& core = dynamic_cast<zero::EngineCore&>(*engine);
    zero::EngineCore::OffloadStats before;
    for (int step = 0; step < o.warmup + o.steps; ++step) {
      if (step == o.warmup) {
        c10::cuda::device_synchronize();
        before = core.offload_stats();
        forward_s = backward_s = step_s = 0;
      }
      for (int micro = 0; micro < o.gas; ++micro) {
        const auto t0 = Clock::now();
        const at::Tensor loss = model->forward_loss(x, y);
        const double value = loss.item<double>();  // the forward has run
        const auto t1 = Clock::now();
        engine->backward(loss);
        c10::cuda::device_synchronize();
        const auto t2 = Clock::now();
        engine->step();
        c10::cuda::device_synchronize();
        const auto t3 = Clock::now();
        forward_s += std::chrono::duration<double>(t1 - t0).count();
        backward_s += std::chrono::duration<double>(t2 - t1).count();
        step_s += std::chrono::duration<double>(t3 - t2).count();
        if (step == 0 && micro == 0) first_loss = value;
        last_loss = value;
      }
      std::printf("bench_offload_cuda step=%d loss=%.4f\n", step + 1, last_loss);
      std::fflush(stdout);
    }
    const zero::EngineCore::OffloadStats after = core.offload_stats();
    const double total = (forward_s + backward_s + step_s) / o.steps;
    const double tokens = static_cast<double>(o.batch * o.seq * o.gas);
    const double rate = tokens / total;
    const zero::CudaMemory memory = cuda.memory(gpu.index());
    const double steps = o.steps;
    std::printf("bench_offload_cuda result ms_per_step=%.0f tokens_per_s=%.0f mfu=%.3f "
                "loss=%.4f->%.4f gpu_peak_allocated_gib=%.2f gpu_peak_reserved_gib=%.2f "
                "host_peak_rss_gib=%.2f\n",
                total * 1e3, rate, rate * zero::bench::flops_per_token(shape, o.seq) / peak,
                first_loss, last_loss, gib(memory.peak_allocated_bytes),
                gib(memory.peak_reserved_bytes), peak_rss_gib());
    std::printf("bench_offload_cuda split_ms_per_step forward=%.0f backward_with_wait=%.0f "
                "(autograd %.0f, exposed wait %.0f) step_after_backward=%.0f (optimizer %.0f) | "
                "copy_stream down=%.0f (%.2f GB) up=%.0f (%.2f GB) | worker add=%.0f "
                "overlapped_optimizer=%.0f\n",
                forward_s / steps * 1e3, backward_s / steps * 1e3,
                (after.backward_seconds - before.backward_seconds) / steps * 1e3,
                (after.wait_seconds - before.wait_seconds) / steps * 1e3, step_s / steps * 1e3,
                (after.step_seconds - before.step_seconds) / steps * 1e3,
                (after.transfers.down_seconds - before.transfers.down_seconds) / steps * 1e3,
                (after.transfers.down_bytes - before.transfers.down_bytes) / steps / 1e9,
                (after.transfers.up_seconds - before.transfers.up_seconds) / steps * 1e3,
                (after.transfers.up_bytes - before.transfers.up_bytes) / steps / 1e9,
                (after.add_seconds - before.add_seconds) / steps * 1e3,
                (after.overlapped_step_seconds - before.overlapped_step_seconds) / steps * 1e3);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_offload_cuda: %s\n", error.what());
    return 1;
  }
}
