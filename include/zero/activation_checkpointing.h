// Activation checkpointing: a checkpointed call keeps only its inputs during forward and runs
// its forward again during backward, trading one extra forward for the activations in between.
//
//   x = zero::checkpointed(block, x);   // block->forward(x): a stage-3 unit or any module
//   auto outs = zero::checkpoint(                  // any code that is a function of its inputs
//       [block](const std::vector<at::Tensor>& in) {      // captures by value: it runs again
//         return std::vector<at::Tensor>{block->forward(in[0], in[1])};  // during backward
//       },
//       {x, mask});
//
// It works at every stage. At stage 3 a checkpointed unit is gathered for its forward, released,
// and gathered again for the recomputed forward during backward (a fetch the trace records, so
// it is prefetched like the others), then released after its gradients are reduced. The random
// number generators (the CPU one, and the CUDA one of each device an input is on) are restored
// for the recompute, so dropout masks are the same and the gradients are bitwise those of the
// run without checkpointing. Note [Activation checkpointing] in
// src/engine/activation_checkpoint.cpp says how.
//
// Rules, as for PyTorch's reentrant torch.utils.checkpoint:
//   - the body is kept and called again during backward: capture by value what it uses (a
//     module holder, numbers), never references to the caller's locals;
//   - every tensor the body reads, other than the parameters of the modules it calls, must be
//     one of its inputs (a captured tensor that requires grad would make the recompute's
//     backward run into the outer graph a second time), and the body must compute the same
//     thing when called again (no state it changes, e.g. a counter);
//   - gradients reach the inputs and the parameters the body uses; run the backward with
//     engine.backward(loss) (torch::autograd::grad with `inputs` is not supported);
//   - a parameter used inside a checkpointed call may not also be used outside it, or in
//     another checkpointed call, in the same backward: the recompute's backward gives it a
//     gradient of its own, and zero reduces each parameter's gradient once per backward
//     (engine.backward throws, naming the parameter; tied weights: checkpoint every use of
//     them in one call, or none);
//   - at stage 3 the units a checkpointed call runs stay gathered from their recompute until
//     their gradients are reduced: a call that spans k units holds all k at once during its
//     backward, whatever stage3_max_live_parameters says (checkpoint one unit per call);
//   - with grad mode off (evaluation) the body just runs.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "zero/unit.h"

namespace zero {

/// Process-wide options of checkpointed calls. zero::initialize sets them from the config's
/// `activation_checkpointing` section; configure_activation_checkpointing sets them directly.
struct ZERO_API ActivationCheckpointingOptions {
  /// Keep the saved inputs of device (CUDA) tensors in host memory between forward and
  /// backward (DeepSpeed's cpu_checkpointing). Inputs already in host memory stay where they
  /// are, so it has no effect on CPU ranks.
  bool cpu_checkpointing = false;
  /// Time the forwards and the recomputes (activation_checkpoint_profile()).
  bool profile = false;
};
ZERO_API void configure_activation_checkpointing(const ActivationCheckpointingOptions& options);
ZERO_API ActivationCheckpointingOptions activation_checkpointing_options();

/// What checkpointed calls did since the last reset (the counts always, the times with
/// `profile`).
struct ZERO_API ActivationCheckpointProfile {
  int64_t forwards = 0;          // checkpointed forwards with grad mode on
  int64_t recomputes = 0;        // their recomputes during backward
  double forward_seconds = 0.0;  // in the checkpointed forwards
  double recompute_seconds = 0.0;  // in the recomputes, without the backward that follows
  double backward_seconds = 0.0;   // in the backward through the recomputed part
};
ZERO_API ActivationCheckpointProfile activation_checkpoint_profile();
ZERO_API void reset_activation_checkpoint_profile();

using CheckpointBody = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

/// Runs body(inputs) as one checkpointed call: with grad mode on, only `inputs` are kept for
/// backward, where `body` runs again. Returns body's outputs. Inputs may be undefined or not
/// differentiable (integer ids, masks); outputs that are not floating point get no gradient.
ZERO_API std::vector<at::Tensor> checkpoint(const CheckpointBody& body,
                                            const std::vector<at::Tensor>& inputs);

/// module->forward(inputs...) as one checkpointed call, through zero::run when the module is
/// a declared stage-3 unit (zero/unit.h). `module` is a ModuleHolder or a std::shared_ptr of a
/// module whose forward takes tensors and returns one tensor; it is kept alive until backward.
template <typename Holder, typename... Tensors>
at::Tensor checkpointed(const Holder& module, const Tensors&... inputs);

namespace detail {
template <typename Holder, size_t... I>
at::Tensor run_indexed(Holder& module, const std::vector<at::Tensor>& in,
                       std::index_sequence<I...> /*indices*/) {
  return zero::run(module, in[I]...);
}
}  // namespace detail

template <typename Holder, typename... Tensors>
at::Tensor checkpointed(const Holder& module, const Tensors&... inputs) {
  const CheckpointBody body = [unit = Holder(module)](const std::vector<at::Tensor>& in) mutable {
    return std::vector<at::Tensor>{
        detail::run_indexed(unit, in, std::index_sequence_for<Tensors...>{})};
  };
  return checkpoint(body, {at::Tensor(inputs)...}).at(0);
}

}  // namespace zero
