// The memory planner: every byte one rank will hold at the peak of a training step, before
// anything is allocated, for each ZeRO stage side by side. DeepSpeed's estimators
// (estimate_zero3_model_states_mem_needs_all_live) count the model states only; this one adds
// the engine's buffers (gradient buckets, stage 3's gathered units and gradient buffers, NVMe
// staging) and the activations, with and without activation checkpointing.
//
//   zero::PlanModel model = zero::gpt2::GPT2Config::preset("gpt2").plan_model(
//       config.train_micro_batch_size_per_gpu, 512, config.compute_dtype);
//   std::printf("%s", zero::format_memory_plans(zero::plan_every_stage(config, model)).c_str());
//
// The model states follow the ZeRO formulas (zero::estimate_state); the buffers follow the
// engines' rules, stage 3's gathered units by replaying its schedule (docs/design.md, "Memory
// planner"); the activations come from the model
// (GPT-2 derives them from its forward, gpt2.h; any other model gives its own or measures
// them). Checked against what runs measure (zero::host_memory_stats) by tests/test_memory_plan
// and bench/bench_memory_plan.
#pragma once

#include "zero/export.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/config.h"

namespace torch::nn {
class Module;
}

namespace zero {

/// One micro-batch's activation memory beyond the model state and the engine's buffers: the
/// most held at once during forward, and during backward.
struct ZERO_API ActivationBytes {
  int64_t forward_peak = 0;
  int64_t backward_peak = 0;
  int64_t peak() const { return forward_peak > backward_peak ? forward_peak : backward_peak; }
};

/// Parameters the planner partitions: per stage-3 unit, its parameters' element counts in
/// registration order (the engine's grouping rule, Note [Stage 3 units], applies to them).
struct ZERO_API PlanUnit {
  std::string name;
  std::vector<int64_t> parameter_numels;
  bool declared = true;       // false: parameters outside every unit (whole at stage 3)
  bool checkpointed = false;  // its calls are checkpointed (when the model checkpoints)
  /// Optional, parallel to parameter_numels: each parameter's shape and name (what Muon's rows
  /// need: which parameters are hidden matrices, and their sides). Without shapes the plan has
  /// no row for Muon's step; without names the unit's name stands for its parameters'.
  std::vector<std::vector<int64_t>> parameter_shapes = {};
  std::vector<std::string> parameter_names = {};
};

/// A unit of parameters given by shape (their numels follow).
ZERO_API PlanUnit plan_unit(std::string name, std::vector<std::vector<int64_t>> shapes,
                            bool declared, bool checkpointed = false);

struct ZERO_API PlanModel {
  std::string name;
  /// Every trainable parameter once, grouped by unit, in registration order; a model without
  /// declared units is one undeclared entry.
  std::vector<PlanUnit> units;
  /// The order a forward calls the units in (indices into `units`; a unit called twice, like
  /// GPT-2's tied embedding, appears twice); empty: each unit once, in order. Stage 3's
  /// gathered units are planned by replaying the engine's schedule over these calls.
  std::vector<int> forward_calls;
  /// Parameters that do not require grad: the engines leave them in the module, whole.
  int64_t frozen_parameter_bytes = 0;
  /// What the process holds resident before the model exists (libraries, MPI and its
  /// shared-memory segments, thread stacks, loaded data), measured by the caller
  /// (zero::resident_bytes() at start-up) so that the plan predicts what the operating system
  /// sees; 0: not measured (the plan then covers the training state alone).
  int64_t process_baseline_bytes = 0;
  int64_t micro_batch = 0;  // what the activations are for (0: not given)
  int64_t seq = 0;
  ActivationBytes activations;                 // without activation checkpointing
  std::optional<ActivationBytes> checkpointed;  // with it (as the model would checkpoint)
  bool checkpointing = false;                   // whether the run checkpoints
  int64_t num_parameters() const;
};

/// The PlanModel of a built module: its trainable parameters per declared unit (zero/unit.h),
/// in module pre-order, those outside every unit last, and its frozen parameters' bytes.
/// Activations are left at 0: set them (e.g. from a measurement).
ZERO_API PlanModel plan_model_of(const torch::nn::Module& module);

/// Where a row's bytes are: host RAM (private, shared by the ranks of a node, or pinned:
/// page-locked for a device's copies), the model's device (a GPU), or swap files on NVMe.
enum class MemoryPlace { kHost, kSharedHost, kNvme, kDevice, kPinnedHost };
/// Where the model computes: the host (CPU ranks) or a device (a GPU per rank). On a device,
/// the parameters, buffers and activations are device rows, and an offloaded optimizer's
/// state, gradient shard and parameter copy are host rows (Note [Offload of a device model]).
enum class PlanTarget { kHost, kDevice };
ZERO_API const char* memory_place_name(MemoryPlace place);

struct ZERO_API MemoryPlanRow {
  std::string item;
  int64_t bytes = 0;
  MemoryPlace place = MemoryPlace::kHost;
  bool in_peak = true;  // false: shown for comparison (the other activation variant)
  std::string basis;    // how it was computed
};

/// One rank's plan for one stage.
struct ZERO_API MemoryPlan {
  int stage = 0;
  std::vector<MemoryPlanRow> rows;
  PlanTarget target = PlanTarget::kHost;
  int64_t peak_memory_bytes = 0;  // host memory (RAM: private, shared, pinned) at the step's peak
  /// What the operating system counts in the rank's resident set at that peak:
  /// peak_memory_bytes plus the peers' shared memory the rank maps to read in place (stages
  /// 0-1's gradient chunks, Note [Shared-memory reduce-scatter]), which is no memory of its
  /// own (the host check leaves it out) but is in its VmRSS. Host ranks only.
  int64_t resident_bytes = 0;
  int64_t pinned_bytes = 0;       // of it, page-locked (a device model's offload copies)
  int64_t device_bytes = 0;       // the device's memory (PlanTarget::kDevice)
  int64_t nvme_bytes = 0;         // swap files on NVMe
  /// The row of `item`, or nullptr.
  const MemoryPlanRow* row(const std::string& item) const;
};

/// The plan for `config` (its stage, world size, dtypes, accumulation, offload, buckets,
/// stage-3 limits) and `model`.
ZERO_API MemoryPlan plan_memory(const Config& config, const PlanModel& model,
                                PlanTarget target = PlanTarget::kHost);

/// plan_memory at stages 0-3, the config otherwise as given, with what the parser would make of
/// it at each stage: offload settings a stage cannot use dropped, and the dtypes of
/// compute_data_type (fp32 compute from 16-bit shards exists at stage 3 only; "auto" on a CPU
/// with slow 16-bit GEMMs makes the parameters fp32 at stages 0-2).
ZERO_API std::vector<MemoryPlan> plan_every_stage(const Config& config, const PlanModel& model,
                                                 PlanTarget target = PlanTarget::kHost);

/// For a device model whose plan needs more than `device_bytes` of the device: the first of
/// these changes, each keeping what the config asks for and adding to it, whose plan fits,
/// as one line naming the keys ("zero_optimization.offload_optimizer.device \"cpu\" ..."):
/// offload_optimizer "cpu" at the config's stage (stage 1 when it is 0), stage 3 with it,
/// stage 3 with offload_param "cpu" too, and each of those with every block's activations
/// checkpointed (when the model can say what that saves); "" when none fits. `host_bytes`
/// bounds the host memory they may use.
ZERO_API std::string offload_that_fits(const Config& config, const PlanModel& model,
                                       int64_t device_bytes, int64_t host_bytes);

/// Note [Fitting the defaults] (src/engine/memory_plan.cpp): when `config`'s plan needs more
/// than `memory_per_rank` of host memory per rank, lowers the speed-for-memory knobs the config
/// left at DeepSpeed's defaults (NVMe offload's sub_group_size and buffer counts, stage 3's
/// prefetch and live-parameter limits, the reduce bucket size) until it fits, and returns one
/// line saying what it chose and why ("" and `config` unchanged when it already fits or cannot
/// be made to). Identical inputs give identical choices on every rank.
ZERO_API std::string fit_defaults_to_memory(Config& config, const PlanModel& model,
                                            int64_t memory_per_rank,
                                            PlanTarget target = PlanTarget::kHost);

/// The plans as one table, a column per plan, with each row's place.
ZERO_API std::string format_memory_plans(const std::vector<MemoryPlan>& plans);

/// Collective. check_state_fits (zero/memory.h) with `plan`'s peak as the memory each rank
/// needs: throws zero::Error on every rank when the ranks of a host need more than its
/// MemAvailable, or their swap files more than the free space under nvme_path, naming what is
/// needed and what is available. Returns a one-line account of the plan.
ZERO_API std::string check_plan_fits(const Config& config, const MemoryPlan& plan,
                                     int64_t num_parameters, Communicator& comm);

}  // namespace zero
