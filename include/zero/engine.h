// The ZeRO engine: data-parallel training of a libtorch module with partitioned optimizer
// state (stage 1), gradients (stage 2) and parameters (stage 3; the model declares its units,
// see zero/unit.h).
//
//   auto comm   = zero::make_mpi_communicator();
//   auto config = zero::load_config("ds_config.json", comm->size());
//   auto engine = zero::initialize(model.ptr(), config, comm);
//   for (...) {
//     auto loss = compute_loss(model, micro_batch);
//     engine->backward(loss);   // scales by loss scale / gradient_accumulation_steps
//     engine->step();           // updates at the accumulation boundary, zeroes gradients
//   }
//
// initialize() takes over the module's trainable parameters: they are converted to the
// configured dtype, moved into one flat buffer (each parameter's data becomes a view into it)
// and broadcast from rank 0. Do not call the module's own optimizer or zero_grad afterwards.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "zero/comm.h"
#include "zero/config.h"

namespace torch::nn {
class Module;
}

namespace zero {

/// Model-state bytes held by this rank, by category (the ZeRO paper's accounting).
/// An event for the config's monitors (csv_monitor, tensorboard), as DeepSpeed's
/// engine.monitor.write_events takes them: a name like "Train/Samples/val_loss", its value, and
/// the x axis in samples.
struct ZERO_API MonitorEvent {
  std::string name;
  double value = 0.0;
  int64_t samples = 0;
};

struct ZERO_API ModelStateBytes {
  int64_t params = 0;           // trainable parameters, param dtype: full (stages 0-2) or the
                                // owned shard plus the persistent ones (stage 3)
  int64_t grads = 0;            // gradients: full buffer (stages 0, 1) or owned shard (2, 3)
  int64_t master_params = 0;    // fp32 master weights (0 when params are fp32 and can serve)
  int64_t optimizer_state = 0;  // Adam m and v / SGD momentum, fp32
  int64_t total() const { return params + grads + master_params + optimizer_state; }
  /// Of total(): the bytes held in NVMe swap files, not in memory (offload device "nvme":
  /// the master weights and optimizer state with offload_optimizer, the unit shards of the
  /// parameters with offload_param).
  int64_t on_nvme = 0;
  /// Of on_nvme: the parameters' (offload_param "nvme", stage 3).
  int64_t params_on_nvme = 0;
  /// Host memory staging the swap files (offload_optimizer.buffer_count tiles and
  /// offload_param.buffer_count slots); not part of total().
  int64_t staging = 0;
  int64_t in_memory() const { return total() - on_nvme; }
  // Stage 3: the most bytes of partitioned parameters gathered whole at once so far (the
  // live-parameter budget in use); not part of total(). 0 at stages 0-2.
  int64_t gathered_peak = 0;
};

class ZERO_API Engine {
 public:
  virtual ~Engine() = default;

  /// Backward of `loss` (a scalar) scaled by loss_scale() / gradient_accumulation_steps.
  /// Buckets of ready gradients are communicated during it (stage 2 on every micro-step;
  /// stages 0 and 1 on the boundary micro-step).
  virtual void backward(const at::Tensor& loss) = 0;

  /// Counts a micro-step. On the accumulation boundary: unscales, checks fp16 overflow on
  /// every rank, clips, updates the owned parameters and all-gathers them; then zeroes the
  /// gradients. Between boundaries it does nothing else.
  virtual void step() = 0;

  /// True while the current micro-step is the last one of its accumulation window.
  virtual bool is_gradient_accumulation_boundary() const = 0;

  virtual double loss_scale() const = 0;
  /// Global L2 norm of the (unscaled, unclipped) gradients at the last boundary; -1 before.
  virtual double global_grad_norm() const = 0;
  /// Optimizer steps taken (boundaries that were not skipped).
  virtual int64_t global_steps() const = 0;
  /// Boundaries skipped because of an fp16 overflow on some rank.
  virtual int64_t skipped_steps() const = 0;
  virtual int64_t micro_steps() const = 0;

  /// The rate of the last (or, before any, the first) optimizer step. With a `scheduler` in the
  /// config it follows DeepSpeed's schedule and advances only on applied steps.
  virtual double learning_rate() const = 0;
  /// Sets the rate for the next steps; an error when the config has a scheduler.
  virtual void set_learning_rate(double lr) = 0;

  virtual ModelStateBytes model_state_bytes() const = 0;
  /// Bytes communicated by this rank since initialize(), by collective.
  virtual CommStats communication() const = 0;

  /// Collective. Writes a sharded checkpoint to `dir`/`tag` (tag "": "global_step<N>", N the
  /// boundaries taken): each rank writes the fp32 master weights and optimizer state it owns
  /// (and, at stage 3, its 16-bit shard), keyed by parameter name and element range, and rank
  /// 0 the metadata (zero/checkpoint.h, Note [Checkpoint format]). Atomic: the checkpoint
  /// appears, and `dir`/latest names it, only once every rank has finished. `client_state`
  /// is any JSON text, returned by load_checkpoint. Call it between optimizer steps (at an
  /// accumulation boundary). Returns the tag. When a rank fails (a full disk, an unwritable
  /// directory) every rank throws zero::CollectiveError and nothing of the save is left.
  virtual std::string save_checkpoint(const std::string& dir, const std::string& tag = "",
                                      const std::string& client_state = "{}") = 0;
  /// Collective. Loads `dir`/`tag` (tag "": the one `dir`/latest names), saved at any world
  /// size and any stage, into this engine: parameters, master weights, optimizer state,
  /// step counters, loss scale, learning rate. Every file is verified first; on any error
  /// every rank throws zero::CollectiveError and the engine is unchanged. Returns the saved
  /// client state.
  virtual std::string load_checkpoint(const std::string& dir, const std::string& tag = "") = 0;
  /// Collective. Checks before training what a later save_checkpoint(`dir`) needs: `dir`
  /// exists or can be made, every rank can create files in it, and each file system it lands
  /// on has room for one more checkpoint (the bytes of every rank's file there, from the state
  /// the ranks hold). Makes `dir`. Throws zero::CollectiveError on every rank, naming the
  /// directory and the free and needed bytes, when a save would fail.
  virtual void check_checkpoint_destination(const std::string& dir) = 0;

  virtual const Config& config() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Total trainable parameter elements (shared parameters counted once), without padding.
  virtual int64_t num_parameters() const = 0;

  /// Adds `events` to every monitor the config enables (csv_monitor: a CSV file per event
  /// name; tensorboard: scalars), on rank 0; nothing elsewhere or when none is enabled. The
  /// engine writes the training loss, learning rate, loss scale (fp16) and grad norm itself.
  virtual void write_monitor_events(const std::vector<MonitorEvent>& events) = 0;
};

/// What zero::initialize would refuse in `config` on `comm`'s ranks, before any model exists:
/// the checks that need the communicator (ZeRO++'s hpZ and qgZ need node groups, and hpZ a
/// partition of the ranks per node). Throws zero::Error naming the key; the same on every rank.
/// A program calls it with its config checks (zero-train does, so --plan refuses what
/// training would).
ZERO_API void check_config_for_ranks(const Config& config, const Communicator& comm);

/// Builds the engine. Collective: every rank must call it with the same model structure and
/// config; a mismatch fails on every rank naming the rank and the first difference.
ZERO_API std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Config& config,
                                   std::shared_ptr<Communicator> communicator);

}  // namespace zero
