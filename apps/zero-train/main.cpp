// zero-train: trains GPT-2 with ZeRO across MPI ranks from a DeepSpeed config.
//
//   zero-train --config CONFIG.json [--model gpt2-tiny|gpt2-mini|gpt2|gpt2-medium|gpt2-large|gpt2-xl]
//              [--data PREFIX] [--steps N] [--eval-every K] [--sample-every K] [--out RUN_DIR]
//   mpirun -np N zero-train ...      or      zero-run -n N -- zero-train ...
//
// Everything about the optimization comes from the config (batch sizes, optimizer, precision,
// ZeRO stage, scheduler, seed). PREFIX names the token files PREFIX_train.bin and
// PREFIX_val.bin (llm.c format). Rank 0 prints progress and the final summary and writes the
// run directory: the effective config, metrics.csv and loss.svg.
//
// Errors: anything that can be wrong with the inputs (config, model name, data files) is
// checked on every rank before training starts, and the ranks agree on the outcome, so a bad
// input gives one clear message and every rank exits with status 2. A failure during training
// on one rank aborts the whole job (status 1), since the other ranks may wait in a collective.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "report.h"
#include "zero/comm.h"
#include "zero/config.h"
#include "zero/console.h"
#include "zero/data.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gpt2.h"
#include "zero/memory.h"
#include "zero/shard.h"
#include "zero/tokenizer.h"

namespace {

using zero::train::StepRecord;

struct Options {
  std::string config_path;
  std::string model = "gpt2-tiny";
  std::string data = "data/tokens/moby_dick";
  std::string encoder = "data/gpt2/encoder.json";
  int64_t steps = 100;
  int64_t eval_every = 25;
  int64_t eval_batches = 4;
  int64_t sample_every = 0;
  int64_t sample_tokens = 48;
  int64_t seq_len = 0;  // 0: min(model context, 256)
  std::string out = "runs/latest";
  int threads = 0;
};

int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Everything that can fail because of the user's inputs, prepared on every rank.
struct Inputs {
  zero::Config config;
  zero::gpt2::GPT2Config model;
  std::optional<zero::TokenFile> train;
  std::optional<zero::TokenFile> val;
  std::optional<zero::GPT2Decoder> decoder;
};

Inputs prepare(const Options& o, int world) {
  Inputs in;
  in.config = zero::load_config(o.config_path, world);
  in.model = zero::gpt2::GPT2Config::preset(o.model);
  in.train = zero::TokenFile::load(o.data + "_train.bin", in.model.vocab_size);
  in.val = zero::TokenFile::load(o.data + "_val.bin", in.model.vocab_size);
  in.decoder = zero::GPT2Decoder::load(o.encoder);
  return in;
}

// Every rank learns whether any rank failed; the lowest failing rank's message is printed once.
bool ranks_agree_ok(zero::Communicator& comm, const std::string& error) {
  at::Tensor failed = at::zeros({comm.size()}, at::kDouble);
  at::Tensor mine = at::full({1}, error.empty() ? 0.0 : 1.0, at::kDouble);
  comm.all_gather(mine, failed);
  int first = -1;
  for (int r = 0; r < comm.size(); ++r) {
    if (failed[r].item<double>() > 0) {
      first = r;
      break;
    }
  }
  if (first < 0) return true;
  if (comm.rank() == first) {
    std::fprintf(stderr, "zero-train: error%s: %s\n",
                 comm.size() > 1 && first != 0 ? (" on rank " + std::to_string(first)).c_str() : "",
                 error.c_str());
  }
  return false;
}

double all_mean(zero::Communicator& comm, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  comm.all_reduce(t, zero::ReduceOp::kSum);
  return t.item<double>() / comm.size();
}

// Mean validation loss over `batches` windows per rank, averaged over ranks.
double evaluate(zero::gpt2::GPT2Impl& model, const zero::EvalBatcher& val,
                zero::Communicator& comm) {
  at::NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t b = 0; b < val.num_batches(); ++b) {
    auto [x, y] = val.batch(b);
    total += model.loss(model.forward(x), y).item<double>();
  }
  model.train();
  return all_mean(comm, total / std::max<int64_t>(val.num_batches(), 1));
}

// Top-k sampling (k 40, temperature 0.8) from <|endoftext|>, seeded so runs are reproducible.
std::string sample_text(zero::gpt2::GPT2Impl& model, const zero::GPT2Decoder& decoder,
                        int64_t tokens, int64_t context, uint64_t seed) {
  at::NoGradGuard no_grad;
  model.eval();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> ids = {50256};  // <|endoftext|> as the prompt
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - context);
    at::Tensor x = at::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), at::kLong)
                       .unsqueeze(0);
    at::Tensor logits = model.forward(x).select(1, x.size(1) - 1).squeeze(0).to(at::kFloat);
    auto [top, index] = logits.div(0.8).topk(40);
    const at::Tensor choice = at::multinomial(top.softmax(-1), 1, false, generator);
    ids.push_back(index[choice.item<int64_t>()].item<int64_t>());
  }
  model.train();
  return decoder.decode(std::vector<int64_t>(ids.begin() + 1, ids.end()));
}

// Bytes per element of the gradients the engine keeps: the full buffer in the parameter dtype
// at stages 0 and 1; at stages 2 and 3 the owned shard, in fp32 when gradients accumulate over
// micro-steps or are communicated in fp32, else in the communication dtype.
int64_t grad_bytes_per_element(const zero::Config& c) {
  if (c.zero_optimization.stage < 2) return c10::elementSize(c.param_dtype);
  if (c.gradient_accumulation_steps > 1 || c.communication_dtype == at::kFloat) return 4;
  return c10::elementSize(c.communication_dtype);
}

// Model-state bytes per parameter the ZeRO paper predicts for this stage and precision, with
// Adam: parameters, gradients (grad_bytes_per_element), fp32 master weights (none when the
// parameters are fp32: they serve) and fp32 m and v. 16-bit, 16-bit gradients: 16 / 4 + 12/N /
// 2 + 14/N / 16/N for stages 0 / 1 / 2 / 3; fp32: 16 / 8 + 8/N / 4 + 12/N / 16/N.
double zero_formula_bytes_per_param(const zero::Config& c, int world) {
  const int stage = c.zero_optimization.stage;
  const double n = world;
  const double param = static_cast<double>(c10::elementSize(c.param_dtype));
  const double grad = static_cast<double>(grad_bytes_per_element(c));
  const double master_and_adam = c.param_dtype == at::kFloat ? 8 : 12;
  switch (stage) {
    case 0: return param + grad + master_and_adam;
    case 1: return param + grad + master_and_adam / n;
    case 2: return param + (grad + master_and_adam) / n;
    default: return (param + grad + master_and_adam) / n;  // stage 3: everything partitioned
  }
}

int run(const Options& o, const std::shared_ptr<zero::Communicator>& comm) {
  const int rank = comm->rank();
  const int world = comm->size();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(o.threads > 0 ? o.threads : std::max(1, cores / world));

  Inputs in;
  std::string error;
  try {
    in = prepare(o, world);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!ranks_agree_ok(*comm, error)) return 2;
  const zero::Config& config = in.config;
  const int64_t seq = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(in.model.n_positions, 256);
  const int64_t mbs = config.train_micro_batch_size_per_gpu;
  const int gas = static_cast<int>(config.gradient_accumulation_steps);
  std::optional<zero::DistributedSampler> train_sampler;
  std::optional<zero::EvalBatcher> val_batches;
  error.clear();
  try {
    ZERO_CHECK(seq <= in.model.n_positions, "--seq-len ", seq, " exceeds the context of ", o.model,
               " (", in.model.n_positions, ")");
    train_sampler.emplace(*in.train, mbs, seq, rank, world, gas, config.seed);
    val_batches.emplace(*in.val, mbs, seq, rank, world, o.eval_batches);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!ranks_agree_ok(*comm, error)) return 2;

  try {
    torch::manual_seed(config.seed);
    auto model = std::make_shared<zero::gpt2::GPT2Impl>(in.model);
    auto engine = zero::initialize(model, config, comm);
    zero::train::Progress progress(o.steps, zero::stdout_is_terminal());
    std::unique_ptr<zero::train::CsvLog> csv;
    if (rank == 0) {
      std::filesystem::create_directories(o.out);
      std::ofstream(o.out + "/config.json") << config.effective_json << "\n";
      csv = std::make_unique<zero::train::CsvLog>(o.out + "/metrics.csv");
      std::ostringstream head;
      head << "zero-train: " << o.model << " (" << engine->num_parameters() / 1e6
           << "M parameters), ZeRO stage " << config.zero_optimization.stage << ", " << world
           << " rank(s), micro-batch " << mbs << " x " << seq << " tokens, accumulation " << gas
           << ", global batch " << config.train_batch_size << " sequences; data " << o.data
           << "_{train,val}.bin (" << in.train->size() << " / " << in.val->size() << " tokens)";
      progress.message(head.str());
    }
    const int stage = config.zero_optimization.stage;
    // A forward pass at stage 3 gathers each unit's parameters, a collective: every rank must
    // run it, so every rank samples (the same tokens; rank 0 prints them). At stages 0-2 the
    // parameters are whole and rank 0 samples alone.
    auto sample = [&](uint64_t seed) -> std::string {
      if (rank != 0 && stage != 3) return {};
      return sample_text(*model, *in.decoder, o.sample_tokens, seq, seed);
    };
    std::vector<StepRecord> records;
    const auto start = std::chrono::steady_clock::now();
    double last_val = -1;
    // Bytes the training steps move (reduce-scatter, all-gather), counted around the steps
    // only: at stage 3 evaluation and sampling gather parameters too, and are counted apart.
    int64_t train_rs_bytes = 0, train_ag_bytes = 0;
    const zero::CommStats comm_before = engine->communication();
    for (int64_t step = 0; step < o.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t skipped_before = engine->skipped_steps();
      const zero::CommStats step_before = engine->communication();
      double loss_sum = 0;
      for (int micro = 0; micro < gas; ++micro) {
        auto [x, y] = train_sampler->batch(step, micro);
        at::Tensor loss = model->loss(model->forward(x), y);
        loss_sum += loss.item<double>();
        engine->backward(loss);
        engine->step();
      }
      const zero::CommStats step_after = engine->communication();
      train_rs_bytes += step_after.reduce_scatter.bytes - step_before.reduce_scatter.bytes;
      train_ag_bytes += step_after.all_gather.bytes - step_before.all_gather.bytes;
      StepRecord r;
      r.step = step + 1;
      r.loss = all_mean(*comm, loss_sum / gas);
      r.lr = engine->learning_rate();
      r.grad_norm = engine->global_grad_norm();
      r.loss_scale = engine->loss_scale();
      r.skipped = engine->skipped_steps() > skipped_before;
      r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count();
      r.tokens_per_second = config.train_batch_size * seq / (r.step_ms / 1000.0);
      const bool last = step + 1 == o.steps;
      if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
        r.val_loss = last_val = evaluate(*model, *val_batches, *comm);
      }
      std::optional<std::string> sampled;
      if (o.sample_every > 0 && (step + 1) % o.sample_every == 0 && !last) {
        sampled = sample(config.seed + step);
      }
      records.push_back(r);
      if (rank == 0) {
        csv->append(r);
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress.update(r, elapsed / (step + 1) * (o.steps - step - 1));
        if (r.val_loss >= 0 && !last) {
          char line[96];
          std::snprintf(line, sizeof(line), "step %lld: validation loss %.4f",
                        static_cast<long long>(r.step), r.val_loss);
          progress.message(line);
        }
        if (sampled) progress.message("sample: " + *sampled);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank == 0) progress.finish();

    // Per-rank figures for the summary, gathered to every rank.
    const zero::ModelStateBytes bytes = engine->model_state_bytes();
    constexpr int kFigures = 4;
    at::Tensor mine = at::tensor({static_cast<double>(bytes.total()),
                                  static_cast<double>(peak_rss_bytes()),
                                  static_cast<double>(bytes.gathered_peak),
                                  static_cast<double>(bytes.params - bytes.grads /
                                      grad_bytes_per_element(config) *
                                      static_cast<int64_t>(c10::elementSize(config.param_dtype)))},
                                 at::kDouble);
    at::Tensor all = at::empty({kFigures * world}, at::kDouble);
    comm->all_gather(mine, all);
    auto figure = [&](int r, int k) { return all[kFigures * r + k].item<double>(); };
    const zero::CommStats comm_after = engine->communication();
    const double moved = static_cast<double>(train_rs_bytes + train_ag_bytes);
    const double other_moved = static_cast<double>(
        (comm_after.reduce_scatter.bytes - comm_before.reduce_scatter.bytes) +
        (comm_after.all_gather.bytes - comm_before.all_gather.bytes)) - moved;
    // Collective at stage 3 (see `sample`), so before the summary that only rank 0 prints.
    const std::string final_sample = sample(config.seed);
    if (rank == 0) {
      const zero::ShardLayout layout = zero::shard_layout(engine->num_parameters(), world, 64);
      const double p = static_cast<double>(layout.padded_numel);
      const int64_t comm_elem = c10::elementSize(config.communication_dtype);
      const int64_t param_elem = c10::elementSize(config.param_dtype);
      const double other = static_cast<double>(layout.padded_numel - layout.shard_numel);
      // Ring volume per optimizer step (Note [Counting communicated bytes]): stage 0 all-reduces
      // (RS + AG of gradients), stages 1/2 reduce-scatter gradients (stage 2 on every
      // micro-step) and all-gather parameters. Stage 3, per micro-step, all-gathers every
      // partitioned unit for its forward and again for its backward and reduce-scatters its
      // gradients: 3 x (N-1)/N of each element (persistent parameters move 2x: reduce-scatter,
      // then all-gather after the step). Measured all-gathers differ both ways: a unit used
      // again within stage3_max_reuse_distance stays gathered from forward to backward (with
      // the default, every unit), while the first micro-step, before the prefetch trace
      // exists, releases after every use and gathers wte (embedding and tied LM head) again.
      const double rs_theory = stage == 0 ? other * comm_elem
                               : stage == 1 ? other * comm_elem
                                            : other * gas * comm_elem;
      const double ag_theory = stage == 0 ? other * comm_elem
                               : stage == 3 ? other * 2 * gas * param_elem
                                            : other * param_elem;
      const double theory = rs_theory + ag_theory;
      std::vector<zero::train::SummaryRow> rows;
      rows.push_back({"", "measured", "expected"});
      const double formula = zero_formula_bytes_per_param(config, world);
      for (int r = 0; r < world; ++r) {
        char expected[96];
        std::snprintf(expected, sizeof(expected), "%s (ZeRO-%d: %.2f B/param x %.2fM)",
                      zero::train::human_bytes(formula * p).c_str(), stage, formula, p / 1e6);
        rows.push_back({"model state, rank " + std::to_string(r),
                        zero::train::human_bytes(figure(r, 0)), expected});
      }
      if (stage == 3) {
        // What the formula leaves out: the persistent parameters (whole on every rank, in the
        // model state above) and the partitioned ones gathered for running units (not in it).
        char persistent[128];
        std::snprintf(persistent, sizeof(persistent),
                      "in the model state (stage3_param_persistence_threshold %lld; "
                      "params outside units)",
                      static_cast<long long>(
                          config.zero_optimization.stage3_param_persistence_threshold));
        rows.push_back({"  whole (persistent) params, rank 0",
                        zero::train::human_bytes(figure(0, 3)), persistent});
        double gathered_peak = 0;
        for (int r = 0; r < world; ++r) gathered_peak = std::max(gathered_peak, figure(r, 2));
        char whole[128];
        std::snprintf(whole, sizeof(whole), "of %s whole (%.0f%%); not in the model state",
                      zero::train::human_bytes(p * param_elem).c_str(),
                      100 * gathered_peak / (p * param_elem));
        rows.push_back({"  gathered params, peak", zero::train::human_bytes(gathered_peak), whole});
      }
      {
        // What plain data parallelism would hold per rank: 16 bytes per parameter with 16-bit
        // parameters and Adam (params, grads, fp32 master, m, v), 16 with fp32 too.
        const double measured = figure(0, 0);
        const double dp = 16 * p;
        char saved[96];
        std::snprintf(saved, sizeof(saved), "%s per rank without ZeRO (16 B/param): %.0f%% saved",
                      zero::train::human_bytes(dp).c_str(), 100 * (1 - measured / dp));
        rows.push_back({"vs plain data parallel", "", saved});
      }
      if (stage == 3) {
        rows.push_back({"communicated per step", zero::train::human_bytes(moved / o.steps),
                        zero::train::human_bytes(theory) + " (ring volume, 3 x Psi)"});
        rows.push_back({"  reduce-scatter", zero::train::human_bytes(static_cast<double>(train_rs_bytes) / o.steps),
                        zero::train::human_bytes(rs_theory) +
                            " (gradients, once per micro-step)"});
        rows.push_back({"  all-gather", zero::train::human_bytes(static_cast<double>(train_ag_bytes) / o.steps),
                        zero::train::human_bytes(ag_theory) +
                            " (forward + backward; less when reused soon, more while tracing)"});
        rows.push_back({"  evaluation and sampling, all steps", zero::train::human_bytes(other_moved),
                        "(their forwards gather too; not in the per-step figures)"});
      } else {
        rows.push_back({"communicated per step", zero::train::human_bytes(moved / o.steps),
                        zero::train::human_bytes(theory) + " (ring volume)"});
      }
      for (int r = 0; r < world; ++r) {
        rows.push_back({"peak RSS, rank " + std::to_string(r),
                        zero::train::human_bytes(figure(r, 1)), ""});
      }
      char rate[64];
      std::snprintf(rate, sizeof(rate), "%.0f", config.train_batch_size * seq * o.steps / seconds);
      rows.push_back({"tokens/s", rate, ""});
      char losses[64];
      std::snprintf(losses, sizeof(losses), "%.4f -> %.4f", records.front().loss, records.back().loss);
      rows.push_back({"train loss (first -> last)", losses, ""});
      char val[32];
      std::snprintf(val, sizeof(val), "%.4f", last_val);
      rows.push_back({"validation loss", val, ""});
      std::printf("\nsummary (%lld steps in %.1f s, %lld skipped)\n%s",
                  static_cast<long long>(o.steps), seconds,
                  static_cast<long long>(engine->skipped_steps()),
                  zero::train::format_summary(rows).c_str());
      zero::train::write_loss_svg(o.out + "/loss.svg", records,
                                  "zero-train " + o.model + ", ZeRO stage " + std::to_string(stage) +
                                      ", " + std::to_string(world) + " rank(s)");
      std::printf("\nsample: %s\n", final_sample.c_str());
      std::printf("\nrun directory: %s (config.json, metrics.csv, loss.svg)\n", o.out.c_str());
      std::fflush(stdout);
    }
    comm->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-train: error on rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    comm->abort_job(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"zero-train: train GPT-2 with ZeRO across MPI ranks from a DeepSpeed config"};
  // A later flag overrides an earlier one (scripts/demo.sh passes defaults, users add their own).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", o.config_path, "DeepSpeed JSON config")->required();
  // Checked after start-up (GPT2Config::preset), so the message comes once, from rank 0.
  app.add_option("--model", o.model, "model preset: gpt2-tiny, gpt2-mini, gpt2, gpt2-medium, "
                 "gpt2-large, gpt2-xl")->capture_default_str();
  app.add_option("--data", o.data, "token files PREFIX_train.bin and PREFIX_val.bin")
      ->capture_default_str();
  app.add_option("--encoder", o.encoder, "GPT-2 encoder.json for decoding samples")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "validation loss every K steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches, "validation micro-batches per rank")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--sample-every", o.sample_every, "print a generated sample every K steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--sample-tokens", o.sample_tokens, "tokens per sample")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sequence (default: min(context, 256))")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--out", o.out, "run directory")->capture_default_str();
  app.add_option("--threads", o.threads, "libtorch threads per rank (default: cores / ranks)")
      ->check(CLI::NonNegativeNumber);
  zero::keep_freed_host_memory();
  std::shared_ptr<zero::Communicator> comm;
  try {
    comm = zero::make_mpi_communicator();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-train: error: %s\n", e.what());
    return 2;
  }
  // Every rank parses the same command line; only rank 0 prints usage or the parse error.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (comm->rank() == 0) return app.exit(e);
    return e.get_exit_code();
  }
  return run(o, comm);
}
