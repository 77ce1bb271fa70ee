// zero-train's phases (Note [zero-train's phases]), each a function in a file of its own,
// composed by run() (run.cpp); main.cpp holds the command line.
//
// Note [zero-train's phases]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// One run goes through, in order:
//   1. prepare_inputs (prepare.cpp): the 16-bit speed agreed, text tokenized by rank 0, the
//      config, the model (zero/causal_lm.h: a preset or --init's config.json), the token files,
//      the batch order and the validation batches;
//   2. plan_run (plan.cpp): the device, the memory plan (Note [Memory plan]) and the defaults
//      fitted to memory; --plan prints it (print_plans) and stops;
//   3. claim_run_directory (resume.cpp): the directory locks and the checkpoint to resume from;
//   4. build_engine (build_engine.cpp): the plan checked against the machine, NCCL between
//      GPUs, the model (partitioned as it is built at stage 3), the engine, --init's weights;
//   5. resume (resume.cpp): the engine's state from the checkpoint (Note [Resuming zero-train])
//      and metrics.csv continued;
//   6. train (train_loop.cpp): the steps, validation, samples and checkpoints;
//   7. summarise (summary.cpp, beside report.cpp): the summary table and loss.svg.
// Every failure a user's input can cause is agreed across ranks where it happens
// (zero::run_and_agree, Note [Agreeing on a failure]): every rank throws the same
// CollectiveError, and run() prints it once and exits with status 2.
#pragma once

#include <ATen/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "directory_lock.h"
#include "report.h"
#include "zero/causal_lm.h"
#include "zero/comm.h"
#include "zero/config.h"
#include "zero/cuda_support.h"
#include "zero/data.h"
#include "zero/engine.h"
#include "zero/hf_tokenizer.h"
#include "zero/memory_plan.h"
#include "zero/tokenizer.h"

namespace zero::train {

struct Options {
  std::string config_path;
  std::string model = "gpt2-tiny";
  bool model_given = false;  // --model on the command line (else --init's config.json decides)
  std::string init;          // a Hugging Face directory to start from
  std::string data = "data/tokens/moby_dick";
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";  // with --data text: the BPE merges
  std::string tokenizer;  // a Hugging Face tokenizer.json or its directory ("": see RunTokenizer)
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


/// Where checkpoints go: --checkpoint-dir, or RUN_DIR/checkpoints.
std::string checkpoint_dir(const Options& o);

// 1. prepare.cpp

/// The run's tokenizer: a Hugging Face tokenizer.json (--tokenizer, or --init's directory's when
/// it has one), else GPT-2's BPE files (--encoder, --vocab). Text --data is tokenized with it
/// and samples are decoded with it.
struct RunTokenizer {
  std::optional<HfTokenizer> hf;
  std::optional<GPT2Decoder> gpt2;  // GPT-2's decoder (its encoder is loaded to tokenize text)
  int64_t vocab_size() const;
  std::string decode(const std::vector<int64_t>& ids) const;
  /// What samples start from: the tokenizer's bos token, else its eos; GPT-2's <|endoftext|>.
  int64_t start_id() const;
  /// Its file (tokenizer.json, or encoder.json).
  std::string path() const;
};
/// --tokenizer, or --init's directory's tokenizer.json, or "" (GPT-2's files).
std::string tokenizer_path(const Options& o);

/// Everything that can fail because of the user's inputs, prepared on every rank.
struct Inputs {
  Config config;
  std::unique_ptr<CausalLMConfig> model;
  CausalLMShape shape;  // the model's, activation checkpointing included
  std::string data;     // the token files' prefix (--data, or where its text was tokenized)
  std::optional<TokenFile> train;
  std::optional<TokenFile> val;
  RunTokenizer tokenizer;
  int64_t seq = 0;  // tokens per sequence
  std::optional<DistributedSampler> sampler;
  std::optional<EvalBatcher> val_batches;
  std::string data_note;  // how the text was tokenized ("" for token files)
  std::string eval_note;  // what the validation set reduced ("" when nothing)
  int64_t memory_per_rank = 0;  // this rank's share of the host's memory (0: unknown)
};

/// Collective. Phase 1: sets the threads, agrees on the 16-bit speed, tokenizes text --data
/// (rank 0), loads and checks the inputs on every rank. A bad input: CollectiveError on all.
Inputs prepare_inputs(Options& o, Communicator& comm);

// 2. plan.cpp

struct Planned {
  at::Device device{at::kCPU};
  const CudaSupport* cuda = nullptr;  // --device cuda: libzero_cuda, loaded now
  bool on_gpu = false;
  PlanTarget target = PlanTarget::kHost;
  PlanModel plan_model;
  MemoryPlan plan;
  std::string fitted;  // the knobs lowered to fit memory ("" when none)
};

/// Collective. Phase 2: the device and the memory plan, the defaults fitted to memory (which
/// may lower knobs of in.config).
Planned plan_run(const Options& o, Inputs& in, Communicator& comm);
/// --plan: every stage's plan, printed (by rank 0: run() calls it there).
void print_plans(const Options& o, const Inputs& in, const Planned& planned, int world);

// 3. resume.cpp

/// A checkpoint to resume from: `dir` and `tag` as load_checkpoint takes them. An empty `dir`
/// means start fresh.
struct ResumeFrom {
  std::string dir;
  std::string tag;
  std::string note;  // why there is nothing to resume, for --resume auto
};

/// One job per directory (Note [Directory lock] in directory_lock.h): rank 0 holds the locks
/// until the run ends.
struct RunDirectory {
  std::optional<DirectoryLock> run_lock;
  std::optional<DirectoryLock> checkpoint_lock;
  ResumeFrom from;
};

/// Collective. Phase 3: the locks (rank 0), and where to resume from.
std::unique_ptr<RunDirectory> claim_run_directory(const Options& o, Communicator& comm);

// 4. build_engine.cpp

/// The model and the engine that trains it.
struct Trainee {
  std::shared_ptr<Communicator> engine_comm;  // NCCL between GPUs, else `comm`
  std::shared_ptr<CausalLM> model;
  std::unique_ptr<Engine> engine;
  std::string estimate;   // the start-up memory check's line
  std::string init_note;  // --init: where the weights came from ("" without)
};

/// Collective. Phase 4: the plan against the machine, the communicator, the model, the engine,
/// and --init's weights (unless resuming).
Trainee build_engine(const Options& o, Inputs& in, const Planned& planned, const ResumeFrom& from,
                     const std::shared_ptr<Communicator>& comm);

// 5. resume.cpp

struct Resumed {
  ResumeFrom from;
  int64_t first_step = 0;           // steps already trained
  std::vector<std::string> notes;   // what differs from an uninterrupted run
  std::vector<StepRecord> records;  // metrics.csv's kept rows (rank 0)
  std::unique_ptr<CsvLog> csv;      // rank 0
};

/// Collective. Phase 5: the checkpoint's state into the engine, metrics.csv continued (rank 0).
Resumed resume(const Options& o, const Inputs& in, Trainee& trainee, const ResumeFrom& from,
               Communicator& comm);

// 6. train_loop.cpp

struct Trained {
  std::vector<StepRecord> records;  // every step of the run (rank 0), the resumed ones first
  double seconds = 0;               // this process's steps
  double last_val = -1;             // the last validation loss
  // Bytes the training steps moved (Note [Counting communicated bytes]), and all since before
  // the first step (evaluation and sampling gather too at stage 3).
  int64_t reduce_scatter_bytes = 0, all_gather_bytes = 0, inter_node_bytes = 0;
  CommStats before;
};

/// Collective. Phase 6: the steps, validation, samples, checkpoints.
Trained train(const Options& o, Inputs& in, const Planned& planned, Trainee& trainee,
              Resumed& resumed, Communicator& comm);
/// Collective (a forward may gather at stage 3): top-k sampling from the tokenizer's start id,
/// seeded.
std::string sample_text(CausalLM& model, const RunTokenizer& tokenizer, int64_t tokens,
                        int64_t context, uint64_t seed);

// 7. summary.cpp

/// Collective. Phase 7: the summary (rank 0 prints it) and loss.svg.
void summarise(const Options& o, const Inputs& in, const Planned& planned, Trainee& trainee,
               const Resumed& resumed, const Trained& trained, Communicator& comm);

// run.cpp

/// Every phase in order; 0, or 2 for a failure every rank agreed on (printed once).
int run(Options o, const std::shared_ptr<Communicator>& comm);

}  // namespace zero::train
