// The ZeRO stage 3 engine: every rank keeps 1/N of every parameter (16-bit copy, fp32 master,
// optimizer state, gradient); the full weights of a unit exist only while the unit runs.
//
// Note [Stage 3 units]
// ~~~~~~~~~~~~~~~~~~~~
// Parameters are partitioned per *group*: one group per declared unit (zero/unit.h) holding
// the unit's own parameters, plus one persistent group of the parameters that stay whole on
// every rank (numel <= stage3_param_persistence_threshold while the running total stays
// <= stage3_model_persistence_threshold, and every parameter outside all units). A group is a
// flat buffer laid out by shard_layout() (Note [Shard layout]); rank r owns shard r of every
// group, and this rank's shards of all groups, concatenated, form the flat "shard space" that
// the fp32 master, optimizer state and gradient shard cover. A unit needs its own group plus
// the groups of shared parameters it uses (a parameter belongs to the first unit, in module
// order, that contains it).
//
// Each group's parameters are views into one tensor, `full`, whose storage is detached (0
// bytes) while the group is released and attached to a pooled buffer while it is gathered.
// Autograd's saved tensors refer to the same storage, so re-attaching it before the unit's
// backward makes them valid again; the all-gather writes through the raw pointer, which does
// not bump the version counter autograd checks.
//
// Per micro-step, for each unit call:
//   forward:  gather (wait for the prefetched gather, or gather now) -> body -> release,
//             unless the unit is used again within stage3_max_reuse_distance elements;
//   backward: a hook on the unit's outputs gathers the groups again before the unit's
//             backward; when every parameter of a group has its gradient (AccumulateGrad
//             post hook) the group's gradients are reduce-scattered into the owned gradient
//             shard and the full parameters are released.
// That is 3 x (N-1)/N of every partitioned element moved per step (Note [Counting
// communicated bytes]); the persistent group moves 2x (reduce-scatter, then all-gather after
// the optimizer step).
//
// With a compute dtype wider than the stored one (fp32 from 16-bit shards, Note [Compute
// dtype] in zero/config.h) `full` and the gathered buffers are fp32: a gather collects the
// 16-bit shards into a pooled 16-bit staging buffer and widens it into the fp32 buffer, and a
// group's fp32 gradients are narrowed into the communication dtype as they are copied into
// its gradient buffer. Shards, collectives and the optimizer's view stay exactly those of the
// 16-bit run.
//
// Prefetch follows the recorded order of fetches: Note [Stage 3 trace and prefetch] in
// gather_schedule.h.
//
// Note [ZeRO++]
// ~~~~~~~~~~~~~
// Three options (zero/config.h: ZeroPlusPlusConfig; arXiv 2306.10209) cut what crosses
// nodes, on k nodes of m ranks (N = k m, Topology::blocked). A gather delivers a "wire"
// buffer of N chunks, chunk r from rank r, which is then decoded into the gathered buffer:
//   plain  the stored 16-bit shards (decoding: none, or widening to the compute dtype);
//   qwZ    (zero_quantized_weights) each rank's shard as one record of int8 with a scale
//          per 256 values (Note [Block quantization], src/quant/block_quantization.h);
//          decoding dequantizes. Only unit fetches (forward, backward, recompute, and
//          evaluation forwards) are quantized: zero::GatheredParameters, state dicts,
//          checkpoints, exports and the persistent group gather exactly, and a group gathered
//          quantized is gathered again exactly when pinned (refused while a unit runs on it).
//   hpZ    (zero_hpz_partition_size = m) after a unit fetch's all-gather over every rank,
//          local rank l keeps slice l of m of the wire buffer ("secondary" partition); later
//          unit fetches of the group gather the wire from the node's secondaries
//          (CollectiveGroup::kNode), which moves nothing across nodes. So the forward gathers
//          across nodes and the backward (and every fetch of later micro-steps) inside the
//          node. The secondaries hold exactly what the first fetch delivered, so every fetch
//          sees the same values; they are dropped whenever the shards change (optimizer step,
//          load_checkpoint, GatheredParameters with a modifier). Memory: 1/m of the wire per
//          group and rank, kept between steps.
//   qgZ    (zero_quantized_gradients) the gradient reduce-scatter in two hops: an exact
//          reduce-scatter inside the node gives local rank l the node's sums of the chunks of
//          local index l on every node; those k chunks are quantized (int4, a scale per 128
//          values) and exchanged with the k ranks of local index l (all_to_all across
//          nodes); each rank dequantizes the k partial sums of its own chunk and adds them in
//          fp32, in node order. Each value is quantized once whatever k is (a ring that
//          requantized at every hop would add k errors), so the error stays below
//          sum over nodes of (block max of the node's partial sum) / 14. On one node nothing
//          crosses nodes and the reduce-scatter stays exact.
// Per step (one micro-step) across nodes, in units of a plain 16-bit gather's inter-node
// bytes: plain stage 3 moves 1 (forward) + 1 (backward) + 1 (reduce-scatter); with all three
// 0.51 + 0 + 0.27 (the scales included).
// All ranks make the same fetches in the same order (the agreed trace), so whether a gather
// goes over every rank or inside the node is decided alike everywhere.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/engine_core.h"
#include "engine/fingerprint.h"
#include "engine/flat_group.h"
#include "engine/gather_schedule.h"
#include "engine/param_storage.h"
#include "engine/parameter_access.h"
#include "engine/unit_grouping.h"
#include "engine/unit_registry.h"
#include "quant/block_quantization.h"
#include "state/param_store.h"
#include "zero/error.h"
#include "zero/shard.h"

namespace zero {
namespace {

// How many trace invalidations rank 0 reports before it only counts them.
constexpr int kReportedInvalidations = 3;

enum class GroupState { kReleased, kInFlight, kGathered };

// One unit's partitioned parameters (or the persistent ones): a flat group (Note [Flat
// groups]) whose range is its whole buffer, [0, layout.numel).
struct Group : FlatGroup {
  std::string name;
  bool persistent = false;
  int unit = -1;             // the unit whose own parameters these are (-1: persistent)
  ShardLayout layout;
  int64_t shard_offset = 0;  // this rank's shard in the shard space
  at::Tensor full;           // param dtype, padded_numel; the parameters are views of it
  GroupState state = GroupState::kReleased;
  WorkHandle gather;        // the gather in flight
  ParamStore::Lease lease;   // its shard, held until the gather has finished
  std::shared_ptr<std::exception_ptr> gather_failure;  // set when the ranks gave the gather up
  at::Tensor gathered;       // the pooled buffer `full` points into while gathered
  int in_use = 0;            // running unit calls that need it
  int pins = 0;              // GatheredParameters scopes holding it
  bool prefetched = false;   // gathered ahead by the trace, not fetched yet
  bool reduced = false;      // its reduce-scatter was launched in this backward
  bool exact = true;         // gathered (or in flight) without quantization (Note [ZeRO++])
  at::Tensor secondary;      // hpZ: this rank's slice of the wire buffer (Note [ZeRO++])
  bool secondary_valid = false;  // written by the communicator's thread while no step runs
};

struct Unit {
  std::string name;
  const torch::nn::Module* module = nullptr;
  std::vector<int> groups;  // non-persistent groups the unit needs (its own first)
  std::shared_ptr<detail::UnitBinding> binding;
  std::shared_ptr<PrepartitionedUnit> prepartitioned;  // built under zero::ShardedInit
};

class Stage3Engine final : public EngineCore, public UnitRuntime, public ParameterAccess {
 public:
  Stage3Engine(std::shared_ptr<torch::nn::Module> model, const Config& config,
               std::shared_ptr<Communicator> comm);
  ~Stage3Engine() override;

  ModelStateBytes model_state_bytes() const override;
  int64_t num_parameters() const override { return num_parameters_; }
  void on_gradient_ready(int index) override;

  void unit_begin(int unit, CallPhase phase) override;
  void unit_end(int unit, const std::vector<at::Tensor>& outputs, CallPhase phase) override;
  void unit_abandon(int unit) override;

  void pin(const std::vector<at::Tensor>& params) override;
  void unpin(const std::vector<at::Tensor>& params, int modifier_rank) override;
  void visit_full_parameters(
      const std::function<void(const std::string&, const at::Tensor&)>& visit) override;

  std::vector<CheckpointParameter> checkpoint_parameters() const override;
  bool saves_param_shard() const override { return param_dtype_ != at::kFloat; }

 private:
  void begin_backward() override;
  void finish_backward() override;
  void abandon_backward() override;
  at::Tensor local_sum_of_squares() override;
  void apply_update(const GradMultiplier& grad_multiplier) override;
  void zero_gradients() override;
  void reload_parameters() override;
  void quiesce() override;

  void collect_parameters();
  std::string describe_parameters() const;
  void partition();
  void make_param_store();
  // Gathering.
  // A unit fetch may be quantized and may use the hpZ secondary; others gather exactly.
  void issue_gather(int g, bool unit_fetch);
  void all_gather_group(int g, const at::Tensor& shard, const at::Tensor& output, bool unit_fetch,
                        const std::string& label);
  // What a gather of group g issued now is for (Note [Collective signatures]): the unit and
  // the pass it is issued in (a prefetch at the forward's end for the backward says forward),
  // so that ranks on different paths are told where each one was.
  std::string gather_label(int g, bool unit_fetch) const;
  void invalidate_secondaries();
  void quantized_reduce_scatter(const at::Tensor& work, const at::Tensor& own,
                                const std::string& label);
  void check_zeropp() const;
  void read_ahead();
  // Waits for group g's gather (if in flight) and releases its shard's lease; rethrows a
  // failed read of an offloaded shard only when `report_read_failure`.
  void wait_gathered(int g, bool report_read_failure = true);
  // Group g's parameters lose their gathered storage, which goes back to the pool: released.
  void detach_gathered(int g);
  void release(int g);
  void release_prefetched();
  void fetch(int g, bool training, FetchMode mode);
  void prefetch();
  void enforce_live_budget();
  void before_backward(int unit);
  // Whether a unit call in `phase` is part of a training micro-step (recorded in the trace).
  bool training_call(CallPhase phase) const;
  void adopt_trace();
  // Gradients.
  void launch_reduction(int g);
  void reduce_group(int g);
  void gather_persistent();
  std::vector<int> groups_of(const std::vector<at::Tensor>& params) const;

  std::vector<TrainableParameter> params_;  // registration order; group and offset set
  std::unordered_map<const void*, int> param_index_;  // TensorImpl -> params_ index
  std::vector<Group> groups_;
  std::vector<Unit> units_;
  int persistent_group_ = -1;
  int64_t num_parameters_ = 0;
  int64_t shard_numel_ = 0;  // this rank's shard space

  // Param dtype, the shard space (this rank's shard of every group, one segment per group):
  // the source of every gather, and the copy the shard state's updates write (Note [Shard
  // state]); in memory or, with offload_param "nvme", on NVMe (Note [Parameter offload]).
  std::shared_ptr<ParamStore> param_store_;
  at::TensorOptions shard_options_;  // param dtype, on the parameters' device
  // offload_param with a device model (Note [Offload of a device model]): the shards live on
  // the host only, and each gather copies its shard up on the transfer queue first.
  bool shards_on_host_ = false;
  std::vector<StateSegment> owned_segments() const;  // this rank's shard space, by parameter
  BufferPool pool_;  // gathered parameters and gradients in flight

  // Note [ZeRO++].
  ZeroPlusPlusConfig zeropp_;
  BlockQuantization weight_format_{8, 256};
  BlockQuantization gradient_format_{4, 128};
  bool quantize_gradients_ = false;  // qgZ and more than one node

  std::unique_ptr<GatherSchedule> schedule_;  // Note [Stage 3 trace and prefetch]
  int64_t live_numel_ = 0;     // partitioned elements gathered or in flight
  int64_t live_peak_numel_ = 0;
};

Stage3Engine::Stage3Engine(std::shared_ptr<torch::nn::Module> model, const Config& config,
                           std::shared_ptr<Communicator> comm)
    : EngineCore(std::move(model), config, std::move(comm)) {
  ZERO_INTERNAL_ASSERT(policy_.parameters == StagePolicy::Parameters::kPartitioned,
                       "Stage3Engine runs stage 3, got ", stage_);
  const auto& zc = config_.zero_optimization;
  // reduce_scatter and contiguous_gradients change nothing here: each unit's gradients are
  // copied into one buffer and reduce-scattered together (the parser says so, docs/config.md).
  // reduce_bucket_size and allgather_bucket_size do not apply: stage 3 communicates per unit
  // (docs/config.md).
  zeropp_ = zc.zeropp;
  check_zeropp();
  quantize_gradients_ = zeropp_.quantized_gradients && comm_->topology().nodes() > 1;
  collect_parameters();
  check_ranks_agree(describe_parameters());
  partition();
  std::vector<int64_t> numel, padded;
  for (const Group& group : groups_) {
    numel.push_back(group.layout.numel);
    padded.push_back(group.layout.padded_numel);
  }
  GatherLimits limits;
  limits.prefetch_bucket = zc.stage3_prefetch_bucket_size;
  limits.max_live = zc.stage3_max_live_parameters;
  limits.max_reuse_distance = zc.stage3_max_reuse_distance;
  limits.prefetch = zc.overlap_comm_enabled() && zc.stage3_prefetch_bucket_size > 0;
  schedule_ = std::make_unique<GatherSchedule>(std::move(numel), std::move(padded), limits);
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& p : params_) {
    params.push_back(p.tensor);
    names.push_back(p.name);
  }
  register_gradient_hooks(params, names);
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    units_[u].binding = bind_unit(*units_[u].module, this, u);
  }
}

Stage3Engine::~Stage3Engine() {
  for (auto& unit : units_) {
    if (!unit.binding) continue;
    std::lock_guard<std::mutex> lock(unit.binding->mutex);
    unit.binding->runtime = nullptr;
  }
  shutdown();
}

void Stage3Engine::check_zeropp() const { check_config_for_ranks(config_, *comm_); }

void Stage3Engine::invalidate_secondaries() {
  for (Group& group : groups_) group.secondary_valid = false;
}

void Stage3Engine::collect_parameters() {
  // Parameters, each once (the first module that registers a shared one owns it), and the
  // grouping rule over them (unit_grouping.h), before the model changes dtype.
  const auto& zc = config_.zero_optimization;
  ModelParameters collected = collect_trainable_parameters(*model_);
  const UnitAssignment assignment = assign_units(
      collected, zc.stage3_param_persistence_threshold, zc.stage3_model_persistence_threshold);
  for (int m : assignment.unit_modules) {
    Unit u;
    u.name = collected.modules[m].first.empty() ? "<model>" : collected.modules[m].first;
    u.module = collected.modules[m].second.get();
    units_.push_back(std::move(u));
  }
  ZERO_CHECK(!units_.empty(), config_.source, ": zero_optimization.stage = 3, but the model ",
             "declares no units: call zero::declare_unit(module) for each block (zero/unit.h) ",
             "and run them with zero::run, or use stage 2");
  // Units partitioned while the model was built must match this engine's configuration.
  for (auto& unit : units_) {
    unit.prepartitioned = take_prepartitioned(*unit.module);
    if (!unit.prepartitioned) continue;
    const PrepartitionedUnit& built = *unit.prepartitioned;
    ZERO_CHECK(built.dtype == param_dtype_ && built.compute_dtype == compute_dtype_ &&
                   built.world == world_ &&
                   built.persistence_threshold == zc.stage3_param_persistence_threshold,
               "zero::initialize: unit '", unit.name, "' was partitioned by zero::ShardedInit for ",
               dtype_name(built.dtype), " parameters computed in ", dtype_name(built.compute_dtype),
               ", world size ", built.world, " and stage3_param_persistence_threshold ",
               built.persistence_threshold, ", but this config (", config_.source, ") has ",
               dtype_name(param_dtype_), ", ", dtype_name(compute_dtype_), ", ", world_, " and ",
               zc.stage3_param_persistence_threshold,
               "; build the model under a ShardedInit with the same config");
  }
  // DeepSpeed converts the whole module to the training dtype (module.half()/bfloat16()); here
  // the compute dtype (Note [Compute dtype]). Partitioned parameters are in that dtype already,
  // so this never reads their storage. The parameters keep their TensorImpls (set_data).
  model_->to(compute_dtype_);

  params_ = std::move(collected.parameters);
  const std::vector<int>& home_unit = assignment.home_unit;
  const std::vector<bool>& persistent = assignment.persistent;
  std::vector<std::vector<int>> unit_uses(units_.size());  // params each unit touches
  for (int m = 0; m < static_cast<int>(collected.modules.size()); ++m) {
    const int unit = assignment.unit_of_module[m];
    if (unit < 0) continue;
    for (int index : collected.uses[m]) unit_uses[unit].push_back(index);
  }
  int64_t persistent_numel = 0;
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    param_index_[params_[i].tensor.unsafeGetTensorImpl()] = i;
    num_parameters_ += params_[i].numel;
    if (persistent[i]) persistent_numel += params_[i].numel;
  }

  // Groups: the persistent one first, then one per unit that owns partitioned parameters.
  auto add_param = [&](int g, int i) {
    Group& group = groups_[g];
    params_[i].group = g;
    params_[i].offset = group.layout.numel;
    group.layout.numel += params_[i].numel;
    group.params.push_back(i);
  };
  if (persistent_numel > 0) {
    groups_.emplace_back();
    groups_.back().name = "<persistent>";
    groups_.back().persistent = true;
    persistent_group_ = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (persistent[i]) add_param(persistent_group_, static_cast<int>(i));
    }
  }
  std::vector<int> group_of_unit(units_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (persistent[i]) continue;
    const int unit = home_unit[i];
    if (group_of_unit[unit] < 0) {
      groups_.emplace_back();
      groups_.back().name = units_[unit].name;
      groups_.back().unit = unit;
      group_of_unit[unit] = static_cast<int>(groups_.size()) - 1;
    }
    add_param(group_of_unit[unit], static_cast<int>(i));
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (group_of_unit[u] >= 0) units_[u].groups.push_back(group_of_unit[u]);
    for (int i : unit_uses[u]) {
      const int g = params_[i].group;
      if (g == persistent_group_) continue;
      auto& needed = units_[u].groups;
      if (std::find(needed.begin(), needed.end(), g) == needed.end()) needed.push_back(g);
    }
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].prepartitioned) continue;
    std::vector<const void*> expected;
    if (group_of_unit[u] >= 0) {
      for (int i : groups_[group_of_unit[u]].params) {
        expected.push_back(params_[i].tensor.unsafeGetTensorImpl());
      }
    }
    std::vector<const void*> built;
    for (const auto& p : units_[u].prepartitioned->params) built.push_back(p.unsafeGetTensorImpl());
    ZERO_CHECK(expected == built, "zero::initialize: unit '", units_[u].name, "' was partitioned ",
               "by zero::ShardedInit with ", built.size(), " parameters, but the finished model ",
               "gives it ", expected.size(), " (a parameter shared with a unit declared earlier ",
               "in construction than in module order?); build this model without ShardedInit");
  }
  for (auto& group : groups_) {
    group.layout = shard_layout(group.layout.numel, world_, kShardAlignment);
    group.range = Range{0, group.layout.numel};
    group.shard_offset = shard_numel_;
    shard_numel_ += group.layout.shard_numel;
  }
}

std::string Stage3Engine::describe_parameters() const {
  std::ostringstream description;
  for (const auto& group : groups_) {
    description << "group " << group.name << " " << group.layout.numel << "\n";
  }
  for (const auto& p : params_) {
    description << "parameter " << p.name << " " << p.tensor.sizes() << " "
                << dtype_name(p.tensor.scalar_type()) << " group " << groups_[p.group].name
                << "\n";
  }
  return description.str();
}

// One group at a time: rank 0's values are broadcast, this rank keeps its shard, and the
// full copy is released; the peak beyond the model as built is one group's full buffer.
// Groups partitioned while the model was built (zero::ShardedInit) are adopted as they are.
void Stage3Engine::partition() {
  const auto device = params_.front().tensor.device();
  shard_options_ = at::TensorOptions().device(device).dtype(param_dtype_);
  prepare_device_offload(device);  // Note [Offload of a device model]
  make_param_store();
  // A write to NVMe that fails on one rank must not leave the others in the next broadcast:
  // the first failure is kept and every rank agrees on it after the loop.
  std::string write_error;
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    Group& group = groups_[g];
    std::vector<at::Tensor> members;
    for (int i : group.params) members.push_back(params_[i].tensor);
    PartitionedGroup partitioned;
    if (group.unit >= 0 && units_[group.unit].prepartitioned) {
      partitioned = std::move(units_[group.unit].prepartitioned->group);
      units_[group.unit].prepartitioned.reset();
    } else {
      partitioned = partition_parameters(members, param_dtype_, compute_dtype_, *comm_,
                                         group.persistent, group.name);
      count_moved(partitioned.moved);
    }
    ZERO_INTERNAL_ASSERT(partitioned.layout.padded_numel == group.layout.padded_numel,
                         "group ", group.name, " partitioned with ", partitioned.layout.padded_numel,
                         " elements, expected ", group.layout.padded_numel);
    if (write_error.empty()) {
      write_error = capture_error([&] { param_store_->write(group.shard_offset, partitioned.shard); });
    }
    group.full = partitioned.full;
    group.state = group.persistent ? GroupState::kGathered : GroupState::kReleased;
  }
  agree_on_failure(*comm_, "writing the parameter shards", write_error);
  const std::vector<StateSegment> owned = owned_segments();
  // The master weights start from the shards, read from NVMe when offloaded: a failure on one
  // rank fails every rank (the store maker agrees on its own failures, on every rank alike).
  const StateStoreMaker make_store = state_store_maker(state_device(device));
  agree_on_failure(*comm_, "making the shard state", capture_error([&] {
    state_ = std::make_unique<ShardState>(config_.optimizer, param_store_,
                                          make_gradient_shard(shard_numel_, device),
                                          config_.zero_optimization.sub_group_size,
                                          optimizer_placement(), make_store, owned, owned);
  }));
  int64_t largest_piece = 0;  // a group's shard, the most the gradient pipeline gets
  for (const Group& group : groups_) largest_piece = std::max(largest_piece, group.layout.shard_numel);
  start_gradient_pipeline(largest_piece);
}

// The shard space's store: one segment per group, in memory, or with offload_param "nvme" in a
// swap file but for the persistent group and max_in_cpu elements (Note [Parameter offload]).
void Stage3Engine::make_param_store() {
  const OffloadConfig& offload = config_.zero_optimization.offload_param;
  // offload_param on a device model: the shards on the host (pinned with "cpu", in swap files
  // with "nvme"), stepped there by the offloaded optimizer; a gather copies its shard up first
  // (all_gather_group). On CPU ranks "cpu" is where the shards are already (Note [CPU offload
  // on CPU ranks]).
  const bool device_model = !shard_options_.device().is_cpu() || device_offload();
  ZERO_CHECK(offload.device == OffloadDevice::kNone || !device_model || device_offload(),
             config_.source, ": zero_optimization.offload_param.device = \"",
             offload.device == OffloadDevice::kNvme ? "nvme" : "cpu", "\" with parameters on ",
             shard_options_.device(), " needs zero_optimization.offload_optimizer.device \"cpu\" ",
             "or \"nvme\" too: the optimizer steps the parameters where they are kept");
  shards_on_host_ = device_model && offload.device != OffloadDevice::kNone;
  std::vector<int64_t> numel;
  std::vector<bool> persistent;
  for (const Group& group : groups_) {
    numel.push_back(group.layout.shard_numel);
    persistent.push_back(group.persistent);
  }
  if (offload.device == OffloadDevice::kCpu && shards_on_host_) {
    param_store_ = std::make_shared<ParamStore>(
        transfer_->host_buffer(shard_numel_, param_dtype_, offload.pin_memory),
        param_segments(numel, persistent, shard_numel_));
    return;
  }
  if (offload.device != OffloadDevice::kNvme) {
    // Offloaded from a device, a host copy of the shards with them as its device copy.
    param_store_ = make_param_store_over(at::empty({shard_numel_}, shard_options_),
                                         param_segments(numel, persistent, shard_numel_));
    return;
  }
  const std::vector<ParamStore::Segment> segments =
      param_segments(numel, persistent, offload.max_in_cpu);
  // Shards differ between ranks, so this can fail on some only: every rank throws together
  // (one message, the lowest failing rank's), none waits in the collectives below.
  agree_on_failure(*comm_, "NVMe offload", capture_error([&] {
    for (size_t g = 0; g < groups_.size(); ++g) {
      ZERO_CHECK(!segments[g].swapped || segments[g].numel <= offload.buffer_size, config_.source,
                 ": zero_optimization.offload_param.buffer_size = ", offload.buffer_size,
                 " elements is smaller than this rank's shard of unit '", groups_[g].name, "' (",
                 segments[g].numel, " elements), which must fit in one buffer; allowed: >= ",
                 segments[g].numel, " at this world size");
    }
  }));
  AsyncIo& io = async_io();
  const SwapDirectory& directory =
      swap_directory(offload.nvme_path, config_.source + ": zero_optimization.offload_param.nvme_path");
  agree_on_failure(*comm_, "NVMe offload", capture_error([&] {
    param_store_ = std::make_shared<ParamStore>(param_dtype_, segments, offload, io, directory,
                                                "parameters");
  }));
}

ModelStateBytes Stage3Engine::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.params = shard_numel_ * static_cast<int64_t>(c10::elementSize(param_dtype_));
  if (persistent_group_ >= 0) bytes.params += groups_[persistent_group_].full.nbytes();
  bytes.grads = state_->gradient_bytes();
  bytes.master_params = state_->master_bytes();
  bytes.optimizer_state = state_->moment_bytes();
  bytes.on_nvme = state_->file_bytes() > 0 ? bytes.master_params + bytes.optimizer_state : 0;
  bytes.params_on_nvme = param_store_->swapped_bytes();
  bytes.on_nvme += bytes.params_on_nvme;
  bytes.staging = state_->staging_bytes() + param_store_->staging_bytes();
  bytes.gathered_peak =
      live_peak_numel_ * static_cast<int64_t>(c10::elementSize(compute_dtype_));
  // hpZ's secondary partitions stay between steps, like the shards (Note [ZeRO++]).
  for (const Group& group : groups_) {
    if (group.secondary.defined()) bytes.params += group.secondary.nbytes();
  }
  return bytes;
}

// ---- gathering ---------------------------------------------------------------------------

std::string Stage3Engine::gather_label(int g, bool unit_fetch) const {
  const std::string unit = "stage-3 gather of unit '" + groups_[g].name + "'";
  if (!unit_fetch) return unit + ", whole (zero::GatheredParameters or a checkpoint)";
  if (in_backward_) return unit + " in the backward pass";
  return unit + (c10::GradMode::is_enabled()
                     ? " in the forward pass"
                     : " in a forward without gradients (evaluation, or a checkpointed call)");
}

void Stage3Engine::issue_gather(int g, bool unit_fetch) {
  Group& group = groups_[g];
  ZERO_INTERNAL_ASSERT(group.state == GroupState::kReleased, "gather of ", group.name,
                       " while it is not released");
  // An offloaded shard needs a slot (Note [Parameter offload]); when gathers in flight hold
  // them all, the oldest is waited for, which frees its slot.
  while (!param_store_->can_lease(g)) {
    int oldest = -1;
    for (int h = 0; h < static_cast<int>(groups_.size()) && oldest < 0; ++h) {
      if (groups_[h].state == GroupState::kInFlight) oldest = h;
    }
    ZERO_INTERNAL_ASSERT(oldest >= 0, "no parameter slot for ", group.name,
                         " and no gather in flight to free one");
    wait_gathered(oldest);
  }
  const int64_t padded = group.layout.padded_numel;
  at::Tensor buffer = pool_.acquire(padded, shard_options_.dtype(compute_dtype_));
  group.gathered = buffer;
  attach_storage(group.full, buffer);
  group.state = GroupState::kInFlight;
  group.exact = !(unit_fetch && zeropp_.quantized_weights);
  live_numel_ += padded;
  live_peak_numel_ = std::max(live_peak_numel_, live_numel_);
  at::Tensor output = buffer.narrow(0, 0, padded);
  group.lease = param_store_->lease(g);
  const ParamStore::Lease lease = group.lease;
  // The read of an offloaded shard is waited for on the communicator's thread, so it overlaps
  // whatever the main thread computes until the gather is needed.
  const bool offloaded = param_store_->offloaded();
  auto failure = std::make_shared<std::exception_ptr>();
  group.gather_failure = failure;
  group.gather = submit([this, g, lease, output, offloaded, failure, unit_fetch,
                         label = gather_label(g, unit_fetch)] {
    if (offloaded) {
      // A rank whose read failed (a swap file changed under the run, an I/O error) must not
      // leave the others in the all-gather: every rank agrees first (Note [Agreeing on a
      // failure]), and then none gathers; the error is thrown on the main thread (wait_gathered),
      // so the communicator's queue goes on.
      try {
        agree_on_failure(*comm_, "reading the parameter shard of unit '" + groups_[g].name + "'",
                         capture_error([&] { AsyncIo::wait(lease.ready); }));
      } catch (const Error&) {
        *failure = std::current_exception();
        return;
      }
    }
    all_gather_group(g, lease.shard, output, unit_fetch, label);
  });
}

// Gathers group g's shards into `output` (compute dtype, padded_numel elements) through the
// wire buffer of Note [ZeRO++]: the output itself when nothing is to decode, else a pooled
// 16-bit staging buffer (widened into it) or a pooled buffer of int8 records (dequantized into
// it). Written through `output`, a tensor of its own: the parameters' version counters are
// not bumped (Note [Stage 3 units]). Runs on the communicator's thread.
void Stage3Engine::all_gather_group(int g, const at::Tensor& shard, const at::Tensor& output,
                                    bool unit_fetch, const std::string& label) {
  Group& group = groups_[g];
  // A shard kept on the host (offload_param with a device model) goes up first, on the transfer
  // queue. This thread waits for the copy: the host memory it reads (a swap slot, or the shard
  // a step will overwrite) may be reused as soon as the gather is done.
  at::Tensor uploaded;
  at::Tensor input = shard;
  if (shards_on_host_) {
    uploaded = pool_.acquire(shard.numel(), shard_options_);
    input = uploaded.narrow(0, 0, shard.numel());
    transfer_->wait(transfer_->copy(input, shard, TransferQueue::Direction::kUp));
  }
  const bool quantized = unit_fetch && zeropp_.quantized_weights;
  const bool hierarchical = unit_fetch && zeropp_.hpz_partition_size > 1;
  const int64_t padded = group.layout.padded_numel;
  const int64_t shard_numel = group.layout.shard_numel;
  const int64_t record = weight_format_.record_bytes(shard_numel);
  at::Tensor pooled;
  at::Tensor wire = output;
  if (quantized) {
    pooled = pool_.acquire(world_ * record, shard_options_.dtype(at::kByte));
    wire = pooled.narrow(0, 0, world_ * record);
  } else if (compute_dtype_ != param_dtype_) {
    pooled = pool_.acquire(padded, shard_options_);
    wire = pooled.narrow(0, 0, padded);
  }
  CollectiveOptions labelled;
  labelled.label = label;
  if (hierarchical && group.secondary_valid) {
    CollectiveOptions node = labelled;
    node.group = CollectiveGroup::kNode;
    counted(comm_->all_gather(group.secondary, wire, {}, node))->wait();
  } else {
    at::Tensor mine = input;
    if (quantized) {
      mine = wire.narrow(0, rank_ * record, record);  // in place: this rank's chunk
      quantize_rows(input, mine, weight_format_);
    }
    counted(comm_->all_gather(mine, wire, {}, labelled))->wait();
    if (hierarchical) {
      const int64_t slice = wire.numel() / zeropp_.hpz_partition_size;
      const int64_t local = rank_ % zeropp_.hpz_partition_size;
      if (!group.secondary.defined()) group.secondary = at::empty({slice}, wire.options());
      group.secondary.copy_(wire.narrow(0, local * slice, slice));
      group.secondary_valid = true;
    }
  }
  if (quantized) {
    dequantize_rows(wire.view({world_, record}), output.view({world_, shard_numel}), weight_format_);
  } else if (!wire.is_same(output)) {
    output.copy_(wire);
  }
  pool_.put(std::move(pooled));
  pool_.put(std::move(uploaded));
}

void Stage3Engine::wait_gathered(int g, bool report_read_failure) {
  Group& group = groups_[g];
  if (group.state != GroupState::kInFlight) return;
  const WorkHandle gather = std::move(group.gather);
  group.gather = nullptr;
  const ParamStore::Lease lease = std::move(group.lease);
  group.lease = ParamStore::Lease{};
  const std::shared_ptr<std::exception_ptr> failure = std::move(group.gather_failure);
  group.gather_failure = nullptr;
  try {
    gather->wait();
  } catch (...) {
    param_store_->release(lease);
    detach_gathered(g);
    throw;
  }
  param_store_->release(lease);
  if (failure && *failure) {
    detach_gathered(g);
    if (report_read_failure) std::rethrow_exception(*failure);
    return;
  }
  group.state = GroupState::kGathered;
}

void Stage3Engine::detach_gathered(int g) {
  Group& group = groups_[g];
  detach_storage(group.full, group.name);
  pool_.put(std::move(group.gathered));
  group.gathered = at::Tensor();
  group.state = GroupState::kReleased;
  group.prefetched = false;
  live_numel_ -= group.layout.padded_numel;
}

void Stage3Engine::release(int g) {
  Group& group = groups_[g];
  if (group.persistent || group.state == GroupState::kReleased) return;
  // The buffer may not go back to the pool while the gather writes it. A shard that could not
  // be read does not matter to a release: nothing will use what was not gathered.
  wait_gathered(g, /*report_read_failure=*/false);
  if (group.state == GroupState::kReleased) return;  // that gather gathered nothing
  detach_gathered(g);
}

// Gathers issued ahead and not yet used: released (they are gathered again on use).
void Stage3Engine::release_prefetched() {
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    const Group& group = groups_[g];
    if (group.prefetched && group.pins == 0 && group.in_use == 0) release(g);
  }
}

void Stage3Engine::quiesce() {
  wait_submitted();
  release_prefetched();
}

// Makes group g whole for a unit call; Note [Stage 3 trace and prefetch].
void Stage3Engine::fetch(int g, bool training, FetchMode mode) {
  if (training) {
    const GatherSchedule::Fetch fetch = schedule_->fetched(g, mode);
    if (fetch.invalidated) {
      if (rank_ == 0 && schedule_->invalidations() <= kReportedInvalidations) {
        const std::string expected =
            fetch.expected >= 0 ? groups_[fetch.expected].name : std::string("<end>");
        std::fprintf(stderr,
                     "zero: stage 3 unit order changed at fetch %zu (expected %s, got %s); "
                     "prefetch is off for this micro-step and the new order is recorded%s\n",
                     fetch.position, expected.c_str(), groups_[g].name.c_str(),
                     schedule_->invalidations() == kReportedInvalidations
                         ? " (further changes not reported)"
                         : "");
      }
      for (int h = 0; h < static_cast<int>(groups_.size()); ++h) {
        if (groups_[h].prefetched && h != g) release(h);
      }
    }
  }
  Group& group = groups_[g];
  if (group.state == GroupState::kReleased) issue_gather(g, /*unit_fetch=*/true);
  group.prefetched = false;
  wait_gathered(g);
  if (training) {
    prefetch();
    read_ahead();
  }
}

void Stage3Engine::prefetch() {
  int64_t ahead = 0;
  for (const auto& group : groups_) {
    if (group.prefetched) ahead += group.layout.padded_numel;
  }
  const auto released = [this](int h) { return groups_[h].state == GroupState::kReleased; };
  for (int g : schedule_->prefetch(released, ahead, live_numel_)) {
    issue_gather(g, /*unit_fetch=*/true);
    groups_[g].prefetched = true;
  }
}

// Offloaded shards of the groups the trace fetches next (those gathered now are skipped until
// they come up again), read into free slots (Note [Parameter offload]).
void Stage3Engine::read_ahead() {
  if (!param_store_->offloaded() || !schedule_->replaying()) return;
  std::vector<int> upcoming;
  std::vector<bool> seen(groups_.size(), false);
  const size_t wanted = static_cast<size_t>(config_.zero_optimization.offload_param.buffer_count);
  for (int g : schedule_->upcoming()) {
    if (upcoming.size() == wanted) break;
    const bool first = !seen[g];
    seen[g] = true;
    if (first && groups_[g].state != GroupState::kReleased) continue;  // its gather holds it
    if (std::find(upcoming.begin(), upcoming.end(), g) == upcoming.end()) upcoming.push_back(g);
  }
  param_store_->read_ahead(upcoming);
}

// Keeps gathered-but-idle groups within stage3_max_live_parameters, dropping those whose
// next use is farthest first (GatherSchedule::eviction_victim).
void Stage3Engine::enforce_live_budget() {
  const int64_t budget = config_.zero_optimization.stage3_max_live_parameters;
  while (live_numel_ > budget) {
    std::vector<int> candidates;
    for (int h = 0; h < static_cast<int>(groups_.size()); ++h) {
      const Group& group = groups_[h];
      if (group.persistent || group.state == GroupState::kReleased || group.in_use > 0 ||
          group.pins > 0 || group.prefetched || (in_backward_ && group.pending > 0)) {
        continue;
      }
      candidates.push_back(h);
    }
    const int victim = schedule_->eviction_victim(candidates);
    if (victim < 0) return;  // everything gathered is needed now
    release(victim);
  }
}

bool Stage3Engine::training_call(CallPhase phase) const {
  switch (phase) {
    case CallPhase::kPlain:
      return c10::GradMode::is_enabled() && !in_backward_;
    case CallPhase::kCheckpointedForward:  // grad mode is off inside it, yet it trains
      return !in_backward_;
    case CallPhase::kRecompute:
      return true;
  }
  return false;
}

// Note [Activation checkpointing] (activation_checkpoint.cpp): a checkpointed unit is fetched
// three times per micro-step (kForward, kRecompute, kBackward), each recorded in the trace.
void Stage3Engine::unit_begin(int unit, CallPhase phase) {
  ZERO_CHECK(phase != CallPhase::kRecompute || in_backward_, "the recompute of checkpointed ",
             "stage-3 unit '", units_[unit].name, "' ran outside engine.backward(loss): call ",
             "engine.backward(loss) instead of loss.backward()");
  const bool training = training_call(phase);
  const FetchMode mode = phase == CallPhase::kRecompute ? FetchMode::kRecompute : FetchMode::kForward;
  for (int g : units_[unit].groups) {
    fetch(g, training, mode);
    ++groups_[g].in_use;
  }
}

void Stage3Engine::unit_abandon(int unit) {
  for (int g : units_[unit].groups) --groups_[g].in_use;
}

void Stage3Engine::unit_end(int unit, const std::vector<at::Tensor>& outputs, CallPhase phase) {
  const bool training = training_call(phase);
  for (int g : units_[unit].groups) --groups_[g].in_use;
  // A checkpointed forward runs without grad mode: its outputs have no backward of their own
  // (the checkpoint's recompute calls the unit again and hooks those outputs).
  if (training && c10::GradMode::is_enabled() && !units_[unit].groups.empty()) {
    // The first gradient to reach any output re-gathers the unit for its backward.
    auto fired = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<HookTarget> target = hook_target_;
    for (const at::Tensor& output : outputs) {
      if (!output.defined() || !output.requires_grad()) continue;
      const_cast<at::Tensor&>(output).register_hook([target, fired, unit](const at::Tensor&) {
        if (fired->exchange(true)) return;
        std::lock_guard<std::mutex> lock(target->mutex);
        if (target->engine != nullptr) {
          static_cast<Stage3Engine*>(target->engine)->before_backward(unit);
        }
      });
    }
  }
  // After a recompute the unit's backward follows at once: its groups stay gathered until
  // their gradients are reduced (on_gradient_ready) or the backward ends.
  if (phase == CallPhase::kRecompute) return;
  for (int g : units_[unit].groups) {
    const Group& group = groups_[g];
    if (group.in_use > 0 || group.pins > 0) continue;
    if (training && schedule_->reused_soon(g)) continue;
    release(g);
  }
  enforce_live_budget();
}

void Stage3Engine::before_backward(int unit) {
  ZERO_CHECK(in_backward_, "the backward of stage-3 unit '", units_[unit].name,
             "' ran outside engine.backward(loss): call engine.backward(loss) instead of ",
             "loss.backward()");
  for (int g : units_[unit].groups) {
    if (groups_[g].reduced) continue;  // its gradients are complete: nothing left to compute
    fetch(g, /*training=*/true, FetchMode::kBackward);
  }
}

void Stage3Engine::adopt_trace() {
  if (schedule_->adopt() && world_ > 1) {
    // Every rank must replay the same trace, or their prefetch collectives would not match.
    std::ostringstream description;
    description << "stage 3 unit order:";
    for (int g : schedule_->trace()) description << " " << groups_[g].name;
    description << "\n";
    check_ranks_agree_on(*comm_, description.str());
  }
}

// ---- gradients ---------------------------------------------------------------------------

void Stage3Engine::begin_backward() {
  for (auto& group : groups_) {
    group.pending = static_cast<int>(group.params.size());
    group.reduced = false;
  }
}

void Stage3Engine::on_gradient_ready(int index) {
  ZERO_CHECK(in_backward_, "a gradient of '", params_[index].name,
             "' was computed outside engine.backward(loss): call engine.backward(loss) instead ",
             "of loss.backward() so loss scaling and gradient reduction happen");
  TrainableParameter& p = params_[index];
  Group& group = groups_[p.group];
  at::Tensor grad = p.tensor.grad();
  if (grad.defined()) {
    if (!group.grad_buffer.defined()) {
      pool_.acquire_gradients(group, group.layout.padded_numel,
                              shard_options_.dtype(comm_dtype_));
    }
    group.grad_buffer.narrow(0, p.offset, p.numel).copy_(grad.reshape({-1}));
    p.tensor.mutable_grad().reset();  // the full-size gradient is not kept
  }
  if (--group.pending == 0) {
    launch_reduction(p.group);
    if (group.in_use == 0 && group.pins == 0) release(p.group);
  }
}

void Stage3Engine::launch_reduction(int g) {
  Group& group = groups_[g];
  ZERO_INTERNAL_ASSERT(!group.reduced, "group ", group.name, " reduced twice in one backward");
  group.reduced = true;
  if (!group.grad_buffer.defined()) {  // no gradient arrived: contribute zeros
    pool_.acquire_gradients(group, group.layout.padded_numel,
                            shard_options_.dtype(comm_dtype_));
  }
  submit([this, g] { reduce_group(g); });
}

// Runs in the communicator's order (submit); Note [Deterministic reduction] in zero/comm.h.
void Stage3Engine::reduce_group(int g) {
  Group& group = groups_[g];
  const int64_t shard = group.layout.shard_numel;
  at::Tensor work = group.grad_buffer;
  at::Tensor own = work.narrow(0, rank_ * shard, shard);
  scale_before_reduction(work);  // Note [Gradient scaling] in engine_core.cpp
  const std::string label = "stage-3 reduce-scatter of unit '" + group.name + "' gradients";
  if (quantize_gradients_) {
    quantized_reduce_scatter(work, own, label);
  } else {
    CollectiveOptions labelled;
    labelled.label = label;
    counted(comm_->reduce_scatter(work, own, ReduceOp::kSum, {}, labelled))->wait();
  }
  deliver_reduced(own, group.shard_offset, config_.gradient_accumulation_steps > 1);
  pool_.release_gradients(group);
}

// qgZ (Note [ZeRO++]): `work` holds N chunks (chunk r for rank r = n m + l); `own` receives
// this rank's chunk summed over every rank.
void Stage3Engine::quantized_reduce_scatter(const at::Tensor& work, const at::Tensor& own,
                                            const std::string& label) {
  const Topology& topology = comm_->topology();
  const int m = topology.ranks_per_node(), k = topology.nodes();
  const int64_t chunk = own.numel();
  // Chunks regrouped by local index: super-chunk l holds the chunks of local index l, node by
  // node, so that the node's reduce-scatter gives local rank l the node's sums of them.
  at::Tensor packed_pool = pool_.acquire(work.numel(), work.options());
  at::Tensor packed = packed_pool.narrow(0, 0, work.numel());
  packed.view({m, k, chunk}).copy_(work.view({k, m, chunk}).transpose(0, 1));
  at::Tensor node_sum = work.narrow(0, 0, k * chunk);  // work is scratch now
  CollectiveOptions node;
  node.group = CollectiveGroup::kNode;
  node.label = label;
  counted(comm_->reduce_scatter(packed, node_sum, ReduceOp::kSum, {}, node))->wait();
  // Row n: the node's partial sum of the chunk of rank (n, l), quantized, sent to node n.
  const int64_t record = gradient_format_.record_bytes(chunk);
  const at::TensorOptions bytes = work.options().dtype(at::kByte);
  at::Tensor records_pool = pool_.acquire(2 * k * record, bytes);
  at::Tensor outgoing = records_pool.narrow(0, 0, k * record);
  at::Tensor incoming = records_pool.narrow(0, k * record, k * record);
  quantize_rows(node_sum.view({k, chunk}), outgoing.view({k, record}), gradient_format_);
  CollectiveOptions across;
  across.group = CollectiveGroup::kAcrossNodes;
  across.label = label;
  counted(comm_->all_to_all(outgoing, incoming, across))->wait();
  // Every node's partial sum of this rank's chunk, added in node order in fp32.
  at::Tensor partial_pool = pool_.acquire(k * chunk, work.options().dtype(at::kFloat));
  at::Tensor partial = partial_pool.narrow(0, 0, k * chunk).view({k, chunk});
  dequantize_rows(incoming.view({k, record}), partial, gradient_format_);
  at::Tensor total = partial[0];
  for (int n = 1; n < k; ++n) total.add_(partial[n]);
  own.copy_(total);
  pool_.put(std::move(packed_pool));
  pool_.put(std::move(records_pool));
  pool_.put(std::move(partial_pool));
}

void Stage3Engine::finish_backward() {
  // Groups some of whose parameters got no gradient in this backward: reduce what there is,
  // in group order (the same on every rank).
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    if (!groups_[g].reduced) launch_reduction(g);
  }
  wait_submitted();
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    if (groups_[g].pins == 0) release(g);
  }
  adopt_trace();
}

void Stage3Engine::abandon_backward() {
  try {
    wait_submitted();
  } catch (...) {
    // The autograd error is what the caller sees.
  }
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    Group& group = groups_[g];
    group.grad_buffer = at::Tensor();
    group.grad_pooled = at::Tensor();
    group.reduced = true;
    if (group.pins == 0) release(g);
  }
  schedule_->abandon();
}

at::Tensor Stage3Engine::local_sum_of_squares() {
  // Padding contributes zeros (the gradient buffers are zeroed), so the whole shard will do.
  return sum_of_squares(state_->gradient());
}

void Stage3Engine::apply_update(const GradMultiplier& grad_multiplier) {
  step_shard_state(grad_multiplier);
  invalidate_secondaries();  // the shards changed (Note [ZeRO++])
  gather_persistent();
}

void Stage3Engine::gather_persistent() {
  if (persistent_group_ < 0) return;
  at::NoGradGuard no_grad;
  // Through a tensor of its own sharing full's storage, like every gather.
  const Group& group = groups_[persistent_group_];
  const ParamStore::Lease lease = param_store_->lease(persistent_group_);  // always in memory
  all_gather_group(persistent_group_, lease.shard,
                   at::from_blob(group.full.data_ptr(), {group.layout.padded_numel},
                                 group.full.options()),
                   /*unit_fetch=*/false, "stage-3 gather of the persistent parameters");
  param_store_->release(lease);
}

void Stage3Engine::zero_gradients() {
  // Offloaded without accumulation, the next boundary's reductions replace every element of
  // the host gradient (every group is reduced, Note [Offload of a device model]).
  if (device_offload() && config_.gradient_accumulation_steps == 1) return;
  state_->gradient().zero_();
}

// ---- checkpoints ------------------------------------------------------------------------

std::vector<CheckpointParameter> Stage3Engine::checkpoint_parameters() const {
  std::vector<CheckpointParameter> result;
  for (const auto& p : params_) result.push_back({p.name, p.tensor.sizes().vec(), p.numel});
  return result;
}

std::vector<StateSegment> Stage3Engine::owned_segments() const {
  std::vector<StateSegment> segments;
  for (const auto& group : groups_) {
    const Range owned = group.layout.owned(rank_);
    for (int i : group.params) {
      const TrainableParameter& p = params_[i];
      const Range part = intersect(Range{p.offset, p.offset + p.numel}, owned);
      if (part.empty()) continue;
      segments.push_back({i, part.begin - p.offset, part.end - p.offset,
                          group.shard_offset + part.begin - owned.begin});
    }
  }
  return segments;
}

void Stage3Engine::reload_parameters() {
  at::NoGradGuard no_grad;
  ZERO_CHECK(!in_backward_, "load_checkpoint during backward");
  quiesce();
  // The 16-bit shard is the master weights rounded, exactly as the optimizer writes it; the
  // gathered copies are stale, so everything is released and re-gathered on use. Offloaded,
  // the rounding writes swap files and can fail on one rank: every rank agrees.
  agree_on_failure(*comm_, "load_checkpoint (rounding the parameters from the master weights)",
                   capture_error([&] { state_->round_params_from_master(); }));
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    ZERO_CHECK(groups_[g].pins == 0, "load_checkpoint while a zero::GatheredParameters holds unit '",
               groups_[g].name, "'");
    release(g);
  }
  invalidate_secondaries();
  gather_persistent();
  zero_gradients();
}

// ---- access outside forward (zero::GatheredParameters, state dicts) ---------------------

std::vector<int> Stage3Engine::groups_of(const std::vector<at::Tensor>& params) const {
  std::vector<int> groups;
  for (const at::Tensor& p : params) {
    auto it = param_index_.find(p.unsafeGetTensorImpl());
    ZERO_CHECK(it != param_index_.end(), "zero::GatheredParameters: a tensor of shape ",
               p.sizes(), " is not a trainable parameter of this engine's model");
    const int g = params_[it->second].group;
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  std::sort(groups.begin(), groups.end());  // the same order on every rank
  return groups;
}

void Stage3Engine::pin(const std::vector<at::Tensor>& params) {
  ZERO_CHECK(!in_backward_, "zero::GatheredParameters cannot be used during backward");
  for (int g : groups_of(params)) {
    if (groups_[g].persistent) continue;  // always whole
    if (!groups_[g].exact && groups_[g].state != GroupState::kReleased) {
      // Gathered quantized for a unit (Note [ZeRO++]): gathered again, exactly.
      ZERO_CHECK(groups_[g].in_use == 0 && groups_[g].pins == 0, "zero::GatheredParameters: ",
                 "unit '", groups_[g].name, "' is running on parameters gathered with ",
                 "zero_quantized_weights; gather its parameters exactly before or after the ",
                 "unit runs, not inside it");
      release(g);
    }
    if (groups_[g].state == GroupState::kReleased) issue_gather(g, /*unit_fetch=*/false);
    groups_[g].prefetched = false;
    wait_gathered(g);
    ++groups_[g].pins;
  }
}

void Stage3Engine::unpin(const std::vector<at::Tensor>& params, int modifier_rank) {
  const std::vector<int> groups = groups_of(params);
  at::NoGradGuard no_grad;
  // Writing the shards may need every parameter slot (Note [Parameter offload]): gathers
  // issued ahead give theirs back first (a forward that needs them gathers them again).
  if (modifier_rank >= 0) {
    release_prefetched();
    invalidate_secondaries();
  }
  for (int g : groups) {
    Group& group = groups_[g];
    if (modifier_rank >= 0) {
      // The modifier's values become everyone's, and this rank's shard (and fp32 master)
      // takes its part of them, as stored: with a wider compute dtype they are rounded to the
      // stored dtype first, so the gathered copy, the shard and the master agree.
      counted(comm_->broadcast(group.full, modifier_rank))->wait();
      if (compute_dtype_ != param_dtype_) group.full.copy_(group.full.to(param_dtype_));
      const Range owned = group.layout.owned(rank_);
      at::Tensor source = group.full.narrow(0, owned.begin, owned.size());
      // Offloaded, the writes go to swap files and can fail on one rank: every rank agrees
      // before the next group's broadcast (Note [Agreeing on a failure]).
      agree_on_failure(*comm_, "writing the modified parameters of unit '" + group.name + "'",
                       capture_error([&] {
                         param_store_->write(group.shard_offset, source);
                         if (param_dtype_ != at::kFloat) {
                           state_->write_master(group.shard_offset, source);
                         }
                       }));
    }
    if (!group.persistent) {
      ZERO_INTERNAL_ASSERT(group.pins > 0, "unpin of group ", group.name, " that is not pinned");
      if (--group.pins == 0 && group.in_use == 0) release(g);
    }
  }
}

void Stage3Engine::visit_full_parameters(
    const std::function<void(const std::string&, const at::Tensor&)>& visit) {
  // One group at a time, so at most one unit's parameters are gathered beyond the usual.
  for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
    std::vector<at::Tensor> members;
    for (int i : groups_[g].params) members.push_back(params_[i].tensor);
    pin(members);
    try {
      for (int i : groups_[g].params) visit(params_[i].name, params_[i].tensor);
    } catch (...) {
      unpin(members, -1);
      throw;
    }
    unpin(members, -1);
  }
}

}  // namespace

std::unique_ptr<Engine> make_stage3_engine(std::shared_ptr<torch::nn::Module> model,
                                           const Config& config,
                                           std::shared_ptr<Communicator> comm) {
  return std::make_unique<Stage3Engine>(std::move(model), config, std::move(comm));
}

}  // namespace zero
