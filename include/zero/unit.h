// Stage 3 units: the pieces of a model whose parameters are gathered together, just in time.
//
// libtorch's C++ modules have no forward hooks, so a model says where its units are:
//
//   // In the model's constructor, after registering each block:
//   zero::declare_unit(*block);
//   // In the model's forward:
//   x = zero::run(block, x);                                        // block->forward(x)
//   logits = zero::run_with(*wte, [&] { return at::linear(x, wte->weight); });  // any code
//
// At stages 0-2, or before zero::initialize, run() just calls forward: one model definition
// serves every stage. At stage 3 (Note [Stage 3 units] in src/engine/stage3_engine.cpp):
//   - a unit's parameters are the module's parameters, recursively, except those of units
//     declared inside it and those small enough to stay whole on every rank
//     (stage3_param_persistence_threshold); parameters outside every unit stay whole too;
//   - run() gathers them before the body and releases them after it; autograd gathers them
//     again before the unit's backward, and its gradients are reduce-scattered into the
//     owned shards as soon as they are complete;
//   - a parameter may be used only inside run() of a unit containing it (or while a
//     zero::GatheredParameters holds it): outside, its storage is released and reading it is
//     invalid;
//   - every rank must run the same units in the same order (as with DeepSpeed and FSDP):
//     each gather is a collective. A unit skipped on every rank in some step is fine.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace zero {

/// Declares `module` a stage-3 unit. Call it before zero::initialize, typically in the
/// model's constructor. `module` must be owned by a std::shared_ptr (every ModuleHolder is).
/// Idempotent; has no effect at stages 0-2.
ZERO_API void declare_unit(torch::nn::Module& module);

/// Whether `module` has been declared a unit.
ZERO_API bool is_declared_unit(const torch::nn::Module& module);

namespace detail {

struct UnitBinding;

// One call of a unit: gathers in the constructor, releases in finish() (or the destructor when
// the body threw). Inactive (a no-op) unless a stage-3 engine partitions the unit.
class ZERO_API UnitCall {
 public:
  explicit UnitCall(const torch::nn::Module& unit);
  ~UnitCall();
  UnitCall(const UnitCall&) = delete;
  UnitCall& operator=(const UnitCall&) = delete;
  bool active() const { return binding_ != nullptr; }
  void finish(const std::vector<at::Tensor>& outputs);

 private:
  std::shared_ptr<UnitBinding> binding_;
  int phase_ = 0;  // the engine's CallPhase at the start of the call
  bool finished_ = false;
};

inline void collect_tensors(const at::Tensor& tensor, std::vector<at::Tensor>& out) {
  out.push_back(tensor);
}
inline void collect_tensors(const std::vector<at::Tensor>& tensors, std::vector<at::Tensor>& out) {
  out.insert(out.end(), tensors.begin(), tensors.end());
}
template <typename... T>
void collect_tensors(const std::tuple<T...>& tuple, std::vector<at::Tensor>& out) {
  std::apply([&](const auto&... item) { (collect_tensors(item, out), ...); }, tuple);
}
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& pair, std::vector<at::Tensor>& out) {
  collect_tensors(pair.first, out);
  collect_tensors(pair.second, out);
}

}  // namespace detail

/// Runs `body` (code that uses `unit`'s parameters) as one call of the unit. The body returns
/// a tensor, a std::vector of tensors, or a tuple/pair of them: gradients flowing back into
/// these outputs are what re-gathers the unit's parameters for its backward.
template <typename Body>
auto run_with(const torch::nn::Module& unit, Body&& body) -> decltype(body()) {
  detail::UnitCall call(unit);
  auto outputs = body();
  if (call.active()) {
    std::vector<at::Tensor> tensors;
    detail::collect_tensors(outputs, tensors);
    call.finish(tensors);
  }
  return outputs;
}

/// unit->forward(args...) as one call of the unit (`unit` is a ModuleHolder or a pointer).
template <typename Holder, typename... Args>
auto run(Holder& unit, Args&&... args) -> decltype(unit->forward(std::forward<Args>(args)...)) {
  return run_with(*unit, [&] { return unit->forward(std::forward<Args>(args)...); });
}

}  // namespace zero
