// Step time and model-state bytes per rank of ZeRO stages 0-3 on a GPT-2.
//
//   mpirun -np N bench_engine [--model gpt2-mini] [--batch 2] [--seq 256] [--steps 6]
//                             [--dtype fp32|bf16] [--threads T] [--overlap 0|1]
//                             [--stages 0123]
//
// Stage 3 runs four ways: gathering on demand on the main thread (overlap_comm false), on the
// communication thread without prefetch (stage3_prefetch_bucket_size 0), with prefetch, and with
// prefetch but nothing kept gathered between uses and at most 1e7 elements gathered ahead (the
// memory-lean setting: 3Ψ per step).
//
// The engines of all configurations live side by side and their steps are interleaved
// round-robin (stage 0, 1, 2, 0, 1, 2, ...), so drift in the shared machine's speed hits every
// stage alike and the ratios come from one run. Prints a markdown table on rank 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/gpt2.h"
#include "zero/memory.h"

namespace {

struct Options {
  std::string model = "gpt2-mini";
  int64_t batch = 2;
  int64_t seq = 256;
  int steps = 6;
  std::string dtype = "fp32";
  int threads = 0;  // 0: cores / ranks
  bool overlap_variants = true;
  std::string stages = "0123";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--model") o.model = value;
    else if (key == "--batch") o.batch = std::stoll(value);
    else if (key == "--seq") o.seq = std::stoll(value);
    else if (key == "--steps") o.steps = std::stoi(value);
    else if (key == "--dtype") o.dtype = value;
    else if (key == "--threads") o.threads = std::stoi(value);
    else if (key == "--overlap") o.overlap_variants = value != "0";
    else if (key == "--stages") o.stages = value;
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return o;
}

struct Variant {
  int stage;
  bool overlap;
  std::string label;
  std::string extra_zero_json;
  std::shared_ptr<zero::gpt2::GPT2Impl> model;
  std::unique_ptr<zero::Engine> engine;
  std::vector<double> step_ms;
  double comm_ms = 0;
};

std::string config_json(const Options& o, int stage, bool overlap, const std::string& extra) {
  std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.batch) +
                     ", \"gradient_accumulation_steps\": 1, \"gradient_clipping\": 1.0" +
                     ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, "
                     "\"weight_decay\": 0.1}}";
  if (o.dtype == "bf16") json += ", \"bf16\": {\"enabled\": true}";
  json += ", \"zero_optimization\": {\"stage\": " + std::to_string(stage) +
          ", \"reduce_bucket_size\": 5e7, \"allgather_bucket_size\": 5e7, \"overlap_comm\": " +
          (overlap ? "true" : "false") + extra + "}}";
  return json;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  zero::keep_freed_host_memory();
  auto comm = zero::make_mpi_communicator();
  const int world = comm->size();
  const int rank = comm->rank();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(o.threads > 0 ? o.threads : std::max(1, cores / world));

  std::vector<Variant> variants;
  auto wanted = [&](int stage) { return o.stages.find(char('0' + stage)) != std::string::npos; };
  auto add = [&](int stage, bool overlap, std::string label, std::string extra) {
    Variant v;
    v.stage = stage;
    v.overlap = overlap;
    v.label = std::move(label);
    v.extra_zero_json = std::move(extra);
    variants.push_back(std::move(v));
  };
  for (int stage = 0; stage <= 2; ++stage) {
    if (wanted(stage)) add(stage, false, "stage " + std::to_string(stage), "");
  }
  if (o.overlap_variants && world > 1 && wanted(2)) {
    add(2, true, "stage 2 + overlap_comm", "");
  }
  if (wanted(3)) {
    add(3, false, "stage 3, on demand", "");
    if (o.overlap_variants) {
      add(3, true, "stage 3 + overlap, no prefetch",
                          ", \"stage3_prefetch_bucket_size\": 0");
      add(3, true, "stage 3 + overlap + prefetch", "");
      add(3, true, "stage 3 + prefetch, reuse distance 0, live 1e7",
                          ", \"stage3_max_reuse_distance\": 0, "
                          "\"stage3_max_live_parameters\": 1e7");
    }
  }
  for (auto& v : variants) {
    torch::manual_seed(0);
    v.model = std::make_shared<zero::gpt2::GPT2Impl>(zero::gpt2::GPT2Config::preset(o.model));
    const zero::Config config =
        zero::parse_config(config_json(o, v.stage, v.overlap, v.extra_zero_json), world, "bench");
    v.engine = zero::initialize(v.model, config, comm);
  }
  const auto vocab = zero::gpt2::GPT2Config::preset(o.model).vocab_size;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1 + rank);
  const int warmup = 2;
  for (int step = 0; step < warmup + o.steps; ++step) {
    at::Tensor tokens = at::randint(0, vocab, {o.batch, o.seq + 1}, generator);
    at::Tensor x = tokens.narrow(1, 0, o.seq).contiguous();
    at::Tensor y = tokens.narrow(1, 1, o.seq).contiguous();
    for (auto& v : variants) {
      comm->barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      at::Tensor loss = v.model->loss(v.model->forward(x), y);
      v.engine->backward(loss);
      v.engine->step();
      comm->barrier()->wait();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (step >= warmup) v.step_ms.push_back(ms);
    }
  }
  if (rank == 0) {
    const double base = median(variants[0].step_ms);
    std::printf("model %s (%.1fM parameters), %s, world %d, micro-batch %lld x %lld tokens, "
                "%d threads/rank, median of %d steps\n\n",
                o.model.c_str(), variants[0].engine->num_parameters() / 1e6, o.dtype.c_str(),
                world, static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                at::get_num_threads(), o.steps);
    std::printf("| configuration | step ms | vs first | model-state MiB/rank | params | grads | "
                "fp32 master | optimizer | gathered peak | comm MiB/step |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto& v : variants) {
      const auto bytes = v.engine->model_state_bytes();
      const auto c = v.engine->communication();
      const double steps = warmup + o.steps;
      const double per_step =
          (c.reduce_scatter.bytes + c.all_gather.bytes + c.all_reduce.bytes) / steps / (1 << 20);
      auto mib = [](int64_t b) { return b / double(1 << 20); };
      std::printf("| %s | %.0f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                  v.label.c_str(), median(v.step_ms), median(v.step_ms) / base,
                  mib(bytes.total()), mib(bytes.params), mib(bytes.grads),
                  mib(bytes.master_params), mib(bytes.optimizer_state), mib(bytes.gathered_peak),
                  per_step);
    }
  }
  return 0;
}
