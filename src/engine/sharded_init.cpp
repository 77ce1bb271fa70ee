#include "zero/sharded_init.h"

#include <torch/nn/module.h>

#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/param_storage.h"
#include "engine/unit_registry.h"
#include "zero/error.h"

namespace zero {

struct ShardedInit::State {
  Config config;
  std::shared_ptr<Communicator> comm;
  std::unordered_set<const void*> claimed;  // parameters already in some unit's partition
  ShardedInit* previous = nullptr;
};

namespace {
thread_local ShardedInit::State* active = nullptr;
}  // namespace

ShardedInit::ShardedInit(const Config& config, std::shared_ptr<Communicator> comm)
    : state_(std::make_unique<State>()) {
  ZERO_CHECK(comm != nullptr, "zero::ShardedInit: communicator is null");
  validate_config(config);
  ZERO_CHECK(config.zero_optimization.stage == 3, config.source,
             ": zero::ShardedInit partitions parameters while the model is built, which is ZeRO ",
             "stage 3; zero_optimization.stage = ", config.zero_optimization.stage,
             " (allowed: 3)");
  ZERO_CHECK(config.world_size == comm->size(), config.source, ": the config was solved for ",
             "world size ", config.world_size, " but the communicator has ", comm->size(),
             " ranks");
  ZERO_CHECK(config.zero_optimization.stage3_model_persistence_threshold ==
                 std::numeric_limits<int64_t>::max(),
             config.source, ": zero_optimization.stage3_model_persistence_threshold = ",
             config.zero_optimization.stage3_model_persistence_threshold,
             " cannot be used with zero::ShardedInit (the model-wide cap depends on parameters ",
             "not built yet); allowed: the default (no cap)");
  ZERO_CHECK(active == nullptr, "zero::ShardedInit: another ShardedInit is already active on ",
             "this thread");
  state_->config = config;
  state_->comm = std::move(comm);
  active = state_.get();
}

ShardedInit::~ShardedInit() { active = nullptr; }

void partition_declared_unit(torch::nn::Module& module) {
  ShardedInit::State* state = active;
  if (state == nullptr) return;
  // The unit's own parameters: module pre-order, skipping units declared inside it (already
  // partitioned), parameters claimed by earlier units, frozen ones, and the persistent ones —
  // the same rule zero::initialize applies (Note [Stage 3 units]).
  std::vector<std::string> inner_units;
  std::vector<at::Tensor> params;
  const int64_t threshold = state->config.zero_optimization.stage3_param_persistence_threshold;
  for (const auto& item : module.named_modules()) {
    const std::string& name = item.key();
    bool inside_inner = false;
    for (const auto& inner : inner_units) {
      if (name == inner || name.rfind(inner + ".", 0) == 0) inside_inner = true;
    }
    if (inside_inner) continue;
    if (!name.empty() && is_declared_unit(*item.value())) {
      inner_units.push_back(name);
      continue;
    }
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      const at::Tensor& tensor = p.value();
      if (!tensor.requires_grad() || tensor.numel() <= threshold) continue;
      if (!state->claimed.insert(tensor.unsafeGetTensorImpl()).second) continue;
      params.push_back(tensor);
    }
  }
  if (params.empty()) return;
  auto unit = std::make_shared<PrepartitionedUnit>();
  unit->params = params;
  unit->dtype = state->config.param_dtype;
  unit->compute_dtype = state->config.compute_dtype;
  unit->world = state->comm->size();
  unit->persistence_threshold = threshold;
  unit->group = partition_parameters(params, unit->dtype, unit->compute_dtype, *state->comm,
                                     /*keep_whole=*/false, module.name());
  store_prepartitioned(module, std::move(unit));
}

}  // namespace zero
