// What a rank keeps for the elements its optimizer updates. See Note [Shard state].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optim/muon.h"
#include "optim/shard_optimizer.h"
#include "state/param_store.h"
#include "state/state_store.h"
#include "state/training_state.h"
#include "zero/config.h"

namespace zero {

// Note [Shard state]
// ~~~~~~~~~~~~~~~~~~
// The "shard space" of a rank is the flat range of elements its optimizer updates: its 1/N of
// the padded parameters at stages 1-3 (at stage 3, its shards of every group, concatenated),
// all of them at stage 0. Over it one ShardState holds
//   - the parameter copy the update writes (a ParamStore: a view into the engine's parameter
//     storage, the flat buffer at stages 0-2 and the partitioned shards at stage 3, or those
//     shards in a swap file with offload_param "nvme", Note [Parameter offload]),
//   - the fp32 master weights (that copy itself when parameters are fp32),
//   - the optimizer's moments and step count (ShardOptimizer),
//   - the reduced gradient, where the stage keeps one of its own (stages 2 and 3: the owned
//     gradient shard; stages 0 and 1 reduce into the full gradient buffer and lend its range),
//   - the segments that map the space back to parameter names and element ranges: what this
//     rank saves, and what a load must fill (they differ at stage 0, which holds everything but
//     saves its 1/N), the vocabulary of checkpoints (src/checkpoint).
// A placement says where the fp32 parts live (a StateStore, src/state/state_store.h): host
// memory or the model's device (the same on CPU ranks), or swap files on NVMe (Note [NVMe
// offload], src/offload/swap_file.h). The optimizer steps the space in tiles of at most
// sub_group_size elements, so an offloaded state needs a few tiles in memory at a time; each
// element's update reads and writes that element alone, so the tiling changes no bit.

/// What the optimizers whose step needs other ranks take from the engine. LAMB (Note [LAMB's
/// norms across shards], optim/lamb.h): how many checkpoint parameters there are
/// (StateSegment::param indexes them), and `gather`, which gathers every rank's int64 tensor of
/// n elements into [world * n]. Muon (Note [Muon under partitioning], optim/muon.h): each
/// checkpoint parameter's part, this rank and the world, `gather_varying` (every rank's int64
/// tensor, of any length, in rank order) and `all_to_all` (Communicator::all_to_all).
struct StepCollectives {
  int parameters = 0;
  std::function<at::Tensor(const at::Tensor&)> gather;
  std::vector<MuonMatrix> matrices;
  int rank = 0;
  int world = 1;
  MuonExchangeMode mode = MuonExchangeMode::kOwner;
  std::function<std::vector<at::Tensor>(const at::Tensor&)> gather_varying;
  std::function<void(const at::Tensor& input, const at::Tensor& output)> all_to_all;
};

enum class Placement {
  kHost,    // host memory
  kDevice,  // the memory of the device the parameters live on
  kNvme,    // swap files (Note [NVMe offload], src/offload/swap_file.h)
};

class ShardState {
 public:
  /// `params`: the parameter-dtype copy of the shard space that updates write (its values
  /// become the master weights). `gradient`: the gradient shard this state owns (zeros, of
  /// numel elements, where the engine keeps it: beside the parameters, or pinned on the host
  /// when a device model's optimizer is offloaded), or undefined when the engine lends its
  /// gradient to step(). `saved` and `loaded`:
  /// the segments this rank writes to a checkpoint and those a load fills (offsets into the
  /// space). `make_store` makes where the fp32 parts live (memory or a swap file, matching
  /// `placement`). Throws zero::Error for a placement it cannot honour (host state for device
  /// parameters needs the offload of a later issue).
  ShardState(const OptimizerConfig& optimizer, std::shared_ptr<ParamStore> params,
             at::Tensor gradient, int64_t tile_numel,
             Placement placement, const StateStoreMaker& make_store,
             std::vector<StateSegment> saved, std::vector<StateSegment> loaded);

  int64_t numel() const { return params_->numel(); }
  Placement placement() const { return placement_; }
  int64_t tile_numel() const { return tile_numel_; }

  /// The parameter copy (Note [Parameter offload]).
  ParamStore& params() const { return *params_; }
  at::ScalarType param_dtype() const { return params_->dtype(); }
  /// The owned gradient shard; undefined when the gradient is lent (stages 0-1).
  const at::Tensor& gradient() const { return gradient_; }
  const std::vector<StateSegment>& saved_segments() const { return saved_; }
  const std::vector<StateSegment>& loaded_segments() const { return loaded_; }

  /// The fp32 parts of the state by checkpoint name: "master", then the optimizer's moments
  /// (Adam "exp_avg", "exp_avg_sq"; SGD with momentum "exp_avg"; plain SGD none).
  const std::vector<std::string>& part_names() const { return part_names_; }
  /// Copies elements [offset, offset + out.numel()) of part `part` into `out` (fp32).
  void read_part(int part, int64_t offset, const at::Tensor& out) const;
  /// Sets elements [offset, offset + values.numel()) of the fp32 master weights (for 16-bit
  /// parameters; with fp32 parameters they are the parameters, and nothing is to be done).
  void write_master(int64_t offset, const at::Tensor& values);

  /// A zero-filled copy of every part, of the same placement, for a load to fill before it
  /// commits (a swap file beside the live one when offloaded: never the state in memory).
  std::unique_ptr<StateStore> make_staging() const;
  /// Replaces every part by the staging copy's (and the 16-bit parameters by the master
  /// rounded, as a step writes them).
  void commit(StateStore& staging);

  /// Muon's exchange so far (zero before its first step).
  const MuonExchangeStats& muon_exchange_stats() const { return muon_stats_; }

  int64_t optimizer_steps() const { return optimizer_.step_count(); }
  void set_optimizer_steps(int64_t steps) { optimizer_.set_step_count(steps); }

  /// Bytes of the master weights (0 when they are the fp32 parameters), the moments, and the
  /// owned gradient shard, wherever they live; and of those, the bytes in swap files.
  int64_t master_bytes() const;
  int64_t moment_bytes() const;
  int64_t gradient_bytes() const { return gradient_.defined() ? gradient_.nbytes() : 0; }
  int64_t file_bytes() const { return store_->file_bytes(); }
  /// Host memory the offloaded parts use for staging (0 in memory).
  int64_t staging_bytes() const { return file_bytes() > 0 ? store_->memory_bytes() : 0; }

  /// One optimizer step over the space, tile by tile: the gradient (the owned shard when
  /// `lent` is undefined) times `grad_multiplier`, at learning rate `lr`; writes the master
  /// weights, the moments and, for 16-bit parameters, the rounded parameter copy.
  /// LAMB and Muon need `exchange` (collectives: every rank calls step together); other
  /// optimizers ignore it.
  void step(const GradMultiplier& grad_multiplier, double lr, const at::Tensor& lent = at::Tensor(),
            const StepCollectives* exchange = nullptr);

  /// One step in parts, each element once (the overlapped step of Note [Offload of a device
  /// model]): begin_step(), then step_range() over disjoint ranges covering the space, in any
  /// order and from any one thread at a time; bitwise what step() computes. Needs a state and
  /// parameter store in memory (supports_ranges()). The parameters of each range are published
  /// to the device copy as soon as they are written.
  bool supports_ranges() const;
  void begin_step() { optimizer_.begin_step(); }
  void step_range(int64_t begin, int64_t end, double grad_multiplier, double lr);

  /// After the master weights changed outside a step: the 16-bit parameter copy becomes them
  /// rounded, exactly as a step writes it.
  void round_params_from_master();

 private:
  bool master_in_store() const { return params_->dtype() != at::kFloat; }
  // LAMB's two passes (Note [LAMB's norms across shards]).
  void step_lamb(double grad_multiplier, double lr, const at::Tensor& grad,
                 const StepCollectives& exchange);
  // Muon's two passes around the exchange (Note [Muon under partitioning]).
  void step_muon(double grad_multiplier, double lr, const at::Tensor& grad,
                 const StepCollectives& exchange);
  // Muon's plan (made at its first step).
  std::optional<MuonExchangePlan> muon_plan_;
  MuonExchangeStats muon_stats_;

  std::shared_ptr<ParamStore> params_;
  at::Tensor gradient_;
  ShardOptimizer optimizer_;
  int64_t tile_numel_;
  Placement placement_;
  StateStoreMaker make_store_;
  std::vector<std::string> part_names_;
  // The fp32 parts: the master weights first when the parameters are 16-bit, then the moments.
  std::unique_ptr<StateStore> store_;
  std::vector<StateSegment> saved_;
  std::vector<StateSegment> loaded_;
};

}  // namespace zero
