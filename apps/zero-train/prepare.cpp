// zero-train, phase 1 (Note [zero-train's phases] in trainer.h): the inputs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <limits>
#include <sstream>
#include <thread>

#include "trainer.h"
#include "zero/console.h"
#include "zero/error.h"
#include "zero/gemm_rates.h"
#include "zero/memory.h"
#include "zero/text_corpus.h"

namespace zero::train {
namespace {

// The micro-batch candidates when the config leaves it to zero-train and --micro-batch is not
// given: the Hugging Face Trainer's default first, then smaller ones (the first that fits).
constexpr int64_t kMicroBatchCandidates[] = {8, 4, 2, 1};

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

// The config, the model, the token files and the tokenizer into `in` (whose `data` is set).
void load_inputs(const Options& o, Inputs& in, int world, int64_t memory_per_rank) {
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
  // Activation checkpointing of the model's blocks: with --activation-checkpointing all of them
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
  in.train = TokenFile::load(in.data + "_train.bin", shape.vocab_size);
  in.val = TokenFile::load(in.data + "_val.bin", shape.vocab_size);
  in.shape = in.model->shape();
  in.seq = seq;
  if (o.plan) return;  // --plan samples nothing
  const std::string hf = tokenizer_path(o);
  if (hf.empty()) {
    in.tokenizer.gpt2 = GPT2Decoder::load(o.encoder);
  } else {
    in.tokenizer.hf = HfTokenizer::load(hf);
  }
  const std::string option = hf.empty() ? " (--encoder)" : " (--tokenizer)";
  zero::check_tokenizer_fits(shape.vocab_size, in.tokenizer.vocab_size(),
                             o.init.empty() ? o.model : in.model->display_name(),
                             in.tokenizer.path() + option);
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

// --data FILE.txt (or a directory of them): tokenized by rank 0 into a cache beside it
// (zero/text_corpus.h: a second run with the same text reads only its checksums); the other
// ranks then read the token files it wrote, from a path they all see. Returns the token files'
// prefix.
std::string tokenize_text_data(const Options& o, Communicator& comm, int cores,
                               std::string& note) {
  if (!is_text_data(o.data)) return o.data;
  run_and_agree(comm, "tokenizing " + o.data, [&] {
    if (comm.rank() != 0) return;
    const bool terminal = stdout_is_terminal();
    const auto progress = [terminal](int64_t done, int64_t total) {
      if (!terminal || total == 0) return;
      std::printf("\rzero-train: tokenizing %5.1f%% of %.1f MB", 100.0 * done / total,
                  total / 1e6);
      std::fflush(stdout);
    };
    const std::string hf = tokenizer_path(o);
    if (hf.empty()) {
      const GPT2Encoder encoder = GPT2Encoder::load(o.encoder, o.vocab);
      prepare_text_data(o.data, encoder, o.val_fraction, cores, &note, progress);
    } else {
      const HfTokenizer tokenizer = HfTokenizer::load(hf);
      prepare_text_data(o.data, tokenizer, o.val_fraction, cores, &note, progress);
    }
    if (terminal) std::printf("\n");
  });
  return text_data_prefix(o.data);
}

}  // namespace

int64_t RunTokenizer::vocab_size() const { return hf ? hf->vocab_size() : gpt2->vocab_size(); }

std::string RunTokenizer::decode(const std::vector<int64_t>& ids) const {
  // A padded model's ids past the tokenizer's decode to nothing (Note [Padded vocabularies]).
  std::vector<int64_t> tokens;
  for (const int64_t id : ids) {
    if (id < vocab_size()) tokens.push_back(id);
  }
  return hf ? hf->decode(tokens) : gpt2->decode(tokens);
}

int64_t RunTokenizer::start_id() const {
  if (!hf) return GPT2Encoder::kEndOfText;
  return hf->bos_id().value_or(hf->eos_id().value_or(0));
}

std::string RunTokenizer::path() const { return hf ? hf->path() : gpt2->path(); }

std::string tokenizer_path(const Options& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  if (!o.init.empty() && HfTokenizer::present(o.init)) return o.init;
  return "";
}

Inputs prepare_inputs(Options& o, Communicator& comm) {
  const int world = comm.size();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(o.threads > 0 ? o.threads : std::max(1, cores / world));
  agree_on_16bit_speed(comm, o);  // at the thread count the step runs with
  Inputs in;
  in.data = tokenize_text_data(o, comm, cores, in.data_note);
  // Collective: each rank's share of this host's memory (the plan is fitted to it).
  in.memory_per_rank = zero::memory_per_rank(comm);
  run_and_agree(comm, "checking the inputs", [&] {
    load_inputs(o, in, world, in.memory_per_rank);
    // What the engine would refuse on these ranks, refused here (and by --plan) too.
    check_config_for_ranks(in.config, comm);
  });
  // Without --model, the run's model is --init's: named so (in the log, the plan, and the
  // checkpoint's client state, which a resume compares with this name: the path normalised,
  // so "DIR/" and "DIR" resume each other).
  if (!o.init.empty() && !o.model_given) {
    std::filesystem::path init = std::filesystem::path(o.init).lexically_normal();
    if (init.filename().empty()) init = init.parent_path();
    o.model = in.model->display_name() + " from " + init.string();
  }
  run_and_agree(comm, "preparing the batches", [&] {
    const Config& config = in.config;
    const int64_t mbs = config.train_micro_batch_size_per_gpu;
    const int gas = static_cast<int>(config.gradient_accumulation_steps);
    ZERO_CHECK(in.seq <= in.shape.context_length, "--seq-len ", in.seq,
               " exceeds the context of ", o.model, " (", in.shape.context_length, ")");
    in.sampler.emplace(*in.train, mbs, in.seq, comm.rank(), world, gas, config.seed);
    in.val_batches.emplace(
        make_eval_batches(*in.val, o, mbs, in.seq, comm.rank(), world, in.eval_note));
  });
  return in;
}

}  // namespace zero::train
