// Note [Values left to the trainer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Configs written for the Hugging Face Trainer set the keys the trainer knows to "auto" and
// often have no optimizer section: the HF integration (transformers' HfTrainerDeepSpeedConfig)
// replaces "auto" with its TrainingArguments before DeepSpeed sees the config, and the Trainer
// makes an AdamW when the config names no optimizer. DeepSpeed alone drops "auto" (the key's
// default). zero does either, and never silently:
//   - with TrainerValues (zero-train, or a program acting as the trainer), the keys the HF
//     integration fills are filled from them (fill_from_trainer, below), and a missing
//     optimizer section becomes AdamW with the trainer's learning rate, betas, eps and weight
//     decay. The batch keys are filled only where the config's numbers leave them open: a
//     "auto" key the others determine is solved by DeepSpeed's rule instead, and values the
//     user gave are used before defaults (so train_batch_size 32 with "auto" micro-batch and
//     accumulation takes --micro-batch and solves the accumulation). A config with no batch
//     size at all (DeepSpeed's error) gets the trainer's micro-batch, as if it were "auto";
//   - every other "auto" takes DeepSpeed's default, or the batch solver's result.
// Config::filled lists every value "auto" became and where from; config_notices prints it in
// one line at start-up, and the run directory's effective config has the values. A value the
// user gave that contradicts a number in the config is an error naming both, as the HF
// integration's "mismatch" check is (defaults never conflict: the config's numbers win).
#include "config/trainer_fill.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "config/keys.h"
#include "zero/error.h"
#include "zero/gemm_rates.h"

namespace zero::config_detail {

namespace {

const char* const kHfDefault = "the Hugging Face Trainer's default";

void collect_auto(const Json& value, const std::string& path, std::vector<std::string>& out) {
  if (!value.is_object()) return;
  for (const auto& item : value.items()) {
    const std::string key = join_path(path, item.key());
    if (is_auto(item.value())) {
      out.push_back(key);
    } else {
      collect_auto(item.value(), key, out);
    }
  }
}

// The value at a dotted path of objects, or nullptr (JsonT: Json or const Json).
template <typename JsonT>
JsonT* find_path(JsonT& root, const std::string& path) {
  JsonT* node = &root;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) return node;
    begin = dot + 1;
  }
}

// How a TrainingArguments value is named in messages (zero-train: its flag).
std::string argument_name(const TrainerValues& trainer, const std::string& argument) {
  auto it = trainer.names.find(argument);
  return it == trainer.names.end() ? argument : it->second;
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

class Filler {
 public:
  Filler(Json& root, const TrainerValues& trainer, int world, const std::string& source)
      : root_(root), trainer_(trainer), world_(world), source_(source) {}

  std::vector<FilledValue> run() {
    fill_batch();
    fill_simple("gradient_clipping", "max_grad_norm", trainer_.max_grad_norm);
    fill_optimizer();
    fill_scheduler();
    fill_precision();
    fill_buckets();
    return std::move(filled_);
  }

 private:
  std::string name(const std::string& argument) const { return argument_name(trainer_, argument); }

  template <typename T>
  std::string origin(const std::string& argument, const TrainerValues::Value<T>& value) const {
    if (value.given) return name(argument);
    auto it = trainer_.default_origins.find(argument);
    return it == trainer_.default_origins.end() ? name(argument) + ": " + kHfDefault
                                                : name(argument) + ": " + it->second;
  }

  bool is_auto_at(const std::string& path) {
    const Json* value = find_path(root_, path);
    return value != nullptr && is_auto(*value);
  }

  void put(const std::string& path, Json value, const std::string& origin) {
    Json* slot = find_path(root_, path);
    ZERO_INTERNAL_ASSERT(slot != nullptr, "no value to fill at ", path);
    filled_.push_back({path, show(value), origin});
    *slot = std::move(value);
  }

  // A given value against a number the config sets at `path` (the HF integration's mismatch).
  template <typename T>
  void check_agrees(const std::string& path, const std::string& argument,
                    const TrainerValues::Value<T>& value) {
    if (!value.given) return;
    const Json* set = find_path(root_, path);
    if (set == nullptr || !set->is_number()) return;
    if (set->get<double>() == static_cast<double>(value.value)) return;
    fail(source_, name(argument) + " " + number_text(static_cast<double>(value.value)) +
                      " contradicts " + path + " = " + show(*set) + " in the config; set " +
                      path + " to \"auto\" to take " + name(argument) + ", or leave " +
                      name(argument) + " out");
  }

  template <typename T>
  void fill_simple(const std::string& path, const std::string& argument,
                   const TrainerValues::Value<T>& value) {
    check_agrees(path, argument, value);
    if (is_auto_at(path)) put(path, Json(value.value), origin(argument, value));
  }

  // The batch triple: Note [Values left to the trainer].
  void fill_batch() {
    struct Key {
      const char* path;
      const char* argument;
      const TrainerValues::Value<int64_t>* value;
      std::optional<int64_t> known;
    };
    Key micro{"train_micro_batch_size_per_gpu", "per_device_train_batch_size",
              &trainer_.micro_batch, {}};
    Key accumulation{"gradient_accumulation_steps", "gradient_accumulation_steps",
                     &trainer_.gradient_accumulation, {}};
    std::optional<int64_t> total;
    auto number_at = [&](const char* path) -> std::optional<int64_t> {
      const Json* value = find_path(root_, path);
      return value != nullptr ? json_to_integer(*value) : std::nullopt;
    };
    // A config with no batch size at all (DeepSpeed requires one) leaves it to the trainer as
    // "auto" does: the micro-batch is the trainer's.
    auto absent = [&](const char* path) {
      const Json* value = find_path(root_, path);
      return value == nullptr || value->is_null();
    };
    const bool no_batch_size = absent(micro.path) && absent("train_batch_size");
    if (no_batch_size) root_[micro.path] = "auto";
    micro.known = number_at(micro.path);
    accumulation.known = number_at(accumulation.path);
    total = number_at("train_batch_size");
    check_agrees(micro.path, micro.argument, *micro.value);
    check_agrees(accumulation.path, accumulation.argument, *accumulation.value);
    // Given values first, then defaults; each only where the keys known so far leave it open.
    std::vector<Key*> order = {&micro, &accumulation};
    std::stable_sort(order.begin(), order.end(),
                     [](const Key* a, const Key* b) { return a->value->given && !b->value->given; });
    for (Key* key : order) {
      const Key& other = key == &micro ? accumulation : micro;
      if (!is_auto_at(key->path) || (total && other.known)) continue;
      std::string why = origin(key->argument, *key->value);
      if (key == &micro && no_batch_size) why += "; the config sets no batch size";
      put(key->path, Json(key->value->value), why);
      key->known = key->value->value;
    }
    if (is_auto_at("train_batch_size")) {
      // As the HF integration computes it: a factor the config leaves out is the trainer's
      // (the solver then derives that key from the total).
      std::string why;
      auto factor = [&](const Key& key) {
        if (key.known) {
          why += std::string(key.path) + " x ";
          return *key.known;
        }
        why += name(key.argument) + " " + std::to_string(key.value->value) + " x ";
        return key.value->value;
      };
      int64_t total_value = 0;
      // An overflowing product is left to the solver, whose message names the keys.
      if (!__builtin_mul_overflow(factor(micro), factor(accumulation), &total_value) &&
          !__builtin_mul_overflow(total_value, static_cast<int64_t>(world_), &total_value)) {
        put("train_batch_size", Json(total_value), why + "world size " + std::to_string(world_));
      }
    }
  }

  void fill_optimizer() {
    const Json* optimizer = find_path(root_, "optimizer");
    if (optimizer == nullptr || optimizer->is_null()) {
      Json params = {{"lr", trainer_.learning_rate.value},
                     {"betas", {trainer_.adam_beta1.value, trainer_.adam_beta2.value}},
                     {"eps", trainer_.adam_epsilon.value},
                     {"weight_decay", trainer_.weight_decay.value}};
      root_["optimizer"] = {{"type", "AdamW"}, {"params", params}};
      filled_.push_back({"optimizer", "AdamW",
                         "no optimizer section: the Hugging Face Trainer's AdamW"});
      filled_.push_back({"optimizer.params.lr", show(params["lr"]),
                         origin("learning_rate", trainer_.learning_rate)});
      filled_.push_back({"optimizer.params.betas", show(params["betas"]),
                         betas_origin()});
      filled_.push_back({"optimizer.params.eps", show(params["eps"]),
                         origin("adam_epsilon", trainer_.adam_epsilon)});
      filled_.push_back({"optimizer.params.weight_decay", show(params["weight_decay"]),
                         origin("weight_decay", trainer_.weight_decay)});
      return;
    }
    fill_simple("optimizer.params.lr", "learning_rate", trainer_.learning_rate);
    fill_simple("optimizer.params.eps", "adam_epsilon", trainer_.adam_epsilon);
    fill_simple("optimizer.params.weight_decay", "weight_decay", trainer_.weight_decay);
    if (is_auto_at("optimizer.params.betas")) {
      put("optimizer.params.betas", Json::array({trainer_.adam_beta1.value, trainer_.adam_beta2.value}),
          betas_origin());
    }
  }

  std::string betas_origin() const {
    if (trainer_.adam_beta1.given || trainer_.adam_beta2.given) {
      return origin("adam_beta1", trainer_.adam_beta1) + ", " +
             origin("adam_beta2", trainer_.adam_beta2);
    }
    return name("adam_beta1") + ", " + name("adam_beta2") + ": " + kHfDefault;
  }

  void fill_scheduler() {
    if (is_auto_at("scheduler.params.warmup_min_lr")) {
      put("scheduler.params.warmup_min_lr", Json(0.0), "the Hugging Face integration's value");
    }
    fill_simple("scheduler.params.warmup_max_lr", "learning_rate", trainer_.learning_rate);
    if (is_auto_at("scheduler.params.warmup_num_steps")) {
      const int64_t steps = trainer_.warmup_steps.value;
      std::string why = origin("warmup_steps", trainer_.warmup_steps);
      // zero takes warmup_num_steps >= 1; DeepSpeed's schedules use max(2, N) either way.
      if (steps < 2) {
        why += "; DeepSpeed's schedules warm up over at least 2 steps: the first updates run "
               "below the peak learning rate (the very first at the schedule's minimum)";
      }
      put("scheduler.params.warmup_num_steps", Json(std::max<int64_t>(1, steps)), why);
    }
    if (trainer_.total_steps && is_auto_at("scheduler.params.total_num_steps")) {
      put("scheduler.params.total_num_steps", Json(*trainer_.total_steps), name("max_steps"));
    }
  }

  // fp16 / bf16 "enabled": "auto": 16-bit where the device computes it fast (bf16 first: it
  // needs no loss scaling), never both.
  void fill_precision() {
    const std::string bf16 = find_path(root_, "bfloat16") != nullptr ? "bfloat16" : "bf16";
    const bool bf16_auto = is_auto_at(bf16 + ".enabled");
    const bool fp16_auto = is_auto_at("fp16.enabled");
    auto set_true = [&](const std::string& path) {
      const Json* value = find_path(root_, path);
      return value != nullptr && value->is_boolean() && value->get<bool>();
    };
    bool bf16_on = set_true(bf16 + ".enabled");
    const bool fp16_on = set_true("fp16.enabled");
    if (bf16_auto) {
      const auto [fast, why] =
          speed(c10::ScalarType::BFloat16, trainer_.bf16_fast, trainer_.bf16_speed_origin);
      const bool enable = fast && !fp16_on;
      put(bf16 + ".enabled", Json(enable),
          fp16_on ? "fp16.enabled is true" : why);
      bf16_on = enable;
    }
    if (fp16_auto) {
      const auto [fast, why] =
          speed(c10::ScalarType::Half, trainer_.fp16_fast, trainer_.fp16_speed_origin);
      put("fp16.enabled", Json(fast && !bf16_on),
          bf16_on ? std::string("bf16 is enabled") : why);
    }
    if (is_auto_at("amp.enabled")) {
      put("amp.enabled", Json(false), "the Hugging Face integration: no apex AMP (fp16 is native)");
    }
  }

  // Whether `dtype` is fast, and why, for the start-up line.
  static std::pair<bool, std::string> speed(c10::ScalarType dtype, std::optional<bool> given,
                                            const std::string& why) {
    const std::string name = dtype_name(dtype);
    if (given) {
      return {*given, !why.empty() ? why : "the device computes " + name + (*given ? " fast" : " slowly")};
    }
    const GemmRates& rates = measured_gemm_rates();
    return {!rates.slow(dtype), rates.describe(dtype)};
  }

  // The bucket and persistence sizes from the model's width (HF: trainer_config_finalize).
  void fill_buckets() {
    if (!trainer_.hidden_size) return;
    const int64_t h = *trainer_.hidden_size;
    const std::string width = "the model's width " + std::to_string(h);
    if (is_auto_at("zero_optimization.reduce_bucket_size")) {
      put("zero_optimization.reduce_bucket_size", Json(h * h), width + " squared");
    }
    const Json* stage = find_path(root_, "zero_optimization.stage");
    if (stage == nullptr || json_to_integer(*stage) != std::optional<int64_t>(3)) return;
    for (const char* name : kPrefetchBucketSize.names) {
      const std::string path = join_path("zero_optimization", name);
      if (is_auto_at(path)) {
        put(path, Json(static_cast<int64_t>(0.9 * static_cast<double>(h * h))),
            "0.9 x " + width + " squared");
      }
    }
    for (const char* name : kParamPersistence.names) {
      const std::string path = join_path("zero_optimization", name);
      if (is_auto_at(path)) put(path, Json(10 * h), "10 x " + width);
    }
  }

  Json& root_;
  const TrainerValues& trainer_;
  int world_;
  const std::string& source_;
  std::vector<FilledValue> filled_;
};

bool is_batch_key(const std::string& path) {
  return path == "train_batch_size" || path == "train_micro_batch_size_per_gpu" ||
         path == "gradient_accumulation_steps";
}

}  // namespace

std::vector<std::string> auto_paths(const Json& root) {
  std::vector<std::string> paths;
  collect_auto(root, "", paths);
  return paths;
}

std::vector<FilledValue> fill_from_trainer(Json& root, const TrainerValues& trainer,
                                           int world_size, const std::string& source) {
  return Filler(root, trainer, world_size, source).run();
}

bool was_filled(const std::vector<FilledValue>& filled, const std::string& path) {
  return std::any_of(filled.begin(), filled.end(),
                     [&](const FilledValue& f) { return f.key == path; });
}

void record_left_open(const std::vector<std::string>& autos, const std::string& effective_json,
                      std::vector<FilledValue>& filled) {
  const Json effective = Json::parse(effective_json);
  for (const std::string& path : autos) {
    if (was_filled(filled, path)) continue;
    const Json* value = find_path(effective, canonical_key_path(path));
    FilledValue entry{path, value != nullptr ? show(*value) : "its default",
                      is_batch_key(path) ? "solved from the other batch keys"
                                         : "DeepSpeed's default"};
    if (value == nullptr) entry.origin = "DeepSpeed's default; no effect in zero";
    filled.push_back(std::move(entry));
  }
  std::stable_sort(filled.begin(), filled.end(),
                   [](const FilledValue& a, const FilledValue& b) { return a.key < b.key; });
}

void check_trainer_batch(const Config& config, const TrainerValues& trainer) {
  auto name = [&](const std::string& argument) { return argument_name(trainer, argument); };
  auto check = [&](const TrainerValues::Value<int64_t>& value, int64_t solved,
                   const std::string& argument, const std::string& key) {
    if (!value.given || value.value == solved) return;
    fail(config.source, name(argument) + " " + std::to_string(value.value) + " contradicts " +
                            key + " = " + std::to_string(solved) +
                            ", which the config's batch keys give at world size " +
                            std::to_string(config.world_size) + " (train_batch_size " +
                            std::to_string(config.train_batch_size) + "); set the batch keys " +
                            "to \"auto\" to take " + name(argument) + ", or leave " +
                            name(argument) + " out");
  };
  check(trainer.micro_batch, config.train_micro_batch_size_per_gpu, "per_device_train_batch_size",
        "train_micro_batch_size_per_gpu");
  check(trainer.gradient_accumulation, config.gradient_accumulation_steps,
        "gradient_accumulation_steps", "gradient_accumulation_steps");
}

}  // namespace zero::config_detail
