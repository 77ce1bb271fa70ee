// zero's side of the peers benchmark (bench/peers/): trains the benchmark's GPT-2 with one
// ZeRO stage, on the same initial weights, data and hyper-parameters as the Python systems
// there, and writes the same JSON result.
//
//   mpirun -np 2 --bind-to core bench_peer_zero --stage 0|1|2|3 --dtype fp32|bf16
//       --model gpt2-mini --init INIT.safetensors --data TOKENS.bin [--config DS_CONFIG.json]
//       [--batch 2] [--seq 256] [--warmup 2] [--steps 5] [--threads 1] [--head fused|plain]
//       --out RESULT.json
//
// --head fused (default) trains with GPT2Impl::forward_loss, zero's fused LM head and loss
// (Note [Fused LM-head cross-entropy]); --head plain computes the logits and then the loss,
// the same model code path as the Python systems, to separate the model's gain from the
// engine's.
//
// Protocol (bench/peers/README.md): the initial weights are a safetensors file with Hugging
// Face GPT2LMHeadModel names; rank r's rows of step s are the token windows
// (s * world + r) * batch + b, b < batch (window w = tokens [w T, w T + T + 1)); AdamW, lr
// 3e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.1, clipping 1.0, no accumulation, unless
// --config gives the DeepSpeed config the driver also hands DeepSpeed. A step (forward, loss,
// backward, engine step) is timed between barriers, so its time is the slowest rank's; the
// loss recorded is the mean over ranks, computed outside the timed part. The allocator is
// whatever the environment says (the driver sets glibc's MALLOC_* variables or not): this
// program does not call zero::keep_freed_host_memory.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/data.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gpt2.h"
#include "zero/safetensors.h"

namespace {

struct Options {
  int stage = 0;
  std::string dtype = "fp32";
  std::string model = "gpt2-mini";
  std::string init;
  std::string data;
  std::string config;  // "": the protocol's defaults (config_json)
  std::string out;
  int64_t batch = 2;
  int64_t seq = 256;
  int warmup = 2;
  int steps = 5;
  int threads = 1;
  bool fused_head = true;  // GPT2Impl::forward_loss; false: loss(forward(x)), as the peers do
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    ZERO_CHECK(i + 1 < argc, "bench_peer_zero: ", key, " needs a value");
    const std::string value = argv[i + 1];
    if (key == "--stage") o.stage = std::stoi(value);
    else if (key == "--dtype") o.dtype = value;
    else if (key == "--model") o.model = value;
    else if (key == "--init") o.init = value;
    else if (key == "--data") o.data = value;
    else if (key == "--config") o.config = value;
    else if (key == "--out") o.out = value;
    else if (key == "--batch") o.batch = std::stoll(value);
    else if (key == "--seq") o.seq = std::stoll(value);
    else if (key == "--warmup") o.warmup = std::stoi(value);
    else if (key == "--steps") o.steps = std::stoi(value);
    else if (key == "--threads") o.threads = std::stoi(value);
    else if (key == "--head") {
      ZERO_CHECK(value == "fused" || value == "plain", "bench_peer_zero: --head ", value,
                 "; allowed: fused, plain");
      o.fused_head = value == "fused";
    }
    else ZERO_CHECK(false, "bench_peer_zero: unknown option ", key);
  }
  ZERO_CHECK(!o.init.empty() && !o.data.empty() && !o.out.empty(),
             "bench_peer_zero: --init, --data and --out are required");
  ZERO_CHECK(o.dtype == "fp32" || o.dtype == "bf16", "bench_peer_zero: --dtype ", o.dtype,
             "; allowed: fp32, bf16");
  return o;
}

// The protocol's hyper-parameters as a DeepSpeed config (the driver passes the same file to
// DeepSpeed when it gives --config).
std::string config_json(const Options& o) {
  nlohmann::json config = {
      {"train_micro_batch_size_per_gpu", o.batch},
      {"gradient_accumulation_steps", 1},
      {"gradient_clipping", 1.0},
      {"optimizer",
       {{"type", "AdamW"},
        {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"weight_decay", 0.1}}}}},
      {"zero_optimization", {{"stage", o.stage}}}};
  if (o.dtype == "bf16") config["bf16"] = {{"enabled", true}};
  return config.dump();
}

int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Copies the init file's tensors into the model's parameters, by name; every parameter must
// be there with its shape.
void load_initial_weights(zero::gpt2::GPT2Impl& model, const std::string& path) {
  const zero::SafetensorsFile file = zero::read_safetensors(path);
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters()) {
    const auto it = file.tensors.find(item.key());
    ZERO_CHECK(it != file.tensors.end(), path, " has no tensor '", item.key(), "'");
    ZERO_CHECK(it->second.sizes() == item.value().sizes(), path, ": '", item.key(), "' has shape ",
               it->second.sizes(), ", the model ", item.value().sizes());
    item.value().copy_(it->second);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run(const Options& o) {
  auto comm = zero::make_mpi_communicator();
  const int world = comm->size();
  const int rank = comm->rank();
  at::set_num_threads(o.threads);
  std::string config_text = config_json(o);
  if (!o.config.empty()) {
    std::ifstream file(o.config);
    ZERO_CHECK(file.good(), "bench_peer_zero: cannot read ", o.config);
    std::stringstream text;
    text << file.rdbuf();
    config_text = text.str();
  }
  const zero::Config config =
      zero::parse_config(config_text, world, o.config.empty() ? "bench_peer_zero" : o.config);
  ZERO_CHECK(config.zero_optimization.stage == o.stage && config.train_micro_batch_size_per_gpu ==
                 o.batch,
             "bench_peer_zero: the config's stage / micro-batch differ from --stage / --batch");

  const zero::gpt2::GPT2Config shape = zero::gpt2::GPT2Config::preset(o.model);
  auto model = std::make_shared<zero::gpt2::GPT2Impl>(shape);
  load_initial_weights(*model, o.init);
  auto engine = zero::initialize(model, config, comm);
  const zero::EvalBatcher rows(zero::TokenFile::load(o.data, shape.vocab_size), o.batch, o.seq,
                               rank, world);
  ZERO_CHECK(rows.num_batches() >= o.warmup + o.steps, o.data, " holds ", rows.num_batches(),
             " steps of ", o.batch, " x ", o.seq, " tokens per rank, fewer than ",
             o.warmup + o.steps);

  std::vector<double> losses, step_ms;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    auto [x, y] = rows.batch(step);
    comm->barrier()->wait();
    const auto start = std::chrono::steady_clock::now();
    at::Tensor loss = o.fused_head ? model->forward_loss(x, y) : model->loss(model->forward(x), y);
    engine->backward(loss);
    engine->step();
    comm->barrier()->wait();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    at::Tensor mean = at::full({1}, loss.item<double>() / world, at::kDouble);
    comm->all_reduce(mean, zero::ReduceOp::kSum)->wait();
    losses.push_back(mean.item<double>());
    if (step >= o.warmup) step_ms.push_back(ms);
  }
  at::Tensor rss = at::zeros({world}, at::kDouble);
  comm->all_gather(at::full({1}, static_cast<double>(peak_rss_bytes()), at::kDouble), rss)->wait();
  if (rank == 0) {
    std::vector<double> rss_per_rank(world);
    for (int r = 0; r < world; ++r) rss_per_rank[r] = rss[r].item<double>();
    const zero::ModelStateBytes bytes = engine->model_state_bytes();
    nlohmann::json result = {
        {"system", "zero"},
        {"config", "zero-" + std::to_string(o.stage) + (o.fused_head ? "" : "-plain-head")},
        {"stage", o.stage},
        {"dtype", o.dtype},
        {"world", world},
        {"batch", o.batch},
        {"seq", o.seq},
        {"threads_per_rank", at::get_num_threads()},
        {"warmup", o.warmup},
        {"losses", losses},
        {"step_ms", step_ms},
        {"peak_rss_bytes", rss_per_rank},
        {"model_state_bytes", bytes.total()},
        {"notes", std::string(o.fused_head ? "fused LM head + loss (GPT2Impl::forward_loss); "
                                           : "logits then loss, as the Python peers; ") +
                      "zero " + zero::dtype_name(config.param_dtype) + " parameters, compute " +
                      zero::dtype_name(config.compute_dtype) + ", communication " +
                      zero::dtype_name(config.communication_dtype) + "; effective config " +
                      config.effective_json}};
    std::ofstream(o.out) << result.dump(2) << "\n";
    std::printf("zero-%d%s %s: median step %.1f ms, loss %.4f -> %.4f\n", o.stage,
                o.fused_head ? "" : " (plain head)", o.dtype.c_str(), median(step_ms),
                losses.front(), losses.back());
  }
  comm->barrier()->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_peer_zero: error: %s\n", e.what());
    return 1;
  }
}
