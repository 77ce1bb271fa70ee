// zero-train: trains a causal language model (GPT-2, the Llama family: zero/causal_lm.h) with
// ZeRO across MPI ranks from a DeepSpeed config.
//
//   zero-train --config CONFIG.json [--model gpt2-tiny|gpt2-mini|...|llama-mini|...|L<layers>-C<width>...] [--init HF_DIR]
//              [--data PREFIX] [--encoder FILE] [--steps N] [--eval-every K] [--eval-batches B]
//              [--sample-every K] [--sample-tokens T] [--seq-len T] [--out RUN_DIR]
//              [--threads T] [--device cpu|cuda] [--dropout P] [--save-every K] [--checkpoint-dir DIR]
//              [--resume auto|DIR] [--activation-checkpointing] [--plan]   (README.md lists them; --help describes them)
//   mpirun -np N zero-train ...      or      zero-run -n N -- zero-train ...
//
// Everything about the optimization comes from the config (batch sizes, optimizer, precision,
// ZeRO stage, scheduler, seed). PREFIX names the token files PREFIX_train.bin and
// PREFIX_val.bin (llm.c format). Rank 0 prints progress and the final summary and writes the
// run directory: the effective config, metrics.csv and loss.svg.
//
// Checkpoints (see Note [Resuming zero-train]): --save-every K saves every K steps and after
// the last into RUN_DIR/checkpoints (or --checkpoint-dir); --resume continues a run from one.
//
// Errors: anything that can be wrong with the inputs (command line, config, model name, data
// files, the checkpoint to resume from) is checked on every rank before training starts, and
// the ranks agree on the outcome, so a bad input gives one clear message and every rank exits
// with status 2. So are what a save needs (with --save-every: the checkpoint directory
// writable from every rank, room for a checkpoint), csv_monitor's files and the encoder's
// vocabulary. A failed save (a full disk) ends every rank together, also with status 2 (Note
// [Agreeing on a failure] in zero/comm.h). Any other failure during training on one rank
// aborts the whole job (status 1), since the other ranks may wait in a collective; a rank
// that stops ends the job at the collective deadline (status 3, docs/launching.md).
//
// Note [Resuming zero-train]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// --steps is the total: a run resumed from the checkpoint after step S trains steps S+1..N.
// Everything a step depends on is restored, so the resumed steps' losses are bitwise those of
// an uninterrupted run at the same world size and stage:
//   - the engine's state (zero/engine.h load_checkpoint): weights, optimizer state, counters,
//     loss scale, learning rate and schedule position, each rank's CPU generator (dropout);
//   - the data position: batches are a pure function of the step (zero/data.h,
//     DistributedSampler), so the client state records only the next step;
//   - the metrics: rank 0 keeps metrics.csv's rows up to step S (rows after it were trained
//     after the checkpoint and are trained again) and appends; loss.svg and the summary's
//     first loss cover the whole run.
// The client state also records the data, sequence length, batch and seed; a resume that
// changes them continues with a note that the data order differs from an uninterrupted run.
// The CSV row of a step is written before that step's checkpoint is published, so a kill
// between the two never leaves a checkpoint whose step has no row. One checkpoint directory
// holds one run: with --save-every, a directory that has checkpoints is only saved into by a
// run resuming from its latest one (check_checkpoint_dir).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "directory_lock.h"
#include "report.h"
#include "zero/activation_checkpointing.h"
#include "zero/checkpoint.h"
#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/console.h"
#include "zero/cuda_support.h"
#include "zero/data.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/files.h"
#include "zero/gemm_rates.h"
#include "zero/causal_lm.h"
#include "zero/memory.h"
#include "zero/memory_plan.h"
#include "zero/shard.h"
#include "zero/sharded_init.h"
#include "zero/text_corpus.h"
#include "zero/tokenizer.h"

namespace {

using zero::train::StepRecord;

struct Options {
  std::string config_path;
  std::string model = "gpt2-tiny";
  bool model_given = false;  // --model on the command line (else --init's config.json decides)
  std::string init;          // a Hugging Face GPT-2 directory to start from
  std::string data = "data/tokens/moby_dick";
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";  // with --data text: the BPE merges
  double val_fraction = 0.05;                 // with --data text: the validation share
  int64_t steps = 100;
  int64_t eval_every = 25;
  int64_t eval_batches = 4;
  int64_t sample_every = 0;
  int64_t sample_tokens = 48;
  int64_t seq_len = 0;  // 0: min(model context, 256)
  std::string out = "runs/latest";
  int threads = 0;
  std::string device = "cpu";  // "cuda": one GPU per rank, NCCL between them
  double dropout = 0.0;
  bool activation_checkpointing = false;  // or the config's number_checkpoints
  bool plan = false;                      // print the memory plan of every stage and stop
  int64_t save_every = 0;      // 0: no checkpoints
  std::string checkpoint_dir;  // "": RUN_DIR/checkpoints
  std::string resume;          // "": start fresh; "auto"; or a checkpoint directory
  // What a Hugging Face-style config leaves to the trainer ("auto", no optimizer section):
  // Note [Values left to the trainer] in src/config/trainer_fill.cpp. Each is "given" only when
  // on the command line (a given value that contradicts the config's number is an error).
  zero::TrainerValues trainer;
};


std::string checkpoint_dir(const Options& o) {
  return o.checkpoint_dir.empty() ? o.out + "/checkpoints" : o.checkpoint_dir;
}

// A checkpoint to resume from: `dir` and `tag` as load_checkpoint takes them. An empty `dir`
// means start fresh.
struct ResumeFrom {
  std::string dir;
  std::string tag;
  std::string note;  // why there is nothing to resume, for --resume auto
};

// The tag DIR/latest names (Note [Checkpoint format]).
std::string latest_tag(const std::filesystem::path& dir) {
  return zero::latest_checkpoint_tag(dir.string());
}

// --resume auto: the checkpoint directory when it has a `latest`, else a fresh start.
// --resume DIR: a checkpoint directory (with `latest`) or one checkpoint in it (with
// metadata.json); anything else is an error.
ResumeFrom find_resume(const Options& o) {
  namespace fs = std::filesystem;
  ResumeFrom from;
  if (o.resume.empty()) return from;
  if (o.resume == "auto") {
    const std::string dir = checkpoint_dir(o);
    if (fs::exists(fs::path(dir) / "latest")) {
      from.dir = dir;
      from.tag = latest_tag(dir);
    } else {
      from.note = "--resume auto: no checkpoint in " + dir + " (no " + dir +
                  "/latest), starting from step 1";
    }
    return from;
  }
  fs::path path = fs::path(o.resume).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "DIR/"
  if (fs::exists(path / "latest")) {
    from.dir = path.string();
    from.tag = latest_tag(path);
  } else if (fs::exists(path / "metadata.json")) {
    from.dir = path.parent_path().empty() ? "." : path.parent_path().string();
    from.tag = path.filename().string();
  } else if (fs::exists(path / "checkpoints" / "latest")) {
    // A run directory (--out of an earlier run): its checkpoints are in RUN_DIR/checkpoints.
    from.dir = (path / "checkpoints").string();
    from.tag = latest_tag(from.dir);
    from.note = "--resume " + o.resume + ": a run directory; resuming from its checkpoints in " +
                from.dir;
  } else {
    ZERO_CHECK(false, "--resume ", o.resume, ": no checkpoint there (none of ",
               (path / "latest").string(), ", ", (path / "metadata.json").string(), " or ",
               (path / "checkpoints" / "latest").string(), " exists)");
  }
  return from;
}

// Where checkpoints go must not already hold another position of a run: saving there would
// mix with it, and fail at the step that `latest` names (a save never replaces the latest
// checkpoint). So with --save-every, the checkpoint directory has no `latest`, or it is where
// the run resumes from, at its latest checkpoint.
void check_checkpoint_dir(const Options& o, const ResumeFrom& from) {
  namespace fs = std::filesystem;
  const fs::path dir = checkpoint_dir(o);
  if (o.save_every == 0 || !fs::exists(dir / "latest")) return;
  const std::string latest = latest_tag(dir);
  std::error_code ignored;
  if (!from.dir.empty() && fs::equivalent(dir, from.dir, ignored) && from.tag == latest) return;
  ZERO_CHECK(false, "checkpoint directory ", dir.string(), " already holds checkpoints (latest: ",
             latest, ")", from.dir.empty() ? "" : ", and this run resumes from " +
             (fs::path(from.dir) / from.tag).string(),
             ": saving there would mix with them; pass --resume auto to continue from ", latest,
             ", or --checkpoint-dir (or --out) to save elsewhere");
}

// Where to resume from (find_resume), checked against where checkpoints go
// (check_checkpoint_dir).
ResumeFrom resume_from(const Options& o) {
  ResumeFrom from = find_resume(o);
  check_checkpoint_dir(o, from);
  return from;
}

// Command-line checks whose messages name the value: "--steps: expected an integer >= 1, got '0'".
// An integer in [least, most]; `why_most` says where the upper bound comes from. The type name
// shown by --help names only the lower bound (the README's usage table is --help's text).
CLI::Validator integer_in(int64_t least, int64_t most, const std::string& why_most) {
  return CLI::Validator(
      [least, most, why_most](std::string& text) -> std::string {
        size_t used = 0;
        long long value = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || value < least) {
          return "expected an integer >= " + std::to_string(least) + ", got '" + text + "'";
        }
        if (value > most) {
          return "expected an integer <= " + std::to_string(most) + " (" + why_most + "), got '" +
                 text + "'";
        }
        return {};
      },
      least == 0 ? "NONNEGATIVE" : least == 1 ? "POSITIVE" : ">= " + std::to_string(least));
}

CLI::Validator integer_at_least(int64_t least) {
  return integer_in(least, std::numeric_limits<int64_t>::max(), "");
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; },
      "");
}

// The micro-batch candidates when the config leaves it to zero-train and --micro-batch is not
// given: the Hugging Face Trainer's default first, then smaller ones (the first that fits).
constexpr int64_t kMicroBatchCandidates[] = {8, 4, 2, 1};

// Everything that can fail because of the user's inputs, prepared on every rank.
struct Inputs {
  zero::Config config;
  std::unique_ptr<zero::CausalLMConfig> model;
  std::optional<zero::TokenFile> train;
  std::optional<zero::TokenFile> val;
  std::optional<zero::GPT2Decoder> decoder;
};

// The config, with what it leaves to the trainer filled from `o` (zero::TrainerValues). When
// it leaves the micro-batch open and --micro-batch is not given, the largest candidate whose
// plan fits `memory_per_rank` (90 %, as Note [Fitting the defaults]) is taken; the same on
// every rank (the memory is the ranks' agreed share).
zero::Config load_filled_config(const Options& o, const zero::CausalLMConfig& model,
                                int64_t seq, int world, int64_t memory_per_rank) {
  zero::TrainerValues trainer = o.trainer;
  trainer.total_steps = o.steps;
  trainer.hidden_size = model.shape().hidden_size;
  const bool fit = !trainer.micro_batch.given && o.device != "cuda" && memory_per_rank > 0;
  if (fit) {
    trainer.default_origins["per_device_train_batch_size"] =
        "the largest of 8 (the Hugging Face Trainer's default), 4, 2, 1 whose plan fits this "
        "machine's memory";
  }
  zero::Config config;
  for (const int64_t candidate : kMicroBatchCandidates) {
    const int64_t micro_batch = fit ? candidate : trainer.micro_batch.value;
    trainer.micro_batch.value = micro_batch;
    config = zero::load_config(o.config_path, world, trainer);
    // Whether the micro-batch is the trainer's (filled, or a factor of a filled total): its
    // value is named by its flag in the origin.
    const std::string& flag = trainer.names.at("per_device_train_batch_size");
    const bool filled = std::any_of(config.filled.begin(), config.filled.end(),
                                    [&](const zero::FilledValue& v) {
                                      return v.origin.find(flag) != std::string::npos;
                                    });
    if (!fit || !filled || micro_batch == 1) break;
    zero::PlanModel plan_model = model.plan_model(micro_batch, seq, config.compute_dtype,
                                                  /*on_host=*/true);  // fitted on CPUs only
    plan_model.process_baseline_bytes = std::max<int64_t>(0, zero::resident_bytes());
    zero::Config fitted = config;
    const int64_t budget = memory_per_rank / 10 * 9;
    (void)zero::fit_defaults_to_memory(fitted, plan_model, budget);
    if (zero::plan_memory(fitted, plan_model).peak_memory_bytes <= budget) break;
  }
  return config;
}

// `data`: the token files' prefix (o.data, or where its text was tokenized).
Inputs prepare(const Options& o, const std::string& data, int world, int64_t memory_per_rank) {
  Inputs in;
  in.model = zero::causal_lm_named(o.model);
  if (!o.init.empty()) {
    // The architecture and shape are --init's config.json's; a --model given too must be them.
    std::unique_ptr<zero::CausalLMConfig> pretrained = zero::causal_lm_config_from_dir(o.init);
    ZERO_CHECK(!o.model_given || (pretrained->model_type() == in.model->model_type() &&
                                  pretrained->describe() == in.model->describe()),
               "--model ", o.model, " (", in.model->display_name(), ": ", in.model->describe(),
               ") is not the model of --init ", o.init, " (", pretrained->display_name(), ": ",
               pretrained->describe(), "); leave --model out to train that model");
    in.model = std::move(pretrained);
  }
  in.model->set_dropout(o.dropout);
  const zero::CausalLMShape shape = in.model->shape();
  const int64_t seq = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(shape.context_length, 256);
  in.config = load_filled_config(o, *in.model, seq, world, memory_per_rank);
  // zero-train builds a stage-3 model partitioned as it is made (zero::ShardedInit), before
  // the model-wide persistence cap could be known.
  ZERO_CHECK(in.config.zero_optimization.stage != 3 ||
                 in.config.zero_optimization.stage3_model_persistence_threshold ==
                     std::numeric_limits<int64_t>::max(),
             o.config_path, ": zero_optimization.stage3_model_persistence_threshold = ",
             in.config.zero_optimization.stage3_model_persistence_threshold,
             " is not supported by zero-train, which partitions a stage-3 model while it is "
             "built (before the model-wide cap can be applied); allowed: the default (no cap); "
             "stage3_param_persistence_threshold caps single parameters");
  // Activation checkpointing of the GPT-2 blocks: with --activation-checkpointing all of them
  // (or number_checkpoints), or the config's number_checkpoints first ones. A section that only
  // spells out DeepSpeed's defaults (number_checkpoints null) changes nothing, as in DeepSpeed,
  // where the model decides what it checkpoints.
  const zero::ActivationCheckpointingConfig& checkpointing = in.config.activation_checkpointing;
  if (o.activation_checkpointing || checkpointing.number_checkpoints) {
    const int64_t blocks = checkpointing.number_checkpoints.value_or(shape.num_layers);
    ZERO_CHECK(blocks <= shape.num_layers, o.config_path,
               ": activation_checkpointing.number_checkpoints = ", blocks, " is more than the ",
               shape.num_layers, " blocks of ", o.model, "; allowed: 0..", shape.num_layers,
               " (the first blocks are checkpointed), or null for all");
    in.model->set_checkpointed_blocks(blocks);
  }
  in.train = zero::TokenFile::load(data + "_train.bin", shape.vocab_size);
  in.val = zero::TokenFile::load(data + "_val.bin", shape.vocab_size);
  in.decoder = zero::GPT2Decoder::load(o.encoder);
  // Samples decode ids the model draws from its whole vocabulary: a smaller encoder would
  // fail at the first sample, after training.
  ZERO_CHECK(in.decoder->vocab_size() >= shape.vocab_size, "--encoder ", o.encoder, " has ",
             in.decoder->vocab_size(), " tokens, but ", o.model, " draws from ",
             shape.vocab_size, "; pass the model's GPT-2 encoder.json");
  return in;
}

// Collective. Whether bf16 and fp16 GEMMs are fast here, for "auto" fp16/bf16 sections: the
// GPUs zero trains on compute both fast (tensor cores); on CPUs each rank measures
// (zero/gemm_rates.h) and a dtype slow on any rank is slow for all, so that measurements near
// the threshold cannot leave the ranks training in different dtypes.
void agree_on_16bit_speed(zero::Communicator& comm, Options& o) {
  zero::TrainerValues& t = o.trainer;
  if (o.device == "cuda") {
    t.bf16_fast = t.fp16_fast = true;
    t.bf16_speed_origin = t.fp16_speed_origin = "the GPU computes it fast";
    return;
  }
  const zero::GemmRates& rates = zero::measured_gemm_rates();
  at::Tensor slow = at::tensor({rates.slow(at::kBFloat16) ? 1.0 : 0.0,
                                rates.slow(at::kHalf) ? 1.0 : 0.0},
                               at::kDouble);
  comm.all_reduce(slow, zero::ReduceOp::kMax)->wait();
  auto verdict = [&](int index, at::ScalarType dtype, std::optional<bool>& fast,
                     std::string& origin) {
    fast = slow[index].item<double>() == 0.0;
    origin = rates.describe(dtype);
    if (*fast == rates.slow(dtype)) origin += "; slow on another rank";
  };
  verdict(0, at::kBFloat16, t.bf16_fast, t.bf16_speed_origin);
  verdict(1, at::kHalf, t.fp16_fast, t.fp16_speed_origin);
}

// "zero-train: error[ on rank R]: MESSAGE" on rank `origin` only, where every rank knows the
// failure and its origin: one message for the job.
void print_error_once(zero::Communicator& comm, int origin, const std::string& message) {
  if (comm.rank() != origin) return;
  std::fprintf(stderr, "zero-train: error%s: %s\n",
               comm.size() > 1 && origin != 0 ? (" on rank " + std::to_string(origin)).c_str() : "",
               message.c_str());
  std::fflush(stderr);
}

// Every rank learns whether any rank failed; the lowest failing rank's message is printed once
// (Note [Agreeing on a failure] in zero/comm.h).
bool ranks_agree_ok(zero::Communicator& comm, const std::string& error) {
  try {
    zero::agree_on_failure(comm, "zero-train", error);
  } catch (const zero::CollectiveError& e) {
    print_error_once(comm, e.origin_rank(), e.what());
    return false;
  }
  return true;
}

double all_mean(zero::Communicator& comm, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  comm.all_reduce(t, zero::ReduceOp::kSum)->wait();
  return t.item<double>() / comm.size();
}

// The validation batches: --eval-batches micro-batches of the training micro-batch per rank,
// or as many as the validation set holds; a set too small for one micro-batch on every rank
// is evaluated in smaller ones. `note` says what was reduced and why ("" when nothing was).
zero::EvalBatcher make_eval_batches(const zero::TokenFile& val, const Options& o,
                                    int64_t micro_batch, int64_t seq, int rank, int world,
                                    std::string& note) {
  const int64_t windows = zero::num_windows(val.size(), seq);
  ZERO_CHECK(windows >= world, "the validation tokens ", val.path(), " (", val.size(),
             " tokens) hold ", windows, " sequences of --seq-len ", seq, ", fewer than one per "
             "rank (", world, "); use a smaller --seq-len, or more validation data (--data, "
             "--val-fraction)");
  const int64_t batch = std::min(micro_batch, windows / world);
  zero::EvalBatcher batches(val, batch, seq, rank, world, o.eval_batches);
  if (batch < micro_batch || batches.num_batches() < o.eval_batches) {
    std::ostringstream line;
    line << "validation: " << batches.num_batches() << " batch(es) of " << batch
         << " sequence(s) per rank (asked: --eval-batches " << o.eval_batches << " of the "
         << "micro-batch " << micro_batch << "): " << val.path() << " holds " << windows
         << " sequences of " << seq << " tokens for " << world << " rank(s)";
    note = line.str();
  }
  return batches;
}

// Mean validation loss over `batches` windows per rank, averaged over ranks.
double evaluate(zero::CausalLM& model, const zero::EvalBatcher& val,
                zero::Communicator& comm, const at::Device& device) {
  at::NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t b = 0; b < val.num_batches(); ++b) {
    auto [x, y] = val.batch(b);
    total += model.forward_loss(x.to(device), y.to(device)).item<double>();
  }
  model.train();
  return all_mean(comm, total / std::max<int64_t>(val.num_batches(), 1));
}

// Top-k sampling (k 40, temperature 0.8) from <|endoftext|>, seeded so runs are reproducible.
// With the KV cache and the last position's logits only, as zero-generate: each token costs
// one position (the whole context's [T, vocab] logits per token took 35 % more memory than
// the training step on gpt2-tiny), so sampling stays inside the training step's memory plan.
std::string sample_text(zero::CausalLM& model, const zero::GPT2Decoder& decoder,
                        int64_t tokens, int64_t context, uint64_t seed) {
  at::NoGradGuard no_grad;
  model.eval();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> ids = {50256};  // <|endoftext|> as the prompt
  zero::KVCache cache;
  for (int64_t i = 0; i < tokens; ++i) {
    // Drawn on the host with the seeded CPU generator, whatever the device.
    const at::Tensor logits = model.next_logits(ids, cache, context).to(at::kCPU, at::kFloat);
    auto [top, index] = logits.div(0.8).topk(40);
    const at::Tensor choice = at::multinomial(top.softmax(-1), 1, false, generator);
    ids.push_back(index[choice.item<int64_t>()].item<int64_t>());
  }
  model.train();
  return decoder.decode(std::vector<int64_t>(ids.begin() + 1, ids.end()));
}

// Bytes per element of the gradients the engine keeps (zero::kept_gradient_dtype).
int64_t grad_bytes_per_element(const zero::Config& c) {
  return c10::elementSize(zero::kept_gradient_dtype(c));
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

int run(Options o, const std::shared_ptr<zero::Communicator>& comm) {
  const int rank = comm->rank();
  const int world = comm->size();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(o.threads > 0 ? o.threads : std::max(1, cores / world));
  agree_on_16bit_speed(*comm, o);  // at the thread count the step runs with

  std::string error;
  // --data FILE.txt (or a directory of them): tokenized by rank 0 into a cache beside it
  // (zero/text_corpus.h: a second run with the same text reads only its checksums); the other
  // ranks then read the token files it wrote, from a path they all see.
  std::string data = o.data;
  std::string data_note;
  if (zero::is_text_data(o.data)) {
    if (rank == 0) {
      try {
        const zero::GPT2Encoder encoder = zero::GPT2Encoder::load(o.encoder, o.vocab);
        const bool terminal = zero::stdout_is_terminal();
        zero::prepare_text_data(o.data, encoder, o.val_fraction, cores, &data_note,
                                [terminal](int64_t done, int64_t total) {
                                  if (!terminal || total == 0) return;
                                  std::printf("\rzero-train: tokenizing %5.1f%% of %.1f MB",
                                              100.0 * done / total, total / 1e6);
                                  std::fflush(stdout);
                                });
        if (terminal) std::printf("\n");
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (!ranks_agree_ok(*comm, error)) return 2;
    data = zero::text_data_prefix(o.data);
  }
  // Collective: each rank's share of this host's memory (the plan is fitted to it).
  const int64_t memory_per_rank = zero::memory_per_rank(*comm);
  Inputs in;
  try {
    in = prepare(o, data, world, memory_per_rank);
    // What the engine would refuse on these ranks, refused here (and by --plan) too.
    zero::check_config_for_ranks(in.config, *comm);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!ranks_agree_ok(*comm, error)) return 2;
  zero::Config& config = in.config;  // Note [Fitting the defaults] may lower knobs left at their defaults
  const zero::CausalLMShape shape = in.model->shape();
  const int64_t seq = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(shape.context_length, 256);
  const int64_t mbs = config.train_micro_batch_size_per_gpu;
  const int gas = static_cast<int>(config.gradient_accumulation_steps);
  std::optional<zero::DistributedSampler> train_sampler;
  std::optional<zero::EvalBatcher> val_batches;
  std::string eval_note;
  error.clear();
  try {
    ZERO_CHECK(seq <= shape.context_length, "--seq-len ", seq, " exceeds the context of ", o.model,
               " (", shape.context_length, ")");
    train_sampler.emplace(*in.train, mbs, seq, rank, world, gas, config.seed);
    val_batches.emplace(make_eval_batches(*in.val, o, mbs, seq, rank, world, eval_note));
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!ranks_agree_ok(*comm, error)) return 2;
  // CUDA ranks (--device cuda): one GPU per rank. libzero_cuda is loaded only now
  // (zero/cuda_support.h), so a CPU run never loads libtorch's CUDA libraries; --plan needs
  // no GPU (it plans for one).
  at::Device device(at::kCPU);
  const zero::CudaSupport* cuda = nullptr;
  if (o.device == "cuda" && !o.plan) {
    error.clear();
    try {
      cuda = &zero::cuda_support();
      const int index = cuda->default_cuda_device();
      ZERO_CHECK(index >= 0, "--device cuda: rank ", rank, " sees no CUDA device");
      device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!ranks_agree_ok(*comm, error)) return 2;
  }
  const bool on_gpu = o.device == "cuda";
  const zero::PlanTarget target = on_gpu ? zero::PlanTarget::kDevice : zero::PlanTarget::kHost;
  // Note [Memory plan] (src/engine/memory_plan.cpp): what each rank will hold at the step's
  // peak, activations included; --plan prints it for every stage and stops.
  zero::PlanModel plan_model = in.model->plan_model(mbs, seq, config.compute_dtype, !on_gpu);
  // What this process holds before any of the model exists, so the plan is of what the
  // operating system sees (the start-up check compares it with MemAvailable): with the BLAS
  // library's retained scratch, which the step's GEMMs would add (a host model's; a GPU
  // model's GEMMs run on the device). --plan runs no step-sized GEMM (seconds with a large
  // model or a slow 16-bit dtype): its baseline leaves that scratch out.
  if (!on_gpu && !o.plan) in.model->warm_up_host_gemms(mbs, seq, config.compute_dtype);
  plan_model.process_baseline_bytes = std::max<int64_t>(0, zero::resident_bytes());
  // Note [Fitting the defaults]: knobs left at DeepSpeed's defaults that only trade speed for
  // memory, lowered when the plan would not fit (collective: every rank makes the same choice).
  // Fitted to 90 % of each rank's share: the plan is measured within a few percent of the
  // resident set (docs/benchmarks.md, "Memory plan against the resident set"), and the rest
  // leaves room for the page cache the swap files go through.
  const std::string fitted = zero::fit_defaults_to_memory(
      config, plan_model, memory_per_rank > 0 ? memory_per_rank / 10 * 9 : memory_per_rank,
      target);
  const zero::MemoryPlan plan = zero::plan_memory(config, plan_model, target);
  auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  if (o.plan) {
    if (rank == 0) {
      for (const std::string& line : zero::config_notices(config)) std::printf("%s\n", line.c_str());
      if (!eval_note.empty()) std::printf("zero-train: %s\n", eval_note.c_str());
      std::printf("zero-train --plan: %s, %d rank(s)%s, micro-batch %lld x %lld tokens, %s "
                  "parameters, compute %s%s; per rank at the peak of a training step:\n\n%s",
                  o.model.c_str(), world, on_gpu ? " on GPUs" : "", static_cast<long long>(mbs),
                  static_cast<long long>(seq), zero::dtype_name(config.param_dtype).c_str(),
                  zero::dtype_name(config.compute_dtype).c_str(),
                  plan_model.checkpointing ? ", activation checkpointing" : "",
                  zero::format_memory_plans(zero::plan_every_stage(config, plan_model, target))
                      .c_str());
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
    return 0;
  }
  if (cuda) {
    // Does the plan fit the GPU? If not, one message with the offload that would make it fit.
    error.clear();
    try {
      const zero::CudaMemory memory = cuda->memory(device.index());
      if (plan.device_bytes > memory.free_bytes) {
        const int64_t host = zero::host_memory_available();
        const std::string fits = zero::offload_that_fits(
            config, plan_model, memory.free_bytes, host > 0 ? host / world : INT64_MAX);
        char needed[192];
        std::snprintf(needed, sizeof(needed),
                      "%s at ZeRO stage %d needs %.2f GiB of %s per rank at the peak of a step "
                      "(zero-train --plan shows what), but %.2f GiB of its %.2f GiB are free",
                      o.model.c_str(), config.zero_optimization.stage, gib(plan.device_bytes),
                      device.str().c_str(), gib(memory.free_bytes), gib(memory.total_bytes));
        error = std::string(needed) + "; " +
                (fits.empty() ? "no offload of the optimizer state makes it fit: use more GPUs "
                                "(stage 3 divides the parameters too) or a smaller micro-batch"
                              : "it fits with " + fits);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!ranks_agree_ok(*comm, error)) return 2;
  }
  // The communicator of the engine: NCCL between the GPUs (collective), else MPI's.
  std::shared_ptr<zero::Communicator> engine_comm = comm;
  if (cuda) {
    error.clear();
    try {
      zero::NcclOptions nccl;
      nccl.device = device.index();
      engine_comm = cuda->make_nccl_communicator(*comm, nccl);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!ranks_agree_ok(*comm, error)) return 2;
  }
  ResumeFrom from;
  // One job per directory (Note [Directory lock] in directory_lock.h): rank 0 takes the locks
  // before anything is written there and holds them until run() returns.
  std::optional<zero::train::DirectoryLock> run_lock;
  std::optional<zero::train::DirectoryLock> checkpoint_lock;
  error.clear();
  try {
    if (rank == 0) {
      run_lock.emplace(o.out, "run directory");
      const std::string checkpoints = checkpoint_dir(o);
      std::error_code different;
      if (o.save_every > 0 && !std::filesystem::equivalent(checkpoints, o.out, different)) {
        checkpoint_lock.emplace(checkpoints, "checkpoint directory");
      }
    }
    from = resume_from(o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!ranks_agree_ok(*comm, error)) return 2;

  try {
    // Before anything is allocated: does the planned peak fit this machine's memory, and the
    // swap files its disk? (A CollectiveError on every rank when not: one message, exit 2.)
    const std::string estimate =
        zero::check_plan_fits(config, plan, in.model->num_parameters(), *comm);
    torch::manual_seed(config.seed);
    std::shared_ptr<zero::CausalLM> model;
    if (config.zero_optimization.stage == 3) {
      // Partitioned unit by unit as it is built: the whole model is never in memory. On a GPU
      // each unit's shards go there as it is partitioned; what stays whole follows after.
      zero::ShardedInit sharded(config, engine_comm,
                                cuda ? std::optional<c10::Device>(device) : std::nullopt);
      model = in.model->build();
    } else {
      model = in.model->build();
    }
    if (cuda) {
      // Built on the host (same values as a CPU run), moved in the training dtype at stages
      // 0-2, where the engine would convert it anyway: the fp32 copy never reaches the GPU.
      if (config.zero_optimization.stage == 3) {
        model->to(device);
      } else {
        model->to(device, config.param_dtype);
      }
      cuda->reset_memory_peaks(device.index());
    }
    auto engine = zero::initialize(model, config, engine_comm);
    const int stage = config.zero_optimization.stage;
    // --init: the Hugging Face weights, a block at a time (zero/gpt2_pretrained.h); a resumed
    // run's checkpoint holds the weights it continues from instead.
    std::string init_note;
    if (!o.init.empty() && from.dir.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      zero::load_hf_weights(*engine, *model, o.init, *comm);
      char line[64];
      std::snprintf(line, sizeof(line), " (%.1f s)",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      init_note = "starting from the weights of " + o.init + line;
    }
    // Before training: every rank can write the checkpoint directory, with room for a
    // checkpoint (a failure is a CollectiveError on every rank, caught below: exit 2).
    if (o.save_every > 0) engine->check_checkpoint_destination(checkpoint_dir(o));
    // Resume (Note [Resuming zero-train]): the engine's state, then the next step.
    int64_t first_step = 0;
    std::vector<std::string> resume_notes;
    if (!from.dir.empty()) {
      error.clear();
      try {
        const std::string text = engine->load_checkpoint(from.dir, from.tag);
        const nlohmann::json client = nlohmann::json::parse(text);
        const std::string where = from.dir + "/" + from.tag;
        const int64_t boundary = engine->global_steps() + engine->skipped_steps();
        if (client.contains("next_step")) {
          // zero-train's own fields, checked against the engine's counters (which the
          // checkpoint's reader has checked): one step per accumulation boundary.
          const nlohmann::json& next = client.at("next_step");
          ZERO_CHECK(next.is_number_integer() && next.get<int64_t>() == boundary,
                     "checkpoint metadata '", where, "/metadata.json': client_state.next_step = ",
                     next.dump(),
                     " contradicts its counters, which say it was saved after boundary ",
                     boundary, " (zero-train saves the boundary it is at: one step per boundary)");
          first_step = boundary;
          if (client.contains("model")) {
            const nlohmann::json& saved_model = client.at("model");
            ZERO_CHECK(saved_model.is_string() && saved_model.get<std::string>() == o.model,
                       "checkpoint metadata '", where, "/metadata.json': client_state.model = ",
                       saved_model.dump(),
                       ", but this run trains --model ", o.model,
                       "; resume with the model it was saved from");
          }
          auto differs = [&](const char* key, const nlohmann::json& here) {
            if (client.contains(key) && client.at(key) != here) {
              resume_notes.push_back(std::string("note: the checkpoint's run had ") + key + " " +
                                     client.at(key).dump() + ", this one " + here.dump() +
                                     ": the data order differs from an uninterrupted run");
            }
          };
          differs("data", o.data);
          differs("seq_len", seq);
          differs("train_batch_size", config.train_batch_size);
          differs("seed", config.seed);
          if (o.dropout > 0 && client.value("world_size", world) != world) {
            resume_notes.push_back("note: saved at " + client.at("world_size").dump() +
                                   " ranks, resumed at " + std::to_string(world) +
                                   ": the random generators start afresh, so dropout draws "
                                   "differ from an uninterrupted run");
          }
        } else {
          // Not saved by zero-train: one optimizer step per accumulation boundary.
          first_step = boundary;
          resume_notes.push_back("note: " + where + " has no next_step in its client state " +
                                 "(not saved by zero-train); continuing after its boundary " +
                                 std::to_string(first_step));
        }
        ZERO_CHECK(first_step <= o.steps, "--steps ", o.steps, ": the checkpoint ", where,
                   " was saved after step ", first_step, "; pass --steps above it to train on");
      } catch (const std::exception& e) {
        error = std::string("cannot resume: ") + e.what();
      }
      if (!ranks_agree_ok(*comm, error)) return 2;
      if (first_step == o.steps) {
        if (rank == 0) {
          if (!from.note.empty()) std::printf("zero-train: %s\n", from.note.c_str());
          std::printf("zero-train: the checkpoint in %s is at step %lld of --steps %lld: nothing "
                      "left to train\n", from.dir.c_str(), static_cast<long long>(first_step),
                      static_cast<long long>(o.steps));
          std::fflush(stdout);
        }
        comm->barrier()->wait();
        return 0;
      }
    }
    // Rank 0 continues metrics.csv from the checkpoint's step (or starts it afresh).
    zero::train::Progress progress(o.steps, zero::stdout_is_terminal());
    std::unique_ptr<zero::train::CsvLog> csv;
    std::vector<StepRecord> records;
    error.clear();
    if (rank == 0) {
      try {
        std::filesystem::create_directories(o.out);
        zero::write_file_atomically(o.out + "/config.json", config.effective_json + "\n");
        zero::train::MetricsRows kept;
        if (first_step > 0) {
          kept = zero::train::read_metrics(o.out + "/metrics.csv", first_step);
          records = kept.records;
        }
        csv = std::make_unique<zero::train::CsvLog>(o.out + "/metrics.csv", kept.lines);
        if (first_step > 0) {
          std::ostringstream line;
          if (kept.lines.empty()) {
            line << o.out << "/metrics.csv starts at step " << first_step + 1
                 << " (no rows of earlier steps there)";
          } else {
            line << "continuing " << o.out << "/metrics.csv: " << kept.lines.size()
                 << " row(s) up to step " << first_step << " kept";
          }
          if (kept.dropped > 0) line << ", " << kept.dropped << " row(s) after it dropped";
          if (kept.torn > 0) line << ", a last row cut short (the run was killed) dropped";
          resume_notes.push_back(line.str());
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (!ranks_agree_ok(*comm, error)) return 2;
    if (rank == 0) {
      std::ostringstream head;
      head << "zero-train: " << o.model << " (" << engine->num_parameters() / 1e6
           << "M parameters), ZeRO stage " << config.zero_optimization.stage << ", " << world
           << " rank(s), micro-batch " << mbs << " x " << seq << " tokens, accumulation " << gas
           << ", global batch " << config.train_batch_size << " sequences; data " << data
           << "_{train,val}.bin (" << in.train->size() << " / " << in.val->size() << " tokens)";
      if (shape.checkpointed_blocks > 0) {
        head << "; activation checkpointing: " << shape.checkpointed_blocks << " of "
             << shape.num_layers << " blocks recomputed in backward";
      }
      progress.message(head.str());
      // Note [Topology]: where the ranks run, once.
      if (world > 1) progress.message("ranks: " + comm->topology().describe());
      if (!data_note.empty()) progress.message(data_note);
      if (!eval_note.empty()) progress.message(eval_note);
      if (!init_note.empty()) progress.message(init_note);
      if (!fitted.empty()) progress.message(fitted);
      progress.message(estimate);
      if (!from.note.empty()) progress.message(from.note);
      if (!from.dir.empty()) {
        progress.message("resuming from " + from.dir + "/" + from.tag + " after step " +
                         std::to_string(first_step) + ": training steps " +
                         std::to_string(first_step + 1) + ".." + std::to_string(o.steps));
      }
      for (const std::string& note : resume_notes) progress.message(note);
    }
    // Collective. The CSV row of step `done` is already written (Note [Resuming zero-train]).
    auto save = [&](int64_t done) {
      const auto t0 = std::chrono::steady_clock::now();
      const nlohmann::json client = {{"next_step", done},         {"model", o.model},
                                     {"data", o.data},            {"seq_len", seq},
                                     {"train_batch_size", config.train_batch_size},
                                     {"seed", config.seed},       {"world_size", world},
                                     {"stage", stage},
                                     // The model's whole shape, as Hugging Face's config.json:
                                     // zero-ckpt export writes it beside the weights.
                                     {"model_config",
                                      nlohmann::json::parse(in.model->hf_config_json())}};
      const std::string dir = checkpoint_dir(o);
      const std::string tag = engine->save_checkpoint(dir, "", client.dump());
      if (rank == 0) {
        char line[64];
        std::snprintf(line, sizeof(line), " (%.2f s)",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        progress.message("step " + std::to_string(done) + ": saved checkpoint " + dir + "/" + tag +
                         line);
      }
    };
    // Every rank samples (the same tokens; rank 0 prints them): a forward pass may be
    // collective (at stage 3 it gathers each unit's parameters), so no rank may skip it.
    auto sample = [&](uint64_t seed) {
      return sample_text(*model, *in.decoder, o.sample_tokens, seq, seed);
    };
    const auto start = std::chrono::steady_clock::now();
    double last_val = -1;
    // Bytes the training steps move (reduce-scatter, all-gather), counted around the steps
    // only: at stage 3 evaluation and sampling gather parameters too, and are counted apart.
    int64_t train_rs_bytes = 0, train_ag_bytes = 0, train_inter_node_bytes = 0;
    const zero::CommStats comm_before = engine->communication();
    for (int64_t step = first_step; step < o.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t skipped_before = engine->skipped_steps();
      const zero::CommStats step_before = engine->communication();
      double loss_sum = 0;
      for (int micro = 0; micro < gas; ++micro) {
        auto [x, y] = train_sampler->batch(step, micro);
        // The fused head and loss (Note [Fused LM-head cross-entropy]): no [B, T, vocab]
        // logits, and faster on CPUs.
        at::Tensor loss = model->forward_loss(x.to(device), y.to(device));
        loss_sum += loss.item<double>();
        engine->backward(loss);
        engine->step();
      }
      const zero::CommStats step_after = engine->communication();
      // ZeRO++'s qgZ exchanges the gradients across nodes by all_to_all: the reduce-scatter's.
      train_rs_bytes += step_after.reduce_scatter.bytes - step_before.reduce_scatter.bytes +
                        step_after.all_to_all.bytes - step_before.all_to_all.bytes;
      train_ag_bytes += step_after.all_gather.bytes - step_before.all_gather.bytes;
      train_inter_node_bytes += step_after.inter_node_bytes - step_before.inter_node_bytes;
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
        r.val_loss = last_val = evaluate(*model, *val_batches, *comm, device);
      }
      // Beside the engine's own events (loss, lr, grad norm) in the config's monitors.
      std::vector<zero::MonitorEvent> events = {
          {"Train/Samples/tokens_per_second", r.tokens_per_second,
           r.step * config.train_batch_size}};
      if (r.val_loss >= 0) {
        events.push_back({"Train/Samples/val_loss", r.val_loss, r.step * config.train_batch_size});
      }
      engine->write_monitor_events(events);
      std::optional<std::string> sampled;
      if (o.sample_every > 0 && (step + 1) % o.sample_every == 0 && !last) {
        sampled = sample(config.seed + step);
      }
      records.push_back(r);
      if (rank == 0) {
        csv->append(r);
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress.update(r, elapsed / (step + 1 - first_step) * (o.steps - step - 1));
        if (r.val_loss >= 0 && !last) {
          char line[96];
          std::snprintf(line, sizeof(line), "step %lld: validation loss %.4f",
                        static_cast<long long>(r.step), r.val_loss);
          progress.message(line);
        }
        if (sampled) progress.message("sample: " + *sampled);
      }
      if (o.save_every > 0 && ((step + 1) % o.save_every == 0 || last)) save(step + 1);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank == 0) progress.finish();
    const int64_t trained = o.steps - first_step;  // by this process (after a resume, the rest)

    // Per-rank figures for the summary, gathered to every rank.
    const zero::ModelStateBytes bytes = engine->model_state_bytes();
    constexpr int kFigures = 13;
    const zero::CudaMemory gpu = cuda ? cuda->memory(device.index()) : zero::CudaMemory{};
    at::Tensor mine = at::tensor({static_cast<double>(bytes.total()),
                                  static_cast<double>(zero::peak_resident_bytes()),
                                  static_cast<double>(bytes.gathered_peak),
                                  static_cast<double>(bytes.params - bytes.grads /
                                      grad_bytes_per_element(config) *
                                      static_cast<int64_t>(c10::elementSize(config.param_dtype))),
                                  static_cast<double>(bytes.on_nvme),
                                  static_cast<double>(bytes.staging),
                                  static_cast<double>(bytes.params_on_nvme),
                                  static_cast<double>(gpu.peak_allocated_bytes),
                                  static_cast<double>(gpu.peak_reserved_bytes),
                                  static_cast<double>(train_inter_node_bytes),
                                  static_cast<double>(plan.resident_bytes),
                                  static_cast<double>(plan_model.process_baseline_bytes),
                                  static_cast<double>(zero::host_memory_stats().peak_bytes)},
                                 at::kDouble);
    at::Tensor all = at::empty({kFigures * world}, at::kDouble);
    comm->all_gather(mine, all)->wait();
    auto figure = [&](int r, int k) { return all[kFigures * r + k].item<double>(); };
    const zero::CommStats comm_after = engine->communication();
    const double moved = static_cast<double>(train_rs_bytes + train_ag_bytes);
    const double other_moved = static_cast<double>(
        (comm_after.reduce_scatter.bytes - comm_before.reduce_scatter.bytes) +
        (comm_after.all_to_all.bytes - comm_before.all_to_all.bytes) +
        (comm_after.all_gather.bytes - comm_before.all_gather.bytes)) - moved;
    // Collective at stage 3 (see `sample`), so before the summary that only rank 0 prints.
    const std::string final_sample = sample(config.seed);
    if (rank == 0) {
      const zero::ShardLayout layout = zero::shard_layout(engine->num_parameters(), world, zero::kShardAlignment);
      const double p = static_cast<double>(layout.padded_numel);
      const int64_t comm_elem = c10::elementSize(config.communication_dtype);
      const int64_t param_elem = c10::elementSize(config.param_dtype);
      const int64_t compute_elem = c10::elementSize(config.compute_dtype);
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
        if (figure(r, 4) > 0) {
          // Note [NVMe offload], Note [Parameter offload]: where it lives.
          const bool optimizer_offloaded = figure(r, 4) > figure(r, 6);
          const bool params_offloaded = figure(r, 6) > 0;
          rows.push_back({"  in memory", zero::train::human_bytes(figure(r, 0) - figure(r, 4)),
                          std::string(params_offloaded ? "params kept in memory, grads"
                                                       : "params, grads") +
                              (optimizer_offloaded ? "" : ", optimizer state") + "; plus " +
                              zero::train::human_bytes(figure(r, 5)) +
                              " of NVMe staging buffers"});
          std::string what;
          if (params_offloaded) what = "unit param shards";
          if (optimizer_offloaded) {
            what += std::string(params_offloaded ? ", " : "") +
                    "fp32 master weights (16-bit params) and optimizer moments";
          }
          rows.push_back({"  on NVMe", zero::train::human_bytes(figure(r, 4)), what});
        }
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
                      zero::train::human_bytes(p * compute_elem).c_str(),
                      100 * gathered_peak / (p * compute_elem));
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
        rows.push_back({"communicated per step", zero::train::human_bytes(moved / trained),
                        zero::train::human_bytes(theory) + " (ring volume, 3 x Psi)"});
        rows.push_back({"  reduce-scatter", zero::train::human_bytes(static_cast<double>(train_rs_bytes) / trained),
                        zero::train::human_bytes(rs_theory) +
                            " (gradients, once per micro-step)"});
        rows.push_back({"  all-gather", zero::train::human_bytes(static_cast<double>(train_ag_bytes) / trained),
                        zero::train::human_bytes(ag_theory) +
                            " (forward + backward; less when reused soon, more while tracing)"});
        rows.push_back({"  evaluation and sampling, all steps", zero::train::human_bytes(other_moved),
                        "(their forwards gather too; not in the per-step figures)"});
      } else {
        rows.push_back({"communicated per step", zero::train::human_bytes(moved / trained),
                        zero::train::human_bytes(theory) + " (ring volume)"});
      }
      if (const zero::Topology& topology = comm->topology(); topology.nodes() > 1) {
        // Note [Counting communicated bytes], all ranks together, against the measured volume
        // (stage 3's differs from the formula above, see there): in the flat ring the first
        // rank of each node receives all of its volume from the node before (k x); in the
        // hierarchical schedules every rank receives (k-1)/(k m) of the buffer from other
        // nodes, (k-1)/(N-1) of its volume (N x that).
        double across = 0;
        for (int r = 0; r < world; ++r) across += figure(r, 9);
        const int k = topology.nodes();
        const bool hierarchical = comm->capabilities().hierarchical;
        const double share = hierarchical ? static_cast<double>(world) * (k - 1) / (world - 1) : k;
        char expected[200];
        const zero::ZeroPlusPlusConfig& zeropp = config.zero_optimization.zeropp;
        if (zeropp.enabled()) {
          // Note [ZeRO++]: against what plain stage 3 moves across nodes (the formula's volume).
          std::snprintf(expected, sizeof(expected),
                        "plain stage 3: %s (%s, %.2f x the 3 x Psi volume): %.1f x less",
                        zero::train::human_bytes(share * theory).c_str(),
                        hierarchical ? "hierarchical" : "flat ring", share,
                        share * theory / std::max(1.0, across / trained));
        } else {
          std::snprintf(expected, sizeof(expected), "%s (%s: %.2f x the volume per rank, all ranks)",
                        zero::train::human_bytes(share * moved / trained).c_str(),
                        hierarchical ? "hierarchical" : "flat ring", share);
        }
        rows.push_back({"  across nodes", zero::train::human_bytes(across / trained), expected});
        if (zeropp.enabled()) {
          std::string parts;
          if (zeropp.quantized_weights) parts += "qwZ (weights int8, a scale per 256)";
          if (zeropp.hpz_partition_size > 1) {
            parts += std::string(parts.empty() ? "" : ", ") + "hpZ (secondary over " +
                     std::to_string(zeropp.hpz_partition_size) + " ranks of a node)";
          }
          if (zeropp.quantized_gradients) {
            parts += std::string(parts.empty() ? "" : ", ") +
                     "qgZ (gradients int4 across nodes, a scale per 128)";
          }
          rows.push_back({"  ZeRO++", "", parts});
        }
      }
      {
        // Note [Compute dtype]: what the model computed in, what it stored and communicated,
        // and how fast this CPU's 16-bit GEMMs are (the measurement behind "auto").
        const c10::ScalarType sixteen = config.configured_param_dtype != c10::ScalarType::Float
                                            ? config.configured_param_dtype
                                            : c10::ScalarType::BFloat16;
        std::string stored = "parameters " + zero::dtype_name(config.param_dtype) +
                             ", communication " + zero::dtype_name(config.communication_dtype);
        if (config.compute_dtype_auto) stored += "; compute_data_type \"auto\"";
        rows.push_back({"compute dtype", zero::dtype_name(config.compute_dtype), stored});
        rows.push_back({"  16-bit GEMMs here", "",
                        zero::measured_gemm_rates().describe(sixteen)});
      }
      for (int r = 0; r < world; ++r) {
        // Against the rank's own plan, which includes its baseline (what the OS sees); with
        // the parts, so that a gap can be placed: the baseline (the resident set before the
        // model: libraries, libtorch's and MPI's own) and the peak of what zero's host
        // allocator held (tensors, communication buffers, offload staging).
        char against[96];
        const double planned = figure(r, 10);
        std::snprintf(against, sizeof(against), "planned %s: %+.1f %%",
                      zero::train::human_bytes(planned).c_str(),
                      (figure(r, 1) / planned - 1) * 100);
        rows.push_back({"peak RSS, rank " + std::to_string(r),
                        zero::train::human_bytes(figure(r, 1)),
                        std::string(cuda ? "host memory " : "") + against});
        rows.push_back({"  baseline + tracked peak",
                        zero::train::human_bytes(figure(r, 11)) + " + " +
                            zero::train::human_bytes(figure(r, 12)),
                        "before the model; zero's host allocator at its peak"});
      }
      if (cuda) {
        for (int r = 0; r < world; ++r) {
          rows.push_back({"GPU memory peak, rank " + std::to_string(r),
                          zero::train::human_bytes(figure(r, 7)),
                          "allocated (" + zero::train::human_bytes(figure(r, 8)) +
                              " reserved); planned " +
                              zero::train::human_bytes(static_cast<double>(plan.device_bytes))});
        }
      }
      char rate[64];
      std::snprintf(rate, sizeof(rate), "%.0f", config.train_batch_size * seq * trained / seconds);
      rows.push_back({"tokens/s", rate, ""});
      if (config.activation_checkpointing.profile && shape.checkpointed_blocks > 0) {
        // activation_checkpointing.profile: rank 0's checkpointed calls, all steps (with
        // evaluation's forwards, which run without recompute).
        const zero::ActivationCheckpointProfile profile = zero::activation_checkpoint_profile();
        char forward[96], recompute[128];
        std::snprintf(forward, sizeof(forward), "%.2f s", profile.forward_seconds);
        std::snprintf(recompute, sizeof(recompute), "%.2f s, then %.2f s of their backward",
                      profile.recompute_seconds, profile.backward_seconds);
        rows.push_back({"checkpointed forwards, rank 0", forward,
                        std::to_string(profile.forwards) + " calls"});
        rows.push_back({"  their recomputes", recompute,
                        std::to_string(profile.recomputes) + " calls"});
      }
      char losses[64];
      std::snprintf(losses, sizeof(losses), "%.4f -> %.4f", records.front().loss, records.back().loss);
      rows.push_back({"train loss (first -> last)", losses, ""});
      char val[32];
      std::snprintf(val, sizeof(val), "%.4f", last_val);
      rows.push_back({"validation loss", val, ""});
      const std::string resumed =
          first_step > 0 ? ", resumed after step " + std::to_string(first_step) : "";
      std::printf("\nsummary (%lld steps in %.1f s%s, %lld skipped)\n%s",
                  static_cast<long long>(trained), seconds, resumed.c_str(),
                  static_cast<long long>(engine->skipped_steps()),
                  zero::train::format_summary(rows).c_str());
      zero::train::write_loss_svg(o.out + "/loss.svg", records,
                                  "zero-train " + o.model + ", ZeRO stage " + std::to_string(stage) +
                                      ", " + std::to_string(world) + " rank(s)");
      std::printf("\nsample: %s\n", final_sample.c_str());
      std::printf("\nrun directory: %s (config.json, metrics.csv, loss.svg)\n", o.out.c_str());
      std::fflush(stdout);
    }
    comm->barrier()->wait();
    return 0;
  } catch (const zero::CollectiveError& e) {
    // Every rank threw it together (a save or load failed somewhere): the job ends normally,
    // with one message and exit status 2, as for a bad input at start-up.
    print_error_once(*comm, e.origin_rank(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-train: error on rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    zero::abort_mpi_job(1);
  }
  return 1;  // not reached: abort_mpi_job ends the job (this silences -Wreturn-type)
}

}  // namespace

// The --model presets of every family, for --help.
std::string preset_list() {
  std::string list;
  for (const std::string& name : zero::causal_lm_preset_names()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"zero-train: train GPT-2 or a Llama-family model with ZeRO across MPI ranks from a "
               "DeepSpeed config"};
  // A later flag overrides an earlier one (scripts/demo.sh passes defaults, users add their own).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", o.config_path, "DeepSpeed JSON config")->required();
  // Checked after start-up (zero::causal_lm_named), so the message comes once, from rank 0.
  app.add_option("--model", o.model, "model preset: " + preset_list() +
                 "; or a GPT-2 shape L<layers>-C<width>[-H<heads>][-T<context>], e.g. L32-C4096-H32")
      ->capture_default_str();
  app.add_option("--init", o.init,
                 "start from a Hugging Face directory (config.json of model_type gpt2, llama, "
                 "mistral or qwen2, and model.safetensors or a sharded "
                 "model.safetensors.index.json): its model and weights")
      ->check(non_empty());
  app.add_option("--data", o.data,
                 "token files PREFIX_train.bin and PREFIX_val.bin; or text: a .txt file or a "
                 "directory of them, tokenized (once: cached in DATA.zero-tokens/) with the last "
                 "--val-fraction of the tokens for validation")
      ->capture_default_str();
  app.add_option("--val-fraction", o.val_fraction,
                 "with text --data: the share of the tokens (the last ones) for validation")
      ->check(CLI::Range(0.001, 0.5))
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "with text --data: GPT-2 vocab.bpe (the BPE merges)")
      ->capture_default_str();
  app.add_option("--encoder", o.encoder, "GPT-2 encoder.json for decoding samples")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps in all (a resumed run trains the rest)")
      ->check(integer_at_least(1))->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "validation loss every K steps (0: only at the end)")
      ->check(integer_at_least(0))->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches, "validation micro-batches per rank")
      ->check(integer_at_least(1))->capture_default_str();
  app.add_option("--sample-every", o.sample_every, "print a generated sample every K steps (0: only at the end)")
      ->check(integer_at_least(0))->capture_default_str();
  app.add_option("--sample-tokens", o.sample_tokens, "tokens per sample")
      ->check(integer_at_least(1))->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sequence (default: min(context, 256))")
      ->check(integer_at_least(0));
  app.add_option("--out", o.out, "run directory")->check(non_empty())->capture_default_str();
  // More threads than cores only slows a rank down, and 100,000 exhaust the process table.
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  app.add_option("--threads", o.threads, "libtorch threads per rank (default: cores / ranks)")
      ->check(integer_in(0, cores, "this machine's " + std::to_string(cores) + " cores"));
  app.add_option("--device", o.device,
                 "cpu, or cuda: each rank trains on one GPU (its local rank's), NCCL between "
                 "them")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--plan", o.plan,
               "print what each rank will hold at the peak of a training step (model state, "
               "buffers, activations, where each lives) for every ZeRO stage side by side, "
               "and stop");
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "recompute the GPT-2 blocks' forwards during backward instead of keeping their "
               "activations (also on when the config's activation_checkpointing."
               "number_checkpoints is set: how many blocks, the first ones)");
  app.add_option("--dropout", o.dropout, "dropout probability of the model, in [0, 1)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            size_t used = 0;
            double p = -1;
            try {
              p = std::stod(text, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            if (used == 0 || used != text.size() || !(p >= 0 && p < 1)) {
              return "expected a number in [0, 1), got '" + text + "'";
            }
            return {};
          },
          "IN [0, 1)"))
      ->capture_default_str();
  app.add_option("--save-every", o.save_every,
                 "save a checkpoint every K steps and after the last (0: never)")
      ->check(integer_at_least(0))->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "where checkpoints go and --resume auto looks (default: RUN_DIR/checkpoints)")
      ->check(non_empty());
  app.add_option("--resume", o.resume,
                 "auto: from the checkpoint directory if it has one, else start afresh; DIR: "
                 "from the checkpoint directory DIR (its latest), the checkpoint DIR, or the run "
                 "directory DIR (its checkpoints/)")
      ->check(non_empty());
  // The trainer's values (zero::TrainerValues): they fill only what the config leaves open
  // ("auto", or no optimizer section); defaults are the Hugging Face Trainer's.
  zero::TrainerValues& t = o.trainer;
  t.names["max_steps"] = "--steps";
  // Each option fills one TrainingArguments value: it is named by its flag in messages, and
  // "given" when on the command line (set after parsing).
  std::vector<std::pair<CLI::Option*, bool*>> trainer_options;
  // `help` ends inside its parenthesis, which this closes.
  auto trainer_option = [&](const char* flag, const char* argument, auto& value,
                            const std::string& help) {
    t.names[argument] = flag;
    CLI::Option* option = app.add_option(flag, value.value, help + ")");
    trainer_options.emplace_back(option, &value.given);
    return option;
  };
  trainer_option("--micro-batch", "per_device_train_batch_size", t.micro_batch,
                 "sequences per micro-batch and rank (fills \"auto\" train_micro_batch_size_per_gpu; "
                 "default: the largest of 8, 4, 2, 1 that fits memory")
      ->check(integer_in(1, 1 << 20, "a micro-batch"));
  trainer_option("--grad-accum", "gradient_accumulation_steps", t.gradient_accumulation,
                 "micro-batches per optimizer step (fills \"auto\" gradient_accumulation_steps")
      ->check(integer_in(1, 1 << 20, "accumulation steps"))->capture_default_str();
  trainer_option("--lr", "learning_rate", t.learning_rate,
                 "learning rate (fills \"auto\" optimizer.params.lr, scheduler.params.warmup_max_lr")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  trainer_option("--weight-decay", "weight_decay", t.weight_decay,
                 "weight decay (fills \"auto\" optimizer.params.weight_decay")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  trainer_option("--adam-beta1", "adam_beta1", t.adam_beta1, "Adam's beta1 (fills \"auto\" betas")
      ->check(CLI::Range(0.0, 0.999999))->capture_default_str();
  trainer_option("--adam-beta2", "adam_beta2", t.adam_beta2, "Adam's beta2 (fills \"auto\" betas")
      ->check(CLI::Range(0.0, 0.999999))->capture_default_str();
  trainer_option("--adam-epsilon", "adam_epsilon", t.adam_epsilon, "Adam's eps (fills \"auto\" eps")
      ->check(CLI::PositiveNumber)->capture_default_str();
  trainer_option("--max-grad-norm", "max_grad_norm", t.max_grad_norm,
                 "gradient clipping norm (fills \"auto\" gradient_clipping")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  trainer_option("--warmup-steps", "warmup_steps", t.warmup_steps,
                 "warm-up steps (fills \"auto\" scheduler.params.warmup_num_steps")
      ->check(integer_at_least(0))->capture_default_str();
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
    o.model_given = app.count("--model") > 0;
    for (const auto& [option, given] : trainer_options) *given = option->count() > 0;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      if (comm->rank() == 0) return app.exit(e);
      return 0;
    }
    // Status 2 like every other bad input.
    if (comm->rank() == 0) {
      std::fprintf(stderr, "zero-train: error: %s\nRun with --help for more information.\n",
                   e.what());
    }
    return 2;
  }
  return run(o, comm);
}
