// The memory planner (zero/memory_plan.h).
//
// Note [Memory plan]
// ~~~~~~~~~~~~~~~~~~
// One rank's peak during a training step is what it holds between steps plus what one
// micro-batch adds at its worst moment:
//   - model state: the ZeRO formulas of estimate_state (zero/memory.h), at stage 3 over the
//     engine's groups (one per unit, persistence rule of Note [Stage 3 units], each padded by
//     shard_layout), plus the persistent parameters whole;
//   - the engine's buffers, which its pool keeps from one step to the next (BufferPool,
//     flat_group.h): stage 2's gradient buckets (the engine's own cut_into_groups at
//     reduce_bucket_size; two in use while one is reduced and the next filled when there are
//     several and overlap_comm, which is a lower bound); stage 3's gathered units, found by
//     replaying the engine's decisions with its GatherSchedule over the model's unit calls
//     (simulated_gathered_peak); the 16-bit staging buffer of a gather widened into fp32
//     compute; the gradient buffers of the largest unit and of the persistent group. Stages
//     0-1 reduce in their gradient buffer, which world > 1 puts in shared memory on a node
//     (Communicator::allocate_buffer), and with a communication dtype of their own convert a
//     bucket at a time;
//   - activations, from the model (PlanModel): GPT-2 derives them from its forward
//     (gpt2.cpp, Note [GPT-2 activation memory]).
// What it leaves out: the runtime (code, MPI, glibc's free lists: RSS is above the plan by about
// 1 GB), and the pool's buffers from a different step shape (evaluation at another batch).
// tests/test_memory_plan.cpp checks the sum against host_memory_stats()'s peak (which counts
// shared memory too) within 10 % for gpt2-tiny at every stage and 1, 2 and 4 ranks.
#include "zero/memory_plan.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <unordered_set>

#include "common/byte_size.h"
#include "engine/flat_group.h"
#include "engine/gather_schedule.h"
#include "engine/host_offload.h"
#include "engine/unit_grouping.h"
#include "offload/swap_file.h"
#include "optim/muon.h"
#include "optim/optimizer_state.h"
#include "state/param_store.h"
#include "zero/error.h"
#include "zero/memory.h"
#include "zero/shard.h"

namespace zero {
namespace {

int64_t bytes_of(c10::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

int64_t largest_shard_numel(const std::vector<int64_t>& shards) {
  int64_t largest = 0;
  for (int64_t numel : shards) largest = std::max(largest, numel);
  return largest;
}

// Stage 3's groups per Note [Stage 3 units]: partitioned elements per unit, and the
// persistent ones (outside every unit, or small while the running total stays within the cap).
struct Groups {
  std::vector<int64_t> partitioned;  // per unit with any, in order
  std::vector<int> group_of_unit;    // per PlanModel unit: its index in `partitioned`, or -1
  int64_t persistent = 0;
  std::vector<bool> persistent_parameter;  // per parameter, in the units' order
};

Groups stage3_groups(const PlanModel& model, const ZeroOptimizationConfig& zero) {
  Groups groups;
  for (const PlanUnit& unit : model.units) {
    int64_t numel = 0;
    for (int64_t p : unit.parameter_numels) {
      const bool small = p <= zero.stage3_param_persistence_threshold &&
                         groups.persistent + p <= zero.stage3_model_persistence_threshold;
      groups.persistent_parameter.push_back(!unit.declared || small);
      if (!unit.declared || small) {
        groups.persistent += p;
      } else {
        numel += p;
      }
    }
    groups.group_of_unit.push_back(numel > 0 ? static_cast<int>(groups.partitioned.size()) : -1);
    if (numel > 0) groups.partitioned.push_back(numel);
  }
  return groups;
}

// The most elements stage 3 holds gathered at once during a replayed micro-step: the engine's
// decisions (Stage3Engine::fetch, unit_end, enforce_live_budget, on_gradient_ready) over the
// model's unit calls, with the same GatherSchedule making the trace's choices (prefetch, reuse,
// eviction). A unit's backward comes in the reverse order of the calls, a checkpointed unit's
// after its recompute; a group is released after the backward of its last call (its gradients
// are complete only then: GPT-2's tied wte stays gathered from the head's backward to the
// embedding's).
int64_t simulated_gathered_peak(const PlanModel& model, const Groups& groups,
                                const std::vector<int64_t>& padded,
                                const ZeroOptimizationConfig& zero) {
  struct Event {
    int group;
    FetchMode mode;
    bool last_backward;  // the group's gradients are complete after it
  };
  std::vector<int> calls = model.forward_calls;
  if (calls.empty()) {
    for (int u = 0; u < static_cast<int>(model.units.size()); ++u) calls.push_back(u);
  }
  std::vector<Event> events;
  for (int u : calls) {
    const int g = groups.group_of_unit.at(u);
    if (g >= 0) events.push_back({g, FetchMode::kForward, false});
  }
  std::vector<bool> seen(padded.size(), false);
  const bool checkpointing = model.checkpointing && model.checkpointed.has_value();
  for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
    const int g = groups.group_of_unit.at(*it);
    if (g < 0) continue;
    if (checkpointing && model.units[*it].checkpointed) {
      events.push_back({g, FetchMode::kRecompute, false});
    }
    events.push_back({g, FetchMode::kBackward, false});
  }
  for (auto it = events.rbegin(); it != events.rend(); ++it) {  // the last backward of each
    if (it->mode == FetchMode::kBackward && !seen[it->group]) {
      seen[it->group] = true;
      it->last_backward = true;
    }
  }
  GatherLimits limits;
  limits.prefetch_bucket = zero.stage3_prefetch_bucket_size;
  limits.max_live = zero.stage3_max_live_parameters;
  limits.max_reuse_distance = zero.stage3_max_reuse_distance;
  limits.prefetch = zero.overlap_comm_enabled() && zero.stage3_prefetch_bucket_size > 0;
  GatherSchedule schedule(groups.partitioned, padded, limits);
  for (const Event& e : events) schedule.fetched(e.group, e.mode);  // the recording micro-step
  schedule.adopt();
  std::vector<bool> gathered(padded.size(), false), prefetched(padded.size(), false),
      complete(padded.size(), false);
  int64_t live = 0, peak = 0;
  auto gather = [&](int g) {
    if (gathered[g]) return;
    gathered[g] = true;
    live += padded[g];
    peak = std::max(peak, live);
  };
  auto release = [&](int g) {
    if (!gathered[g]) return;
    gathered[g] = prefetched[g] = false;
    live -= padded[g];
  };
  bool backward = false;
  for (const Event& e : events) {
    backward = backward || e.mode != FetchMode::kForward;
    schedule.fetched(e.group, e.mode);
    gather(e.group);
    prefetched[e.group] = false;
    int64_t ahead = 0;
    for (size_t g = 0; g < padded.size(); ++g) ahead += prefetched[g] ? padded[g] : 0;
    for (int h : schedule.prefetch([&](int g) { return !gathered[g]; }, ahead, live)) {
      gather(h);
      prefetched[h] = true;
    }
    if (e.mode == FetchMode::kForward) {  // unit_end
      if (!schedule.reused_soon(e.group)) release(e.group);
    } else if (e.last_backward) {          // on_gradient_ready: the group's pending reached 0
      complete[e.group] = true;
      release(e.group);
    }
    // enforce_live_budget: idle groups, farthest next use first.
    while (live > zero.stage3_max_live_parameters) {
      std::vector<int> idle;
      for (size_t g = 0; g < padded.size(); ++g) {
        const bool pending = backward && !complete[g];
        if (gathered[g] && !prefetched[g] && static_cast<int>(g) != e.group && !pending) {
          idle.push_back(static_cast<int>(g));
        }
      }
      const int victim = schedule.eviction_victim(idle);
      if (victim < 0) break;
      release(victim);
    }
  }
  return peak;
}

std::string human(int64_t bytes) { return byte_size_text(bytes); }

// What Muon's step holds beyond its state (Note [Muon under partitioning], ShardState's
// step_muon): u in fp32 when the kept gradient is not (else u is written over it), the
// exchange's two buffers (world x the largest batch's chunk each, for every batch and both
// directions) and Newton-Schulz's working set (the largest matrix's gathered copy, two
// copies of it and five of its short side squared). The holdings are laid out as the engines
// lay them out (Note [Flat buffers]: reverse registration order at stages 1-2; Note [Stage 3
// units]: per unit group), and the exchange is plan_muon_exchange's. 0 when the model gives
// no shapes.
int64_t muon_step_bytes(const PlanModel& model, const Config& config, int world,
                        const Groups& groups, int64_t shard_numel, std::string* basis) {
  const int stage = config.zero_optimization.stage;
  struct Param {
    int64_t numel;
    bool persistent;
  };
  std::vector<Param> params;
  std::vector<MuonMatrix> matrices;
  for (const PlanUnit& unit : model.units) {
    if (unit.parameter_shapes.size() != unit.parameter_numels.size()) return 0;
    for (size_t i = 0; i < unit.parameter_numels.size(); ++i) {
      const std::string& name =
          i < unit.parameter_names.size() ? unit.parameter_names[i] : unit.name;
      const size_t index = params.size();
      params.push_back({unit.parameter_numels[i],
                        stage == 3 && index < groups.persistent_parameter.size() &&
                            groups.persistent_parameter[index]});
      matrices.push_back(muon_matrix_of(name, unit.parameter_shapes[i]));
    }
  }
  std::vector<MuonHolding> holdings;
  auto hold = [&](int param, int64_t offset, const ShardLayout& layout) {
    for (int r = 0; r < world; ++r) {
      const Range owned = layout.owned(r);
      const int64_t begin = std::max(owned.begin, offset);
      const int64_t end = std::min(owned.end, offset + params[static_cast<size_t>(param)].numel);
      if (begin < end) holdings.push_back({r, param, begin - offset, end - offset, 0});
    }
  };
  const int n = static_cast<int>(params.size());
  if (stage == 1 || stage == 2) {
    int64_t psi = 0;
    for (const Param& p : params) psi += p.numel;
    const ShardLayout layout = shard_layout(psi, world, kShardAlignment);
    int64_t offset = 0;
    for (int i = n - 1; i >= 0; --i) {
      if (matrices[static_cast<size_t>(i)].muon()) hold(i, offset, layout);
      offset += params[static_cast<size_t>(i)].numel;
    }
  } else if (stage == 3) {
    int i = 0;
    for (const PlanUnit& unit : model.units) {
      int64_t group = 0;
      for (int j = i; j < i + static_cast<int>(unit.parameter_numels.size()); ++j) {
        const Param& p = params[static_cast<size_t>(j)];
        if (!p.persistent) group += p.numel;
      }
      const ShardLayout layout = shard_layout(group, world, kShardAlignment);
      int64_t offset = 0;
      for (size_t k = 0; k < unit.parameter_numels.size(); ++k, ++i) {
        if (params[static_cast<size_t>(i)].persistent) continue;
        if (matrices[static_cast<size_t>(i)].muon()) hold(i, offset, layout);
        offset += params[static_cast<size_t>(i)].numel;
      }
    }
  }
  const MuonExchangePlan plan =
      plan_muon_exchange(holdings, matrices, world, 0, MuonExchangeMode::kOwner);
  // A matrix computed where it is not held whole is gathered into a copy of its own first.
  const int64_t copies = plan.batches.empty() ? 2 : 3;
  int64_t working = 0;
  MuonMatrix largest;
  for (size_t i = 0; i < matrices.size(); ++i) {
    const MuonMatrix& m = matrices[i];
    if (!m.muon()) continue;
    const int64_t side = std::min(m.rows, m.cols), numel = m.rows * m.cols;
    const int64_t bytes = 4 * (copies * numel + 5 * side * side);
    if (bytes > working) {
      working = bytes;
      largest = m;
    }
  }
  if (!largest.muon()) return 0;
  int64_t chunk = 0;
  for (const MuonExchangeBatch& batch : plan.batches) {
    chunk = std::max({chunk, batch.piece_chunk, batch.result_chunk});
  }
  const int64_t peak = 2 * 4 * world * chunk + working;
  const int64_t u = kept_gradient_dtype(config) == at::kFloat ? 0 : 4 * shard_numel;
  *basis = "Newton-Schulz of the largest matrix (" + std::to_string(largest.rows) + " x " +
           std::to_string(largest.cols) + ")" +
           (plan.batches.empty() ? std::string()
                                 : ", the exchange's buffers (" +
                                       std::to_string(plan.batches.size()) + " batch" +
                                       (plan.batches.size() > 1 ? "es" : "") + ")") +
           (u > 0 ? ", u in fp32" : "");
  return u + peak;
}

}  // namespace

PlanUnit plan_unit(std::string name, std::vector<std::vector<int64_t>> shapes, bool declared,
                   bool checkpointed) {
  PlanUnit unit{std::move(name), {}, declared, checkpointed, std::move(shapes)};
  for (const std::vector<int64_t>& shape : unit.parameter_shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    unit.parameter_numels.push_back(numel);
  }
  return unit;
}

int64_t PlanModel::num_parameters() const {
  int64_t n = 0;
  for (const PlanUnit& unit : units) {
    for (int64_t p : unit.parameter_numels) n += p;
  }
  return n;
}

PlanModel plan_model_of(const torch::nn::Module& module) {
  PlanModel model;
  model.name = module.name();
  // The engines' own collector and stage 3's grouping rule (unit_grouping.h): each trainable
  // parameter's home unit. Persistence is the planner's to apply (it knows the config).
  const ModelParameters collected = collect_trainable_parameters(module, /*require_some=*/false);
  const UnitAssignment units = assign_units(collected, 0, 0);
  for (int m : units.unit_modules) {
    const std::string& name = collected.modules[m].first;
    model.units.push_back(PlanUnit{name.empty() ? model.name : name, {}, true});
  }
  PlanUnit outside{"(outside every unit)", {}, /*declared=*/false};
  for (size_t i = 0; i < collected.parameters.size(); ++i) {
    const int home = units.home_unit[i];
    PlanUnit& unit = home >= 0 ? model.units[home] : outside;
    unit.parameter_numels.push_back(collected.parameters[i].numel);
    unit.parameter_shapes.push_back(collected.parameters[i].tensor.sizes().vec());
    unit.parameter_names.push_back(collected.parameters[i].name);
  }
  if (!outside.parameter_numels.empty()) model.units.push_back(std::move(outside));
  std::unordered_set<const void*> frozen;
  for (const at::Tensor& parameter : module.parameters()) {
    if (!parameter.requires_grad() && frozen.insert(parameter.unsafeGetTensorImpl()).second) {
      model.frozen_parameter_bytes += static_cast<int64_t>(parameter.nbytes());
    }
  }
  return model;
}

const char* memory_place_name(MemoryPlace place) {
  switch (place) {
    case MemoryPlace::kHost:
      return "RAM";
    case MemoryPlace::kSharedHost:
      return "RAM, shared on a node";
    case MemoryPlace::kNvme:
      return "NVMe";
    case MemoryPlace::kDevice:
      return "GPU";
    case MemoryPlace::kPinnedHost:
      return "RAM, pinned";
  }
  return "?";
}

const MemoryPlanRow* MemoryPlan::row(const std::string& item) const {
  for (const MemoryPlanRow& r : rows) {
    if (r.item == item) return &r;
  }
  return nullptr;
}

MemoryPlan plan_memory(const Config& given, const PlanModel& model, PlanTarget target) {
  // A device model: the parameters, the engine's buffers and the activations are on the device;
  // with offload_optimizer, the optimizer's state, the gradient shard and a parameter copy are
  // on the host (Note [Offload of a device model]), and with offload_param (stage 3) the shards
  // are on the host (or NVMe) alone, copied up a shard at a time for each gather.
  const bool device = target == PlanTarget::kDevice;
  const Config& config = given;
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  const int stage = zero.stage;
  const int world = std::max(1, config.world_size);
  const int64_t compute = bytes_of(config.compute_dtype);
  const int64_t comm = bytes_of(config.communication_dtype);
  const bool host_state = device && zero.offload_optimizer.device != OffloadDevice::kNone;
  const bool shards_on_host =
      device && stage == 3 && zero.offload_param.device != OffloadDevice::kNone;
  const MemoryPlace compute_place = device ? MemoryPlace::kDevice : MemoryPlace::kHost;
  const MemoryPlace pinned_place =
      zero.offload_optimizer.pin_memory ? MemoryPlace::kPinnedHost : MemoryPlace::kHost;
  MemoryPlan plan;
  plan.stage = stage;
  plan.target = target;
  auto add = [&plan](std::string item, int64_t bytes, MemoryPlace place, std::string basis,
                     bool in_peak = true) {
    plan.rows.push_back({std::move(item), bytes, place, in_peak, std::move(basis)});
  };
  if (model.process_baseline_bytes > 0) {
    add("process baseline", model.process_baseline_bytes, MemoryPlace::kHost,
        "resident before the model: libraries, MPI, threads, data (measured at start-up)");
  }

  // Model state. Stages 0-2: one flat buffer over every parameter; stage 3: the shard space
  // (this rank's shard of every group) plus the persistent parameters whole.
  const int64_t psi = model.num_parameters();
  int64_t state_numel = psi;  // what estimate_state's formulas run over
  Groups groups;
  int64_t persistent_padded = 0;
  if (stage == 3) {
    groups = stage3_groups(model, zero);
    int64_t shard_space = 0;
    for (int64_t numel : groups.partitioned) {
      shard_space += shard_layout(numel, world, kShardAlignment).shard_numel;
    }
    if (groups.persistent > 0) {
      const ShardLayout layout = shard_layout(groups.persistent, world, kShardAlignment);
      shard_space += layout.shard_numel;
      persistent_padded = layout.padded_numel;
    }
    state_numel = shard_space * world;  // estimate_state's shard is then the shard space
  } else {
    state_numel = shard_layout(psi, world, kShardAlignment).padded_numel;
  }
  // The optimizer's part from the formulas; stage 3's parameter offload exactly below.
  Config without_param_offload = config;
  without_param_offload.zero_optimization.offload_param = OffloadConfig{};
  const StateEstimate e = estimate_state(without_param_offload, state_numel);
  const bool optimizer_on_nvme = zero.offload_optimizer.device == OffloadDevice::kNvme;
  const MemoryPlace state_place = optimizer_on_nvme                ? MemoryPlace::kNvme
                                  : device && !host_state          ? MemoryPlace::kDevice
                                                                   : MemoryPlace::kHost;
  const std::string dtype = dtype_name(config.param_dtype);
  int64_t param_staging = 0;
  if (stage == 3) {
    // The engine's ParamStore (param_store.h): the persistent group's shard, then each unit's,
    // and with offload_param "nvme" the segments param_segments leaves on disk, read through
    // max(2, min(buffer_count, swapped)) slots of the largest swapped shard.
    std::vector<int64_t> shards;
    std::vector<bool> resident;
    if (groups.persistent > 0) {
      shards.push_back(shard_layout(groups.persistent, world, kShardAlignment).shard_numel);
      resident.push_back(true);
    }
    for (int64_t numel : groups.partitioned) {
      shards.push_back(shard_layout(numel, world, kShardAlignment).shard_numel);
      resident.push_back(false);
    }
    const OffloadConfig& offload = zero.offload_param;
    const bool offloaded = offload.device == OffloadDevice::kNvme;
    int64_t in_memory = 0, on_disk = 0, largest = 0, swapped = 0;
    const std::vector<ParamStore::Segment> segments =
        param_segments(shards, resident, offloaded ? offload.max_in_cpu : state_numel);
    for (const ParamStore::Segment& segment : segments) {
      if (segment.swapped) {
        on_disk += segment.numel;
        largest = std::max(largest, segment.numel);
        ++swapped;
      } else {
        in_memory += segment.numel;
      }
    }
    const int64_t param_bytes = bytes_of(config.param_dtype);
    if (swapped > 0) {
      // The slots, and the bounce tile of the optimizer step's pass over the space (tiles of
      // sub_group_size, whatever the optimizer's placement: at the default 1e9 most of a
      // billion-parameter shard).
      const int64_t step_tile =
          largest_bounced_tile(segments, state_numel / world, zero.sub_group_size);
      param_staging = std::max<int64_t>(2, std::min<int64_t>(offload.buffer_count, swapped)) *
                          align_up(largest * param_bytes) +
                      step_tile * param_bytes;
    }
    const MemoryPlace shard_place =
        !shards_on_host                                        ? compute_place
        : offload.device == OffloadDevice::kCpu && offload.pin_memory ? MemoryPlace::kPinnedHost
                                                                       : MemoryPlace::kHost;
    add("parameters", in_memory * param_bytes, shard_place,
        dtype + " shards" + (swapped > 0 ? " kept in memory (max_in_cpu, persistent group)" : ""));
    if (shards_on_host) {
      add("shard upload", largest_shard_numel(shards) * param_bytes, MemoryPlace::kDevice,
          "a gather's shard copied up from the host");
    }
    if (swapped > 0) {
      add("parameters on NVMe", on_disk * param_bytes, MemoryPlace::kNvme, dtype + " unit shards");
    }
    add("persistent parameters", persistent_padded * compute, compute_place,
        "whole on every rank: outside units or <= stage3_param_persistence_threshold");
  } else {
    add("parameters", e.params, compute_place, dtype + ", whole");
  }
  if (model.frozen_parameter_bytes > 0) {
    add("frozen parameters", model.frozen_parameter_bytes, compute_place,
        "not trainable: whole in the module, as built");
  }
  // HostGradientPipeline stages a piece of stages 2-3 when it adds it (accumulation) or
  // converts it (the communication dtype is not the kept gradient's); else, and always at
  // stages 0-1 (the reduced range, in the kept dtype, replaces the host shard), it copies
  // straight into the host gradient.
  const bool offload_stages_gradients =
      stage >= 2 && (config.gradient_accumulation_steps > 1 ||
                     config.communication_dtype != kept_gradient_dtype(config));
  // The owned shard of the shard space (Note [Shard state]): what the optimizer steps.
  const int64_t shard_numel = stage == 3 ? state_numel / world : (state_numel + world - 1) / world;
  int64_t mapped_from_peers = 0;
  if (!host_state) {
    const bool shared = stage <= 1 && world > 1 && !device;
    add("gradients", e.grads, shared ? MemoryPlace::kSharedHost : compute_place,
        stage <= 1 ? std::string("whole, reduced in place") +
                         (device ? "" : "; in shared memory when the ranks share a node")
                   : "the owned shard");
    if (shared) {
      // Note [Shared-memory reduce-scatter]: this rank sums its chunk of every peer's buffer
      // where it lies, so those pages are in its resident set too (measured: gpt2-mini at
      // stage 0 on 2 ranks, RSS 1.10x the plan without this row).
      mapped_from_peers = e.grads / world * (world - 1);
      add("peers' gradient chunks", mapped_from_peers, MemoryPlace::kSharedHost,
          "this rank's chunk of each peer's gradient, read in place: in its resident set, "
          "not memory of its own (not in the peak)",
          /*in_peak=*/false);
    }
  } else {
    // Offloaded from a device: stages 0-1 still reduce in a whole buffer on the device; every
    // stage's owned shard is on the host, with the parameter copy the optimizer writes.
    if (stage <= 1) add("gradients", e.grads, MemoryPlace::kDevice, "whole, reduced in place");
    const int64_t kept = bytes_of(kept_gradient_dtype(config));
    add("gradient shard (host)", shard_numel * kept, pinned_place,
        "the owned shard, copied down as backward reduces it");
    if (!shards_on_host) {  // else the host shards above are what the optimizer writes
      add("parameter copy (host)", shard_numel * bytes_of(config.param_dtype), pinned_place,
          "the owned shard the optimizer writes, copied up tile by tile");
    }
  }
  if (e.master_params > 0) add("fp32 master", e.master_params, state_place, "fp32");
  add("optimizer state", e.optimizer_state, state_place,
      optimizer_state_description(config.optimizer));

  if (e.staging + param_staging > 0) {
    add("NVMe staging", e.staging + param_staging, MemoryPlace::kHost,
        "offload_optimizer's buffer_count tiles, offload_param's slots and step tile");
  }

  // The engine's buffers.
  if (stage <= 2) {
    // The flat engine's buckets (flat_engine.cpp): parameters in reverse registration order,
    // cut at reduce_bucket_size (a larger parameter is a bucket of its own).
    std::vector<int64_t> numels;
    for (const PlanUnit& unit : model.units) {
      numels.insert(numels.end(), unit.parameter_numels.begin(), unit.parameter_numels.end());
    }
    std::reverse(numels.begin(), numels.end());
    const int64_t padded = shard_layout(psi, world, kShardAlignment).padded_numel;
    int64_t largest = 0;
    size_t buckets = 0;
    if (!numels.empty()) {
      for (const FlatGroup& bucket :
           cut_into_groups(numels, std::max<int64_t>(1, zero.reduce_bucket_size), padded)) {
        largest = std::max(largest, bucket.range.size());
        ++buckets;
      }
    }
    if (stage == 2 && zero.contiguous_gradients) {
      // Gradients are copied into pooled bucket buffers: one, or with overlap_comm one being
      // filled while the ones before it are reduced (at least two when there are several).
      const bool several = buckets > 1 && zero.overlap_comm_enabled();
      add("gradient buckets", (several ? 2 : 1) * largest * comm, compute_place,
          several ? "2 x the largest bucket (with overlap_comm: at least)"
                  : "the largest bucket (reduce_bucket_size, capped at the model)");
    } else if (stage <= 1 && config.communication_dtype != kept_gradient_dtype(config)) {
      add("gradient conversion", largest * comm, compute_place,
          "a bucket's gradients converted to communication_data_type while reduced");
    }
    if (host_state && offload_stages_gradients) {
      // HostGradientPipeline's staging buffers: this rank's part of the largest bucket.
      add("offload staging", kHostGradientStagingBuffers * ((largest + world - 1) / world) * comm,
          pinned_place, "gradient pieces between the copy down and their addition");
    }
  }
  if (stage == 3) {
    int64_t largest = 0;
    std::vector<int64_t> padded;
    for (int64_t numel : groups.partitioned) {
      padded.push_back(shard_layout(numel, world, kShardAlignment).padded_numel);
      largest = std::max(largest, padded.back());
    }
    const int64_t gathered = simulated_gathered_peak(model, groups, padded, zero);
    add("gathered units", gathered * compute, compute_place,
        "the units gathered at once: the engine's prefetch, reuse and eviction replayed over "
        "the model's unit calls");
    if (config.compute_dtype != config.param_dtype) {
      // Note [Compute dtype]: the 16-bit shards are gathered into a staging buffer and widened.
      add("gather staging", largest * bytes_of(config.param_dtype), compute_place,
          "the largest unit in the stored dtype, widened into the compute dtype");
    }
    add("unit gradient buffer", largest * comm, compute_place,
        "the largest unit's gradients while reduced");
    if (persistent_padded > 0) {
      add("persistent grad buffer", persistent_padded * comm, compute_place,
          "filled during backward, reduced at its end");
    }
    if (host_state && offload_stages_gradients) {
      // HostGradientPipeline's staging buffers: a group's shard at most.
      add("offload staging",
          kHostGradientStagingBuffers * std::max(largest, persistent_padded) / world * comm,
          pinned_place, "gradient pieces between the copy down and their addition");
    }
  }

  // Activations of one micro-batch; the other variant shown beside for comparison.
  const bool checkpointing = model.checkpointing && model.checkpointed.has_value();
  const ActivationBytes& used = checkpointing ? *model.checkpointed : model.activations;
  add("activations", used.peak(), compute_place,
      std::string(checkpointing ? "with" : "without") + " activation checkpointing" +
          (model.micro_batch > 0 ? ", micro-batch " + std::to_string(model.micro_batch) + " x " +
                                       std::to_string(model.seq) + " tokens"
                                 : std::string()));
  if (model.checkpointed.has_value()) {
    add(checkpointing ? "  without checkpointing" : "  with checkpointing",
        (checkpointing ? model.activations : *model.checkpointed).peak(), compute_place,
        "not in this plan's peak", /*in_peak=*/false);
  }
  if (config.optimizer.type == OptimizerType::kMuon) {
    // The step runs after backward has freed the activations (host ranks: Muon runs on the
    // CPU), so the peak counts the larger of the two.
    std::string basis;
    const int64_t bytes =
        muon_step_bytes(model, config, world, groups, state_numel / world, &basis);
    const int64_t freed = compute_place == MemoryPlace::kHost ? used.peak() : 0;
    if (bytes > 0) {
      add("Muon's step", bytes, MemoryPlace::kHost,
          basis + "; after backward, in the activations' place", /*in_peak=*/false);
    }
    if (bytes > freed) {
      add("  beyond the activations", bytes - freed, MemoryPlace::kHost,
          "what Muon's step needs more than the activations it follows");
    }
  }

  for (const MemoryPlanRow& r : plan.rows) {
    if (!r.in_peak) continue;
    if (r.place == MemoryPlace::kNvme) {
      plan.nvme_bytes += r.bytes;
    } else if (r.place == MemoryPlace::kDevice) {
      plan.device_bytes += r.bytes;
    } else {
      plan.peak_memory_bytes += r.bytes;
      if (r.place == MemoryPlace::kPinnedHost) plan.pinned_bytes += r.bytes;
    }
  }
  plan.resident_bytes = plan.peak_memory_bytes + mapped_from_peers;
  return plan;
}

std::vector<MemoryPlan> plan_every_stage(const Config& config, const PlanModel& model,
                                         PlanTarget target) {
  std::vector<MemoryPlan> plans;
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = config;
    c.zero_optimization.stage = stage;
    if (stage < 3) c.zero_optimization.offload_param = OffloadConfig{};  // stage 3 only
    if (stage == 0) c.zero_optimization.offload_optimizer = OffloadConfig{};
    // parse_compute_dtype's rule (config.cpp), at this stage: compute_data_type "auto" that
    // chose fp32 makes the parameters (and a communication dtype that follows them) fp32 at
    // stages 0-2 and computes in fp32 from 16-bit shards at stage 3; fp32 compute from 16-bit
    // parameters exists at stage 3 only.
    const bool auto_fp32 = config.compute_dtype_auto && config.compute_dtype == at::kFloat;
    const bool follows = config.communication_dtype == config.param_dtype;
    const c10::ScalarType stored =
        config.param_dtype != at::kFloat ? config.param_dtype : config.configured_param_dtype;
    c.param_dtype = stage < 3 && auto_fp32 ? at::kFloat : stored;
    if (follows) c.communication_dtype = c.param_dtype;
    c.compute_dtype = stage == 3 && (auto_fp32 || config.zero_optimization.stage == 3)
                          ? config.compute_dtype
                          : c.param_dtype;
    plans.push_back(plan_memory(c, model, target));
  }
  return plans;
}

// Note [Fitting the defaults]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// DeepSpeed's defaults for the knobs that only trade speed for memory are sized for big machines:
// sub_group_size 1e9 makes an optimizer step over NVMe stage tiles of a billion elements
// (buffer_count records of the optimizer's state, a bounce tile of the swapped parameters). When
// the plan at the config's values does not fit the memory each rank has, and the config did not set
// these knobs, zero lowers them, in this order, each to the largest value of a 1-2-5 ladder (or
// count) at which the plan fits, stopping as soon as it does; a knob no value of which fits goes to
// its floor, and one that lowers the plan by less than 1 MiB at the value it stopped at is put back
// and tried again only if the others do not make the plan fit (the plan counts every buffer these
// knobs size, so what it does not lower, they do not). The order: sub_group_size (to 1e6 at least),
// offload_optimizer's buffer_count (to 2: one tile stepped while the next is read), offload_param's
// buffer_count (to 2), then at stage 3 stage3_prefetch_bucket_size and stage3_max_live_parameters
// (to 1e6: the unit being computed is gathered whatever they say), at stages 0-2 reduce_bucket_size
// (to 1e6). None of them changes a result (smaller tiles, fewer buffers, less gathered ahead,
// smaller buckets; DeterministicReduction.EveryKnobTheFitterLowersChangesNoBit in
// tests/test_engine_equivalence.cpp and the tiling tests of test_offload/test_stage3 hold them to
// the same bits). A value the config set is never changed; when lowering the others cannot make the
// plan fit, nothing is changed and the start-up check refuses the job.

namespace {

// 1e9, 5e8, 2e8, 1e8, ... down to `least`, the values below `from`.
std::vector<int64_t> ladder_below(int64_t from, int64_t least) {
  std::vector<int64_t> values;
  for (int64_t decade = 1000000000000LL; decade >= 1; decade /= 10) {
    for (int64_t step : {5, 2, 1}) {
      const int64_t v = step * decade;
      if (v < from && v >= least) values.push_back(v);
    }
  }
  return values;
}

std::string count_text(int64_t v) {
  if (v < 1000000) return std::to_string(v);
  int exponent = 0;
  int64_t mantissa = v;
  while (mantissa % 10 == 0) {
    mantissa /= 10;
    ++exponent;
  }
  return std::to_string(mantissa) + "e" + std::to_string(exponent);
}

}  // namespace

std::string fit_defaults_to_memory(Config& config, const PlanModel& model, int64_t memory_per_rank,
                                   PlanTarget target) {
  auto peak = [&](const Config& c) { return plan_memory(c, model, target).peak_memory_bytes; };
  const int64_t before = peak(config);
  if (memory_per_rank <= 0 || before <= memory_per_rank) return "";
  Config trial = config;
  ZeroOptimizationConfig& zero = trial.zero_optimization;
  struct Knob {
    const char* key;
    int64_t* value;
    bool adjustable;
    std::vector<int64_t> candidates;  // largest first
  };
  std::vector<int64_t> counts_optimizer, counts_param;
  for (int64_t b = zero.offload_optimizer.buffer_count - 1; b >= 2; --b) counts_optimizer.push_back(b);
  for (int64_t b = zero.offload_param.buffer_count - 1; b >= 2; --b) counts_param.push_back(b);
  const bool nvme_optimizer = zero.offload_optimizer.device == OffloadDevice::kNvme;
  const bool nvme_param = zero.offload_param.device == OffloadDevice::kNvme;
  std::vector<Knob> knobs = {
      // The step's tiles: the optimizer's records on NVMe, the parameters' bounce tile when
      // they are swapped.
      {"zero_optimization.sub_group_size", &zero.sub_group_size,
       (nvme_optimizer || (zero.stage == 3 && nvme_param)) && !zero.sub_group_size_given,
       ladder_below(zero.sub_group_size, 1000000)},
      {"zero_optimization.offload_optimizer.buffer_count", &zero.offload_optimizer.buffer_count,
       nvme_optimizer && !zero.offload_optimizer.buffer_count_given, counts_optimizer},
      {"zero_optimization.offload_param.buffer_count", &zero.offload_param.buffer_count,
       nvme_param && !zero.offload_param.buffer_count_given, counts_param},
      // Stage 3's gathering: less prefetched ahead, fewer units gathered at once (the
      // current unit is gathered whatever the limit).
      {"zero_optimization.stage3_prefetch_bucket_size", &zero.stage3_prefetch_bucket_size,
       zero.stage == 3 && !zero.stage3_prefetch_bucket_size_given,
       ladder_below(zero.stage3_prefetch_bucket_size, 1000000)},
      {"zero_optimization.stage3_max_live_parameters", &zero.stage3_max_live_parameters,
       zero.stage == 3 && !zero.stage3_max_live_parameters_given,
       ladder_below(zero.stage3_max_live_parameters, 1000000)},
      // Stages 0-2's gradient buckets (stage 2's pooled buffers, a conversion buffer at
      // stages 0-1): smaller buckets, more collectives.
      {"zero_optimization.reduce_bucket_size", &zero.reduce_bucket_size,
       zero.stage <= 2 && !zero.reduce_bucket_size_given,
       ladder_below(zero.reduce_bucket_size, 1000000)},
  };
  // A knob that gains less than this is tried again only after the others (with SGD on NVMe,
  // fewer of the optimizer's page-sized records would otherwise be chosen for 8 KiB).
  constexpr int64_t kNegligibleGain = int64_t{1} << 20;
  std::string chosen;
  int64_t after = before;
  // Lowers `knob` to the largest candidate at which the plan fits, failing that to the
  // smallest; keeps it there when that gains `least_gain` or more, else puts it back.
  auto lower = [&](Knob& knob, int64_t least_gain) {
    const int64_t original = *knob.value;
    const int64_t without = after;
    for (int64_t v : knob.candidates) {
      *knob.value = v;
      after = peak(trial);
      if (after <= memory_per_rank) break;
    }
    if (after > without - least_gain) {
      *knob.value = original;
      after = without;
      return false;
    }
    chosen += std::string(chosen.empty() ? "" : ", ") + knob.key + " " + count_text(*knob.value) +
              " (default " + count_text(original) + ")";
    return true;
  };
  std::vector<Knob*> deferred;
  for (Knob& knob : knobs) {
    if (!knob.adjustable || knob.candidates.empty()) continue;
    if (!lower(knob, kNegligibleGain)) deferred.push_back(&knob);
    if (after <= memory_per_rank) break;
  }
  for (Knob* knob : deferred) {
    if (after <= memory_per_rank) break;
    lower(*knob, 1);
  }
  if (after > memory_per_rank) return "";  // nothing changed: the start-up check refuses
  config = trial;
  refresh_effective_json(config);
  return "the plan at DeepSpeed's defaults needs " + human(before) +
         " per rank at the step's peak, more than the " + human(memory_per_rank) +
         " per rank it may plan with here; not set in " + config.source + ", so zero uses " +
         chosen + ": planned peak " + human(after) + " (Note [Fitting the defaults]: none of them "
         "changes a result, only how the step streams its state)";
}

std::string offload_that_fits(const Config& config, const PlanModel& model, int64_t device_bytes,
                              int64_t host_bytes) {
  struct Change {
    int stage;
    bool params;  // offload_param "cpu" too (stage 3)
    bool checkpoint;
  };
  const int stage = std::max(1, config.zero_optimization.stage);
  std::vector<Change> changes = {{stage, false, false}, {3, false, false}, {3, true, false}};
  if (model.checkpointed.has_value() && !model.checkpointing) {
    changes.push_back({stage, false, true});
    changes.push_back({3, false, true});
    changes.push_back({3, true, true});
  }
  for (const Change& change : changes) {
    Config c = config;
    c.zero_optimization.stage = change.stage;
    if (c.zero_optimization.offload_optimizer.device == OffloadDevice::kNone) {
      c.zero_optimization.offload_optimizer.device = OffloadDevice::kCpu;
      c.zero_optimization.offload_optimizer.pin_memory = true;
    }
    const bool add_params =
        change.params && c.zero_optimization.offload_param.device == OffloadDevice::kNone;
    if (add_params) {
      c.zero_optimization.offload_param.device = OffloadDevice::kCpu;
      c.zero_optimization.offload_param.pin_memory = true;
    }
    PlanModel m = model;
    m.checkpointing = change.checkpoint || model.checkpointing;
    const MemoryPlan plan = plan_memory(c, m, PlanTarget::kDevice);
    if (plan.device_bytes > device_bytes || plan.peak_memory_bytes > host_bytes) continue;
    std::string keys;
    if (change.stage != config.zero_optimization.stage) {
      keys = "zero_optimization.stage " + std::to_string(change.stage) + ", ";
    }
    if (config.zero_optimization.offload_optimizer.device == OffloadDevice::kNone) {
      keys += "zero_optimization.offload_optimizer {\"device\": \"cpu\", \"pin_memory\": true}";
    } else {
      keys += "the offload_optimizer already set";
    }
    if (add_params) {
      keys += ", zero_optimization.offload_param {\"device\": \"cpu\", \"pin_memory\": true}";
    }
    if (change.checkpoint) keys += ", and activation checkpointing of every block";
    return keys + " (planned: " + human(plan.device_bytes) + " of the GPU, " +
           human(plan.peak_memory_bytes) + " of host memory per rank)";
  }
  return "";
}

std::string format_memory_plans(const std::vector<MemoryPlan>& plans) {
  // Every plan's items in first appearance, the activations last, as each plan orders them.
  std::vector<std::string> items, activations;
  for (const MemoryPlan& plan : plans) {
    bool after_activations = false;
    for (const MemoryPlanRow& r : plan.rows) {
      after_activations = after_activations || r.item == "activations";
      std::vector<std::string>& list = after_activations ? activations : items;
      if (std::find(list.begin(), list.end(), r.item) == list.end()) list.push_back(r.item);
    }
  }
  items.insert(items.end(), activations.begin(), activations.end());
  // A table: the item left-aligned, then a right-aligned column per plan, each as wide as its
  // widest cell (a placement note makes a cell wider) with two spaces between columns.
  std::vector<std::vector<std::string>> table;  // rows of cells: item, then one per plan
  const auto line = [&](const std::string& item, const auto& cell_of) {
    std::vector<std::string> cells = {item};
    for (const MemoryPlan& plan : plans) cells.push_back(cell_of(plan));
    table.push_back(std::move(cells));
  };
  line("per rank", [](const MemoryPlan& plan) { return "ZeRO-" + std::to_string(plan.stage); });
  for (const std::string& item : items) {
    line(item, [&item](const MemoryPlan& plan) {
      const MemoryPlanRow* r = plan.row(item);
      if (r == nullptr) return std::string("-");
      const MemoryPlace usual = plan.target == PlanTarget::kDevice ? MemoryPlace::kDevice
                                                                   : MemoryPlace::kHost;
      if (r->place == usual) return human(r->bytes);
      return human(r->bytes) + " (" + memory_place_name(r->place) + ")";
    });
  }
  const bool device = std::any_of(plans.begin(), plans.end(), [](const MemoryPlan& plan) {
    return plan.target == PlanTarget::kDevice;
  });
  if (device) line("peak on the GPU", [](const MemoryPlan& plan) { return human(plan.device_bytes); });
  line(device ? "host memory" : "peak in memory",
       [](const MemoryPlan& plan) { return human(plan.peak_memory_bytes); });
  const bool mapped = std::any_of(plans.begin(), plans.end(), [](const MemoryPlan& plan) {
    return plan.resident_bytes != plan.peak_memory_bytes;
  });
  if (mapped) {
    line("resident set (VmRSS)", [](const MemoryPlan& plan) { return human(plan.resident_bytes); });
  }
  const bool pinned = std::any_of(plans.begin(), plans.end(),
                                  [](const MemoryPlan& plan) { return plan.pinned_bytes > 0; });
  if (pinned) line("  of it pinned", [](const MemoryPlan& plan) { return human(plan.pinned_bytes); });
  const bool nvme = std::any_of(plans.begin(), plans.end(),
                                [](const MemoryPlan& plan) { return plan.nvme_bytes > 0; });
  if (nvme) line("on NVMe", [](const MemoryPlan& plan) { return human(plan.nvme_bytes); });
  std::vector<size_t> width(plans.size() + 1, 0);
  for (const auto& cells : table) {
    for (size_t c = 0; c < cells.size(); ++c) width[c] = std::max(width[c], cells[c].size());
  }
  std::ostringstream out;
  for (const auto& cells : table) {
    out << cells[0] << std::string(width[0] - cells[0].size(), ' ');
    for (size_t c = 1; c < cells.size(); ++c) {
      out << std::string(2 + width[c] - cells[c].size(), ' ') << cells[c];
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace zero
