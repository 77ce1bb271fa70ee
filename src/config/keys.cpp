#include "config/keys.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/text.h"
#include "zero/error.h"

namespace zero::config_detail {

namespace {

using Kind = DefaultOnlyKey::Kind;

// DeepSpeed 0.16.5 defaults (deepspeed/runtime/constants.py, zero/config.py,
// zero/offload_config.py, swap_tensor/constants.py, activation_checkpointing/config.py), plus
// the few zero_optimization fields added after it (stage3_allgather_sequential, ...), so that
// configs written for newer DeepSpeed versions that spell out those defaults also run.
// The stage-3 keys zero does not implement: each tunes an internal of DeepSpeed's stage-3
// implementation (sub-group tiling, leaf modules, fetch strategy, Python-side patching) that
// zero's stage 3 does not have. The stage-3 keys zero implements are parsed in config.cpp.
const char* const kStage3Note =
    "it tunes a DeepSpeed stage-3 internal that zero does not implement";
const char* const kRoundRobin =
    "it reorders DeepSpeed's gradient copies from the GPU to host memory so that they run in "
    "parallel; zero's offloaded gradients are copied a shard at a time, and the order never "
    "changes a result";
const char* const kZeroPPNote =
    "of ZeRO++, zero implements zero_quantized_weights, zero_hpz_partition_size and "
    "zero_quantized_gradients; quantized frozen weights and LoCo error feedback are not "
    "implemented";

bool numbers_equal(const Json& a, const Json& b) {
  const std::optional<int64_t> ia = json_to_integer(a), ib = json_to_integer(b);
  if (ia && ib) return *ia == *ib;
  return a.get<double>() == b.get<double>();
}

// Equality of a given value and a default, as DefaultOnlyKey::Kind::kValue describes; objects
// are handled by check_value so that the mismatching sub-key can be named.
bool scalar_matches(const Json& given, const Json& expected) {
  if (is_auto(given)) return true;
  if (given.is_number() && expected.is_number()) return numbers_equal(given, expected);
  if (given.is_string() && expected.is_string()) {
    return lower_ascii(given.get<std::string>()) == lower_ascii(expected.get<std::string>());
  }
  return given == expected;
}

std::vector<std::string> object_keys(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

std::string with_note(std::string message, const char* note) {
  if (note != nullptr) message += std::string(" (") + note + ")";
  return message;
}

// "<path> = <value>: zero does not have <feature>; <what to do>" when the key names a feature,
// else "<path> = <value> is not supported yet; <what is accepted>".
[[noreturn]] void refuse(const std::string& source, const std::string& path, const Json& given,
                         const DefaultOnlyKey& spec, const std::string& accepted) {
  if (spec.feature != nullptr) {
    fail(source, with_note(path + " = " + show(given) + ": zero does not have " + spec.feature +
                               "; " + accepted,
                           spec.note));
  }
  fail(source, with_note(path + " = " + show(given) + " is not supported yet; " + accepted,
                         spec.note));
}

void check_value(const std::string& source, const std::string& path, const Json& given,
                 const Json& expected, const Json* alternative, const DefaultOnlyKey& spec) {
  if (scalar_matches(given, expected)) return;
  if (alternative != nullptr && scalar_matches(given, *alternative)) return;
  if (given.is_object() && expected.is_object() && !expected.empty()) {
    ObjectView view(given, path, source);
    view.check_keys(object_keys(expected));
    for (const auto& item : given.items()) {
      check_value(source, join_path(path, item.key()), item.value(), expected.at(item.key()),
                  nullptr, spec);
    }
    return;
  }
  std::string defaults = "DeepSpeed's default " + show(expected);
  if (alternative != nullptr) defaults += " (or " + show(*alternative) + ")";
  refuse(source, path, given, spec,
         spec.feature != nullptr ? "remove the key or leave it at " + defaults
                                 : "only " + defaults + " is accepted");
}

void check_disabled_section(const ObjectView& view, const DefaultOnlyKey& spec,
                            const Json& given) {
  const std::string path = view.key_path(spec.key);
  const std::string accepted =
      "only a disabled section is accepted: {\"enabled\": false}, {} or null";
  if (given.is_null()) return;
  if (!given.is_object()) view.invalid(spec.key, given, "an object; " + accepted);
  if (given.empty()) return;
  auto enabled = given.find("enabled");
  if (enabled == given.end()) {
    if (spec.feature != nullptr) {
      refuse(view.source(), path, given, spec, "remove the section or set \"enabled\": false");
    }
    fail(view.source(),
         with_note(path + " = " + show(given) + " is not supported yet; " + accepted, spec.note));
  }
  if (!enabled->is_boolean()) {
    fail(view.source(), path + ".enabled = " + show(*enabled) + " is invalid; expected true or false");
  }
  if (enabled->get<bool>()) {
    refuse(view.source(), path + ".enabled", true, spec,
           spec.feature != nullptr ? "remove the section or set \"enabled\": false" : accepted);
  }
}

// A no_effect key: any value of the default's JSON type is accepted; a value other than the
// default is said in `notes`.
void check_no_effect(const ObjectView& view, const DefaultOnlyKey& spec, const Json& given,
                     std::vector<std::string>& notes) {
  if (given.is_null()) return;  // DeepSpeed's "not given"
  const Json expected = Json::parse(spec.default_json);
  const bool same_type = (given.is_boolean() && expected.is_boolean()) ||
                         (given.is_number() && expected.is_number()) ||
                         (given.is_string() && expected.is_string()) ||
                         (given.is_object() && expected.is_object());
  if (!same_type) {
    view.invalid(spec.key, given, std::string("a value of the type of DeepSpeed's default ") +
                                      show(expected));
  }
  if (scalar_matches(given, expected)) return;
  notes.push_back(view.key_path(spec.key) + " = " + show(given) + " changes nothing in zero: " +
                  spec.no_effect);
}

}  // namespace

const Stage3Key kPrefetchBucketSize{{"stage3_prefetch_bucket_size", "prefetch_bucket_size"}};
const Stage3Key kParamPersistence{
    {"stage3_param_persistence_threshold", "param_persistence_threshold"}};
const Stage3Key kModelPersistence{
    {"stage3_model_persistence_threshold", "model_persistence_threshold"}};
const Stage3Key kMaxLiveParameters{{"stage3_max_live_parameters", "max_live_parameters"}};
const Stage3Key kMaxReuseDistance{{"stage3_max_reuse_distance", "max_reuse_distance"}};
const Stage3Key kGather16bitWeights{{"stage3_gather_16bit_weights_on_model_save",
                                     "gather_16bit_weights_on_model_save",
                                     "stage3_gather_fp16_weights_on_model_save"}};

std::string canonical_key_path(const std::string& path) {
  const std::string bf16_alias = "bfloat16.";
  if (path.compare(0, bf16_alias.size(), bf16_alias) == 0) {
    return "bf16." + path.substr(bf16_alias.size());
  }
  const std::string zero = "zero_optimization.";
  if (path.compare(0, zero.size(), zero) != 0) return path;
  const std::string key = path.substr(zero.size());
  for (const Stage3Key* stage3 : {&kPrefetchBucketSize, &kParamPersistence, &kModelPersistence,
                                  &kMaxLiveParameters, &kMaxReuseDistance, &kGather16bitWeights}) {
    for (const char* name : stage3->names) {
      if (key == name) return zero + stage3->names.front();
    }
  }
  return path;
}

const std::vector<DefaultOnlyKey>& top_level_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"memory_breakdown", Kind::kValue, "false", nullptr, nullptr},
      {"dump_state", Kind::kValue, "false", nullptr, nullptr},
      {"disable_allgather", Kind::kValue, "false", nullptr, nullptr},
      {"sparse_gradients", Kind::kValue, "false", nullptr, nullptr},
      {"fp32_allreduce", Kind::kValue, "false", nullptr,
       "use communication_data_type \"fp32\" instead"},
      {"zero_allow_untested_optimizer", Kind::kValue, "false", nullptr, nullptr, nullptr,
       "it lets DeepSpeed wrap a client optimizer it has not tested; zero builds its own "
       "optimizers from the config"},
      {"zero_force_ds_cpu_optimizer", Kind::kValue, "true", nullptr, nullptr, nullptr,
       "it concerns a client optimizer with CPU offload; zero takes no client optimizer"},
      {"dataloader_drop_last", Kind::kValue, "false", nullptr, nullptr},
      {"vocabulary_size", Kind::kValue, "null", nullptr, nullptr},
      {"seq_parallel_communication_data_type", Kind::kValue, "\"fp32\"", "null", nullptr,
       nullptr,
       "it is the dtype of sequence-parallel communication, and zero has no sequence "
       "parallelism"},
      {"sequence_parallel_size", Kind::kValue, "1", nullptr, nullptr,
       "sequence parallelism (DeepSpeed-Ulysses)"},
      {"use_data_before_expert_parallel_", Kind::kValue, "false", nullptr, nullptr},
      {"graph_harvesting", Kind::kValue, "false", nullptr, nullptr},
      {"sparse_attention", Kind::kValue, "null", nullptr, nullptr,
       "DeepSpeed Sparse Attention"},
      {"weight_quantization", Kind::kValue, "null", nullptr, nullptr,
       "weight quantization (MoQ)"},
      {"compression_training", Kind::kValue, "{}", "null", nullptr,
       "DeepSpeed Compression (quantization-aware training, pruning, layer reduction)"},
      {"timers", Kind::kValue, "{}", "null", nullptr, nullptr,
       "it times DeepSpeed's engine (its throughput timer); zero-train reports tokens/s and "
       "the step's time itself"},
      {"compile", Kind::kValue, "{}", "null", nullptr,
       "DeepSpeed's torch.compile integration"},
      {"tensor_parallel", Kind::kValue, "{}", R"({"autotp_size": 1})", nullptr,
       "tensor parallelism (AutoTP)"},
      {"checkpoint", Kind::kValue,
       R"({"tag_validation": "Warn", "load_universal": false, "use_node_local_storage": false,
           "parallel_write": {"pipeline_stage": false}})",
       nullptr, nullptr},
      {"pipeline", Kind::kValue,
       R"({"stages": "auto", "partition": "best", "seed_layers": false,
           "activation_checkpoint_interval": 0, "pipe_partitioned": true,
           "grad_partitioned": true})",
       nullptr, nullptr, "pipeline parallelism"},
      {"amp", Kind::kDisabledSection, nullptr, nullptr, "use fp16 or bf16",
       "NVIDIA apex AMP"},
      {"elasticity", Kind::kDisabledSection, nullptr, nullptr, nullptr, "elastic training"},
      {"flops_profiler", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "the FLOPs profiler"},
      {"wandb", Kind::kDisabledSection, nullptr, nullptr,
       "Weights & Biases logs to a server, and zero's machines have no network; use "
       "tensorboard or csv_monitor"},
      {"comet", Kind::kDisabledSection, nullptr, nullptr,
       "Comet logs to a server, and zero's machines have no network; use tensorboard or "
       "csv_monitor"},
      {"comms_logger", Kind::kDisabledSection, nullptr, nullptr,
       "zero-train's summary reports the bytes each collective moved", "the comms logger"},
      {"autotuning", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "the DeepSpeed Autotuner"},
      {"progressive_layer_drop", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "Progressive Layer Drop"},
      {"curriculum_learning", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "curriculum learning"},
      {"data_efficiency", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "DeepSpeed Data Efficiency (data sampling and routing)"},
      {"hybrid_engine", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "DeepSpeed-Chat's hybrid engine"},
      {"nebula", Kind::kDisabledSection, nullptr, nullptr, nullptr, "Nebula checkpointing"},
      {"quantize_training", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "quantization-aware training (MoQ)"},
      {"torch_autocast", Kind::kDisabledSection, nullptr, nullptr, nullptr, "torch autocast"},
      {"eigenvalue", Kind::kDisabledSection, nullptr, nullptr, nullptr,
       "the eigenvalue computation of MoQ and Progressive Layer Drop"},
      // Not a DeepSpeed 0.16.5 key: LLaMA-Factory's FP8 section (Transformer Engine).
      {"fp8", Kind::kDisabledSection, nullptr, nullptr, nullptr, "FP8 training"},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& zero_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"use_multi_rank_bucket_allreduce", Kind::kValue, "true", nullptr, nullptr},
      {"load_from_fp32_weights", Kind::kValue, "true", nullptr, nullptr},
      {"elastic_checkpoint", Kind::kValue, "false", nullptr, nullptr, nullptr,
       "DeepSpeed marks it no longer supported; zero's checkpoints load at any world size "
       "anyway (docs/checkpoints.md)"},
      {"ignore_unused_parameters", Kind::kValue, "true", nullptr, nullptr},
      {"legacy_stage1", Kind::kValue, "false", nullptr, nullptr},
      {"round_robin_gradients", Kind::kValue, "false", nullptr, nullptr, nullptr, kRoundRobin},
      {"zenflow", Kind::kValue, "null", nullptr, nullptr, "ZenFlow (stall-free offloading)"},
      {"stage3_module_granularity_threshold", Kind::kValue, "0", nullptr, kStage3Note},
      {"module_granularity_threshold", Kind::kValue, "0", nullptr, kStage3Note},
      {"stage3_use_all_reduce_for_fetch_params", Kind::kValue, "false", nullptr, kStage3Note},
      {"use_all_reduce_for_fetch_params", Kind::kValue, "false", nullptr, kStage3Note},
      {"stage3_allgather_sequential", Kind::kValue, "false", nullptr, kStage3Note},
      {"allgather_sequential", Kind::kValue, "false", nullptr, kStage3Note},
      {"stage3_partition_stream_chunk_size", Kind::kValue, "0", nullptr, kStage3Note},
      {"partition_stream_chunk_size", Kind::kValue, "0", nullptr, kStage3Note},
      {"memory_efficient_linear", Kind::kValue, "true", nullptr, kStage3Note},
      {"override_module_apply", Kind::kValue, "true", nullptr, kStage3Note},
      {"pipeline_loading_checkpoint", Kind::kValue, "false", nullptr, kStage3Note},
      {"log_trace_cache_warnings", Kind::kValue, "false", nullptr, kStage3Note},
      {"leaf_module", Kind::kValue, "null", "{}", kStage3Note},
      {"save_muon_momentum_buffer_in_memory", Kind::kValue, "false", nullptr, nullptr},
      {"enable_sanity_checks", Kind::kValue, "false", nullptr, nullptr},
      {"zero_quantized_nontrainable_weights", Kind::kValue, "false", nullptr, kZeroPPNote},
      {"zeropp_loco_param", Kind::kValue, "null", nullptr, kZeroPPNote},
      {"mics_shard_size", Kind::kValue, "-1", nullptr, nullptr, "MiCS"},
      {"mics_hierarchical_params_gather", Kind::kValue, "false", nullptr, nullptr, "MiCS"},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& adam_params_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"amsgrad", Kind::kValue, "false", nullptr,
       "the AMSGrad variant is not implemented; DeepSpeed's FusedAdam rejects it too"},
      {"torch_adam", Kind::kValue, "false", nullptr, nullptr, nullptr,
       "it picks torch's Adam over DeepSpeed's fused one; zero has one Adam, with the same "
       "update"},
      {"set_grad_none", Kind::kValue, "true", nullptr, nullptr},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& sgd_params_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"maximize", Kind::kValue, "false", nullptr, nullptr},
      {"foreach", Kind::kValue, "null", nullptr, nullptr},
      {"differentiable", Kind::kValue, "false", nullptr, nullptr},
      {"fused", Kind::kValue, "null", nullptr, nullptr},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& adagrad_params_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      // DeepSpeedCPUAdagrad's (it has no AMSGrad either) and torch.optim.Adagrad's switches.
      {"amsgrad", Kind::kValue, "false", nullptr, nullptr},
      {"fp32_optimizer_states", Kind::kValue, "true", nullptr, nullptr},
      {"maximize", Kind::kValue, "false", nullptr, nullptr},
      {"foreach", Kind::kValue, "null", nullptr, nullptr},
      {"differentiable", Kind::kValue, "false", nullptr, nullptr},
      {"fused", Kind::kValue, "null", nullptr, nullptr},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& lamb_params_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"amsgrad", Kind::kValue, "false", nullptr,
       "the AMSGrad variant is not implemented; DeepSpeed's FusedLamb rejects it too"},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& muon_params_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"per_head_muon", Kind::kValue, "false", nullptr,
       "orthogonalising each attention head's rows apart is not implemented; every hidden "
       "matrix is orthogonalised whole"},
  };
  return keys;
}

const std::vector<DefaultOnlyKey>& lion_params_default_only() {
  static const std::vector<DefaultOnlyKey> keys = {
      {"fp32_optimizer_states", Kind::kValue, "true", nullptr, nullptr},
  };
  return keys;
}

const std::vector<std::string>& top_level_implemented_keys() {
  static const std::vector<std::string> keys = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
      "gradient_clipping", "optimizer", "fp16", "bf16", "bfloat16", "communication_data_type",
      "zero_optimization", "allgather_size", "scheduler", "steps_per_print",
      "wall_clock_breakdown", "seed", "csv_monitor", "tensorboard", "compute_data_type", "aio",
      "activation_checkpointing", "prescale_gradients", "gradient_predivide_factor",
      "data_types"};
  return keys;
}

const std::vector<std::string>& aio_keys() {
  static const std::vector<std::string> keys = {"block_size", "queue_depth", "intra_op_parallelism",
                                                "thread_count", "single_submit", "overlap_events",
                                                "use_gds"};
  return keys;
}

const std::vector<std::string>& activation_checkpointing_keys() {
  static const std::vector<std::string> keys = {
      "partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
      "number_checkpoints", "synchronize_checkpoint_boundary", "profile"};
  return keys;
}

const std::vector<std::string>& scheduler_keys() {
  static const std::vector<std::string> keys = {"type", "params"};
  return keys;
}

const std::vector<std::string>& warmup_lr_params_keys() {
  static const std::vector<std::string> keys = {"warmup_min_lr", "warmup_max_lr",
                                                "warmup_num_steps", "warmup_type",
                                                "last_batch_iteration"};
  return keys;
}

const std::vector<std::string>& warmup_decay_lr_params_keys() {
  static const std::vector<std::string> keys = {"total_num_steps", "warmup_min_lr",
                                                "warmup_max_lr",   "warmup_num_steps",
                                                "warmup_type",     "last_batch_iteration"};
  return keys;
}

const std::vector<std::string>& warmup_cosine_lr_params_keys() {
  static const std::vector<std::string> keys = {"total_num_steps",  "warmup_min_ratio",
                                                "warmup_num_steps", "cos_min_ratio",
                                                "warmup_type",      "last_batch_iteration"};
  return keys;
}

const std::vector<std::string>& csv_monitor_keys() {
  static const std::vector<std::string> keys = {"enabled", "output_path", "job_name"};
  return keys;
}

const std::vector<std::string>& zero_implemented_keys() {
  static const std::vector<std::string> keys = {
      "stage",          "reduce_bucket_size",   "allgather_bucket_size", "overlap_comm",
      "reduce_scatter", "contiguous_gradients", "allgather_partitions",
      // stage 3, under each of DeepSpeed's names (config.cpp: parse_stage3)
      "stage3_prefetch_bucket_size", "prefetch_bucket_size",
      "stage3_param_persistence_threshold", "param_persistence_threshold",
      "stage3_model_persistence_threshold", "model_persistence_threshold",
      "stage3_max_live_parameters", "max_live_parameters",
      "stage3_max_reuse_distance", "max_reuse_distance",
      "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
      "stage3_gather_fp16_weights_on_model_save",
      "sub_group_size", "offload_optimizer", "offload_param",
      // DeepSpeed's deprecated spellings of the offload keys (config.cpp: parse_cpu_offload)
      "cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
      // ZeRO++ (config.cpp: parse_zeropp)
      "zero_quantized_weights", "zero_hpz_partition_size", "zero_quantized_gradients"};
  return keys;
}

const std::vector<std::string>& optimizer_keys() {
  static const std::vector<std::string> keys = {"type", "params", "legacy_fusion"};
  return keys;
}

const std::vector<std::string>& adam_params_implemented_keys() {
  static const std::vector<std::string> keys = {
      "lr", "betas", "eps", "weight_decay", "bias_correction", "adam_w_mode", "max_grad_norm"};
  return keys;
}

const std::vector<std::string>& sgd_params_implemented_keys() {
  static const std::vector<std::string> keys = {
      "lr", "momentum", "dampening", "weight_decay", "nesterov", "max_grad_norm"};
  return keys;
}

const std::vector<std::string>& adagrad_params_implemented_keys() {
  static const std::vector<std::string> keys = {
      "lr", "eps", "weight_decay", "lr_decay", "initial_accumulator_value", "max_grad_norm"};
  return keys;
}

const std::vector<std::string>& lamb_params_implemented_keys() {
  static const std::vector<std::string> keys = {
      "lr",        "betas",     "eps",           "weight_decay", "bias_correction",
      "max_coeff", "min_coeff", "eps_inside_sqrt", "max_grad_norm"};
  return keys;
}

const std::vector<std::string>& lion_params_implemented_keys() {
  static const std::vector<std::string> keys = {"lr", "betas", "weight_decay", "max_grad_norm"};
  return keys;
}

const std::vector<std::string>& muon_params_implemented_keys() {
  static const std::vector<std::string> keys = {
      "lr",  "muon_lr", "adam_lr",     "momentum",  "weight_decay", "betas",
      "eps", "adam_w_mode", "ns_method", "ns_dtype", "max_grad_norm"};
  return keys;
}

const std::vector<std::string>& fp16_keys() {
  static const std::vector<std::string> keys = {
      "enabled",        "loss_scale", "initial_scale_power", "loss_scale_window",
      "hysteresis",     "consecutive_hysteresis", "min_loss_scale", "auto_cast",
      "fp16_master_weights_and_grads"};
  return keys;
}

const std::vector<std::string>& loss_scale_keys() {
  static const std::vector<std::string> keys = {
      "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
      "consecutive_hysteresis", "min_loss_scale"};
  return keys;
}

const std::vector<std::string>& bf16_keys() {
  static const std::vector<std::string> keys = {"enabled", "immediate_grad_update"};
  return keys;
}

std::vector<std::string> all_keys(const std::vector<std::string>& implemented,
                                  const std::vector<DefaultOnlyKey>& default_only) {
  std::vector<std::string> keys = implemented;
  for (const DefaultOnlyKey& spec : default_only) keys.emplace_back(spec.key);
  return keys;
}

void check_default_only(const ObjectView& view, const DefaultOnlyKey& spec,
                        std::vector<std::string>& notes) {
  const Json* given = view.given(spec.key);
  if (given == nullptr) return;
  switch (spec.kind) {
    case Kind::kValue: {
      if (spec.no_effect != nullptr) {
        check_no_effect(view, spec, *given, notes);
        return;
      }
      const Json expected = Json::parse(spec.default_json);
      if (given->is_null() && expected.is_object()) return;  // a section: null is "not given"
      const Json alternative =
          spec.alternative_json != nullptr ? Json::parse(spec.alternative_json) : Json();
      check_value(view.source(), view.key_path(spec.key), *given, expected,
                  spec.alternative_json != nullptr ? &alternative : nullptr, spec);
      return;
    }
    case Kind::kDisabledSection:
      check_disabled_section(view, spec, *given);
      return;
  }
  ZERO_INTERNAL_ASSERT(false, "unhandled DefaultOnlyKey kind for ", spec.key);
}

std::optional<std::string> section_knowing(const std::string& key,
                                           const std::string& except_path) {
  std::vector<std::pair<std::string, std::vector<std::string>>> sections = {
      {"", all_keys(top_level_implemented_keys(), top_level_default_only())},
      {"zero_optimization", all_keys(zero_implemented_keys(), zero_default_only())},
      {"optimizer", optimizer_keys()},
      {"optimizer.params", all_keys(adam_params_implemented_keys(), adam_params_default_only())},
      {"optimizer.params", all_keys(sgd_params_implemented_keys(), sgd_params_default_only())},
      {"fp16", fp16_keys()},
      {"bf16", bf16_keys()},
      {"scheduler", scheduler_keys()},
      {"scheduler.params", warmup_decay_lr_params_keys()},
      {"scheduler.params", warmup_cosine_lr_params_keys()},
      {"csv_monitor", csv_monitor_keys()},
      {"tensorboard", csv_monitor_keys()},
      {"aio", aio_keys()},
      {"activation_checkpointing", activation_checkpointing_keys()},
  };
  auto add_object_sections = [&](const std::string& parent,
                                 const std::vector<DefaultOnlyKey>& specs) {
    for (const DefaultOnlyKey& spec : specs) {
      if (spec.kind == Kind::kDisabledSection) continue;
      const Json defaults = Json::parse(spec.default_json);
      if (defaults.is_object() && !defaults.empty()) {
        sections.emplace_back(join_path(parent, spec.key), object_keys(defaults));
      }
    }
  };
  add_object_sections("", top_level_default_only());
  add_object_sections("zero_optimization", zero_default_only());
  std::optional<std::string> found;
  for (const auto& [path, keys] : sections) {
    if (path == except_path || std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
    if (found && *found == path) continue;  // optimizer.params, scheduler.params: several lists
    if (found) return std::nullopt;  // known in several sections: no single suggestion
    found = path;
  }
  return found;
}

}  // namespace zero::config_detail
