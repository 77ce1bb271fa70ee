// parse_config / load_config: DeepSpeed JSON -> zero::Config (see include/zero/config.h and
// docs/config.md for every key and where zero's behaviour differs from DeepSpeed's).
#include "zero/config.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/bounded_input.h"
#include "common/dtype_names.h"
#include "common/text.h"
#include "config/keys.h"
#include "config/reader.h"
#include "config/trainer_fill.h"
#include "zero/error.h"
#include "zero/gemm_rates.h"

namespace zero {

namespace {

using config_detail::all_keys;
using config_detail::check_default_only;
using config_detail::closest_match;
using config_detail::DefaultOnlyKey;
using config_detail::fail;
using config_detail::Json;
using config_detail::ObjectView;
using config_detail::show;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

bool non_negative(double v) { return v >= 0.0; }
bool positive(double v) { return v > 0.0; }
bool beta_range(double v) { return v >= 0.0 && v < 1.0; }
bool unit_range(double v) { return v >= 0.0 && v <= 1.0; }

// ---- batch triple -------------------------------------------------------------------------

// DeepSpeedConfig._set_batch_related_parameters and _batch_assertion, with an explicit
// divisibility error where DeepSpeed's floor division would only fail the final equality.
void parse_batch(const ObjectView& top, int world_size, Config& config) {
  const std::string& source = top.source();
  // Bounded by INT_MAX: samplers, loops and checkpoint counters hold these as int, and no
  // real batch comes near it (2^32 + 1 would otherwise wrap to 1 further on).
  auto read = [&](const char* key) -> std::optional<int64_t> {
    std::optional<int64_t> value = top.get_optional_integer(key, "an integer > 0");
    if (value && (*value <= 0 || *value > INT_MAX)) {
      top.invalid(key, *top.raw(key), "an integer > 0 and <= " + std::to_string(INT_MAX));
    }
    return value;
  };
  const std::optional<int64_t> tbs = read("train_batch_size");
  const std::optional<int64_t> mbs = read("train_micro_batch_size_per_gpu");
  const std::optional<int64_t> gas = read("gradient_accumulation_steps");
  const int64_t world = world_size;
  const std::string world_text = "world size " + std::to_string(world);

  auto multiply = [&](int64_t a, int64_t b) {
    int64_t product = 0;
    if (__builtin_mul_overflow(a, b, &product)) {
      fail(source, "the batch sizes overflow a 64-bit integer (" + std::to_string(a) + " * " +
                       std::to_string(b) + "); check train_batch_size, "
                       "train_micro_batch_size_per_gpu and gradient_accumulation_steps");
    }
    return product;
  };
  auto t = [](int64_t v) { return std::to_string(v); };

  int64_t train_batch = 0, micro_batch = 0, accumulation = 0;
  if (tbs && mbs && gas) {
    train_batch = *tbs;
    micro_batch = *mbs;
    accumulation = *gas;
    const int64_t product = multiply(multiply(micro_batch, accumulation), world);
    if (train_batch != product) {
      fail(source, "train_batch_size " + t(train_batch) +
                       " is not equal to train_micro_batch_size_per_gpu " + t(micro_batch) +
                       " * gradient_accumulation_steps " + t(accumulation) + " * " +
                       world_text + " = " + t(product));
    }
  } else if (tbs && mbs) {
    train_batch = *tbs;
    micro_batch = *mbs;
    const int64_t per_step = multiply(micro_batch, world);
    if (train_batch % per_step != 0) {
      fail(source, "train_batch_size " + t(train_batch) +
                       " is not divisible by train_micro_batch_size_per_gpu " + t(micro_batch) +
                       " * " + world_text + " = " + t(per_step) +
                       ", so gradient_accumulation_steps = train_batch_size / " + t(per_step) +
                       " is not a whole number >= 1");
    }
    accumulation = train_batch / per_step;
  } else if (tbs && gas) {
    train_batch = *tbs;
    accumulation = *gas;
    const int64_t per_micro = multiply(world, accumulation);
    if (train_batch % per_micro != 0) {
      fail(source, "train_batch_size " + t(train_batch) + " is not divisible by " + world_text +
                       " * gradient_accumulation_steps " + t(accumulation) + " = " +
                       t(per_micro) + ", so train_micro_batch_size_per_gpu = train_batch_size / " +
                       t(per_micro) + " is not a whole number >= 1");
    }
    micro_batch = train_batch / per_micro;
  } else if (mbs && gas) {
    micro_batch = *mbs;
    accumulation = *gas;
    train_batch = multiply(multiply(micro_batch, accumulation), world);
  } else if (tbs) {
    train_batch = *tbs;
    accumulation = 1;
    if (train_batch % world != 0) {
      fail(source, "train_batch_size " + t(train_batch) + " is not divisible by " + world_text +
                       ", so train_micro_batch_size_per_gpu = train_batch_size / " + t(world) +
                       " (with gradient_accumulation_steps 1) is not a whole number >= 1");
    }
    micro_batch = train_batch / world;
  } else if (mbs) {
    micro_batch = *mbs;
    accumulation = 1;
    train_batch = multiply(micro_batch, world);
  } else {
    std::string message =
        "one of train_batch_size or train_micro_batch_size_per_gpu is required (neither is "
        "given";
    if (gas) message += "; gradient_accumulation_steps " + t(*gas) + " alone does not determine the batch";
    const Json* tbs_raw = top.raw("train_batch_size");
    const Json* mbs_raw = top.raw("train_micro_batch_size_per_gpu");
    if ((tbs_raw != nullptr && config_detail::is_auto(*tbs_raw)) ||
        (mbs_raw != nullptr && config_detail::is_auto(*mbs_raw))) {
      message += "; \"auto\" is filled by a trainer: zero-train --micro-batch, or "
                 "parse_config with TrainerValues";
    }
    fail(source, message + ")");
  }
  ZERO_INTERNAL_ASSERT(train_batch > 0 && micro_batch > 0 && accumulation > 0 &&
                           train_batch == micro_batch * accumulation * world,
                       "batch triple ", train_batch, " ", micro_batch, " ", accumulation);
  config.train_batch_size = train_batch;
  config.train_micro_batch_size_per_gpu = micro_batch;
  config.gradient_accumulation_steps = accumulation;
}

// ---- optimizer ----------------------------------------------------------------------------

constexpr const char* kAllowedTypes =
    "Adam, AdamW, SGD, Adagrad, Lion, Lamb, Muon (case-insensitive)";

// optimizer.params.betas: [beta1, beta2], each in [0, 1) (Adam's and Lion's).
void parse_betas(const ObjectView& params, OptimizerConfig& optimizer) {
  if (const Json* betas = params.given("betas")) {
    const char* expected = "an array [beta1, beta2] of two numbers, each in [0, 1)";
    if (!betas->is_array() || betas->size() != 2) params.invalid("betas", *betas, expected);
    for (const Json& beta : *betas) {
      if (!beta.is_number() || !beta_range(beta.get<double>())) {
        params.invalid("betas", *betas, expected);
      }
    }
    optimizer.beta1 = (*betas)[0].get<double>();
    optimizer.beta2 = (*betas)[1].get<double>();
  }
}

void parse_adam_params(const ObjectView& params, bool adamw_type, OptimizerConfig& optimizer,
                       std::vector<std::string>& notes) {
  optimizer.lr = params.get_number("lr", OptimizerConfig{}.lr, non_negative, "a number >= 0");
  parse_betas(params, optimizer);
  const OptimizerConfig defaults;
  optimizer.eps = params.get_number("eps", defaults.eps, positive, "a number > 0");
  optimizer.weight_decay =
      params.get_number("weight_decay", defaults.weight_decay, non_negative, "a number >= 0");
  optimizer.bias_correction = params.get_bool("bias_correction", defaults.bias_correction);
  const bool adam_w_mode = params.get_bool("adam_w_mode", true);
  if (adamw_type && !adam_w_mode) {
    fail(params.source(),
         params.key_path("adam_w_mode") +
             " = false contradicts optimizer.type \"AdamW\" (DeepSpeed silently runs AdamW "
             "anyway); for Adam with L2 weight decay use type \"Adam\" with adam_w_mode false, "
             "or remove adam_w_mode");
  }
  optimizer.type = (adamw_type || adam_w_mode) ? OptimizerType::kAdamW : OptimizerType::kAdam;
  for (const DefaultOnlyKey& spec : config_detail::adam_params_default_only()) {
    check_default_only(params, spec, notes);
  }
}

void parse_sgd_params(const ObjectView& params, OptimizerConfig& optimizer,
                      std::vector<std::string>& notes) {
  optimizer.type = OptimizerType::kSGD;
  if (params.given("lr") == nullptr) {
    std::string message = params.key_path("lr") +
                          " is required for SGD (it has no default learning rate); give a "
                          "number >= 0";
    if (const Json* lr = params.raw("lr")) message += " (got " + show(*lr) + ")";
    fail(params.source(), message);
  }
  optimizer.lr = params.get_number("lr", 0.0, non_negative, "a number >= 0");
  const OptimizerConfig defaults;
  optimizer.momentum =
      params.get_number("momentum", defaults.momentum, non_negative, "a number >= 0");
  optimizer.dampening =
      params.get_number("dampening", defaults.dampening, unit_range, "a number in [0, 1]");
  optimizer.weight_decay =
      params.get_number("weight_decay", defaults.weight_decay, non_negative, "a number >= 0");
  optimizer.nesterov = params.get_bool("nesterov", defaults.nesterov);
  if (optimizer.nesterov && (optimizer.momentum <= 0.0 || optimizer.dampening != 0.0)) {
    fail(params.source(), params.key_path("nesterov") +
                              " = true requires momentum > 0 and dampening 0, as in "
                              "torch.optim.SGD (got momentum " +
                              show(Json(optimizer.momentum)) + ", dampening " +
                              show(Json(optimizer.dampening)) + ")");
  }
  for (const DefaultOnlyKey& spec : config_detail::sgd_params_default_only()) {
    check_default_only(params, spec, notes);
  }
}

// torch.optim.Adagrad's parameters (DeepSpeed builds it, or DeepSpeedCPUAdagrad when the
// optimizer is offloaded, from optimizer.params), with its defaults: lr 1e-2, eps 1e-10.
void parse_adagrad_params(const ObjectView& params, OptimizerConfig& optimizer,
                          std::vector<std::string>& notes) {
  optimizer.type = OptimizerType::kAdagrad;
  optimizer.lr = params.get_number("lr", 1e-2, non_negative, "a number >= 0");
  optimizer.eps = params.get_number("eps", 1e-10, positive, "a number > 0");
  optimizer.weight_decay = params.get_number("weight_decay", 0.0, non_negative, "a number >= 0");
  optimizer.lr_decay = params.get_number("lr_decay", 0.0, non_negative, "a number >= 0");
  optimizer.initial_accumulator_value =
      params.get_number("initial_accumulator_value", 0.0, non_negative, "a number >= 0");
  for (const DefaultOnlyKey& spec : config_detail::adagrad_params_default_only()) {
    check_default_only(params, spec, notes);
  }
}

// Lion's parameters as DeepSpeedCPULion and FusedLion take them, with their defaults: lr 1e-3,
// betas [0.9, 0.999] (the paper suggests [0.9, 0.99]).
void parse_lion_params(const ObjectView& params, OptimizerConfig& optimizer,
                       std::vector<std::string>& notes) {
  optimizer.type = OptimizerType::kLion;
  optimizer.lr = params.get_number("lr", 1e-3, non_negative, "a number >= 0");
  parse_betas(params, optimizer);
  optimizer.weight_decay = params.get_number("weight_decay", 0.0, non_negative, "a number >= 0");
  for (const DefaultOnlyKey& spec : config_detail::lion_params_default_only()) {
    check_default_only(params, spec, notes);
  }
}

// DeepSpeed's FusedLamb parameters, with its defaults: Adam's (lr 1e-3, betas [0.9, 0.999],
// eps 1e-8, bias_correction), weight decay added to the update, and the trust ratio's clamp
// [min_coeff 0.01, max_coeff 10].
void parse_lamb_params(const ObjectView& params, OptimizerConfig& optimizer,
                       std::vector<std::string>& notes) {
  optimizer.type = OptimizerType::kLamb;
  const OptimizerConfig defaults;
  optimizer.lr = params.get_number("lr", defaults.lr, non_negative, "a number >= 0");
  parse_betas(params, optimizer);
  optimizer.eps = params.get_number("eps", defaults.eps, positive, "a number > 0");
  optimizer.weight_decay =
      params.get_number("weight_decay", defaults.weight_decay, non_negative, "a number >= 0");
  optimizer.bias_correction = params.get_bool("bias_correction", defaults.bias_correction);
  optimizer.eps_inside_sqrt = params.get_bool("eps_inside_sqrt", defaults.eps_inside_sqrt);
  optimizer.max_coeff =
      params.get_number("max_coeff", defaults.max_coeff, positive, "a number > 0");
  optimizer.min_coeff =
      params.get_number("min_coeff", defaults.min_coeff, non_negative, "a number >= 0");
  if (optimizer.min_coeff > optimizer.max_coeff) {
    fail(params.source(), params.key_path("min_coeff") + " = " +
                              show(Json(optimizer.min_coeff)) + " is more than " +
                              params.key_path("max_coeff") + " = " +
                              show(Json(optimizer.max_coeff)) +
                              "; the trust ratio is clamped to [min_coeff, max_coeff]");
  }
  for (const DefaultOnlyKey& spec : config_detail::lamb_params_default_only()) {
    check_default_only(params, spec, notes);
  }
}

// DeepSpeed's Muon (MuonWithAuxAdam, engine._muon_param_groups): one config for two halves.
// The matrices take muon_lr (else lr, else 0.02), momentum 0.95 and ns_method "gram"; the
// auxiliary AdamW takes adam_lr (else lr, else 3e-4), betas [0.9, 0.95], eps 1e-10 and
// adam_w_mode; weight_decay (0) is both halves'. ns_dtype is zero's: the iteration's dtype,
// which DeepSpeed derives from ns_method and the accelerator (docs/config.md).
void parse_muon_params(const ObjectView& params, OptimizerConfig& optimizer,
                       std::vector<std::string>& notes) {
  optimizer.type = OptimizerType::kMuon;
  const double shared_lr = params.get_number("lr", -1.0, non_negative, "a number >= 0");
  const bool lr_given = params.given("lr") != nullptr;
  optimizer.lr = params.get_number("adam_lr", lr_given ? shared_lr : 3e-4, positive,
                                   "a number > 0 (the matrices' rate follows its schedule)");
  if (optimizer.lr <= 0.0) {
    // Only reachable through "lr": 0 with no adam_lr.
    fail(params.source(), params.key_path("lr") + " = 0 leaves Muon's AdamW half a rate of 0, "
                          "which the matrices' rate (muon_lr / lr of the schedule's) cannot "
                          "follow; give adam_lr > 0 (and muon_lr for the matrices)");
  }
  optimizer.muon_lr = params.get_number("muon_lr", lr_given ? shared_lr : 0.02, non_negative,
                                        "a number >= 0");
  optimizer.momentum = params.get_number("momentum", 0.95, beta_range, "a number in [0, 1)");
  optimizer.weight_decay = params.get_number("weight_decay", 0.0, non_negative, "a number >= 0");
  optimizer.beta1 = 0.9;
  optimizer.beta2 = 0.95;
  parse_betas(params, optimizer);
  optimizer.eps = params.get_number("eps", 1e-10, positive, "a number > 0");
  optimizer.aux_adam_w_mode = params.get_bool("adam_w_mode", true);
  if (const auto method =
          params.get_choice("ns_method", {"gram", "standard"}, "\"gram\" or \"standard\"")) {
    optimizer.ns_method = *method == 0 ? MuonNsMethod::kGram : MuonNsMethod::kStandard;
  }
  if (const auto dtype = params.get_choice("ns_dtype", {"fp32", "bf16"},
                                           "\"fp32\" or \"bf16\" (fp16 is not supported)")) {
    optimizer.ns_dtype = *dtype == 0 ? c10::ScalarType::Float : c10::ScalarType::BFloat16;
  }
  for (const DefaultOnlyKey& spec : config_detail::muon_params_default_only()) {
    check_default_only(params, spec, notes);
  }
}

void parse_optimizer(const ObjectView& top, Config& config) {
  const std::string& source = top.source();
  const Json* section = top.given("optimizer");
  if (section == nullptr || section->is_null()) {
    fail(source,
         "the 'optimizer' section is required: zero builds the optimizer from the config and "
         "takes no client optimizer; e.g. \"optimizer\": {\"type\": \"AdamW\", \"params\": "
         "{\"lr\": 0.001}} (allowed types: Adam, AdamW, SGD, Adagrad, Lion, Lamb, Muon). A trainer "
         "makes "
         "the Hugging Face Trainer's AdamW when it is missing: zero-train does, and "
         "parse_config with TrainerValues");
  }
  ObjectView optimizer(*section, "optimizer", source);
  optimizer.check_keys(config_detail::optimizer_keys());
  static const DefaultOnlyKey kLegacyFusion = {"legacy_fusion", DefaultOnlyKey::Kind::kValue,
                                               "false", nullptr, nullptr};
  check_default_only(optimizer, kLegacyFusion, config.notes);

  const Json* type_json = optimizer.raw("type");
  if (type_json == nullptr || type_json->is_null()) {
    fail(source, "optimizer.type is required; allowed: " + std::string(kAllowedTypes));
  }
  if (!type_json->is_string()) {
    optimizer.invalid("type", *type_json, "a string: " + std::string(kAllowedTypes));
  }
  const std::string type = lower_ascii(type_json->get<std::string>());
  static const std::vector<std::string> kNotYet = {"muadam", "muadamw", "musgd"};
  static const std::vector<std::string> kOneBit = {"onebitadam", "zerooneadam", "onebitlamb"};
  if (std::find(kOneBit.begin(), kOneBit.end(), type) != kOneBit.end()) {
    fail(source, "optimizer.type = " + show(*type_json) +
                     ": zero does not have DeepSpeed's 1-bit optimizers (compressed "
                     "communication); use " + std::string(kAllowedTypes));
  }
  static const std::vector<std::string> kTypes = {"adam", "adamw", "sgd", "adagrad",
                                                  "lion", "lamb",  "muon"};
  if (std::find(kTypes.begin(), kTypes.end(), type) == kTypes.end()) {
    if (std::find(kNotYet.begin(), kNotYet.end(), type) != kNotYet.end()) {
      optimizer.not_supported("type", *type_json,
                              "supported types: " + std::string(kAllowedTypes));
    }
    static const std::vector<std::string> kKnown = {
        "Adam",    "AdamW", "SGD",  "Lamb",   "OneBitAdam", "ZeroOneAdam", "OneBitLamb",
        "Adagrad", "Lion",  "Muon", "MuAdam", "MuAdamW",    "MuSGD"};
    std::string expected = "one of " + std::string(kAllowedTypes);
    const std::string suggestion = closest_match(type, kKnown);
    if (!suggestion.empty()) expected += "; did you mean '" + suggestion + "'?";
    optimizer.invalid("type", *type_json, expected);
  }

  const Json empty = Json::object();
  const Json* params_json = optimizer.given("params");
  if (params_json == nullptr) params_json = &empty;
  ObjectView params(*params_json, "optimizer.params", source);
  if (const Json* max_grad_norm = params.raw("max_grad_norm")) {
    fail(source, "optimizer.params.max_grad_norm = " + show(*max_grad_norm) +
                     " is not supported: use the top-level gradient_clipping instead (DeepSpeed "
                     "raises the same error)");
  }
  OptimizerConfig result;
  if (type == "sgd") {
    params.check_keys(all_keys(config_detail::sgd_params_implemented_keys(),
                               config_detail::sgd_params_default_only()));
    parse_sgd_params(params, result, config.notes);
  } else if (type == "adagrad") {
    params.check_keys(all_keys(config_detail::adagrad_params_implemented_keys(),
                               config_detail::adagrad_params_default_only()));
    parse_adagrad_params(params, result, config.notes);
  } else if (type == "lion") {
    params.check_keys(all_keys(config_detail::lion_params_implemented_keys(),
                               config_detail::lion_params_default_only()));
    parse_lion_params(params, result, config.notes);
  } else if (type == "lamb") {
    params.check_keys(all_keys(config_detail::lamb_params_implemented_keys(),
                               config_detail::lamb_params_default_only()));
    parse_lamb_params(params, result, config.notes);
  } else if (type == "muon") {
    params.check_keys(all_keys(config_detail::muon_params_implemented_keys(),
                               config_detail::muon_params_default_only()));
    parse_muon_params(params, result, config.notes);
  } else {
    params.check_keys(all_keys(config_detail::adam_params_implemented_keys(),
                               config_detail::adam_params_default_only()));
    parse_adam_params(params, type == "adamw", result, config.notes);
  }
  config.optimizer = result;
}

// ---- precision ----------------------------------------------------------------------------

// Returns fp16.enabled; fills config.loss_scale.
bool parse_fp16(const ObjectView& top, Config& config) {
  const Json* section = top.given("fp16");
  if (section == nullptr) return false;
  ObjectView fp16(*section, "fp16", top.source());
  fp16.check_keys(config_detail::fp16_keys());
  const bool enabled = fp16.get_bool("enabled", false);
  if (fp16.get_bool("auto_cast", false)) {
    // DeepSpeed's engine casts the forward's floating-point inputs to fp16 (the parameters are
    // fp16 already). zero does not run the forward: the model is given its inputs by the
    // program (zero-train's GPT-2 takes token ids, which are not cast).
    config.notes.push_back(
        enabled ? "fp16.auto_cast = true: DeepSpeed casts the forward's floating-point inputs to "
                  "fp16; zero does not run the forward, so a program gives its fp16 model fp16 "
                  "inputs itself (zero-train's GPT-2 takes token ids: nothing to cast)"
                : "fp16.auto_cast = true has no effect: fp16 is not enabled");
  }
  if (fp16.get_bool("fp16_master_weights_and_grads", false)) {
    fp16.not_supported("fp16_master_weights_and_grads", true,
                       "only false is accepted (master weights and optimizer states are fp32)");
  }
  LossScaleConfig& scale = config.loss_scale;
  const double loss_scale = fp16.get_number("loss_scale", 0.0, non_negative,
                                            "a number >= 0 (0 selects dynamic loss scaling)");
  scale.dynamic = loss_scale == 0.0;
  scale.static_scale = scale.dynamic ? 1.0 : loss_scale;
  const LossScaleConfig defaults;
  // 2^127 is the largest power of two an fp32 loss can be scaled by.
  scale.initial_scale_power = static_cast<int>(fp16.get_integer(
      "initial_scale_power", defaults.initial_scale_power, 0, 127, "an integer in [0, 127]"));
  scale.scale_window = fp16.get_integer("loss_scale_window", defaults.scale_window, 1, kInt64Max,
                                        "an integer >= 1");
  scale.hysteresis = static_cast<int>(
      fp16.get_integer("hysteresis", defaults.hysteresis, 1, INT_MAX, "an integer >= 1"));
  scale.consecutive_hysteresis =
      fp16.get_bool("consecutive_hysteresis", defaults.consecutive_hysteresis);
  scale.min_loss_scale =
      fp16.get_number("min_loss_scale", defaults.min_loss_scale, non_negative, "a number >= 0");
  return enabled;
}

// Returns bf16.enabled (or bfloat16.enabled).
bool parse_bf16(const ObjectView& top, std::vector<std::string>& notes) {
  if (top.raw("bf16") != nullptr && top.raw("bfloat16") != nullptr) {
    fail(top.source(), "both 'bf16' and its alias 'bfloat16' are given; keep one of them");
  }
  const std::string name = top.raw("bfloat16") != nullptr ? "bfloat16" : "bf16";
  const Json* section = top.given(name);
  if (section == nullptr) return false;
  ObjectView bf16(*section, name, top.source());
  // fp16's loss-scale keys, copied into bf16 sections by many configs, have no effect there.
  std::vector<std::string> known = config_detail::bf16_keys();
  const std::vector<std::string>& loss_scale = config_detail::loss_scale_keys();
  known.insert(known.end(), loss_scale.begin(), loss_scale.end());
  bf16.check_keys(known);
  for (const std::string& key : loss_scale) {
    if (bf16.raw(key) != nullptr) {
      notes.push_back(bf16.key_path(key) + " ignored: it is an fp16 key, and bf16 has no loss "
                      "scaling");
    }
  }
  const bool enabled = bf16.get_bool("enabled", false);
  if (bf16.get_bool("immediate_grad_update", false)) {
    bf16.not_supported("immediate_grad_update", true, "only false is accepted");
  }
  return enabled;
}

// Returns whether communication_data_type was given (not null / absent / "auto").
bool parse_precision(const ObjectView& top, Config& config) {
  const bool fp16 = parse_fp16(top, config);
  const bool bf16 = parse_bf16(top, config.notes);
  if (fp16 && bf16) {
    fail(top.source(),
         "fp16.enabled and bf16.enabled are both true; enable at most one (DeepSpeed asserts "
         "the same)");
  }
  config.param_dtype = fp16   ? c10::ScalarType::Half
                       : bf16 ? c10::ScalarType::BFloat16
                              : c10::ScalarType::Float;
  config.configured_param_dtype = config.param_dtype;

  const char* expected = "one of \"fp32\", \"fp16\", \"bf16\" (case-insensitive), or null";
  config.communication_dtype = config.param_dtype;
  if (std::optional<std::string> name =
          top.get_optional_string("communication_data_type", expected)) {
    const std::string value = lower_ascii(*name);
    if (value == "fp32") {
      config.communication_dtype = c10::ScalarType::Float;
    } else if (value == "fp16") {
      config.communication_dtype = c10::ScalarType::Half;
    } else if (value == "bf16" || value == "bfp16") {
      // "bfp16": older DeepSpeed versions' name of bf16 here.
      config.communication_dtype = c10::ScalarType::BFloat16;
    } else {
      top.invalid("communication_data_type", *top.raw("communication_data_type"), expected);
    }
    return true;
  }
  return false;
}

c10::ScalarType parse_dtype_name(const std::string& name) {
  const std::string value = lower_ascii(name);
  if (value == "fp32") return c10::ScalarType::Float;
  if (value == "fp16") return c10::ScalarType::Half;
  return c10::ScalarType::BFloat16;  // the caller accepts only the three names
}

// compute_data_type (a zero extension; Note [Compute dtype] in zero/config.h). Needs the
// parameter dtype and the stage, so it runs after parse_precision and parse_zero.
void parse_compute_dtype(const ObjectView& top, Config& config, bool communication_given,
                         const TrainerValues* trainer) {
  const char* key = "compute_data_type";
  const char* expected = "one of \"auto\", \"fp32\", \"bf16\", \"fp16\" (case-insensitive), or "
                         "null (compute in the parameter dtype)";
  config.compute_dtype = config.param_dtype;
  const Json* raw = top.raw(key);
  if (raw == nullptr || raw->is_null()) return;
  if (!raw->is_string()) top.invalid(key, *raw, expected);
  const std::string value = lower_ascii(raw->get<std::string>());
  const int stage = config.zero_optimization.stage;
  const std::string param_name = dtype_name(config.param_dtype);
  const std::string param_key = config.param_dtype == c10::ScalarType::Half ? "fp16.enabled"
                                : config.param_dtype == c10::ScalarType::BFloat16 ? "bf16.enabled"
                                                                                   : "";
  if (value == "auto") {
    config.compute_dtype_auto = true;
    if (config.param_dtype == c10::ScalarType::Float) return;  // nothing 16-bit to decide
    // A trainer's verdict on the 16-bit speed (zero-train's is agreed by every rank) wins over
    // this process's own measurement.
    const std::optional<bool> fast =
        trainer == nullptr ? std::nullopt
        : config.param_dtype == c10::ScalarType::BFloat16 ? trainer->bf16_fast
                                                           : trainer->fp16_fast;
    if (fast ? *fast : !measured_gemm_rates().slow(config.param_dtype)) return;
    // 16-bit GEMMs are slow here: compute in fp32. Stage 3 keeps 16-bit storage and
    // collectives; at stages 0-2 the parameters are the compute copy, so they become fp32
    // (and so does the default communication dtype, which follows them).
    config.compute_dtype = c10::ScalarType::Float;
    if (stage < 3) {
      config.param_dtype = c10::ScalarType::Float;
      if (!communication_given) config.communication_dtype = c10::ScalarType::Float;
    }
    return;
  }
  if (value != "fp32" && value != "bf16" && value != "fp16") top.invalid(key, *raw, expected);
  const c10::ScalarType compute = parse_dtype_name(value);
  if (compute == config.param_dtype) return;
  if (compute != c10::ScalarType::Float) {
    fail(top.source(), std::string(key) + " = " + show(*raw) + " with " + param_name +
                           " parameters is not supported: zero computes in the parameter dtype " +
                           "or, at stage 3, in fp32 from 16-bit parameters (no autocast); " +
                           "allowed here: \"" + param_name + "\", \"auto\" or null" +
                           (config.param_dtype == c10::ScalarType::Float
                                ? std::string("; for ") + value + " parameters set " +
                                      (compute == c10::ScalarType::Half ? "fp16" : "bf16") +
                                      ".enabled true"
                                : std::string()));
  }
  if (stage != 3) {
    fail(top.source(), std::string(key) + " = " + show(*raw) + " with " + param_key +
                           " needs zero_optimization.stage 3 (got " + std::to_string(stage) +
                           "): only there are the " + param_name + " parameters a stored " +
                           "copy, gathered into fp32 for compute; at stages 0-2 the model " +
                           "computes with the parameters themselves. For fp32 compute here " +
                           "set " + param_key + " false (communication_data_type \"" +
                           param_name + "\" still halves gradient traffic), or use \"auto\"");
  }
  config.compute_dtype = compute;
}

// ---- zero_optimization --------------------------------------------------------------------

using config_detail::kGather16bitWeights;
using config_detail::kMaxLiveParameters;
using config_detail::kMaxReuseDistance;
using config_detail::kModelPersistence;
using config_detail::kParamPersistence;
using config_detail::kPrefetchBucketSize;
using config_detail::Stage3Key;

// The name under which `key` is given (its canonical name when absent). Giving it under two
// names is an error, as for bf16 / bfloat16 (DeepSpeed asserts for a deprecated name given with
// its new one).
std::string stage3_name(const ObjectView& view, const Stage3Key& key) {
  const char* found = nullptr;
  for (const char* name : key.names) {
    if (view.raw(name) == nullptr) continue;
    if (found != nullptr) {
      fail(view.source(), "both '" + view.key_path(found) + "' and its alias '" +
                              view.key_path(name) + "' are given; keep one of them");
    }
    found = name;
  }
  return found != nullptr ? found : key.names.front();
}

// Stage-3 keys (DeepSpeedZeroConfig, DeepSpeed 0.16.5). Sizes are element counts, integers
// >= 0 as in DeepSpeed (ge=0). Accepted at every stage; stages 0-2 do not use them (DeepSpeed
// ignores them there too).
void parse_stage3(const ObjectView& view, ZeroOptimizationConfig& zero,
                  std::vector<std::string>& notes) {
  auto count = [&](const Stage3Key& key, int64_t fallback, const char* expected) {
    return view.get_integer(stage3_name(view, key), fallback, 0, kInt64Max, expected);
  };
  const ZeroOptimizationConfig defaults;
  zero.stage3_prefetch_bucket_size =
      count(kPrefetchBucketSize, defaults.stage3_prefetch_bucket_size,
            "an integer number of elements >= 0 (e.g. 5e7; 0 disables prefetching)");
  zero.stage3_prefetch_bucket_size_given =
      view.given(stage3_name(view, kPrefetchBucketSize)) != nullptr;
  zero.stage3_param_persistence_threshold =
      count(kParamPersistence, defaults.stage3_param_persistence_threshold,
            "an integer number of elements >= 0 (parameters with at most this many elements "
            "are not partitioned; 0: none)");
  zero.stage3_model_persistence_threshold =
      count(kModelPersistence, defaults.stage3_model_persistence_threshold,
            "an integer number of elements >= 0 (cap on all persistent parameters' elements)");
  zero.stage3_max_live_parameters =
      count(kMaxLiveParameters, defaults.stage3_max_live_parameters,
            "an integer number of elements >= 0 (e.g. 1e9; 0: no prefetch beyond the module "
            "being fetched)");
  zero.stage3_max_live_parameters_given =
      view.given(stage3_name(view, kMaxLiveParameters)) != nullptr;
  zero.stage3_max_reuse_distance =
      count(kMaxReuseDistance, defaults.stage3_max_reuse_distance,
            "an integer number of elements >= 0 (e.g. 1e9; 0: release every parameter after "
            "use)");
  zero.stage3_gather_16bit_weights_on_model_save =
      view.get_bool(stage3_name(view, kGather16bitWeights),
                    defaults.stage3_gather_16bit_weights_on_model_save);
  zero.sub_group_size = view.get_integer("sub_group_size", defaults.sub_group_size, 0, kInt64Max,
                                         "an integer number of elements >= 0 (e.g. 1e9)");
  zero.sub_group_size_given = view.given("sub_group_size") != nullptr;
  if (zero.sub_group_size == 0) {
    // DeepSpeed steps one parameter per sub-group then. zero's step tiles never change a
    // result, so the default is kept (and lowered to fit memory, as when unset).
    zero.sub_group_size = defaults.sub_group_size;
    zero.sub_group_size_given = false;
    notes.push_back("zero_optimization.sub_group_size = 0 (in DeepSpeed: a sub-group per "
                    "parameter) changes nothing in zero's results; the default 1e9 is kept, "
                    "lowered to fit memory when needed");
  }
}

// ZeRO++'s keys (Note [ZeRO++] in src/engine/stage3_engine.cpp). Stage 3 only: DeepSpeed
// ignores them at other stages, zero refuses them there (no silent downgrade). Whether
// zero_hpz_partition_size matches the ranks per node is checked against the topology when
// the engine is made.
void parse_zeropp(const ObjectView& view, ZeroOptimizationConfig& zero) {
  ZeroPlusPlusConfig& zeropp = zero.zeropp;
  zeropp.quantized_weights = view.get_bool("zero_quantized_weights", false);
  zeropp.quantized_gradients = view.get_bool("zero_quantized_gradients", false);
  zeropp.hpz_partition_size = view.get_integer(
      "zero_hpz_partition_size", 1, 1, kInt64Max,
      "an integer >= 1: 1 (off) or the number of ranks per node");
  if (zero.stage == 3) return;
  struct Part {
    const char* key;
    bool on;
    const char* off;  // the default, the only value allowed below stage 3
  };
  for (const Part& part : {Part{"zero_quantized_weights", zeropp.quantized_weights, "false"},
                           Part{"zero_hpz_partition_size", zeropp.hpz_partition_size > 1, "1"},
                           Part{"zero_quantized_gradients", zeropp.quantized_gradients, "false"}}) {
    if (!part.on) continue;
    fail(view.source(), "zero_optimization." + std::string(part.key) + " = " +
                            show(*view.given(part.key)) +
                            " needs zero_optimization.stage 3 (ZeRO++ partitions parameters), "
                            "but the stage is " + std::to_string(zero.stage) +
                            "; allowed at this stage: the default (" + part.off + ")");
  }
}

// zero_optimization.offload_optimizer / offload_param (DeepSpeed's DeepSpeedZeroOffload*Config).
// `nvme_keys` are read only with device "nvme"; with another device they must be known keys,
// as in DeepSpeed, and have no effect. Needs the stage (parse_zero).
enum class OffloadSection { kOptimizer, kParam };

void parse_offload(const ObjectView& zero_view, int stage, OffloadSection which,
                   OffloadConfig& offload) {
  const bool optimizer = which == OffloadSection::kOptimizer;
  const char* key = optimizer ? "offload_optimizer" : "offload_param";
  const Json* given = zero_view.given(key);
  if (given == nullptr || given->is_null()) return;
  ObjectView section(*given, zero_view.key_path(key), zero_view.source());
  std::vector<std::string> known = {"device", "pin_memory", "nvme_path", "buffer_count"};
  const std::vector<std::string> extra =
      optimizer ? std::vector<std::string>{"pipeline", "pipeline_read", "pipeline_write",
                                           "fast_init", "ratio"}
                : std::vector<std::string>{"buffer_size", "max_in_cpu"};
  known.insert(known.end(), extra.begin(), extra.end());
  section.check_keys(known);
  const char* devices = "\"none\", \"cpu\" or \"nvme\"";
  const std::optional<std::string> device = section.get_optional_string("device", devices);
  offload.pin_memory = section.get_bool("pin_memory", OffloadConfig{}.pin_memory);
  if (const Json* ratio = section.given("ratio")) {
    if (!ratio->is_number() || ratio->get<double>() != 1.0) {
      section.not_supported("ratio", *ratio, "only 1.0 (offload all of it) is accepted");
    }
  }
  const std::string name = device ? lower_ascii(*device) : "none";
  if (name == "none") return;
  if (name != "cpu" && name != "nvme") section.invalid("device", *section.raw("device"), devices);
  const int min_stage = optimizer ? 1 : 3;
  if (stage < min_stage) {
    fail(zero_view.source(),
         section.key_path("device") + " = \"" + name + "\" needs zero_optimization.stage " +
             std::to_string(min_stage) + " or higher (got " + std::to_string(stage) + "): " +
             (optimizer ? "the optimizer state is offloaded a rank's partition at a time "
                          "(DeepSpeed: ZeRO-Offload runs at stages 1-3)"
                        : "only stage 3 partitions the parameters"));
  }
  if (name == "cpu") {
    offload.device = OffloadDevice::kCpu;
    return;
  }
  offload.device = OffloadDevice::kNvme;
  const Json* path = section.given("nvme_path");
  if (path == nullptr || path->is_null() || !path->is_string() ||
      path->get<std::string>().empty()) {
    section.invalid("nvme_path", path == nullptr ? Json(nullptr) : *path,
                    "a directory for the swap files (required with device \"nvme\")");
  }
  offload.nvme_path = path->get<std::string>();
  const OffloadConfig defaults = optimizer ? ZeroOptimizationConfig{}.offload_optimizer
                                           : ZeroOptimizationConfig{}.offload_param;
  // A pass over offloaded parameters reads one unit's shard while it writes the one before
  // (Note [Parameter offload]): two buffers at least.
  const int64_t min_buffers = optimizer ? 1 : 2;
  const std::string buffers_allowed =
      "an integer number of staging buffers in [" + std::to_string(min_buffers) + ", 1024]";
  offload.buffer_count = section.get_integer("buffer_count", defaults.buffer_count, min_buffers,
                                             1024, buffers_allowed.c_str());
  offload.buffer_count_given = section.given("buffer_count") != nullptr;
  if (optimizer) {
    // DeepSpeed's "pipeline" sets both directions; the specific keys win when given.
    const bool both = section.get_bool("pipeline", defaults.pipeline_read);
    offload.pipeline_read = section.get_bool("pipeline_read", both);
    offload.pipeline_write = section.get_bool("pipeline_write", both);
  } else {
    offload.buffer_size = section.get_integer("buffer_size", defaults.buffer_size, 1, kInt64Max,
                                              "an integer number of elements >= 1 (e.g. 1e8)");
    offload.max_in_cpu = section.get_integer("max_in_cpu", defaults.max_in_cpu, 0, kInt64Max,
                                             "an integer number of elements >= 0 (e.g. 1e8)");
  }
}

// The top-level `aio` section (DeepSpeed's swap_tensor/aio_config.py): read whatever the
// offload devices, as DeepSpeed does; it matters only with device "nvme".
void parse_aio(const ObjectView& top, Config& config) {
  const Json* given = top.given("aio");
  if (given == nullptr || given->is_null()) return;
  if (!given->is_object()) top.invalid("aio", *given, "an object");
  ObjectView aio(*given, "aio", top.source());
  aio.check_keys(config_detail::aio_keys());
  const AioConfig defaults;
  AioConfig& out = config.aio;
  // O_DIRECT transfers must be multiples of the device's logical block (at most 4 KiB).
  out.block_size = aio.get_integer("block_size", defaults.block_size, 4096, int64_t{1} << 30,
                                   "an integer number of bytes in [4096, 2^30], a multiple of "
                                   "4096");
  if (out.block_size % 4096 != 0) {
    aio.invalid("block_size", *aio.raw("block_size"),
                "an integer number of bytes in [4096, 2^30], a multiple of 4096");
  }
  out.queue_depth = aio.get_integer("queue_depth", defaults.queue_depth, 1, 4096,
                                    "an integer in [1, 4096] (requests in flight per thread)");
  const int64_t threads =
      aio.get_integer("thread_count", 1, 1, 1, "1 (DeepSpeed's own default; use "
                                                 "intra_op_parallelism for more I/O threads)");
  (void)threads;
  out.intra_op_parallelism =
      aio.get_integer("intra_op_parallelism", defaults.intra_op_parallelism, 1, 64,
                      "an integer number of I/O threads in [1, 64]");
  out.single_submit = aio.get_bool("single_submit", defaults.single_submit);
  out.overlap_events = aio.get_bool("overlap_events", defaults.overlap_events);
  if (aio.get_bool("use_gds", false)) {
    aio.not_supported("use_gds", true, "only false: GPUDirect Storage needs CUDA ranks");
  }
}

// The top-level `activation_checkpointing` section: the keys with a meaning in pure data
// parallelism; those of model-parallel activation partitioning only at their defaults.
void parse_activation_checkpointing(const ObjectView& top, Config& config) {
  const Json* given = top.given("activation_checkpointing");
  if (given == nullptr || given->is_null()) return;
  if (!given->is_object()) top.invalid("activation_checkpointing", *given, "an object");
  ObjectView section(*given, "activation_checkpointing", top.source());
  section.check_keys(config_detail::activation_checkpointing_keys());
  ActivationCheckpointingConfig& out = config.activation_checkpointing;
  out.enabled = true;
  const Json* number = section.given("number_checkpoints");
  if (number != nullptr && !number->is_null()) {
    out.number_checkpoints = section.get_integer(
        "number_checkpoints", 0, 0, kInt64Max,
        "an integer >= 0 (how many pieces of the model are checkpointed), or null for all");
  }
  out.cpu_checkpointing = section.get_bool("cpu_checkpointing", false);
  out.profile = section.get_bool("profile", false);
  // Keys of DeepSpeed's model-parallel activation checkpointing: without model parallelism
  // (zero has none; DeepSpeed with one model-parallel rank alike) they change nothing.
  struct NoEffect {
    const char* key;
    const char* why;
  };
  for (const NoEffect& option :
       {NoEffect{"partition_activations",
                 "it partitions checkpointed activations across model-parallel ranks, and zero "
                 "has no model parallelism"},
        NoEffect{"contiguous_memory_optimization",
                 "it packs the model-parallel partitions of partition_activations into one "
                 "buffer, and zero has no model parallelism"},
        NoEffect{"synchronize_checkpoint_boundary",
                 "it synchronizes the CUDA device around DeepSpeed's model-parallel "
                 "checkpointed calls; use profile for timings"}}) {
    if (section.get_bool(option.key, false)) {
      config.notes.push_back(section.key_path(option.key) + " = true changes nothing in zero: " +
                             option.why);
    }
  }
}

// DeepSpeed's deprecated spellings (zero/config.py): cpu_offload -> offload_optimizer.device
// "cpu", cpu_offload_param -> offload_param.device "cpu", cpu_offload_use_pin_memory -> their
// pin_memory. Mapped with a note; giving a key under both spellings is an error, as in
// DeepSpeed.
void parse_cpu_offload(const ObjectView& view, ZeroOptimizationConfig& zero,
                       std::vector<std::string>& notes) {
  struct Old {
    const char* key;
    const char* section;
    OffloadConfig* offload;
    int min_stage;
  };
  bool any = false;
  for (const Old& old : {Old{"cpu_offload", "offload_optimizer", &zero.offload_optimizer, 1},
                         Old{"cpu_offload_param", "offload_param", &zero.offload_param, 3}}) {
    const std::optional<bool> on = view.get_optional_bool(old.key);
    if (!on || !*on) continue;
    any = true;
    if (view.given(old.section) != nullptr && !view.given(old.section)->is_null()) {
      fail(view.source(), "both '" + view.key_path(old.key) + "' (DeepSpeed's deprecated " +
                              "spelling) and '" + view.key_path(old.section) +
                              "' are given; keep " + old.section);
    }
    if (zero.stage < old.min_stage) {
      fail(view.source(), view.key_path(old.key) + " = true needs zero_optimization.stage " +
                              std::to_string(old.min_stage) + " or higher (got " +
                              std::to_string(zero.stage) + ")");
    }
    old.offload->device = OffloadDevice::kCpu;
    notes.push_back(view.key_path(old.key) + " = true is DeepSpeed's deprecated spelling of " +
                    view.key_path(old.section) + ".device \"cpu\": taken as that");
  }
  const std::optional<bool> pin = view.get_optional_bool("cpu_offload_use_pin_memory");
  if (pin && *pin) {
    if (!any) {
      fail(view.source(), view.key_path("cpu_offload_use_pin_memory") +
                              " = true needs cpu_offload or cpu_offload_param true (it is their "
                              "pin_memory)");
    }
    for (OffloadConfig* offload : {&zero.offload_optimizer, &zero.offload_param}) {
      if (offload->device == OffloadDevice::kCpu) offload->pin_memory = true;
    }
  }
}

void parse_zero(const ObjectView& top, Config& config) {
  const std::string& source = top.source();
  ZeroOptimizationConfig& zero = config.zero_optimization;
  const Json* section = top.given("zero_optimization");
  const Json* allgather_size = top.given("allgather_size");

  if (section != nullptr && section->is_boolean()) {
    // DeepSpeed's deprecated form: true = stage 1 with the top-level allgather_size.
    zero.stage = section->get<bool>() ? 1 : 0;
    if (allgather_size != nullptr && zero.stage == 0) {
      fail(source, "allgather_size = " + show(*allgather_size) +
                       " has no effect with \"zero_optimization\": false; remove it");
    }
    zero.allgather_bucket_size = top.get_integer("allgather_size",
                                                 ZeroOptimizationConfig{}.allgather_bucket_size, 1,
                                                 kInt64Max, "an integer number of elements > 0");
    return;
  }
  if (allgather_size != nullptr) {
    fail(source, "allgather_size = " + show(*allgather_size) +
                     " is read only with the legacy form \"zero_optimization\": true; use "
                     "zero_optimization.allgather_bucket_size");
  }
  if (section == nullptr) return;
  if (!section->is_object()) {
    top.invalid("zero_optimization", *section,
                "an object (or the legacy form true / false)");
  }
  ObjectView view(*section, "zero_optimization", source);
  view.check_keys(all_keys(config_detail::zero_implemented_keys(),
                           config_detail::zero_default_only()));

  const char* stage_expected = "an integer ZeRO stage; allowed: 0, 1, 2, 3";
  const int64_t stage = view.get_integer("stage", 0, std::numeric_limits<int64_t>::min(),
                                         kInt64Max, stage_expected);
  if (stage < 0 || stage > 3) view.invalid("stage", *view.raw("stage"), stage_expected);
  zero.stage = static_cast<int>(stage);
  const char* bucket = "an integer number of elements > 0 (e.g. 5e8)";
  const ZeroOptimizationConfig defaults;
  // 0 is DeepSpeed's "each gradient alone" (its buckets flush before every gradient): 1 here.
  zero.reduce_bucket_size = view.get_integer("reduce_bucket_size", defaults.reduce_bucket_size, 0,
                                             kInt64Max, "an integer number of elements >= 0 (e.g. 5e8)");
  const bool reduce_bucket_zero = zero.reduce_bucket_size == 0;
  if (reduce_bucket_zero) zero.reduce_bucket_size = 1;
  zero.reduce_bucket_size_given = view.given("reduce_bucket_size") != nullptr;
  zero.allgather_bucket_size = view.get_integer("allgather_bucket_size",
                                                defaults.allgather_bucket_size, 1, kInt64Max, bucket);
  // DeepSpeed's default is None: true for stage 3, false for stages 0-2 (overlap_comm_enabled).
  zero.overlap_comm = view.get_optional_bool("overlap_comm");
  zero.contiguous_gradients = view.get_bool("contiguous_gradients", defaults.contiguous_gradients);
  zero.reduce_scatter = view.get_bool("reduce_scatter", defaults.reduce_scatter);
  zero.allgather_partitions = view.get_bool("allgather_partitions", defaults.allgather_partitions);
  if (!zero.allgather_partitions) {
    view.not_supported("allgather_partitions", false,
                       "only true (all-gather) is accepted; the broadcast variant is not "
                       "implemented");
  }
  parse_stage3(view, zero, config.notes);
  parse_zeropp(view, zero);
  parse_offload(view, zero.stage, OffloadSection::kOptimizer, zero.offload_optimizer);
  parse_offload(view, zero.stage, OffloadSection::kParam, zero.offload_param);
  parse_cpu_offload(view, zero, config.notes);
  for (const DefaultOnlyKey& spec : config_detail::zero_default_only()) {
    check_default_only(view, spec, config.notes);
  }
  if (zero.stage == 3) {
    // Options of DeepSpeed's stage-3 gradient path that change nothing in zero's (each unit's
    // gradients are copied into one buffer and reduce-scattered together).
    if (!zero.contiguous_gradients) {
      config.notes.push_back(
          "zero_optimization.contiguous_gradients = false changes nothing at stage 3 in zero: "
          "each unit's gradients are always copied into one buffer and reduce-scattered "
          "together (DeepSpeed's false only skips a copy)");
      zero.contiguous_gradients = true;
    }
    if (!zero.reduce_scatter) {
      config.notes.push_back(
          "zero_optimization.reduce_scatter = false changes nothing at stage 3: gradients are "
          "always reduce-scattered there (as in DeepSpeed)");
      zero.reduce_scatter = true;
    }
  }
  if (reduce_bucket_zero) {
    config.notes.push_back(
        zero.stage == 3 ? "zero_optimization.reduce_bucket_size = 0 changes nothing at stage 3: "
                          "gradients are reduced a unit at a time"
                        : "zero_optimization.reduce_bucket_size = 0: each gradient is reduced on "
                          "its own (as in DeepSpeed)");
  }
}

// prescale_gradients / gradient_predivide_factor, where DeepSpeed honours them (engine.py
// allreduce_bucket at stage 0, stage_1_and_2.py without reduce_scatter, stage3.py): Note
// [Gradient scaling] in src/engine/engine_core.cpp. Needs the stage (parse_zero).
void parse_gradient_scaling(const ObjectView& top, Config& config) {
  config.prescale_gradients = top.get_bool("prescale_gradients", false);
  config.gradient_predivide_factor =
      top.get_number("gradient_predivide_factor", 1.0, positive, "a number > 0");
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  const bool predivide = config.gradient_predivide_factor != 1.0;
  if ((zero.stage == 1 || zero.stage == 2) && zero.reduce_scatter &&
      (config.prescale_gradients || predivide)) {
    const std::string key = config.prescale_gradients ? "prescale_gradients" : "gradient_predivide_factor";
    fail(top.source(), key + " = " + show(*top.raw(key)) + " at zero_optimization.stage " +
                           std::to_string(zero.stage) + " with reduce_scatter true (its default) " +
                           "is refused, as DeepSpeed's stage 1-2 optimizer asserts it: that "
                           "path divides after reducing. Set zero_optimization.reduce_scatter "
                           "false (all-reduce) to honour it, or remove it");
  }
  if (config.prescale_gradients && predivide) {
    config.notes.push_back("gradient_predivide_factor = " + show(*top.raw("gradient_predivide_factor")) +
                           " has no effect with prescale_gradients true: gradients are divided "
                           "by the world size before they are reduced (as in DeepSpeed)");
  }
}

// data_types.grad_accum_dtype (DeepSpeed's DtypeEnum names). "fp32" accumulates in fp32 at every
// stage (kept_gradient_dtype); the dtype zero accumulates in anyway is accepted; any other is
// refused naming what zero keeps. Needs the batch, precision and stage.
void parse_data_types(const ObjectView& top, Config& config) {
  const Json* given = top.given("data_types");
  if (given == nullptr || given->is_null()) return;
  ObjectView section(*given, "data_types", top.source());
  section.check_keys({"grad_accum_dtype"});
  const char* expected = "\"fp32\", \"fp16\", \"bf16\" (or DeepSpeed's other names of them), or null";
  const std::optional<std::string> name = section.get_optional_string("grad_accum_dtype", expected);
  if (!name) return;
  const std::string value = lower_ascii(*name);
  c10::ScalarType dtype = c10::ScalarType::Float;
  if (value == "fp32" || value == "float32" || value == "float") {
    dtype = c10::ScalarType::Float;
  } else if (value == "fp16" || value == "float16" || value == "half") {
    dtype = c10::ScalarType::Half;
  } else if (value == "bf16" || value == "bfloat16") {
    dtype = c10::ScalarType::BFloat16;
  } else {
    section.invalid("grad_accum_dtype", *section.raw("grad_accum_dtype"), expected);
  }
  const c10::ScalarType kept = kept_gradient_dtype(config);
  if (dtype != c10::ScalarType::Float && dtype != kept) {
    fail(top.source(), "data_types.grad_accum_dtype = " + show(*section.raw("grad_accum_dtype")) +
                           " is not supported with " + dtype_name(config.param_dtype) +
                           " parameters at zero_optimization.stage " +
                           std::to_string(config.zero_optimization.stage) +
                           ": zero accumulates gradients in " + dtype_name(kept) +
                           " there; allowed: \"fp32\", \"" + dtype_name(kept) + "\" or null");
  }
  config.grad_accum_dtype = dtype;
}

// ---- scheduler ----------------------------------------------------------------------------

const char* scheduler_type_name(SchedulerType type) {
  switch (type) {
    case SchedulerType::kWarmupLR: return "WarmupLR";
    case SchedulerType::kWarmupDecayLR: return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR: return "WarmupCosineLR";
  }
  ZERO_INTERNAL_ASSERT(false, "unexpected scheduler type ", static_cast<int>(type));
  return "";
}

const std::vector<std::string>& scheduler_params_keys(SchedulerType type) {
  switch (type) {
    case SchedulerType::kWarmupLR: return config_detail::warmup_lr_params_keys();
    case SchedulerType::kWarmupDecayLR: return config_detail::warmup_decay_lr_params_keys();
    case SchedulerType::kWarmupCosineLR: return config_detail::warmup_cosine_lr_params_keys();
  }
  ZERO_INTERNAL_ASSERT(false, "unexpected scheduler type ", static_cast<int>(type));
  return config_detail::warmup_lr_params_keys();
}

// scheduler.type. DeepSpeed looks the name up with getattr (case-sensitive) in its
// lr_schedules module, then in torch.optim.lr_scheduler.
SchedulerType parse_scheduler_type(const ObjectView& scheduler) {
  const char* allowed = "WarmupLR, WarmupDecayLR, WarmupCosineLR (case-sensitive, as in DeepSpeed)";
  const Json* type_json = scheduler.given("type");
  if (type_json == nullptr || type_json->is_null()) {
    std::string message = "scheduler.type is required in a non-empty 'scheduler' section; allowed: ";
    message += allowed;
    message += " (a null or empty 'scheduler' means no schedule)";
    if (const Json* raw = scheduler.raw("type")) message += " (got " + show(*raw) + ")";
    fail(scheduler.source(), message);
  }
  if (!type_json->is_string()) scheduler.invalid("type", *type_json, std::string("a string: ") + allowed);
  const std::string type = type_json->get<std::string>();
  if (type == "WarmupLR") return SchedulerType::kWarmupLR;
  if (type == "WarmupDecayLR") return SchedulerType::kWarmupDecayLR;
  if (type == "WarmupCosineLR") return SchedulerType::kWarmupCosineLR;
  const std::string supported = std::string("supported types: ") + allowed;
  if (type == "OneCycle" || type == "LRRangeTest") {
    scheduler.not_supported("type", *type_json, supported);
  }
  // torch.optim.lr_scheduler classes, which DeepSpeed also accepts by name.
  static const std::vector<std::string> kTorch = {
      "LambdaLR",       "MultiplicativeLR", "StepLR",         "MultiStepLR",
      "ConstantLR",     "LinearLR",         "ExponentialLR",  "SequentialLR",
      "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
      "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "LRScheduler"};
  if (std::find(kTorch.begin(), kTorch.end(), type) != kTorch.end()) {
    scheduler.not_supported("type", *type_json,
                            supported + "; torch.optim.lr_scheduler classes are not implemented");
  }
  static const std::vector<std::string> kKnown = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                                  "OneCycle", "LRRangeTest"};
  std::string expected = std::string("one of ") + allowed;
  const std::string suggestion = closest_match(type, kKnown);
  if (!suggestion.empty()) expected += "; did you mean '" + suggestion + "'?";
  scheduler.invalid("type", *type_json, expected);
}

void parse_scheduler(const ObjectView& top, Config& config) {
  const std::string& source = top.source();
  const Json* section = top.given("scheduler");
  if (section == nullptr || section->is_null()) return;
  ObjectView scheduler(*section, "scheduler", source);  // throws unless an object
  if (section->empty()) return;  // DeepSpeed: no "type" means no scheduler
  scheduler.check_keys(config_detail::scheduler_keys());
  SchedulerConfig result;
  result.type = parse_scheduler_type(scheduler);
  const char* type_name = scheduler_type_name(result.type);

  const Json empty = Json::object();
  const Json* params_json = scheduler.given("params");
  if (params_json == nullptr) params_json = &empty;
  ObjectView params(*params_json, "scheduler.params", source);
  // A parameter of another schedule type: DeepSpeed's constructor raises a TypeError.
  const std::vector<std::string>& known = scheduler_params_keys(result.type);
  for (const auto& item : params_json->items()) {
    if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
    for (SchedulerType other : {SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR,
                                SchedulerType::kWarmupCosineLR}) {
      const std::vector<std::string>& keys = scheduler_params_keys(other);
      if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) continue;
      std::string message = "scheduler.params." + item.key() + " is not a parameter of " +
                            type_name + " (it is one of " + scheduler_type_name(other) +
                            "); " + type_name + " takes:";
      for (size_t i = 0; i < known.size(); ++i) message += (i ? ", " : " ") + known[i];
      fail(source, message);
    }
  }
  params.check_keys(known);

  static const DefaultOnlyKey kLastBatchIteration = {
      "last_batch_iteration", DefaultOnlyKey::Kind::kValue, "-1", nullptr,
      "resuming a schedule is done by the engine, not by this key"};
  check_default_only(params, kLastBatchIteration, config.notes);

  const SchedulerConfig defaults;
  result.warmup_num_steps = params.get_integer("warmup_num_steps", defaults.warmup_num_steps, 1, kInt64Max,
                                               "an integer >= 1 (DeepSpeed uses at least 2)");
  if (const auto warmup_type =
          params.get_choice("warmup_type", {"log", "linear"}, "\"log\" or \"linear\"")) {
    result.warmup_type = *warmup_type == 0 ? WarmupType::kLog : WarmupType::kLinear;
  } else if (const Json* raw = params.raw("warmup_type"); raw != nullptr && raw->is_null()) {
    params.invalid("warmup_type", *raw, "\"log\" or \"linear\"");
  }

  if (result.type == SchedulerType::kWarmupCosineLR) {
    result.warmup_min_ratio = params.get_number("warmup_min_ratio", defaults.warmup_min_ratio,
                                                unit_range, "a number in [0, 1]");
    result.cos_min_ratio = params.get_number("cos_min_ratio", defaults.cos_min_ratio, unit_range,
                                             "a number in [0, 1]");
  } else {
    result.warmup_min_lr =
        params.get_number("warmup_min_lr", defaults.warmup_min_lr, non_negative, "a number >= 0");
    result.warmup_max_lr =
        params.get_number("warmup_max_lr", defaults.warmup_max_lr, non_negative, "a number >= 0");
  }

  if (result.type != SchedulerType::kWarmupLR) {
    if (params.given("total_num_steps") == nullptr) {
      std::string message = "scheduler.params.total_num_steps is required for " +
                            std::string(type_name) + "; give an integer number of optimizer steps";
      if (const Json* raw = params.raw("total_num_steps")) message += " (got " + show(*raw) + ")";
      fail(source, message);
    }
    result.total_num_steps =
        params.get_integer("total_num_steps", 0, 1, kInt64Max, "an integer >= 1");
    const int64_t warmup = result.effective_warmup_steps();
    const bool cosine = result.type == SchedulerType::kWarmupCosineLR;
    // WarmupCosineLR divides by total - warmup (DeepSpeed 0.16.5 raises ZeroDivisionError at
    // equality and runs the cosine backwards below it); WarmupDecayLR only warns when
    // total < warmup, and its LR would then drop to 0 as soon as warmup ends.
    if (cosine ? result.total_num_steps <= warmup : result.total_num_steps < warmup) {
      std::string warmup_text = std::to_string(warmup);
      if (warmup != result.warmup_num_steps) {
        warmup_text += " (warmup_num_steps " + std::to_string(result.warmup_num_steps) +
                       " raised to DeepSpeed's minimum of 2)";
      }
      fail(source, "scheduler.params.total_num_steps = " +
                       show(*params.raw("total_num_steps")) + " is invalid for " + type_name +
                       "; expected an integer " + (cosine ? ">" : ">=") +
                       " the warmup length " + warmup_text);
    }
  }
  config.scheduler = result;
}

// ---- logging and monitoring -----------------------------------------------------------------

// csv_monitor and tensorboard: DeepSpeed's monitor sections, the same three keys.
template <typename Monitor>
void parse_monitor_section(const ObjectView& top, const char* key, Monitor& monitor) {
  const Json* section = top.given(key);
  if (section == nullptr || section->is_null()) return;
  ObjectView view(*section, key, top.source());
  view.check_keys(config_detail::csv_monitor_keys());
  monitor.enabled = view.get_bool("enabled", false);
  auto read_string = [&](const char* name, std::string& out) {
    const Json* value = view.given(name);
    if (value == nullptr) return;
    if (!value->is_string()) view.invalid(name, *value, "a string");
    out = value->get<std::string>();
  };
  read_string("output_path", monitor.output_path);
  read_string("job_name", monitor.job_name);
}

void parse_training_extras(const ObjectView& top, Config& config) {
  const char* print_expected = "an integer >= 1, or null (no progress lines)";
  config.steps_per_print = top.get_optional_integer("steps_per_print", print_expected);
  if (config.steps_per_print && *config.steps_per_print < 1) {
    top.invalid("steps_per_print", *top.raw("steps_per_print"), print_expected);
  }
  const Config defaults;
  config.wall_clock_breakdown = top.get_bool("wall_clock_breakdown", defaults.wall_clock_breakdown);
  config.seed = static_cast<uint64_t>(
      top.get_integer("seed", static_cast<int64_t>(defaults.seed), 0, kInt64Max,
                      "an integer in [0, 9223372036854775807] (a zero extension)"));

  parse_monitor_section(top, "csv_monitor", config.csv_monitor);
  parse_monitor_section(top, "tensorboard", config.tensorboard);
}

// ---- effective configuration --------------------------------------------------------------

// Canonical JSON: every implemented key with its effective value. It is itself a valid config
// that parses (at the same world size) to the same Config.
std::string effective_json(const Config& config) {
  Json root = Json::object();
  root["train_batch_size"] = config.train_batch_size;
  root["train_micro_batch_size_per_gpu"] = config.train_micro_batch_size_per_gpu;
  root["gradient_accumulation_steps"] = config.gradient_accumulation_steps;
  root["gradient_clipping"] = config.gradient_clipping;

  const OptimizerConfig& opt = config.optimizer;
  Json params = Json::object();
  params["lr"] = opt.lr;
  params["weight_decay"] = opt.weight_decay;
  std::string type;
  switch (opt.type) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam:
      type = opt.type == OptimizerType::kAdamW ? "AdamW" : "Adam";
      params["betas"] = Json::array({opt.beta1, opt.beta2});
      params["eps"] = opt.eps;
      params["bias_correction"] = opt.bias_correction;
      params["adam_w_mode"] = opt.type == OptimizerType::kAdamW;
      break;
    case OptimizerType::kSGD:
      type = "SGD";
      params["momentum"] = opt.momentum;
      params["dampening"] = opt.dampening;
      params["nesterov"] = opt.nesterov;
      break;
    case OptimizerType::kAdagrad:
      type = "Adagrad";
      params["eps"] = opt.eps;
      params["lr_decay"] = opt.lr_decay;
      params["initial_accumulator_value"] = opt.initial_accumulator_value;
      break;
    case OptimizerType::kLion:
      type = "Lion";
      params["betas"] = Json::array({opt.beta1, opt.beta2});
      break;
    case OptimizerType::kLamb:
      type = "Lamb";
      params["betas"] = Json::array({opt.beta1, opt.beta2});
      params["eps"] = opt.eps;
      params["bias_correction"] = opt.bias_correction;
      params["eps_inside_sqrt"] = opt.eps_inside_sqrt;
      params["max_coeff"] = opt.max_coeff;
      params["min_coeff"] = opt.min_coeff;
      break;
    case OptimizerType::kMuon:
      type = "Muon";
      params.erase("lr");
      params["adam_lr"] = opt.lr;
      params["muon_lr"] = opt.muon_lr;
      params["momentum"] = opt.momentum;
      params["betas"] = Json::array({opt.beta1, opt.beta2});
      params["eps"] = opt.eps;
      params["adam_w_mode"] = opt.aux_adam_w_mode;
      params["ns_method"] = opt.ns_method == MuonNsMethod::kGram ? "gram" : "standard";
      params["ns_dtype"] = opt.ns_dtype == c10::ScalarType::BFloat16 ? "bf16" : "fp32";
      break;
  }
  root["optimizer"] = {{"type", type}, {"params", params}};

  const LossScaleConfig& scale = config.loss_scale;
  Json fp16 = Json::object();
  fp16["enabled"] = config.param_dtype == c10::ScalarType::Half;
  fp16["loss_scale"] = scale.dynamic ? 0.0 : scale.static_scale;
  fp16["initial_scale_power"] = scale.initial_scale_power;
  fp16["loss_scale_window"] = scale.scale_window;
  fp16["hysteresis"] = scale.hysteresis;
  fp16["consecutive_hysteresis"] = scale.consecutive_hysteresis;
  fp16["min_loss_scale"] = scale.min_loss_scale;
  fp16["auto_cast"] = false;
  fp16["fp16_master_weights_and_grads"] = false;
  root["fp16"] = fp16;
  root["bf16"] = {{"enabled", config.param_dtype == c10::ScalarType::BFloat16},
                  {"immediate_grad_update", false}};
  root["communication_data_type"] = dtype_name(config.communication_dtype);
  // Resolved: "auto" is recorded as what it chose on this machine (the start-up agreement
  // between ranks compares it).
  root["compute_data_type"] = dtype_name(config.compute_dtype);

  const ZeroOptimizationConfig& zero = config.zero_optimization;
  root["zero_optimization"] = {{"stage", zero.stage},
                               {"reduce_bucket_size", zero.reduce_bucket_size},
                               {"allgather_bucket_size", zero.allgather_bucket_size},
                               {"overlap_comm", zero.overlap_comm_enabled()},
                               {"contiguous_gradients", zero.contiguous_gradients},
                               {"reduce_scatter", zero.reduce_scatter},
                               {"allgather_partitions", zero.allgather_partitions},
                               {"stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size},
                               {"stage3_param_persistence_threshold",
                                zero.stage3_param_persistence_threshold},
                               {"stage3_model_persistence_threshold",
                                zero.stage3_model_persistence_threshold},
                               {"stage3_max_live_parameters", zero.stage3_max_live_parameters},
                               {"stage3_max_reuse_distance", zero.stage3_max_reuse_distance},
                               {"stage3_gather_16bit_weights_on_model_save",
                                zero.stage3_gather_16bit_weights_on_model_save},
                               {"sub_group_size", zero.sub_group_size},
                               {"zero_quantized_weights", zero.zeropp.quantized_weights},
                               {"zero_hpz_partition_size", zero.zeropp.hpz_partition_size},
                               {"zero_quantized_gradients", zero.zeropp.quantized_gradients}};
  auto offload_json = [](const OffloadConfig& offload, bool optimizer) {
    const char* device = offload.device == OffloadDevice::kNvme  ? "nvme"
                         : offload.device == OffloadDevice::kCpu ? "cpu"
                                                                 : "none";
    Json section{{"device", device}, {"pin_memory", offload.pin_memory}};
    if (offload.device != OffloadDevice::kNvme) return section;
    section["nvme_path"] = offload.nvme_path;
    section["buffer_count"] = offload.buffer_count;
    if (optimizer) {
      section["pipeline_read"] = offload.pipeline_read;
      section["pipeline_write"] = offload.pipeline_write;
    } else {
      section["buffer_size"] = offload.buffer_size;
      section["max_in_cpu"] = offload.max_in_cpu;
    }
    return section;
  };
  root["zero_optimization"]["offload_optimizer"] = offload_json(zero.offload_optimizer, true);
  root["zero_optimization"]["offload_param"] = offload_json(zero.offload_param, false);
  root["aio"] = {{"block_size", config.aio.block_size},
                 {"queue_depth", config.aio.queue_depth},
                 {"intra_op_parallelism", config.aio.intra_op_parallelism},
                 {"single_submit", config.aio.single_submit},
                 {"overlap_events", config.aio.overlap_events}};
  if (config.activation_checkpointing.enabled) {
    const ActivationCheckpointingConfig& ac = config.activation_checkpointing;
    root["activation_checkpointing"] = {
        {"number_checkpoints", ac.number_checkpoints ? Json(*ac.number_checkpoints) : Json()},
        {"cpu_checkpointing", ac.cpu_checkpointing},
        {"profile", ac.profile}};
  }

  if (config.scheduler) {
    const SchedulerConfig& sched = *config.scheduler;
    Json params = Json::object();
    params["warmup_num_steps"] = sched.warmup_num_steps;
    params["warmup_type"] = sched.warmup_type == WarmupType::kLog ? "log" : "linear";
    if (sched.type == SchedulerType::kWarmupCosineLR) {
      params["warmup_min_ratio"] = sched.warmup_min_ratio;
      params["cos_min_ratio"] = sched.cos_min_ratio;
    } else {
      params["warmup_min_lr"] = sched.warmup_min_lr;
      params["warmup_max_lr"] = sched.warmup_max_lr;
    }
    if (sched.type != SchedulerType::kWarmupLR) params["total_num_steps"] = sched.total_num_steps;
    root["scheduler"] = {{"type", scheduler_type_name(sched.type)}, {"params", params}};
  } else {
    root["scheduler"] = nullptr;
  }
  root["steps_per_print"] =
      config.steps_per_print ? Json(*config.steps_per_print) : Json(nullptr);
  root["prescale_gradients"] = config.prescale_gradients;
  root["gradient_predivide_factor"] = config.gradient_predivide_factor;
  root["data_types"] = {{"grad_accum_dtype", config.grad_accum_dtype
                                                 ? Json(dtype_name(*config.grad_accum_dtype))
                                                 : Json(nullptr)}};
  root["wall_clock_breakdown"] = config.wall_clock_breakdown;
  root["seed"] = config.seed;
  root["csv_monitor"] = {{"enabled", config.csv_monitor.enabled},
                         {"output_path", config.csv_monitor.output_path},
                         {"job_name", config.csv_monitor.job_name}};
  root["tensorboard"] = {{"enabled", config.tensorboard.enabled},
                         {"output_path", config.tensorboard.output_path},
                         {"job_name", config.tensorboard.job_name}};
  return root.dump();
}

}  // namespace

namespace {

// The parse proper, of a config whose "auto" values a trainer may have filled (parse_text).
Config parse_root(const Json& root, int world_size, const std::string& source,
                  const TrainerValues* trainer) {
  const ObjectView top(root, "", source);
  Config config;
  top.check_keys_ignoring_extras(all_keys(config_detail::top_level_implemented_keys(),
                                          config_detail::top_level_default_only()),
                                 config.notes);
  config.source = source;
  config.world_size = world_size;
  parse_batch(top, world_size, config);
  config.gradient_clipping = top.get_number("gradient_clipping", 0.0, non_negative,
                                            "a number >= 0 (0 disables clipping)");
  parse_optimizer(top, config);
  const bool communication_given = parse_precision(top, config);
  parse_zero(top, config);
  parse_compute_dtype(top, config, communication_given, trainer);
  parse_gradient_scaling(top, config);
  parse_data_types(top, config);
  parse_scheduler(top, config);
  parse_training_extras(top, config);
  parse_aio(top, config);
  parse_activation_checkpointing(top, config);
  for (const DefaultOnlyKey& spec : config_detail::top_level_default_only()) {
    check_default_only(top, spec, config.notes);
  }
  config.effective_json = effective_json(config);
  return config;
}

// Note [Values left to the trainer] in trainer_fill.cpp: what "auto" (and, with a trainer, a
// missing optimizer section) becomes, recorded in Config::filled.
Config parse_text(const std::string& json_text, int world_size, const std::string& source,
                  const TrainerValues* trainer) {
  ZERO_CHECK(world_size >= 1, source, ": world_size must be >= 1 (got ", world_size, ")");
  Json root = config_detail::parse_json_text(json_text, source);
  (void)ObjectView(root, "", source);  // a JSON object, or the error that says it is not
  const std::vector<std::string> autos = config_detail::auto_paths(root);
  std::vector<FilledValue> filled;
  if (trainer != nullptr) {
    filled = config_detail::fill_from_trainer(root, *trainer, world_size, source);
  }
  Config config = parse_root(root, world_size, source, trainer);
  if (trainer != nullptr) {
    config_detail::check_trainer_batch(config, *trainer);
    // Sizes the trainer made from the model's width are not the user's: Note [Fitting the
    // defaults] may lower them to fit memory, as DeepSpeed's defaults.
    ZeroOptimizationConfig& zero = config.zero_optimization;
    for (const FilledValue& value : filled) {
      if (value.key == "zero_optimization.reduce_bucket_size") zero.reduce_bucket_size_given = false;
      if (value.key == "zero_optimization.stage3_prefetch_bucket_size" ||
          value.key == "zero_optimization.prefetch_bucket_size") {
        zero.stage3_prefetch_bucket_size_given = false;
      }
    }
    if (!config.scheduler) {
      char lr[32];
      std::snprintf(lr, sizeof(lr), "%g", config.optimizer.lr);
      config.notes.push_back(std::string("no scheduler section: the learning rate stays ") + lr +
                             " (DeepSpeed's meaning; the Hugging Face Trainer would add its own "
                             "linear decay: add a WarmupDecayLR section for one)");
    }
  }
  config_detail::record_left_open(autos, config.effective_json, filled);
  config.filled = std::move(filled);
  return config;
}

}  // namespace

Config parse_config(const std::string& json_text, int world_size, const std::string& source) {
  return parse_text(json_text, world_size, source, nullptr);
}

Config parse_config(const std::string& json_text, int world_size, const std::string& source,
                    const TrainerValues& trainer) {
  return parse_text(json_text, world_size, source, &trainer);
}

void refresh_effective_json(Config& config) { config.effective_json = effective_json(config); }

void validate_config(const Config& config) {
  // The one field the JSON form cannot carry wrong: it writes fp16/bf16.enabled from it.
  const c10::ScalarType p = config.param_dtype;
  if (p != c10::ScalarType::Float && p != c10::ScalarType::Half && p != c10::ScalarType::BFloat16) {
    fail(config.source, "param_dtype " + dtype_name(p) + " is not supported; allowed: fp32, "
                        "fp16 (fp16.enabled true) or bf16 (bf16.enabled true)");
  }
  // One validator: the config written out as the JSON the parser reads (effective_json's form,
  // which names every key) and parsed with the rules and messages of parse_config.
  (void)parse_config(effective_json(config), config.world_size, config.source);
}

Config load_config(const std::string& path, int world_size) {
  const std::string text = read_regular_file(path, "config file", kMaxConfigBytes);
  return parse_config(text, world_size, path);
}

Config load_config(const std::string& path, int world_size, const TrainerValues& trainer) {
  const std::string text = read_regular_file(path, "config file", kMaxConfigBytes);
  return parse_config(text, world_size, path, trainer);
}

}  // namespace zero

namespace zero {

std::string compute_dtype_notice(const Config& config) {
  const c10::ScalarType wanted = config.configured_param_dtype;
  if (wanted == c10::ScalarType::Float) return "";
  const GemmRates& rates = measured_gemm_rates();
  const std::string name = dtype_name(wanted);
  if (config.compute_dtype_auto) {
    if (config.compute_dtype != c10::ScalarType::Float) {
      return "zero: compute_data_type \"auto\": " + rates.describe(wanted) + "; computing in " +
             name;
    }
    return "zero: compute_data_type \"auto\": " + rates.describe(wanted) + "; computing in fp32" +
           (config.param_dtype == wanted
                ? " from " + name + " parameters (stage 3: " + name + " partitioned shards and " +
                      "collectives are kept)"
                : " (stages 0-2 compute with the parameters themselves, so they are fp32 too)");
  }
  if (config.compute_dtype == c10::ScalarType::Float) return "";  // stage 3 fp32 compute
  if (!rates.slow(wanted)) return "";
  const std::string section = wanted == c10::ScalarType::Half ? "fp16" : "bf16";
  return "zero: warning: " + rates.describe(wanted) + "; training computes in " + name +
         " as configured. For fp32 speed set \"compute_data_type\": \"auto\" (at stage 3 the " +
         "parameters stay " + name + " in memory and on the wire) or " + section +
         ".enabled false";
}

c10::ScalarType kept_gradient_dtype(const Config& config) {
  if (config.grad_accum_dtype == c10::ScalarType::Float) return c10::ScalarType::Float;
  if (config.zero_optimization.stage < 2) return config.param_dtype;
  if (config.gradient_accumulation_steps > 1 || config.communication_dtype == at::kFloat) {
    return at::kFloat;
  }
  return config.communication_dtype;
}

double pre_reduction_multiplier(const Config& config) {
  if (config.prescale_gradients) return 1.0 / config.world_size;
  return 1.0 / config.gradient_predivide_factor;
}

std::vector<std::string> config_notices(const Config& config) {
  std::vector<std::string> lines;
  if (!config.filled.empty()) {
    std::string line = "zero: " + config.source + ": values left open (\"auto\"";
    const bool optimizer = std::any_of(config.filled.begin(), config.filled.end(),
                                       [](const FilledValue& v) { return v.key == "optimizer"; });
    line += optimizer ? ", no optimizer section):" : "):";
    for (size_t i = 0; i < config.filled.size(); ++i) {
      const FilledValue& value = config.filled[i];
      line += (i ? "; " : " ") + value.key + " = " + value.value + " (" + value.origin + ")";
    }
    lines.push_back(line);
  }
  for (const std::string& note : config.notes) lines.push_back("zero: " + config.source + ": " + note);
  return lines;
}

std::vector<std::string> effective_config_lines(const Config& config) {
  const nlohmann::json flat = nlohmann::json::parse(config.effective_json).flatten();
  std::vector<std::string> lines;
  for (const auto& item : flat.items()) {
    std::string key = item.key();  // a JSON pointer: "/zero_optimization/stage"
    if (!key.empty() && key[0] == '/') key.erase(0, 1);
    for (char& c : key) {
      if (c == '/') c = '.';
    }
    lines.push_back(key + " = " + item.value().dump());
  }
  return lines;  // flatten() of a sorted object keeps the keys sorted
}

}  // namespace zero
