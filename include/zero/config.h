// The training configuration: DeepSpeed's JSON schema, validated strictly.
//
// parse_config() accepts the same JSON a DeepSpeed user already has. Every key is implemented
// with DeepSpeed's meaning, accepted with a note saying why it changes nothing in zero
// (Config::notes), or rejected; unknown keys in a section are rejected with the closest known
// key suggested, harmless unknown top-level keys are ignored with a note (docs/config.md).
// "auto" values are filled by a trainer (TrainerValues) or take DeepSpeed's default, and
// Config::filled says which. Errors throw zero::Error naming the key path (e.g.
// "zero_optimization.stage"), the value received and what is allowed.
#pragma once

#include "zero/export.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zero {

// Note [Compute dtype]
// ~~~~~~~~~~~~~~~~~~~~
// DeepSpeed computes in the parameter dtype (bf16.enabled / fp16.enabled). On CPUs without
// fast 16-bit GEMMs that is 10-45x slower than fp32 (zero/gemm_rates.h), so zero separates
// what is stored and communicated (param_dtype, communication_dtype) from what is computed
// (compute_dtype, the zero extension `compute_data_type`), where the stage allows it:
//   - stages 0-2: the model computes with the parameters themselves, so compute_dtype ==
//     param_dtype;
//   - stage 3 with 16-bit parameters and compute_data_type "fp32": 16-bit partitioned shards,
//     16-bit all-gathers and reduce-scatters, fp32 gathered parameters (the 16-bit values,
//     widened) and fp32 gradients (narrowed to the communication dtype when reduced). The
//     model state and the communication of the 16-bit run, at fp32 compute speed. (FSDP2's
//     MixedPrecisionPolicy does the reverse: fp32 storage, 16-bit compute.)
// "auto" computes in fp32 where this CPU's GEMMs in the configured 16-bit dtype are slow
// (GemmRates::slow): at stage 3 as above, at stages 0-2 by training in fp32 altogether (the
// parameters, and the communication dtype unless given, become fp32). Elsewhere it computes
// in the 16-bit dtype. Each rank resolves it when the config is parsed; ranks that resolve it
// differently fail the start-up agreement naming compute_data_type.

enum class OptimizerType {
  kAdamW,  // decoupled weight decay (DeepSpeed "AdamW", or "Adam" with adam_w_mode true)
  kAdam,   // L2 weight decay added to the gradient ("Adam" with adam_w_mode false)
  kSGD,    // SGD with optional momentum / nesterov, torch semantics
  kAdagrad,  // torch.optim.Adagrad's update (weight decay added to the gradient)
  kLion,     // Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled decay
  kLamb,     // LAMB (You et al. 2019) as DeepSpeed's FusedLamb: Adam's update per parameter
             // scaled by the trust ratio ||p|| / ||update||, clamped to [min_coeff, max_coeff]
  kMuon,     // Muon (Jordan et al. 2024) as DeepSpeed's MuonWithAuxAdam: momentum whose
             // Newton-Schulz orthogonalisation updates each hidden matrix; AdamW for the rest
};

/// Muon's Newton-Schulz iteration (optimizer.params.ns_method): DeepSpeed's "gram" (its
/// default: the same polynomial iterated on the Gram matrix X X^T, fewer FLOPs for a wide X)
/// or "standard" (Keller Jordan's quintic on X).
enum class MuonNsMethod { kGram, kStandard };

struct ZERO_API OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  // SGD only
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Adagrad only: the step's lr is lr / (1 + (step - 1) lr_decay); the sum of squared
  // gradients starts at initial_accumulator_value. (Its eps defaults to 1e-10 and lr to 1e-2,
  // set by the parser.)
  double lr_decay = 0.0;
  double initial_accumulator_value = 0.0;
  // LAMB only (beta1, beta2, eps, weight_decay and bias_correction as Adam's): the trust
  // ratio's clamp, and eps under the square root (sqrt(v + eps)) rather than added to it.
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;
  // Muon only. The matrices' (Muon's) rate; `lr`, beta1, beta2, eps are the auxiliary AdamW's
  // (DeepSpeed's adam_lr or lr, default 3e-4; betas [0.9, 0.95]; eps 1e-10, set by the parser),
  // `momentum` Muon's (0.95), `weight_decay` both halves'. A schedule's rate is the AdamW
  // half's; the matrices' rate keeps the ratio muon_lr / lr to it.
  double muon_lr = 0.02;
  MuonNsMethod ns_method = MuonNsMethod::kGram;
  /// The Newton-Schulz iteration's dtype: fp32 (kFloat) or bf16 (kBFloat16) (ns_dtype).
  at::ScalarType ns_dtype = at::kFloat;
  /// The auxiliary Adam's weight decay: decoupled (AdamW, adam_w_mode true) or added to the
  /// gradient (Adam).
  bool aux_adam_w_mode = true;
};

/// fp16 loss scaling, DeepSpeed semantics (runtime/fp16/loss_scaler.py). We use the documented
/// defaults whether or not the dynamic keys are present (DeepSpeed's code switches to 2^32 /
/// hysteresis 1 when none is given; see docs/config.md).
struct ZERO_API LossScaleConfig {
  bool dynamic = true;          // fp16.loss_scale == 0
  double static_scale = 1.0;    // fp16.loss_scale when > 0
  int initial_scale_power = 16; // initial dynamic scale = 2^power
  int64_t scale_window = 1000;  // fp16.loss_scale_window
  int hysteresis = 2;           // fp16.hysteresis (delayed shift)
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
};

/// Where zero_optimization.offload_optimizer / offload_param put their state (DeepSpeed's
/// ZeRO-Offload and ZeRO-Infinity keys). "cpu" is host memory: on CPU ranks the state is there
/// already, so it is accepted as such and nothing moves (zero::initialize says so once).
/// "nvme" keeps the state in swap files under nvme_path and streams it through memory in tiles
/// (Note [NVMe offload] in src/offload/swap_file.h).
enum class OffloadDevice { kNone, kCpu, kNvme };

struct ZERO_API OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  bool pin_memory = false;  // page-locked host memory: a CUDA concept, no effect on CPU ranks
  /// device "nvme": the directory swap files go under (nvme_path/zero-<job>/rank<r>/).
  std::string nvme_path;
  /// device "nvme": staging buffers (offload_optimizer: tiles of sub_group_size in flight, at
  /// least 1; offload_param: unit shards read ahead, at least 2). DeepSpeed's defaults: 4, 5.
  int64_t buffer_count = 4;
  /// offload_param: elements of one staging buffer (a unit's shard must fit in one).
  int64_t buffer_size = 100000000;
  /// offload_param: elements of a rank's parameter shards kept in host memory instead of on
  /// NVMe (whole units, in order). DeepSpeed's default, 1e9, caps a second, flattened copy of
  /// the shards that zero does not keep; here the default is 0: every unit's shard on NVMe
  /// (docs/config.md).
  int64_t max_in_cpu = 0;
  /// offload_optimizer: read tile i+1 while tile i is stepped / write tile i-1 back meanwhile.
  /// DeepSpeed's defaults are false; ours are true (docs/config.md): an unpipelined NVMe step
  /// waits on the disk twice per tile for nothing.
  bool pipeline_read = true;
  bool pipeline_write = true;
  /// Whether the config set buffer_count (else zero may lower it to fit memory: Note [Fitting
  /// the defaults], src/engine/memory_plan.cpp).
  bool buffer_count_given = false;
};

/// The `aio` section: how swap files are read and written (Linux io_uring here; DeepSpeed's
/// keys and defaults, docs/config.md).
struct ZERO_API AioConfig {
  int64_t block_size = 1048576;   // bytes per request: a transfer is cut into these
  int64_t queue_depth = 8;        // requests in flight per I/O thread
  int64_t intra_op_parallelism = 1;  // I/O threads, each with its own queue
  bool single_submit = false;     // submit each request on its own instead of in batches
  bool overlap_events = true;     // refill the queue as requests finish instead of in rounds
};

/// The `activation_checkpointing` section (DeepSpeed's activation_checkpointing/config.py).
/// The model decides what it checkpoints (zero/activation_checkpointing.h); zero::initialize
/// hands these options to the checkpointed calls. The keys that partition activations across
/// model-parallel ranks are rejected: zero has no model parallelism (docs/config.md).
struct ZERO_API ActivationCheckpointingConfig {
  bool enabled = false;  // the section was given (not null)
  /// How many of the model's checkpointable pieces to checkpoint (zero-train: the first this
  /// many GPT-2 blocks); nullopt: all of them.
  std::optional<int64_t> number_checkpoints;
  bool cpu_checkpointing = false;  // saved inputs of device tensors kept in host memory
  bool profile = false;            // time forwards and recomputes
};

/// ZeRO++ (DeepSpeed's keys; arXiv 2306.10209), stage 3 only: less traffic between nodes
/// (Note [ZeRO++] in src/engine/stage3_engine.cpp, docs/config.md).
struct ZERO_API ZeroPlusPlusConfig {
  /// qwZ: the forward's parameter all-gathers move int8 with block scales; the fp32 master
  /// weights and the stored shards are untouched.
  bool quantized_weights = false;
  /// hpZ: 1 (off), or the ranks per node: each node keeps a secondary copy of the gathered
  /// parameters partitioned over its ranks, and gathers after the first of a step stay inside
  /// the node.
  int64_t hpz_partition_size = 1;
  /// qgZ: the part of the gradient reduce-scatter that crosses nodes moves int4 with block
  /// scales (the part inside a node stays exact).
  bool quantized_gradients = false;

  bool enabled() const { return quantized_weights || hpz_partition_size > 1 || quantized_gradients; }
};

struct ZERO_API ZeroOptimizationConfig {
  int stage = 0;                            // 0, 1, 2 or 3
  int64_t reduce_bucket_size = 500000000;   // elements per gradient bucket
  int64_t allgather_bucket_size = 500000000;// elements per parameter all-gather call
  // Issue collectives while backward (and stage 3's forward) computes. Unset: DeepSpeed's
  // default, which follows the stage (true at stage 3); read it with overlap_comm_enabled().
  std::optional<bool> overlap_comm;
  bool contiguous_gradients = true;         // stage 2: copy grads into bucket buffers
  bool reduce_scatter = true;               // false: all-reduce buckets, keep the owned part
  bool allgather_partitions = true;         // false (broadcasts) is rejected: not supported yet
  // Stage 3 (elements, as DeepSpeed counts them; DeepSpeed 0.16.5 code defaults).
  int64_t stage3_prefetch_bucket_size = 50000000;      // elements gathered ahead of use
  int64_t stage3_param_persistence_threshold = 100000; // numel <= this: kept whole on all ranks
  int64_t stage3_model_persistence_threshold = INT64_MAX;  // cap on all persistent elements
  int64_t stage3_max_live_parameters = 1000000000;     // gathered elements resident at once
  int64_t stage3_max_reuse_distance = 1000000000;      // keep a unit gathered if reused sooner
  bool stage3_gather_16bit_weights_on_model_save = false;
  // Elements the optimizer steps at a time (DeepSpeed's sub-groups), at every stage: the
  // working set of an offloaded step (Note [Shard state] in src/state/shard_state.h). The
  // value never changes a result.
  int64_t sub_group_size = 1000000000;
  /// Whether the config set sub_group_size, stage3_prefetch_bucket_size,
  /// stage3_max_live_parameters, reduce_bucket_size (else zero may lower them to fit memory:
  /// Note [Fitting the defaults], src/engine/memory_plan.cpp).
  bool sub_group_size_given = false;
  bool stage3_prefetch_bucket_size_given = false;
  bool stage3_max_live_parameters_given = false;
  bool reduce_bucket_size_given = false;
  /// The fp32 master weights and optimizer moments (stages 1-3).
  OffloadConfig offload_optimizer;
  /// The partitioned 16-bit parameter shards (stage 3); DeepSpeed's buffer_count default is 5.
  OffloadConfig offload_param{OffloadDevice::kNone, false, {}, 5};
  /// zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients.
  ZeroPlusPlusConfig zeropp;

  bool overlap_comm_enabled() const { return overlap_comm.value_or(stage == 3); }
};

/// The `scheduler` section: DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py).
/// zero::LRScheduler (zero/scheduler.h) turns it into the LR of each optimizer step.
enum class SchedulerType {
  kWarmupLR,        // warmup from warmup_min_lr to warmup_max_lr, then constant
  kWarmupDecayLR,   // WarmupLR, then linear decay back to warmup_min_lr at total_num_steps
  kWarmupCosineLR,  // ratio of the optimizer's lr: warmup, then cosine decay to cos_min_ratio
};

/// scheduler.params.warmup_type: gamma = ln(t + 1) / ln(N) (log) or t / N (linear).
enum class WarmupType { kLog, kLinear };

struct ZERO_API SchedulerConfig {
  SchedulerType type = SchedulerType::kWarmupLR;
  WarmupType warmup_type = WarmupType::kLog;
  /// As given (>= 1). The schedule uses max(2, warmup_num_steps), as DeepSpeed does.
  int64_t warmup_num_steps = 1000;
  // WarmupLR and WarmupDecayLR: absolute learning rates.
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  // WarmupDecayLR and WarmupCosineLR (required there; 0 for WarmupLR).
  int64_t total_num_steps = 0;
  // WarmupCosineLR: ratios of the optimizer's lr (optimizer.params.lr).
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;

  /// max(2, warmup_num_steps): the warmup length DeepSpeed's schedules actually use.
  int64_t effective_warmup_steps() const {
    return warmup_num_steps < 2 ? 2 : warmup_num_steps;
  }
};

/// The `csv_monitor` section (DeepSpeed's deepspeed/monitor/config.py CSVConfig): when enabled,
/// rank 0 appends training events to CSV files in <output_path>/<job_name>/.
struct ZERO_API CsvMonitorConfig {
  bool enabled = false;
  std::string output_path;                  // "" = relative to the working directory
  std::string job_name = "DeepSpeedJobName";
};

/// The `tensorboard` section (DeepSpeed's TensorBoardConfig): when enabled, rank 0 writes
/// TensorBoard event files into output_path/job_name/ (output_path "": ./runs, a zero choice:
/// DeepSpeed writes under the home directory) with the same events as csv_monitor
/// (Train/Samples/train_loss, .../lr, .../loss_scale with fp16) plus Train/Samples/grad_norm,
/// and what the program adds (Engine::write_monitor_events). Needs zero built with protobuf.
struct ZERO_API TensorBoardConfig {
  bool enabled = false;
  std::string output_path;                  // "" = ./runs
  std::string job_name = "DeepSpeedJobName";
};

/// A value the config left open ("auto", or no optimizer section) and what it became: filled
/// from the trainer's values (TrainerValues) or, without a trainer, DeepSpeed's default or the
/// batch solver's result (Note [Values left to the trainer] in src/config/trainer_fill.cpp).
struct ZERO_API FilledValue {
  std::string key;     // "optimizer.params.lr"
  std::string value;   // as JSON: "5e-05"
  std::string origin;  // "--lr", "the Hugging Face Trainer's default", "DeepSpeed's default"
};

/// What a trainer fills into a config written for the Hugging Face Trainer: the keys it sets
/// to "auto" (the HF integration's list: batch sizes, learning rate, Adam's betas, eps and
/// weight decay, gradient_clipping, the scheduler's warm-up and length, fp16/bf16 enabled, the
/// bucket and persistence sizes) and the optimizer when the config has no optimizer section
/// (AdamW, as the HF Trainer makes). Each value's default is the HF Trainer's
/// (TrainingArguments); `given` marks a value the user set, and a given value that contradicts
/// a number the config sets is an error, as in the HF integration ("mismatch").
struct ZERO_API TrainerValues {
  template <typename T>
  struct Value {
    T value;
    bool given = false;  // set by the user, not a default
    void set(T v) {
      value = v;
      given = true;
    }
  };
  Value<int64_t> micro_batch{8};            // per_device_train_batch_size
  Value<int64_t> gradient_accumulation{1};  // gradient_accumulation_steps
  Value<double> learning_rate{5e-5};        // learning_rate
  Value<double> weight_decay{0.0};          // weight_decay
  Value<double> adam_beta1{0.9};            // adam_beta1
  Value<double> adam_beta2{0.999};          // adam_beta2
  Value<double> adam_epsilon{1e-8};         // adam_epsilon
  Value<double> max_grad_norm{1.0};         // max_grad_norm -> gradient_clipping
  Value<int64_t> warmup_steps{0};           // warmup_steps
  /// The optimizer steps of the run (max_steps -> scheduler.params.total_num_steps); no
  /// default: an "auto" total_num_steps without it stays unset (an error for the schedules that
  /// need it).
  std::optional<int64_t> total_steps;
  /// The model's width (hidden_size): "auto" bucket sizes are made from it as the HF
  /// integration does (reduce_bucket_size h^2; stage 3: stage3_prefetch_bucket_size 0.9 h^2,
  /// stage3_param_persistence_threshold 10 h). Unset: they take DeepSpeed's defaults.
  std::optional<int64_t> hidden_size;
  /// Whether the device computes bf16 / fp16 GEMMs fast: "auto" fp16/bf16 sections are enabled
  /// where it does (bf16 first: it needs no loss scaling). Unset: measured on this CPU
  /// (zero/gemm_rates.h), as compute_data_type "auto" decides.
  std::optional<bool> bf16_fast;
  std::optional<bool> fp16_fast;
  /// Why, for the start-up line, when bf16_fast / fp16_fast are set ("" : "the device computes
  /// bf16 fast").
  std::string bf16_speed_origin;
  std::string fp16_speed_origin;
  /// How the values are named in messages, by their TrainingArguments name ("learning_rate"
  /// -> "--lr"); unlisted names are shown as they are.
  std::map<std::string, std::string> names;
  /// Where a default comes from, by TrainingArguments name, when not the HF Trainer's default
  /// (zero-train: "per_device_train_batch_size" -> "the largest of 8, 4, 2, 1 that fits").
  std::map<std::string, std::string> default_origins;
};

/// A whole configuration. parse_config / load_config make one from DeepSpeed JSON; one built in
/// code starts from these defaults (the parser's: every default is written here once), a valid
/// fp32 stage-0 config at world size 1, and zero::initialize checks it with validate_config.
struct ZERO_API Config {
  // The batch triple, solved against the world size (DeepSpeed's rules and errors).
  int64_t train_batch_size = 1;
  int64_t train_micro_batch_size_per_gpu = 1;
  int64_t gradient_accumulation_steps = 1;
  int world_size = 1;

  double gradient_clipping = 0.0;  // 0 disables clipping
  OptimizerConfig optimizer;

  /// dtype of the model's trainable parameters and gradients:
  /// kFloat (default), kBFloat16 (bf16.enabled) or kHalf (fp16.enabled).
  c10::ScalarType param_dtype = c10::ScalarType::Float;
  LossScaleConfig loss_scale;  // used only when param_dtype is kHalf
  /// dtype gradients are reduced in (communication_data_type); defaults to param_dtype.
  c10::ScalarType communication_dtype = c10::ScalarType::Float;
  /// dtype the model computes in: its forward and backward, the gathered parameters, the
  /// gradients autograd produces (Note [Compute dtype]). param_dtype, or kFloat with 16-bit
  /// parameters at stage 3.
  c10::ScalarType compute_dtype = c10::ScalarType::Float;
  /// compute_data_type was "auto" (resolved against this CPU when parsed).
  bool compute_dtype_auto = false;
  /// The parameter dtype the fp16 / bf16 sections ask for, before "auto" may make it kFloat.
  c10::ScalarType configured_param_dtype = c10::ScalarType::Float;

  ZeroOptimizationConfig zero_optimization;
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;

  /// The learning-rate schedule; nullopt (no `scheduler`, or null / {}) keeps optimizer.params.lr
  /// constant. See zero/scheduler.h (make_scheduler).
  std::optional<SchedulerConfig> scheduler;
  /// Print a progress line every this many optimizer steps (>= 1); nullopt = never (DeepSpeed's
  /// code default, None).
  std::optional<int64_t> steps_per_print;
  /// Time forward / backward / step and report the breakdown (DeepSpeed's wall_clock_breakdown).
  bool wall_clock_breakdown = false;
  /// Random seed (a zero extension, not a DeepSpeed key): integer >= 0, default 1234.
  uint64_t seed = 1234;
  CsvMonitorConfig csv_monitor;
  TensorBoardConfig tensorboard;

  /// prescale_gradients / gradient_predivide_factor (DeepSpeed's): gradients are multiplied
  /// by pre_reduction_multiplier() before they are summed over ranks, and the rest of the
  /// average after (Note [Gradient scaling] in src/engine/engine_core.cpp). Honoured where
  /// DeepSpeed honours them: everywhere but stages 1-2 with reduce_scatter (refused there).
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  /// data_types.grad_accum_dtype: the dtype gradients accumulate in over micro-steps; nullopt
  /// (null, DeepSpeed's default) keeps kept_gradient_dtype's rule. kFloat with 16-bit
  /// parameters accumulates in fp32 at every stage.
  std::optional<c10::ScalarType> grad_accum_dtype;

  /// What "auto" values (and a missing optimizer section) became, in key order
  /// (config_notices prints them).
  std::vector<FilledValue> filled;
  /// One line each about keys accepted that change nothing in zero, unknown keys ignored and
  /// spellings mapped to current ones (config_notices prints them).
  std::vector<std::string> notes;

  /// The effective configuration as canonical JSON (every key, defaults filled in, sorted).
  /// Ranks compare its fingerprint at start-up.
  std::string effective_json;
  /// Where the config came from, for messages ("ds_config.json", "<string>").
  std::string source = "<config built in code>";  // names the config in error messages
};

/// Parses and validates DeepSpeed JSON text. `world_size` is the data-parallel world size the
/// batch triple is solved against. `source` names the text in error messages.
ZERO_API Config parse_config(const std::string& json_text, int world_size,
                    const std::string& source = "<string>");
/// As parse_config, acting as the trainer a Hugging Face-style config was written for: its
/// "auto" values and a missing optimizer section are filled from `trainer` (TrainerValues).
/// Without it, "auto" means DeepSpeed's default (or the batch solver's result) and the
/// optimizer section is required; either way Config::filled lists what "auto" became.
ZERO_API Config parse_config(const std::string& json_text, int world_size,
                             const std::string& source, const TrainerValues& trainer);

/// Checks a Config built or changed in code with exactly the parser's rules and messages (it
/// is written out as DeepSpeed JSON, effective_json's form, and parsed again: one validator).
/// Throws zero::Error naming the key path, the value and what is allowed. zero::initialize
/// and zero::ShardedInit call it, so a hand-built config never reaches the engine unchecked.
ZERO_API void validate_config(const Config& config);

/// After a parsed Config was changed in code (zero::fit_defaults_to_memory does): its
/// effective_json made again from its fields.
ZERO_API void refresh_effective_json(Config& config);

/// The effective config as "key.path = value" lines sorted by key path, e.g.
/// "zero_optimization.stage = 2": for logs, and for naming the key on which ranks disagree.
ZERO_API std::vector<std::string> effective_config_lines(const Config& config);

/// Reads and parses a JSON file; a missing or unreadable file throws zero::Error naming it.
ZERO_API Config load_config(const std::string& path, int world_size);
ZERO_API Config load_config(const std::string& path, int world_size, const TrainerValues& trainer);

/// The lines a program prints once at start-up about its config: what "auto" values became
/// and where from (one line), then Config::notes. zero::initialize prints them on rank 0.
ZERO_API std::vector<std::string> config_notices(const Config& config);

/// What gradients are multiplied by before they are summed over ranks: 1 / world_size with
/// prescale_gradients, else 1 / gradient_predivide_factor (DeepSpeed's engine); the step
/// divides the sum by world_size * loss scale * this.
ZERO_API double pre_reduction_multiplier(const Config& config);

/// The dtype of the gradients a rank keeps between micro-steps: at stages 0 and 1 the full
/// gradient buffer, in the parameter dtype; at stages 2 and 3 its reduced gradient shard, in
/// fp32 when gradients accumulate over micro-steps or are communicated in fp32, else as
/// communicated (2/N bytes per parameter with 16-bit communication: the ZeRO paper's
/// accounting). data_types.grad_accum_dtype "fp32" makes it fp32 at every stage. The engines
/// and every memory figure use this one rule.
ZERO_API c10::ScalarType kept_gradient_dtype(const Config& config);

/// "fp32", "bf16", "fp16" (the names DeepSpeed's communication_data_type uses); any other
/// dtype by c10's name ("Double", ...).
ZERO_API std::string dtype_name(c10::ScalarType dtype);

/// One line about the compute dtype on this CPU (Note [Compute dtype]), "" when there is
/// nothing to say: what "auto" chose and why, or a warning that the configured 16-bit compute
/// dtype is slow here, naming the measured slowdown and the key to change. zero::initialize
/// prints it on rank 0. Measures the GEMM rates it needs (zero/gemm_rates.h).
ZERO_API std::string compute_dtype_notice(const Config& config);

}  // namespace zero
