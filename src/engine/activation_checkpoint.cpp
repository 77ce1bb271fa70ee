// Activation checkpointing (zero/activation_checkpointing.h).
//
// Note [Activation checkpointing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A checkpointed call is one autograd node (a torch::autograd::Function) whose forward runs the
// body with grad mode off, so nothing inside it is saved but the call's inputs, and whose
// backward runs the body again with grad mode on, on detached copies of the inputs, and then
// a backward through that recomputed graph (a reentrant backward, as PyTorch's reentrant
// torch.utils.checkpoint; C++ has no saved-tensor hooks to build the non-reentrant kind on).
// That inner backward reaches the parameters' AccumulateGrad nodes as an ordinary backward
// would, so the engines' gradient hooks, buckets and reduce-scatters run unchanged: stages 0-2
// need nothing else.
//
// Equality with the run without checkpointing, bit for bit:
//   - the random generators (CPU, and the CUDA generator of each device an input is on) are
//     captured before the forward and set for the recompute, then put back as they were, so
//     dropout draws the same masks and the run's later draws are not shifted;
//   - the recompute runs the same operations on the same values, so it yields the same
//     activations, and the backward through them is the backward of the plain run.
//
// Stage 3 (stage3_engine.cpp) sees a checkpointed unit through this thread's CallPhase
// (unit_registry.h): the forward (kCheckpointedForward) gathers and releases the unit as a
// training fetch though grad mode is off, and hooks nothing; the recompute (kRecompute) gathers
// it again during backward (a FetchMode::kRecompute fetch, recorded in the trace and so
// prefetched on later micro-steps), hooks the recomputed outputs like any forward, and keeps
// the groups gathered for the backward that follows at once; they are released when their
// gradients are reduced.
#include "zero/activation_checkpointing.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>

#include "engine/unit_registry.h"
#include "zero/error.h"

namespace zero {
namespace {

struct Settings {
  std::mutex mutex;
  ActivationCheckpointingOptions options;
  ActivationCheckpointProfile profile;
};

Settings& settings() {
  static Settings* instance = new Settings();  // never destroyed: backward may run at exit
  return *instance;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The generators a call may draw from, with their states when it started.
struct RngStates {
  std::vector<std::pair<at::Generator, at::Tensor>> states;

  static RngStates capture(const std::vector<at::Tensor>& inputs) {
    std::set<c10::DeviceIndex> devices;
    for (const at::Tensor& input : inputs) {
      if (input.defined() && input.is_cuda()) devices.insert(input.device().index());
    }
    RngStates captured;
    captured.add(at::detail::getDefaultCPUGenerator());
    for (c10::DeviceIndex index : devices) {
      captured.add(at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, index)));
    }
    return captured;
  }
  void add(at::Generator generator) {  // a handle: copies share the generator
    std::lock_guard<std::mutex> lock(generator.mutex());
    states.emplace_back(generator, generator.get_state());
  }
  // Sets every generator to its captured state; returns their states before.
  RngStates restore() const {
    RngStates before;
    for (const auto& [generator, state] : states) {
      before.add(generator);
      at::Generator handle = generator;  // a handle of the same generator
      std::lock_guard<std::mutex> lock(handle.mutex());
      handle.set_state(state);
    }
    return before;
  }
};

// What a checkpointed call keeps for its backward besides the saved inputs.
struct CallState : torch::CustomClassHolder {
  CheckpointBody body;
  RngStates rng;
  // Per input: where it was (with cpu_checkpointing a device input is saved as a host copy
  // and moved back for the recompute) and whether it needed a gradient (the copies, made
  // without grad mode, do not say).
  std::vector<c10::Device> devices;
  std::vector<bool> differentiable;
  bool profile = false;
  bool anchored = false;  // the last input is the anchor checkpoint() added, not the body's
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                const c10::intrusive_ptr<CallState>& state) {
    const Clock::time_point start = Clock::now();
    std::vector<at::Tensor> body_inputs = inputs.vec();
    if (state->anchored) body_inputs.pop_back();
    state->rng = RngStates::capture(body_inputs);
    std::vector<at::Tensor> outputs;
    {
      CallPhaseScope phase(CallPhase::kCheckpointedForward);
      outputs = state->body(body_inputs);
    }
    const bool offload = activation_checkpointing_options().cpu_checkpointing;
    std::vector<at::Tensor> saved;  // through save_for_backward: freed when autograd is done
    for (const at::Tensor& input : inputs) {
      state->devices.push_back(input.defined() ? input.device() : c10::Device(c10::kCPU));
      state->differentiable.push_back(input.defined() && input.requires_grad());
      saved.push_back(offload && input.defined() && !input.is_cpu() ? input.to(at::kCPU) : input);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    for (const at::Tensor& output : outputs) {
      ZERO_CHECK(output.defined(), "zero::checkpoint: the body returned an undefined tensor");
    }
    // Integer and boolean outputs get no gradient: autograd treats them as non-differentiable.
    {
      std::lock_guard<std::mutex> lock(settings().mutex);
      ++settings().profile.forwards;
      if (state->profile) settings().profile.forward_seconds += seconds_since(start);
    }
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const c10::intrusive_ptr<CallState> state =
        c10::static_intrusive_pointer_cast<CallState>(ctx->saved_data["state"].toCapsule());
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    const Clock::time_point start = Clock::now();
    // Detached inputs: the recompute's graph ends at them, and their .grad is what flows on.
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor input = saved[i];
      if (input.defined()) {
        input = input.device() == state->devices[i] ? input.detach()
                                                    : input.to(state->devices[i]).detach();
        input.requires_grad_(state->differentiable[i]);
      }
      inputs.push_back(std::move(input));
    }
    if (state->anchored) inputs.pop_back();
    std::vector<at::Tensor> outputs;
    {
      const RngStates after_forward = state->rng.restore();
      struct PutBack {
        const RngStates& states;
        ~PutBack() { states.restore(); }
      } put_back{after_forward};
      at::AutoGradMode grad(true);
      CallPhaseScope phase(CallPhase::kRecompute);
      outputs = state->body(inputs);
    }
    const Clock::time_point recomputed = Clock::now();
    ZERO_CHECK(outputs.size() == grad_outputs.size(), "zero::checkpoint: the body returned ",
               grad_outputs.size(), " tensors in forward and ", outputs.size(),
               " when recomputed; it must compute the same thing both times");
    std::vector<at::Tensor> roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    torch::autograd::variable_list input_grads;
    for (const at::Tensor& input : inputs) {
      input_grads.push_back(input.defined() && input.requires_grad() ? input.grad() : at::Tensor());
    }
    if (state->anchored) input_grads.emplace_back();  // the anchor's
    input_grads.emplace_back();                        // the state, not a tensor
    {
      std::lock_guard<std::mutex> lock(settings().mutex);
      ++settings().profile.recomputes;
      if (state->profile) {
        settings().profile.recompute_seconds +=
            std::chrono::duration<double>(recomputed - start).count();
        settings().profile.backward_seconds += seconds_since(recomputed);
      }
    }
    return input_grads;
  }
};

}  // namespace

void configure_activation_checkpointing(const ActivationCheckpointingOptions& options) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().options = options;
}

ActivationCheckpointingOptions activation_checkpointing_options() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  return settings().options;
}

ActivationCheckpointProfile activation_checkpoint_profile() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  return settings().profile;
}

void reset_activation_checkpoint_profile() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().profile = ActivationCheckpointProfile{};
}

std::vector<at::Tensor> checkpoint(const CheckpointBody& body,
                                   const std::vector<at::Tensor>& inputs) {
  ZERO_CHECK(static_cast<bool>(body), "zero::checkpoint: the body is empty");
  // Evaluation, or a call inside another checkpointed call's forward: nothing to save.
  if (!c10::GradMode::is_enabled()) return body(inputs);
  auto state = c10::make_intrusive<CallState>();
  state->body = body;
  state->profile = activation_checkpointing_options().profile;
  const bool any_differentiable =
      std::any_of(inputs.begin(), inputs.end(),
                  [](const at::Tensor& t) { return t.defined() && t.requires_grad(); });
  if (any_differentiable) return CheckpointFunction::apply(at::TensorList(inputs), state);
  // Autograd attaches a node only to outputs of differentiable inputs; the parameters inside
  // the body are not inputs. An empty input that requires grad puts the call in the graph, so
  // the parameters get their gradients even when no input needs one (the first block of a
  // model whose embeddings are frozen). Its gradient is undefined; the body never sees it.
  std::vector<at::Tensor> with_anchor = inputs;
  with_anchor.push_back(at::empty({0}).requires_grad_(true));
  state->anchored = true;
  return CheckpointFunction::apply(at::TensorList(with_anchor), state);
}

}  // namespace zero
