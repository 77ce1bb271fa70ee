#include "engine/unit_registry.h"

#include <torch/nn/module.h>

#include <unordered_map>

#include "zero/error.h"

namespace zero {
namespace {

struct Entry {
  std::weak_ptr<const torch::nn::Module> module;  // to tell a live module from a reused address
  std::shared_ptr<detail::UnitBinding> binding;
};

struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, Entry> entries;
};

thread_local CallPhase call_phase = CallPhase::kPlain;

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: units may outlive statics
  return *instance;
}

// Under the registry mutex: the live entry for `module`, or null.
Entry* find_live(Registry& r, const torch::nn::Module& module) {
  auto it = r.entries.find(&module);
  if (it == r.entries.end()) return nullptr;
  if (it->second.module.expired()) {
    r.entries.erase(it);
    return nullptr;
  }
  return &it->second;
}

}  // namespace

CallPhase current_call_phase() { return call_phase; }

CallPhaseScope::CallPhaseScope(CallPhase phase) : previous_(call_phase) { call_phase = phase; }

CallPhaseScope::~CallPhaseScope() { call_phase = previous_; }

void declare_unit(torch::nn::Module& module) {
  std::shared_ptr<const torch::nn::Module> owner;
  try {
    owner = module.shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    ZERO_CHECK(false, "zero::declare_unit(", module.name(), "): the module must be owned by a ",
               "std::shared_ptr (create it through its ModuleHolder, e.g. torch::nn::Linear, ",
               "or std::make_shared) and be declared after construction");
  }
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (find_live(r, module) != nullptr) return;
    // Drop entries of destroyed modules now and then, so the map does not grow without bound.
    if (r.entries.size() > 64 && r.entries.size() % 64 == 0) {
      for (auto it = r.entries.begin(); it != r.entries.end();) {
        it = it->second.module.expired() ? r.entries.erase(it) : std::next(it);
      }
    }
    r.entries[&module] = Entry{owner, std::make_shared<detail::UnitBinding>()};
  }
  partition_declared_unit(module);  // a no-op unless a zero::ShardedInit is active
}

std::shared_ptr<PrepartitionedUnit> take_prepartitioned(const torch::nn::Module& module) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Entry* entry = find_live(r, module);
  if (entry == nullptr) return nullptr;
  std::lock_guard<std::mutex> binding_lock(entry->binding->mutex);
  return std::move(entry->binding->prepartitioned);
}

void store_prepartitioned(const torch::nn::Module& module, std::shared_ptr<PrepartitionedUnit> unit) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Entry* entry = find_live(r, module);
  ZERO_INTERNAL_ASSERT(entry != nullptr, "store_prepartitioned: ", module.name(), " not declared");
  std::lock_guard<std::mutex> binding_lock(entry->binding->mutex);
  entry->binding->prepartitioned = std::move(unit);
}

bool is_declared_unit(const torch::nn::Module& module) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return find_live(r, module) != nullptr;
}

std::shared_ptr<detail::UnitBinding> bind_unit(const torch::nn::Module& module,
                                               UnitRuntime* runtime, int index) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Entry* entry = find_live(r, module);
  ZERO_INTERNAL_ASSERT(entry != nullptr, "bind_unit: module ", module.name(), " is not declared");
  {
    std::lock_guard<std::mutex> binding_lock(entry->binding->mutex);
    ZERO_CHECK(entry->binding->runtime == nullptr, "zero::initialize: unit ", module.name(),
               " is already partitioned by another live stage-3 engine; destroy that engine ",
               "first");
    entry->binding->runtime = runtime;
    entry->binding->unit = index;
  }
  return entry->binding;
}

namespace detail {

UnitCall::UnitCall(const torch::nn::Module& unit) {
  std::shared_ptr<UnitBinding> binding;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.entries.find(&unit);
    if (it == r.entries.end()) return;
    binding = it->second.binding;
  }
  UnitRuntime* runtime = nullptr;
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(binding->mutex);
    runtime = binding->runtime;
    index = binding->unit;
  }
  if (runtime == nullptr) return;  // stages 0-2, or no engine: pass-through
  phase_ = static_cast<int>(current_call_phase());
  runtime->unit_begin(index, static_cast<CallPhase>(phase_));
  binding_ = std::move(binding);
}

void UnitCall::finish(const std::vector<at::Tensor>& outputs) {
  ZERO_INTERNAL_ASSERT(binding_ != nullptr && !finished_, "UnitCall::finish on an inactive call");
  finished_ = true;
  UnitRuntime* runtime = nullptr;
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(binding_->mutex);
    runtime = binding_->runtime;
    index = binding_->unit;
  }
  if (runtime != nullptr) runtime->unit_end(index, outputs, static_cast<CallPhase>(phase_));
}

UnitCall::~UnitCall() {
  if (binding_ == nullptr || finished_) return;
  std::lock_guard<std::mutex> lock(binding_->mutex);
  if (binding_->runtime != nullptr) binding_->runtime->unit_abandon(binding_->unit);
}

}  // namespace detail
}  // namespace zero
