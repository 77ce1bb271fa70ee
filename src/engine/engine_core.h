// What every ZeRO stage shares: the step protocol (loss scaling, global norm, fp16 overflow
// skip, clipping, learning-rate schedule, monitor), communication accounting, and gradient
// readiness hooks. FlatEngine (stages 0-2, flat_engine.cpp) and Stage3Engine (stage3_engine.cpp)
// supply where gradients and parameters live.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "common/dtype_names.h"
#include "engine/host_offload.h"
#include "engine/monitor.h"
#include "engine/stage_policy.h"
#include "state/loss_scaler.h"
#include "state/shard_state.h"
#include "state/training_state.h"
#include "zero/engine.h"
#include "zero/scheduler.h"

namespace zero {

class AsyncIo;
class SwapDirectory;

/// Sum of squares of `tensor`'s elements in fp64, as a one-element fp64 tensor on its device
/// (nothing is read back to the host). On the CPU with a fixed blocking, so the result does
/// not depend on the thread count (bitwise reproducible across runs); on a device by ATen's
/// norm, accumulated in fp64 (deterministic for a given size).
at::Tensor sum_of_squares(const at::Tensor& tensor);

class EngineCore;

// Autograd hooks hold this, not the engine, and test `engine` under the mutex, so a hook that
// fires after the engine is gone is a no-op rather than a use-after-free.
struct HookTarget {
  std::mutex mutex;
  EngineCore* engine = nullptr;
};

class EngineCore : public Engine, public CheckpointSubject {
 public:
  EngineCore(std::shared_ptr<torch::nn::Module> model, const Config& config,
             std::shared_ptr<Communicator> comm);
  ~EngineCore() override;

  void backward(const at::Tensor& loss) final;
  void step() final;
  bool is_gradient_accumulation_boundary() const final {
    return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
  }
  double loss_scale() const final { return scaler_.scale(); }
  /// A read from the device where the step kept the norm there (Note [A step without a
  /// device read]); -1 before the first step.
  double global_grad_norm() const final;
  /// Tests: the step's multiplier as tensors on CPU ranks too (the GPU's path, where it
  /// applies, bitwise the host's; Note [A step without a device read]).
  void set_multiplier_on_tensors(bool on) { multiplier_on_tensors_ = on; }
  int64_t global_steps() const final { return global_steps_; }
  int64_t skipped_steps() const final { return skipped_steps_; }
  int64_t micro_steps() const final { return micro_steps_; }
  double learning_rate() const final { return lr_; }
  void set_learning_rate(double lr) final;
  CommStats communication() const final;
  void write_monitor_events(const std::vector<MonitorEvent>& events) final {
    monitor_->write_events(events);
  }
  int rank() const final { return rank_; }
  int world_size() const final { return world_; }

  /// Called by the AccumulateGrad post hook of trainable parameter `index` (see
  /// register_gradient_hooks), after its gradient has been accumulated into .grad.
  virtual void on_gradient_ready(int index) = 0;
  /// What the gradient hooks call: refuses a second gradient of a parameter in one backward,
  /// then on_gradient_ready.
  void deliver_gradient(int index);

  /// Optimizer steps taken during backward (Note [Offload of a device model]), for tests and
  /// reports.
  int64_t overlapped_steps() const { return overlapped_steps_; }
  /// Whether the optimizer state is offloaded from a device model (or emulated so).
  bool offloads_from_device() const { return device_offload(); }
  /// Where a device model's offloaded step spends its time, summed since the engine was made
  /// (Note [Offload of a device model]); zeros when not offloaded.
  struct OffloadStats {
    double backward_seconds = 0.0;  // autograd's backward, host wall time
    double wait_seconds = 0.0;      // after it: waiting for the last gradients down (exposed)
    double add_seconds = 0.0;       // worker: gradient pieces into the host gradient
    double overlapped_step_seconds = 0.0;  // worker: the optimizer during backward
    double step_seconds = 0.0;      // the optimizer after backward (main thread)
    TransferQueue::Stats transfers;  // copies down and up, bytes and copy-stream time
  };
  OffloadStats offload_stats() const;
  /// One line for the start-up notice of a device model's offload: where the state lives,
  /// how the copies go, and when the optimizer steps (and why); "" when not offloaded.
  std::string device_offload_notice() const;
  /// Muon's start-up listing of which parameters each half updates; empty for other types.
  std::string muon_notice() const;

  std::string save_checkpoint(const std::string& dir, const std::string& tag,
                              const std::string& client_state) final;
  std::string load_checkpoint(const std::string& dir, const std::string& tag) final;
  void check_checkpoint_destination(const std::string& dir) final;

  // ---- CheckpointSubject (src/checkpoint/checkpoint.h) ----
  Communicator& communicator() override { return *comm_; }
  const Config& config() const final { return config_; }
  ShardState& shard_state() override { return *state_; }
  TrainingCounters counters() const override;
  /// Restores the counters, then the stage makes the parameters whole from the loaded master
  /// weights (reload_parameters; collective).
  void finish_load(const TrainingCounters& counters) override;

 protected:
  // ---- what a stage provides ----
  /// Before autograd runs (loss already checked).
  virtual void begin_backward() = 0;
  /// After autograd returned: launch what is left and wait for this micro-step's reductions.
  virtual void finish_backward() = 0;
  /// Autograd threw: drop per-backward state so the engine stays usable.
  virtual void abandon_backward() = 0;
  /// This rank's share of the global squared norm of the summed (still scaled) gradients,
  /// padding excluded (or zero there): sum_of_squares, on the gradients' device.
  virtual at::Tensor local_sum_of_squares() = 0;
  /// Applies the optimizer with gradients multiplied by `grad_multiplier` at learning rate
  /// lr_, then makes the parameters every rank needs whole again.
  virtual void apply_update(const GradMultiplier& grad_multiplier) = 0;
  /// Whether this step's multiplier stays on the gradients' device (Note [A step without a
  /// device read]); `total` is the global sum of squares.
  bool multiplier_stays_on_device(const at::Tensor& total) const;
  virtual void zero_gradients() = 0;
  /// After a load committed the shard state: round the parameters from the master weights and
  /// make whole again what must be whole (collective).
  virtual void reload_parameters() = 0;

  // ---- shared helpers ----
  /// Where the shard state lives: host memory with offload_optimizer.device "cpu", else the
  /// parameters' device (the same memory on CPU ranks).
  Placement optimizer_placement() const;
  /// Makes the store of the shard state for optimizer_placement() on `device`. Collective with
  /// offload_optimizer "nvme" (the swap directory, and each swap file, are made by every rank
  /// or by none: Note [Agreeing on a failure]); so is every call of what it returns.
  StateStoreMaker state_store_maker(at::Device device);
  /// NVMe offload's I/O threads, started on first use (collective then).
  AsyncIo& async_io();
  /// The swap directory under `nvme_path` (`key` names it in errors), made on first use
  /// (collective then): offload_optimizer's and offload_param's are one when their paths are.
  const SwapDirectory& swap_directory(const std::string& nvme_path, const std::string& key);
  // ---- a device model's offloaded optimizer (Note [Offload of a device model]) ----
  /// Called by a stage with the parameters' device before it makes its shard state: starts the
  /// transfer queue when offload_optimizer is set and the parameters are on a device (or
  /// ZERO_EMULATE_DEVICE_OFFLOAD on CPU ranks). Then device_offload() says so.
  void prepare_device_offload(at::Device device);
  bool device_offload() const { return transfer_ != nullptr; }
  /// Where the shard state keeps its fp32 parts and gradient: the host when offloaded from a
  /// device, else `device`.
  at::Device state_device(at::Device device) const;
  /// The owned gradient shard (zeros, grad_shard_dtype_): pinned on the host when offloaded.
  at::Tensor make_gradient_shard(int64_t numel, at::Device device);
  /// The parameter store over `params` (the engine's storage of the shard space): `params`
  /// itself, or when offloaded a host copy of it with `params` as the device copy.
  std::shared_ptr<ParamStore> make_param_store_over(const at::Tensor& params,
                                                    std::vector<ParamStore::Segment> segments = {});
  /// After the shard state is made: the gradient pipeline, for pieces of at most
  /// `largest_piece` elements of comm_dtype_ (offloaded only).
  void start_gradient_pipeline(int64_t largest_piece);
  /// This rank's reduced `piece` (on the parameters' device) into elements [shard_offset, +n)
  /// of the shard state's gradient: added when `accumulate`, else copied; offloaded, through
  /// the pipeline (the caller's stream is ordered after the copy, so the piece's buffer may
  /// be reused at once).
  void deliver_reduced(const at::Tensor& piece, int64_t shard_offset, bool accumulate);

  /// The optimizer step of the shard state (ShardState::step). Offloaded to NVMe it is a disk
  /// pass that can fail on one rank (a swap file changed under the run): then every rank throws
  /// (Note [Agreeing on a failure]), at the cost of one small collective per step.
  void step_shard_state(const GradMultiplier& grad_multiplier,
                        const at::Tensor& lent = at::Tensor());
  /// Waits for in-flight collectives and detaches the hooks. Every subclass destructor calls
  /// it first, while the buffers the submitted tasks use still exist. Never throws.
  void shutdown() noexcept;
  /// Adds what a collective moves to this engine's counters (Engine::communication);
  /// returns it.
  WorkHandle counted(WorkHandle collective);
  void count_moved(const CommStats& moved);
  /// Runs `task` in the communicator's order (Communicator::in_order: after the collectives
  /// issued before it). With overlap_comm the caller goes on while it runs; without, the
  /// caller waits for it here, so nothing overlaps.
  WorkHandle submit(std::function<void()> task);
  /// Waits for everything submitted so far (they complete in order: the last one suffices);
  /// rethrows the first failure.
  void wait_submitted();
  /// Before the shard state is read or written in whole (an optimizer step, a checkpoint save
  /// or load): waits for everything submitted and settles what the stage keeps in flight
  /// beyond it. Stage 3 releases prefetched gathers, whose values a step or load makes stale
  /// and whose parameter leases (Note [Parameter offload]) a pass over the shard space may not
  /// meet.
  virtual void quiesce() { wait_submitted(); }
  /// Puts a post hook on each parameter's AccumulateGrad node calling on_gradient_ready(i).
  void register_gradient_hooks(const std::vector<at::Tensor>& params,
                               const std::vector<std::string>& names);
  /// Every rank compares config, world size and `parameters_description`; fails together on
  /// a difference (Note in fingerprint.h) or when a rank's construction failed (startup_error_).
  void check_ranks_agree(const std::string& parameters_description);

  std::shared_ptr<torch::nn::Module> model_;
  Config config_;
  std::shared_ptr<Communicator> comm_;
  int rank_ = 0;
  int world_ = 1;
  int stage_ = 0;
  StagePolicy policy_;  // the stage as the decisions the engines read (stage_policy.h)
  // Note [Gradient scaling]: what a group's gradients are multiplied by before they are summed
  // over ranks (1 unless prescale_gradients / gradient_predivide_factor), and the step's divisor.
  double pre_reduction_multiplier_ = 1.0;
  double gradient_divisor() const;
  void scale_before_reduction(const at::Tensor& gradients) const;
  at::ScalarType param_dtype_;    // stored (the partitioned shards at stage 3)
  at::ScalarType compute_dtype_;  // computed in (Note [Compute dtype] in zero/config.h)
  at::ScalarType comm_dtype_;
  // Where reduced gradients accumulate at stages 2 and 3 (kept_gradient_dtype, zero/config.h).
  at::ScalarType grad_shard_dtype_;
  bool in_backward_ = false;
  std::vector<std::string> hooked_names_;  // register_gradient_hooks' names, by index
  std::vector<char> gradient_arrived_;     // per hooked parameter, in this backward

  // NVMe offload (Note [NVMe offload]): declared before state_, whose swap files they outlive.
  std::shared_ptr<AsyncIo> aio_;
  std::vector<std::shared_ptr<SwapDirectory>> swap_directories_;
  // A device model's offload (Note [Offload of a device model]): declared before state_,
  // whose parameter store copies through the queue, and the pipeline that writes its gradient.
  std::shared_ptr<TransferQueue> transfer_;
  bool offload_emulated_ = false;  // ZERO_EMULATE_DEVICE_OFFLOAD on CPU ranks
  std::unique_ptr<ShardState> state_;  // Note [Shard state]; made by the stage
  // Muon: each checkpoint parameter's part (muon_matrix_of), made at the first step.
  std::vector<MuonMatrix> muon_matrices_;
  // What Muon's step needs of the communicator (Note [Muon under partitioning]).
  void add_muon_collectives(StepCollectives& exchange);
  std::unique_ptr<HostGradientPipeline> pipeline_;  // offloaded from a device only
  std::unique_ptr<LRScheduler> scheduler_;  // null: constant (or hand-set) learning rate
  LossScaler scaler_;
  WorkHandle last_submitted_;  // the newest submit(); null when none is pending
  std::shared_ptr<HookTarget> hook_target_;
  double lr_ = 0.0;

 private:
  void boundary_step();
  // The overlapped step (Note [Offload of a device model]): whether this backward steps the
  // optimizer as gradients arrive, and after it returned.
  bool overlaps_step_with_backward() const;
  void begin_offloaded_backward();
  void finish_offloaded_backward(bool failed);
  struct OverlappedStep {
    bool active = false;   // this boundary backward steps as gradients arrive
    bool done = false;     // ... and has stepped every element: the step only gathers
    double grad_multiplier = 0.0;
    double lr = 0.0;
    std::atomic<int64_t> stepped{0};  // elements stepped so far (the worker thread)
  };
  OverlappedStep overlapped_;
  int64_t overlapped_steps_ = 0;
  OffloadStats offload_times_;  // the main thread's parts of offload_stats()
  std::string half_updated_;  // "" or why the state is half-updated (a failed overlapped backward)

  // shared_ptr or intrusive_ptr depending on the libtorch version.
  using AccumulatorPtr =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<at::Tensor>()));
  std::vector<AccumulatorPtr> accumulators_;
  std::unique_ptr<EngineMonitor> monitor_;
  std::string startup_error_;  // "" or why this rank's construction failed (check_ranks_agree)
  BoundaryRecord window_;  // what the monitor gets at the next boundary
  mutable std::mutex stats_mutex_;
  CommStats engine_stats_;
  // The last step's global norm (fp64, one element), where the step computed it: the host
  // unless it stayed on the device. Undefined before the first step.
  at::Tensor grad_norm_;
  bool multiplier_on_tensors_ = false;
  int64_t global_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t micro_steps_ = 0;
};

/// The stage 0-2 engine (flat_engine.cpp).
std::unique_ptr<Engine> make_flat_engine(std::shared_ptr<torch::nn::Module> model,
                                         const Config& config,
                                         std::shared_ptr<Communicator> comm);

/// The stage 3 engine (stage3_engine.cpp).
std::unique_ptr<Engine> make_stage3_engine(std::shared_ptr<torch::nn::Module> model,
                                           const Config& config,
                                           std::shared_ptr<Communicator> comm);

}  // namespace zero
