// What comparing collective signatures costs a training step (Note [Collective signatures],
// src/comm/collective_signature.h): the same GPT-2 trained at stages 2 and 3 on two
// communicators, one comparing signatures (the default) and one not (ZERO_COLLECTIVE_CHECKS=0),
// the four engines' steps interleaved round-robin so that the shared machine's drift hits
// each alike; prints the median step times, their ratio and the collectives per step. Stage 3
// partitions every parameter (stage3_param_persistence_threshold 0): the most collectives per
// step. Then the price of one check alone: small all_reduces on each communicator, timed.
//
//   mpirun -np N bench_collective_checks [--model gpt2-tiny] [--batch 4] [--seq 128]
//                                        [--steps 30] [--dtype fp32|bf16] [--control]
// --control: neither communicator checks (an A/A run: the ratios' noise floor here).
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/gpt2.h"
#include "zero/memory.h"

namespace {

struct Run {
  int stage;
  bool checks;
  std::shared_ptr<zero::Communicator> comm;
  std::shared_ptr<zero::gpt2::GPT2Impl> model;
  std::unique_ptr<zero::Engine> engine;
  std::vector<double> step_ms;
  int64_t collectives = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int64_t collectives(const zero::CommStats& s) {
  return s.reduce_scatter.calls + s.all_gather.calls + s.all_reduce.calls + s.all_to_all.calls +
         s.broadcast.calls;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_collective_checks"};
  std::string model = "gpt2-tiny", dtype = "fp32";
  int64_t batch = 4, seq = 128;
  int steps = 30;
  app.add_option("--model", model);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--steps", steps);
  app.add_option("--dtype", dtype)->check(CLI::IsMember({"fp32", "bf16"}));
  bool control = false;
  app.add_flag("--control", control, "neither communicator checks (the noise floor)");
  CLI11_PARSE(app, argc, argv);
  zero::keep_freed_host_memory();
  zero::comm::MpiOptions checked = zero::comm::MpiOptions::from_env();
  checked.check_signatures = !control;
  zero::comm::MpiOptions unchecked = checked;
  unchecked.check_signatures = false;
  const auto comm_on = zero::comm::make_mpi_communicator(checked);
  const auto comm_off = zero::comm::make_mpi_communicator(unchecked);
  const int world = comm_on->size(), rank = comm_on->rank();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / world));
  std::vector<Run> runs;
  for (const int stage : {2, 3}) {
    for (const bool checks : {false, true}) {
      Run r{stage, checks, checks ? comm_on : comm_off, nullptr, nullptr, {}, 0};
      torch::manual_seed(0);
      r.model = std::make_shared<zero::gpt2::GPT2Impl>(zero::gpt2::GPT2Config::preset(model));
      std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(batch) +
                         ", \"gradient_clipping\": 1.0, \"optimizer\": {\"type\": \"AdamW\", "
                         "\"params\": {\"lr\": 1e-4}}";
      if (dtype == "bf16") json += ", \"bf16\": {\"enabled\": true}";
      json += ", \"zero_optimization\": {\"stage\": " + std::to_string(stage) +
              ", \"overlap_comm\": true" +
              (stage == 3 ? ", \"stage3_param_persistence_threshold\": 0" : "") + "}}";
      r.engine = zero::initialize(r.model, zero::parse_config(json, world, "bench"), r.comm);
      runs.push_back(std::move(r));
    }
  }
  const int64_t vocab = zero::gpt2::GPT2Config::preset(model).vocab_size;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1 + rank);
  const int warmup = 3;
  for (int step = 0; step < warmup + steps; ++step) {
    const at::Tensor tokens = at::randint(0, vocab, {batch, seq + 1}, generator);
    const at::Tensor x = tokens.narrow(1, 0, seq).contiguous();
    const at::Tensor y = tokens.narrow(1, 1, seq).contiguous();
    // Alternate which of a stage's pair goes first, so neither always follows the other.
    for (size_t i = 0; i < runs.size(); ++i) {
      Run& r = runs[step % 2 == 0 ? i : (i ^ 1)];
      comm_off->barrier()->wait();
      const zero::CommStats before = r.comm->stats();
      const auto start = std::chrono::steady_clock::now();
      r.engine->backward(r.model->forward_loss(x, y));
      r.engine->step();
      comm_off->barrier()->wait();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (step >= warmup) r.step_ms.push_back(ms);
      r.collectives = collectives(r.comm->stats()) - collectives(before);
    }
  }
  // One check's price: 4-byte all_reduces, 20 rounds of 200 on each communicator, alternating.
  std::vector<double> per_call_us[2];
  at::Tensor one = at::ones({1});
  for (int round = 0; round < 20; ++round) {
    for (const int checks : {0, 1}) {
      const auto& c = checks ? comm_on : comm_off;
      c->barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < 200; ++i) c->all_reduce(one, zero::ReduceOp::kSum)->wait();
      per_call_us[checks].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
          200);
    }
  }
  // And a step-sized all_gather (the stage-2 parameters' after the step), the same way.
  std::vector<double> gather_ms[2];
  const int64_t numel = runs[0].engine->num_parameters() / world * world;
  at::Tensor whole = at::empty({numel});
  at::Tensor part = at::ones({numel / world});
  for (int round = 0; round < 10; ++round) {
    for (const int checks : {0, 1}) {
      const auto& c = checks ? comm_on : comm_off;
      c->barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < 5; ++i) c->all_gather(part, whole)->wait();
      gather_ms[checks].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 5);
    }
  }
  if (rank == 0) {
    std::printf("all_gather of %lld floats: %.2f ms off, %.2f ms on\n", static_cast<long long>(numel),
                median(gather_ms[0]), median(gather_ms[1]));
    std::printf("model %s, %s, %d ranks, micro-batch %lld x %lld, %d threads/rank, median of %d "
                "steps\n\n| stage | step ms, checks off | step ms, checks on | on / off | "
                "collectives per step |\n|---|---|---|---|---|\n",
                model.c_str(), dtype.c_str(), world, static_cast<long long>(batch),
                static_cast<long long>(seq), at::get_num_threads(), steps);
    for (size_t i = 0; i < runs.size(); i += 2) {
      const double off = median(runs[i].step_ms), on = median(runs[i + 1].step_ms);
      std::printf("| %d | %.1f | %.1f | %.4f | %lld |\n", runs[i].stage, off, on, on / off,
                  static_cast<long long>(runs[i + 1].collectives));
    }
    const double off = median(per_call_us[0]), on = median(per_call_us[1]);
    std::printf("\nOne 4-byte all_reduce: %.1f us with checks off, %.1f us on: %.1f us per "
                "collective for the check (median of 20 rounds of 200)\n", off, on, on - off);
  }
  return 0;
}
