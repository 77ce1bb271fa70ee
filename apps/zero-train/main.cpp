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
// The run itself is in phases, a file each: Note [zero-train's phases] in trainer.h.
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
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "trainer.h"
#include "zero/comm_mpi.h"
#include "zero/memory.h"

namespace {

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

}  // namespace

// The --model presets of every family, for --help.
std::string preset_list() {
  std::string list;
  for (const std::string& name : zero::causal_lm_preset_names()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

int main(int argc, char** argv) {
  zero::train::Options o;
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
  app.add_option("--tokenizer", o.tokenizer,
                 "a Hugging Face tokenizer.json (or its directory) to tokenize text --data with "
                 "and decode samples (default: --init's, when its directory has one; else "
                 "--encoder and --vocab)")
      ->check(non_empty());
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
  return zero::train::run(o, comm);
}
