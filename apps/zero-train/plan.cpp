// zero-train, phase 2 (Note [zero-train's phases] in trainer.h): the device and the memory plan.
#include <algorithm>
#include <cstdio>

#include "trainer.h"
#include "zero/error.h"
#include "zero/memory.h"

namespace zero::train {

Planned plan_run(const Options& o, Inputs& in, Communicator& comm) {
  Planned p;
  Config& config = in.config;  // Note [Fitting the defaults] may lower knobs left at defaults
  const int64_t mbs = config.train_micro_batch_size_per_gpu;
  p.on_gpu = o.device == "cuda";
  p.target = p.on_gpu ? PlanTarget::kDevice : PlanTarget::kHost;
  // CUDA ranks (--device cuda): one GPU per rank. libzero_cuda is loaded only now
  // (zero/cuda_support.h), so a CPU run never loads libtorch's CUDA libraries; --plan needs
  // no GPU (it plans for one).
  if (p.on_gpu && !o.plan) {
    run_and_agree(comm, "choosing the GPU", [&] {
      p.cuda = &cuda_support();
      const int index = p.cuda->default_cuda_device();
      ZERO_CHECK(index >= 0, "--device cuda: rank ", comm.rank(), " sees no CUDA device");
      p.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    });
  }
  const bool on_gpu = p.on_gpu;
  // Note [Memory plan] (src/engine/memory_plan.cpp): what each rank will hold at the step's
  // peak, activations included; --plan prints it for every stage and stops.
  PlanModel& plan_model = p.plan_model;
  plan_model = in.model->plan_model(mbs, in.seq, config.compute_dtype, !on_gpu);
  // What this process holds before any of the model exists, so the plan is of what the
  // operating system sees (the start-up check compares it with MemAvailable): with the BLAS
  // library's retained scratch, which the step's GEMMs would add (a host model's; a GPU
  // model's GEMMs run on the device). --plan runs no step-sized GEMM (seconds with a large
  // model or a slow 16-bit dtype): its baseline leaves that scratch out.
  if (!on_gpu && !o.plan) in.model->warm_up_host_gemms(mbs, in.seq, config.compute_dtype);
  plan_model.process_baseline_bytes = std::max<int64_t>(0, resident_bytes());
  // Note [Fitting the defaults]: knobs left at DeepSpeed's defaults that only trade speed for
  // memory, lowered when the plan would not fit (collective: every rank makes the same choice).
  // Fitted to 90 % of each rank's share: the plan is measured within a few percent of the
  // resident set (docs/benchmarks.md, "Memory plan against the resident set"), and the rest
  // leaves room for the page cache the swap files go through.
  const int64_t memory = in.memory_per_rank;
  p.fitted = fit_defaults_to_memory(config, plan_model, memory > 0 ? memory / 10 * 9 : memory,
                                    p.target);
  p.plan = plan_memory(config, plan_model, p.target);
  return p;
}

void print_plans(const Options& o, const Inputs& in, const Planned& p, int world) {
  const Config& config = in.config;
  const PlanModel& plan_model = p.plan_model;
  const MemoryPlan& plan = p.plan;
  const bool on_gpu = p.on_gpu;
  const int64_t mbs = config.train_micro_batch_size_per_gpu;
  const int64_t seq = in.seq;
  const std::string& eval_note = in.eval_note;
  const std::string& fitted = p.fitted;
  const PlanTarget target = p.target;
  auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  for (const std::string& line : config_notices(config)) std::printf("%s\n", line.c_str());
  if (!eval_note.empty()) std::printf("zero-train: %s\n", eval_note.c_str());
  std::printf("zero-train --plan: %s, %d rank(s)%s, micro-batch %lld x %lld tokens, %s "
              "parameters, compute %s%s; per rank at the peak of a training step:\n\n%s",
              o.model.c_str(), world, on_gpu ? " on GPUs" : "", static_cast<long long>(mbs),
              static_cast<long long>(seq), dtype_name(config.param_dtype).c_str(),
              dtype_name(config.compute_dtype).c_str(),
              plan_model.checkpointing ? ", activation checkpointing" : "",
              format_memory_plans(plan_every_stage(config, plan_model, target)).c_str());
  if (on_gpu) {
    std::printf("\nthe config's stage is %d: %.2f GiB per rank on the GPU, %.2f GiB in host "
                "memory\n", config.zero_optimization.stage, gib(plan.device_bytes),
                gib(plan.peak_memory_bytes));
  } else {
    std::printf("\nthe config's stage is %d: %.2f GiB per rank in memory\n",
                config.zero_optimization.stage, gib(plan.peak_memory_bytes));
  }
  if (!fitted.empty()) std::printf("with this machine's memory: %s\n", fitted.c_str());
  if (!on_gpu) {
    std::printf("(--plan runs no step-sized GEMM, so its process baseline leaves out the "
                "BLAS library's scratch a training run adds, typically tens of MiB)\n");
  }
}

}  // namespace zero::train
