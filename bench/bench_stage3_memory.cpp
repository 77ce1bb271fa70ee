// Peak host memory per rank of a training step at ZeRO stage 3 (and, for comparison, stage 2)
// on a large GPT-2: the per-rank footprint should fall as 1/N.
//
//   mpirun -np N bench_stage3_memory [--model gpt2-medium] [--stage 3] [--batch 1] [--seq 64]
//                                    [--dtype bf16] [--sharded-init 1] [--max-live 3e7]
//
// Every byte libtorch allocates on the CPU is counted (zero::track_host_memory). Reported per
// rank (maximum over ranks): the peak while building the model (with zero::ShardedInit the
// whole model never exists on one rank), the peak during zero::initialize, the model-state
// bytes, and the peak during one replayed training step (parameters gathered for the running
// units, activations, gradients in flight). One line of a markdown table on rank 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/gpt2.h"
#include "zero/memory.h"
#include "zero/sharded_init.h"

namespace {

struct Options {
  std::string model = "gpt2-medium";
  int stage = 3;
  int64_t batch = 1;
  int64_t seq = 64;
  std::string dtype = "bf16";
  bool sharded_init = true;
  double max_live = 3e7;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--model") o.model = value;
    else if (key == "--stage") o.stage = std::stoi(value);
    else if (key == "--batch") o.batch = std::stoll(value);
    else if (key == "--seq") o.seq = std::stoll(value);
    else if (key == "--dtype") o.dtype = value;
    else if (key == "--sharded-init") o.sharded_init = value != "0";
    else if (key == "--max-live") o.max_live = std::stod(value);
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The largest value over ranks.
double max_over_ranks(zero::Communicator& comm, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  comm.all_reduce(t, zero::ReduceOp::kMax)->wait();
  return t.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  zero::keep_freed_host_memory();
  zero::track_host_memory();
  auto comm = zero::make_mpi_communicator();
  const int world = comm->size();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / world));

  std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.batch) +
                     ", \"gradient_clipping\": 1.0, \"optimizer\": {\"type\": \"AdamW\", "
                     "\"params\": {\"lr\": 1e-4}}";
  if (o.dtype == "bf16") json += ", \"bf16\": {\"enabled\": true}";
  json += ", \"zero_optimization\": {\"stage\": " + std::to_string(o.stage) +
          ", \"reduce_bucket_size\": 2e7, \"allgather_bucket_size\": 2e7";
  if (o.stage == 3) {
    json += ", \"stage3_max_live_parameters\": " + std::to_string(static_cast<int64_t>(o.max_live)) +
            ", \"stage3_prefetch_bucket_size\": " + std::to_string(static_cast<int64_t>(o.max_live)) +
            ", \"stage3_max_reuse_distance\": 0";
  }
  json += "}}";
  const zero::Config config = zero::parse_config(json, world, "bench");
  const auto preset = zero::gpt2::GPT2Config::preset(o.model);

  zero::reset_host_memory_peak();
  torch::manual_seed(0);
  std::shared_ptr<zero::gpt2::GPT2Impl> model;
  if (o.stage == 3 && o.sharded_init) {
    zero::ShardedInit sharded(config, comm);
    model = std::make_shared<zero::gpt2::GPT2Impl>(preset);
  } else {
    model = std::make_shared<zero::gpt2::GPT2Impl>(preset);
  }
  const double build_peak = zero::host_memory_stats().peak_bytes;
  zero::reset_host_memory_peak();
  auto engine = zero::initialize(model, config, comm);
  const double init_peak = zero::host_memory_stats().peak_bytes;

  auto generator = at::make_generator<at::CPUGeneratorImpl>(1 + comm->rank());
  double step_peak = 0;
  double resident = 0;
  for (int step = 0; step < 3; ++step) {  // the last step replays the recorded unit order
    at::Tensor tokens = at::randint(0, preset.vocab_size, {o.batch, o.seq + 1}, generator);
    resident = zero::host_memory_stats().allocated_bytes;
    zero::reset_host_memory_peak();
    at::Tensor loss = model->loss(model->forward(tokens.narrow(1, 0, o.seq).contiguous()),
                                  tokens.narrow(1, 1, o.seq).contiguous());
    engine->backward(loss);
    engine->step();
    step_peak = zero::host_memory_stats().peak_bytes;
  }
  const auto state = engine->model_state_bytes();
  const double gib = 1 << 30;
  const double params = static_cast<double>(engine->num_parameters());
  const double build = max_over_ranks(*comm, build_peak) / gib;
  const double init = max_over_ranks(*comm, init_peak) / gib;
  const double model_state = max_over_ranks(*comm, static_cast<double>(state.total())) / gib;
  const double gathered = max_over_ranks(*comm, static_cast<double>(state.gathered_peak)) / gib;
  const double before_step = max_over_ranks(*comm, resident) / gib;
  const double step = max_over_ranks(*comm, step_peak) / gib;
  if (comm->rank() == 0) {
    std::printf("| %s | %d | %d | %s | %.2f | %.2f | %.3f (%.2f B/param) | %.3f | %.3f | %.3f |\n",
                o.model.c_str(), o.stage, world,
                o.stage == 3 ? (o.sharded_init ? "ShardedInit" : "after build") : "-", build, init,
                model_state, state.total() / params, gathered, before_step, step);
  }
  return 0;
}
