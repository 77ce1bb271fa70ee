// The DeepSpeed config keys zero knows (internal to src/config/).
//
// Two kinds of keys:
//   - implemented keys, parsed in config.cpp (the lists below name them for the unknown-key
//     check);
//   - "default-only" keys: options DeepSpeed has and zero does not implement. They are
//     accepted when the value equals DeepSpeed's default or disabled form, so a config that
//     merely spells out defaults runs. Any other value is rejected (naming the DeepSpeed
//     feature zero does not have, when the key turns one on), except for the keys whose value
//     changes nothing in zero (`no_effect`): those are accepted with a one-line note saying so
//     (Config::notes). Nothing is accepted and then silently ignored.
// docs/config.md lists every key with its status.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/reader.h"

namespace zero::config_detail {

struct DefaultOnlyKey {
  enum class Kind {
    /// The value must equal `default_json` (or `alternative_json`). Numbers compare by value,
    /// strings case-insensitively, objects key by key: a given object's keys must be keys of
    /// the default object, and each value must equal the default's.
    kValue,
    /// A section with an "enabled" flag (tensorboard, amp, ...): accepted when null, {}, or
    /// when it has "enabled": false (its other keys then have no effect, as in DeepSpeed).
    kDisabledSection,
  };
  const char* key;
  Kind kind;
  const char* default_json;
  const char* alternative_json;  // another accepted form of the default, or nullptr
  const char* note;              // appended to the "not supported yet" message, or nullptr
  /// The DeepSpeed feature a non-default value turns on, which zero does not have ("the
  /// DeepSpeed Autotuner"): the refusal says so in one line. nullptr: "not supported yet".
  const char* feature = nullptr;
  /// Why any value of the default's JSON type changes nothing in zero: such a value is
  /// accepted and this is said in Config::notes. nullptr: other values are refused.
  const char* no_effect = nullptr;
};

/// Top-level keys other than the implemented ones.
const std::vector<DefaultOnlyKey>& top_level_default_only();
/// zero_optimization keys other than the implemented ones.
const std::vector<DefaultOnlyKey>& zero_default_only();
/// optimizer.params keys DeepSpeed passes to FusedAdam / torch.optim.SGD that zero does not
/// implement (amsgrad, torch_adam, set_grad_none; maximize, foreach, ...).
const std::vector<DefaultOnlyKey>& adam_params_default_only();
const std::vector<DefaultOnlyKey>& sgd_params_default_only();
/// ... and to DeepSpeedCPUAdagrad / torch.optim.Adagrad, and DeepSpeedCPULion.
const std::vector<DefaultOnlyKey>& adagrad_params_default_only();
const std::vector<DefaultOnlyKey>& lion_params_default_only();
const std::vector<DefaultOnlyKey>& muon_params_default_only();
const std::vector<DefaultOnlyKey>& lamb_params_default_only();

/// Implemented keys of each section.
const std::vector<std::string>& top_level_implemented_keys();
const std::vector<std::string>& zero_implemented_keys();
const std::vector<std::string>& optimizer_keys();
const std::vector<std::string>& adam_params_implemented_keys();
const std::vector<std::string>& sgd_params_implemented_keys();
const std::vector<std::string>& adagrad_params_implemented_keys();
const std::vector<std::string>& lion_params_implemented_keys();
const std::vector<std::string>& muon_params_implemented_keys();
const std::vector<std::string>& lamb_params_implemented_keys();
const std::vector<std::string>& fp16_keys();
const std::vector<std::string>& bf16_keys();
const std::vector<std::string>& aio_keys();
const std::vector<std::string>& activation_checkpointing_keys();
const std::vector<std::string>& scheduler_keys();
/// scheduler.params keys of each supported scheduler type (DeepSpeed's constructor arguments).
const std::vector<std::string>& warmup_lr_params_keys();
const std::vector<std::string>& warmup_decay_lr_params_keys();
const std::vector<std::string>& warmup_cosine_lr_params_keys();
const std::vector<std::string>& csv_monitor_keys();

/// A stage-3 key zero implements, with its DeepSpeed names: the canonical one (the name in
/// effective_json) first, then its aliases. DeepSpeed's pydantic model names the field without
/// the prefix and takes the stage3_ name as its alias; stage3_gather_fp16_weights_on_model_save
/// is its deprecated name for kGather16bitWeights.
struct Stage3Key {
  std::vector<const char*> names;
};
extern const Stage3Key kPrefetchBucketSize;
extern const Stage3Key kParamPersistence;
extern const Stage3Key kModelPersistence;
extern const Stage3Key kMaxLiveParameters;
extern const Stage3Key kMaxReuseDistance;
extern const Stage3Key kGather16bitWeights;

/// The path effective_json names a key by, for a path given under another name
/// ("bfloat16.enabled" -> "bf16.enabled", "zero_optimization.prefetch_bucket_size" ->
/// "zero_optimization.stage3_prefetch_bucket_size"); other paths unchanged.
std::string canonical_key_path(const std::string& path);

/// Implemented keys followed by the default-only ones.
std::vector<std::string> all_keys(const std::vector<std::string>& implemented,
                                  const std::vector<DefaultOnlyKey>& default_only);

/// Checks one default-only key of `view` (absent and "auto" are accepted); a `no_effect` key's
/// non-default value adds its note to `notes`.
void check_default_only(const ObjectView& view, const DefaultOnlyKey& spec,
                        std::vector<std::string>& notes);

/// fp16's loss-scale keys, which have no effect inside `bf16` (bf16 has no loss scaling): a
/// common copy of an fp16 section, accepted there with a note.
const std::vector<std::string>& loss_scale_keys();

/// The section path ("" = top level) other than `except_path` where `key` is known, for
/// "did you mean" on a misplaced key (e.g. "aio" inside zero_optimization); nullopt if none.
std::optional<std::string> section_knowing(const std::string& key,
                                           const std::string& except_path);

}  // namespace zero::config_detail
