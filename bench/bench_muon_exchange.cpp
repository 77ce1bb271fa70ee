// Note [Muon under partitioning]: the owner exchange against every holder orthogonalising the
// matrices it holds pieces of (ZERO_MUON_EXCHANGE), in one run on the same model and data.
//
//   mpirun -np N bench_muon_exchange [--model gpt2-mini] [--stage 3] [--steps 6] [--batch 2]
//                                    [--seq 64]
//
// Per mode, over the timed steps (the first is a warm-up): the optimizer step's time (the
// engine's step() at the accumulation boundary, median), its Newton-Schulz and exchange
// seconds, the NS runs and the elements each rank sends per step, and the host memory the
// step adds at its peak; every figure the largest over the ranks. Then whether both modes
// ended with the same parameters, bit for bit (they must: the same NS on the same matrices).
// Markdown rows on rank 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_core.h"
#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/gathered_parameters.h"
#include "zero/gpt2.h"
#include "zero/memory.h"

namespace {

struct Options {
  std::string model = "gpt2-mini";
  int stage = 3;
  int steps = 6;
  int64_t batch = 2;
  int64_t seq = 64;
};

double max_over_ranks(zero::Communicator& comm, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  comm.all_reduce(t, zero::ReduceOp::kMax)->wait();
  return t.item<double>();
}

struct Result {
  double step_ms = 0, ns_s = 0, exchange_s = 0, matrices = 0, sent = 0, peak_mib = 0;
  int split = 0;
  at::Tensor parameters;
};

Result run(const Options& o, const std::shared_ptr<zero::Communicator>& comm, bool every_holder) {
  setenv("ZERO_MUON_EXCHANGE", every_holder ? "every-holder" : "owner", 1);
  const int world = comm->size();
  std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.batch) +
                     ", \"gradient_clipping\": 1.0, \"optimizer\": {\"type\": \"Muon\", "
                     "\"params\": {\"muon_lr\": 0.02, \"adam_lr\": 1e-3}}, "
                     "\"zero_optimization\": {\"stage\": " + std::to_string(o.stage) + "}}";
  const zero::Config config = zero::parse_config(json, world, "bench");
  const auto preset = zero::gpt2::GPT2Config::preset(o.model);
  torch::manual_seed(0);
  auto model = std::make_shared<zero::gpt2::GPT2Impl>(preset);
  auto engine = zero::initialize(model, config, comm);
  auto& core = dynamic_cast<zero::EngineCore&>(*engine);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1 + comm->rank());
  std::vector<double> step_ms;
  double peak = 0;
  zero::MuonExchangeStats first{};
  for (int step = 0; step < o.steps; ++step) {
    at::Tensor tokens = at::randint(0, preset.vocab_size, {o.batch, o.seq + 1}, generator);
    at::Tensor loss = model->loss(model->forward(tokens.narrow(1, 0, o.seq).contiguous()),
                                  tokens.narrow(1, 1, o.seq).contiguous());
    engine->backward(loss);
    const double before = static_cast<double>(zero::host_memory_stats().allocated_bytes);
    zero::reset_host_memory_peak();
    const auto started = std::chrono::steady_clock::now();
    engine->step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    if (step == 0) {
      first = core.shard_state().muon_exchange_stats();
      continue;
    }
    step_ms.push_back(ms);
    peak = std::max(peak, static_cast<double>(zero::host_memory_stats().peak_bytes) - before);
  }
  const zero::MuonExchangeStats& stats = core.shard_state().muon_exchange_stats();
  const double timed = static_cast<double>(stats.steps - first.steps);
  std::sort(step_ms.begin(), step_ms.end());
  Result r;
  r.step_ms = max_over_ranks(*comm, step_ms[step_ms.size() / 2]);
  r.ns_s = max_over_ranks(*comm, (stats.ns_seconds - first.ns_seconds) / timed);
  r.exchange_s = max_over_ranks(*comm, (stats.exchange_seconds - first.exchange_seconds) / timed);
  r.matrices = max_over_ranks(
      *comm, static_cast<double>(stats.matrices_orthogonalized - first.matrices_orthogonalized) /
                 timed);
  r.sent = max_over_ranks(*comm,
                          static_cast<double>(stats.elements_sent - first.elements_sent) / timed);
  r.peak_mib = max_over_ranks(*comm, peak) / (1 << 20);
  r.split = stats.split_matrices;
  {
    zero::GatheredParameters whole(*engine, model->parameters());
    std::vector<at::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}).clone());
    r.parameters = at::cat(flat);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_muon_exchange: Muon's owner exchange against every holder"};
  app.add_option("--model", o.model, "GPT-2 preset")->capture_default_str();
  app.add_option("--stage", o.stage, "ZeRO stage")->check(CLI::Range(0, 3))->capture_default_str();
  app.add_option("--steps", o.steps, "steps per mode (the first untimed)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per micro-batch")->capture_default_str();
  app.add_option("--seq", o.seq, "tokens per sequence")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  zero::keep_freed_host_memory();
  zero::track_host_memory();
  auto comm = zero::make_mpi_communicator();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / comm->size()));
  const Result owner = run(o, comm, /*every_holder=*/false);
  const Result every = run(o, comm, /*every_holder=*/true);
  const bool same = at::equal(owner.parameters, every.parameters);
  at::Tensor agreed = at::full({1}, same ? 1.0 : 0.0, at::kDouble);
  comm->all_reduce(agreed, zero::ReduceOp::kSum)->wait();
  if (comm->rank() == 0) {
    for (const auto& [name, r] : {std::pair<const char*, const Result&>{"owner", owner},
                                  std::pair<const char*, const Result&>{"every holder", every}}) {
      std::printf(
          "| %s | %d | %d | %s | %d | %.1f | %.0f (%.2f MiB) | %.1f | %.1f | %.1f | %.1f |\n",
                  o.model.c_str(), o.stage, comm->size(), name, r.split, r.matrices, r.sent,
                  r.sent * 4 / (1 << 20), r.ns_s * 1e3, r.exchange_s * 1e3, r.step_ms,
                  r.peak_mib);
    }
    std::printf("same parameters after %d steps, bit for bit: %s\n", o.steps,
                agreed.item<double>() == comm->size() ? "yes" : "NO");
  }
  return agreed.item<double>() == comm->size() ? 0 : 1;
}
