// The memory planner (zero/memory_plan.h) against what a run holds, and what activation
// checkpointing saves and costs: GPT-2 trained a few steps; the peak of every byte a rank holds
// during the last (zero::host_memory_stats, shared memory included) next to the plan's peak.
//
//   mpirun -np N bench_memory_plan [--model gpt2-mini] [--stage 0..3] [--batch 1] [--seq 128]
//                                  [--steps 3] [--dtype fp32|bf16] [--compute fp32|bf16|auto]
//                                  [--checkpointing off|on|both]
//
// Prints one markdown row per variant on rank 0: model, stage, ranks, batch x seq,
// checkpointing, planned peak (MiB), measured peak (max over ranks), measured / planned, what
// the step added to what was held before it, the plan with the process's baseline (resident
// before the model, measured at start) against the peak resident set (VmHWM, max over ranks),
// and the median step time (s, the first step left out). With `both` the two variants train interleaved step by step, so their step times
// come from the same minutes of this shared machine; both models are then in memory, so the
// memory columns are left out (run `on` and `off` for them).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/gpt2.h"
#include "zero/memory.h"
#include "zero/memory_plan.h"

namespace {

struct Options {
  std::string model = "gpt2-mini";
  int stage = 0;
  int64_t batch = 1;
  int64_t seq = 128;
  int steps = 3;
  std::string dtype = "fp32";
  std::string checkpointing = "off";
  std::string host_cache = "exact";
  std::string compute;  // compute_data_type; "" = the config's default
};

double max_over_ranks(zero::Communicator& comm, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  comm.all_reduce(t, zero::ReduceOp::kMax)->wait();
  return t.item<double>();
}

struct Run {
  std::shared_ptr<zero::gpt2::GPT2Impl> model;
  std::unique_ptr<zero::Engine> engine;
  int64_t planned = 0;           // the training state, buffers and activations
  int64_t planned_resident = 0;  // and the process's baseline: what the OS should see
  double peak = 0;         // the last step's
  double before_step = 0;  // held when it started
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The memory planner against measured peaks; activation checkpointing"};
  app.add_option("--model", o.model, "GPT-2 preset");
  app.add_option("--stage", o.stage, "ZeRO stage")->check(CLI::Range(0, 3));
  app.add_option("--batch", o.batch, "micro-batch (sequences)");
  app.add_option("--seq", o.seq, "tokens per sequence");
  app.add_option("--steps", o.steps, "training steps (the last is measured)");
  app.add_option("--dtype", o.dtype, "parameter dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--compute", o.compute, "compute_data_type (default: the config's)");
  app.add_option("--checkpointing", o.checkpointing, "activation checkpointing")
      ->check(CLI::IsMember({"off", "on", "both"}));
  app.add_option("--host-cache", o.host_cache,
                 "the host block cache's mode (zero::hold_host_memory_to_peak)")
      ->check(CLI::IsMember({"fast", "exact"}));
  CLI11_PARSE(app, argc, argv);
  zero::keep_freed_host_memory();
  zero::hold_host_memory_to_peak(o.host_cache == "exact");
  zero::track_host_memory();
  auto comm = zero::make_mpi_communicator();
  const int world = comm->size();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / world));

  std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.batch) +
                     ", \"gradient_clipping\": 1.0, \"optimizer\": {\"type\": \"AdamW\", "
                     "\"params\": {\"lr\": 1e-4}}";
  if (o.dtype == "bf16") json += ", \"bf16\": {\"enabled\": true}";
  if (!o.compute.empty()) json += ", \"compute_data_type\": \"" + o.compute + "\"";
  json += ", \"zero_optimization\": {\"stage\": " + std::to_string(o.stage) + "}}";
  const zero::Config config = zero::parse_config(json, world, "bench");
  // Resident before any model exists, BLAS scratch included: the plan's process baseline
  // (zero-train measures the same).
  zero::gpt2::GPT2Config::preset(o.model).warm_up_host_gemms(o.batch, o.seq, config.compute_dtype);
  const int64_t baseline = std::max<int64_t>(0, zero::resident_bytes());

  std::vector<bool> variants;
  if (o.checkpointing != "on") variants.push_back(false);
  if (o.checkpointing != "off") variants.push_back(true);
  std::vector<Run> runs(variants.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    zero::gpt2::GPT2Config preset = zero::gpt2::GPT2Config::preset(o.model);
    preset.checkpointed_blocks = variants[v] ? preset.n_layer : 0;
    torch::manual_seed(0);
    Run& run = runs[v];
    run.model = std::make_shared<zero::gpt2::GPT2Impl>(preset);
    run.engine = zero::initialize(run.model, config, comm);
    zero::PlanModel plan_model = preset.plan_model(o.batch, o.seq, config.compute_dtype);
    run.planned = zero::plan_memory(config, plan_model).peak_memory_bytes;
    plan_model.process_baseline_bytes = baseline;
    run.planned_resident = zero::plan_memory(config, plan_model).resident_bytes;
  }
  const auto vocab = zero::gpt2::GPT2Config::preset(o.model).vocab_size;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1 + comm->rank());
  for (int step = 0; step < o.steps; ++step) {
    at::Tensor tokens = at::randint(0, vocab, {o.batch, o.seq + 1}, generator);
    const at::Tensor x = tokens.narrow(1, 0, o.seq).contiguous();
    const at::Tensor y = tokens.narrow(1, 1, o.seq).contiguous();
    for (Run& run : runs) {
      comm->barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      run.before_step = static_cast<double>(zero::host_memory_stats().allocated_bytes);
      zero::reset_host_memory_peak();
      run.engine->backward(run.model->forward_loss(x, y));
      run.engine->step();
      run.peak = static_cast<double>(zero::host_memory_stats().peak_bytes);
      run.seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  const double mib = 1 << 20;
  const bool alone = runs.size() == 1;
  for (size_t v = 0; v < runs.size(); ++v) {
    Run& run = runs[v];
    const double peak = max_over_ranks(*comm, run.peak);
    const double added = max_over_ranks(*comm, run.peak - run.before_step);
    // The operating system's view: the largest peak resident set over the ranks.
    const double rss = max_over_ranks(*comm, static_cast<double>(zero::peak_resident_bytes()));
    std::vector<double> times(run.seconds.begin() + (run.seconds.size() > 1 ? 1 : 0),
                              run.seconds.end());
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    if (comm->rank() == 0) {
      char memory[192] = "- | - | - | - | - | - | -";
      if (alone) {
        std::snprintf(memory, sizeof(memory), "%.1f | %.1f | %.3f | %.1f | %.1f | %.1f | %.3f",
                      run.planned / mib, peak / mib, peak / static_cast<double>(run.planned),
                      added / mib, static_cast<double>(run.planned_resident) / mib, rss / mib,
                      rss / static_cast<double>(run.planned_resident));
      }
      std::printf("| %s | %d | %d | %lld x %lld | %s | %s | %.2f |\n", o.model.c_str(), o.stage,
                  world, static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                  variants[v] ? "on" : "off", memory, median);
    }
  }
  return 0;
}
