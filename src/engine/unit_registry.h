// Which modules are stage-3 units (zero::declare_unit), and which engine, if any, runs each.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <vector>

#include "zero/unit.h"

namespace zero {

/// Which kind of forward a unit call is part of (Note [Activation checkpointing] in
/// activation_checkpoint.cpp); per thread, set by the checkpointed call around its body.
enum class CallPhase {
  kPlain,                // an ordinary call (training with grad mode on, or evaluation)
  kCheckpointedForward,  // the forward of a checkpointed call: grad mode is off, yet training
  kRecompute,            // its forward run again during backward, before the unit's backward
};
CallPhase current_call_phase();

/// Sets this thread's call phase for its lifetime (and restores the previous one).
class CallPhaseScope {
 public:
  explicit CallPhaseScope(CallPhase phase);
  ~CallPhaseScope();
  CallPhaseScope(const CallPhaseScope&) = delete;
  CallPhaseScope& operator=(const CallPhaseScope&) = delete;

 private:
  CallPhase previous_;
};

/// What a stage-3 engine does around one call of a unit (zero::run).
class UnitRuntime {
 public:
  virtual ~UnitRuntime() = default;
  /// Before the body: the unit's parameters must be whole when this returns.
  virtual void unit_begin(int unit, CallPhase phase) = 0;
  /// After the body returned `outputs`: release, and arrange the re-gather before backward.
  virtual void unit_end(int unit, const std::vector<at::Tensor>& outputs, CallPhase phase) = 0;
  /// The body threw: undo unit_begin without communicating.
  virtual void unit_abandon(int unit) = 0;
};

struct PrepartitionedUnit;

namespace detail {

// Shared by the registry, running UnitCalls and the engine; the engine clears `runtime` when
// it is destroyed, so a later call is a pass-through instead of a use-after-free.
struct UnitBinding {
  std::mutex mutex;
  UnitRuntime* runtime = nullptr;
  int unit = -1;
  // Partitioned while the model was built (zero::ShardedInit); taken by zero::initialize.
  std::shared_ptr<PrepartitionedUnit> prepartitioned;
};

}  // namespace detail

/// Binds `module` (a declared unit) to `runtime` as unit `index`; the returned binding is
/// cleared by the caller when it goes away. Throws zero::Error when another live engine
/// already runs this module.
std::shared_ptr<detail::UnitBinding> bind_unit(const torch::nn::Module& module,
                                               UnitRuntime* runtime, int index);

/// The unit's partition made under zero::ShardedInit, handed over once (null if none).
std::shared_ptr<PrepartitionedUnit> take_prepartitioned(const torch::nn::Module& module);

/// Hands the unit's partition made under zero::ShardedInit to the registry.
void store_prepartitioned(const torch::nn::Module& module, std::shared_ptr<PrepartitionedUnit> unit);

/// Called by declare_unit for every newly declared unit: partitions it when a
/// zero::ShardedInit is active on this thread, else does nothing (sharded_init.cpp).
void partition_declared_unit(torch::nn::Module& module);

}  // namespace zero
