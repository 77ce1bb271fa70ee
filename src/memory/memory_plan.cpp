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
//     flat_group.h): stage 2's gradient buckets (reduce_bucket_size elements, two while one is
//     reduced and the next filled when there are several buckets and overlap_comm), stage 3's
//     gathered units (the largest unit plus what prefetch gathers ahead, within
//     stage3_max_live_parameters; every unit when stage3_max_reuse_distance keeps them all
//     gathered between their forward and backward) and the gradient buffer of the largest
//     unit while it is reduced; stages 0-1 reduce in their gradient buffer, which world > 1
//     puts in shared memory (Communicator::allocate_buffer);
//   - activations, from the model (PlanModel): GPT-2 derives them from its forward
//     (gpt2.cpp, Note [GPT-2 activation memory]).
// tests/test_memory_plan.cpp checks the sum against host_memory_stats()'s peak (which counts
// shared memory too) within 10 % for small GPT-2s at every stage and 1-4 ranks.
#include "zero/memory_plan.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "zero/error.h"
#include "zero/memory.h"
#include "zero/shard.h"
#include "zero/unit.h"

namespace zero {
namespace {

int64_t bytes_of(c10::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

// Stage 3's groups per Note [Stage 3 units]: partitioned elements per unit, and the
// persistent ones (outside every unit, or small while the running total stays within the cap).
struct Groups {
  std::vector<int64_t> partitioned;  // per unit with any, in order
  int64_t persistent = 0;
};

Groups stage3_groups(const PlanModel& model, const ZeroOptimizationConfig& zero) {
  Groups groups;
  for (const PlanUnit& unit : model.units) {
    int64_t numel = 0;
    for (int64_t p : unit.parameter_numels) {
      const bool small = p <= zero.stage3_param_persistence_threshold &&
                         groups.persistent + p <= zero.stage3_model_persistence_threshold;
      if (!unit.declared || small) {
        groups.persistent += p;
      } else {
        numel += p;
      }
    }
    if (numel > 0) groups.partitioned.push_back(numel);
  }
  return groups;
}

std::string human(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) {
    std::snprintf(text, sizeof(text), "%.2f GiB", b / (1 << 30));
  } else if (b >= (1 << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", b / (1 << 20));
  } else {
    std::snprintf(text, sizeof(text), "%.0f KiB", b / 1024);
  }
  return text;
}

}  // namespace

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
  PlanUnit outside{"(outside every unit)", {}, /*declared=*/false};
  std::unordered_set<const void*> seen;
  std::unordered_map<std::string, int> unit_of;  // module name -> index into model.units (-1)
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    const std::string& name = item.key();
    int unit = -1;
    if (!name.empty()) {  // pre-order: the parent came first
      const auto dot = name.rfind('.');
      const auto parent = unit_of.find(dot == std::string::npos ? "" : name.substr(0, dot));
      if (parent != unit_of.end()) unit = parent->second;
    }
    if (is_declared_unit(*item.value())) {
      model.units.push_back(PlanUnit{name.empty() ? model.name : name, {}, true});
      unit = static_cast<int>(model.units.size()) - 1;
    }
    unit_of[name] = unit;
    for (const auto& parameter : item.value()->named_parameters(/*recurse=*/false)) {
      const at::Tensor& tensor = parameter.value();
      if (!tensor.requires_grad() || !seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
      (unit >= 0 ? model.units[unit] : outside).parameter_numels.push_back(tensor.numel());
    }
  }
  if (!outside.parameter_numels.empty()) model.units.push_back(std::move(outside));
  return model;
}

const char* memory_place_name(MemoryPlace place) {
  switch (place) {
    case MemoryPlace::kHost:
      return "RAM";
    case MemoryPlace::kSharedHost:
      return "RAM, shared";
    case MemoryPlace::kNvme:
      return "NVMe";
  }
  return "?";
}

const MemoryPlanRow* MemoryPlan::row(const std::string& item) const {
  for (const MemoryPlanRow& r : rows) {
    if (r.item == item) return &r;
  }
  return nullptr;
}

MemoryPlan plan_memory(const Config& config, const PlanModel& model) {
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  const int stage = zero.stage;
  const int world = std::max(1, config.world_size);
  const int64_t compute = bytes_of(config.compute_dtype);
  const int64_t comm = bytes_of(config.communication_dtype);
  MemoryPlan plan;
  plan.stage = stage;
  auto add = [&plan](std::string item, int64_t bytes, MemoryPlace place, std::string basis,
                     bool in_peak = true) {
    plan.rows.push_back({std::move(item), bytes, place, in_peak, std::move(basis)});
  };

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
  const StateEstimate e = estimate_state(config, state_numel);
  const bool optimizer_on_nvme = zero.offload_optimizer.device == OffloadDevice::kNvme;
  const MemoryPlace state_place = optimizer_on_nvme ? MemoryPlace::kNvme : MemoryPlace::kHost;
  const std::string dtype = dtype_name(config.param_dtype);
  if (stage == 3) {
    const int64_t in_memory = e.params - e.params_on_nvme;
    add("parameters", in_memory, MemoryPlace::kHost, dtype + " shards" +
        (e.params_on_nvme > 0 ? " kept in memory (max_in_cpu, persistent group)" : ""));
    if (e.params_on_nvme > 0) {
      add("parameters on NVMe", e.params_on_nvme, MemoryPlace::kNvme, dtype + " unit shards");
    }
    add("persistent parameters", persistent_padded * compute, MemoryPlace::kHost,
        "whole on every rank: outside units or <= stage3_param_persistence_threshold");
  } else {
    add("parameters", e.params, MemoryPlace::kHost, dtype + ", whole");
  }
  add("gradients", e.grads,
      stage <= 1 && world > 1 ? MemoryPlace::kSharedHost : MemoryPlace::kHost,
      stage <= 1 ? "whole, reduced in place" : "the owned shard");
  if (e.master_params > 0) add("fp32 master", e.master_params, state_place, "fp32");
  add("optimizer state", e.optimizer_state, state_place,
      config.optimizer.type == OptimizerType::kSGD ? "momentum, fp32" : "Adam m and v, fp32");
  if (e.staging > 0) add("NVMe staging", e.staging, MemoryPlace::kHost, "buffer_count buffers");

  // The engine's buffers.
  if (stage == 2) {
    const int64_t bucket = std::min(zero.reduce_bucket_size, psi);
    const bool two = psi > bucket && zero.overlap_comm_enabled();
    add("gradient buckets", (two ? 2 : 1) * bucket * comm, MemoryPlace::kHost,
        two ? "2 x reduce_bucket_size (one filled while one is reduced)"
            : "reduce_bucket_size (capped at the model)");
  }
  if (stage == 3) {
    int64_t total = 0, largest = 0;
    std::vector<int64_t> padded;
    for (int64_t numel : groups.partitioned) {
      padded.push_back(shard_layout(numel, world, kShardAlignment).padded_numel);
      total += padded.back();
      largest = std::max(largest, padded.back());
    }
    const bool keeps_all = zero.stage3_max_reuse_distance >= total;
    int64_t gathered = largest;
    if (keeps_all) {
      gathered = std::max(largest, std::min(total, zero.stage3_max_live_parameters));
    } else if (zero.overlap_comm_enabled() && zero.stage3_prefetch_bucket_size > 0) {
      // A unit, and the next ones the trace gathers ahead of use.
      for (size_t i = 0; i < padded.size(); ++i) {
        int64_t ahead = 0;
        for (size_t j = i + 1; j < padded.size(); ++j) {
          if (ahead + padded[j] > zero.stage3_prefetch_bucket_size ||
              padded[i] + ahead + padded[j] > zero.stage3_max_live_parameters) {
            break;
          }
          ahead += padded[j];
        }
        gathered = std::max(gathered, padded[i] + ahead);
      }
    }
    add("gathered units", gathered * compute, MemoryPlace::kHost,
        keeps_all ? "every unit (stage3_max_reuse_distance keeps them until their backward)"
                  : "the largest unit and what prefetch gathers ahead");
    add("unit gradient buffer", largest * comm, MemoryPlace::kHost,
        "the largest unit's gradients while reduced");
  }

  // Activations of one micro-batch; the other variant shown beside for comparison.
  const bool checkpointing = model.checkpointing && model.checkpointed.has_value();
  const ActivationBytes& used = checkpointing ? *model.checkpointed : model.activations;
  add("activations", used.peak(), MemoryPlace::kHost,
      std::string(checkpointing ? "with" : "without") + " activation checkpointing, micro-batch " +
          std::to_string(config.train_micro_batch_size_per_gpu));
  if (model.checkpointed.has_value()) {
    add(checkpointing ? "  without checkpointing" : "  with checkpointing",
        (checkpointing ? model.activations : *model.checkpointed).peak(), MemoryPlace::kHost,
        "not in this plan's peak", /*in_peak=*/false);
  }

  for (const MemoryPlanRow& r : plan.rows) {
    if (!r.in_peak) continue;
    if (r.place == MemoryPlace::kNvme) {
      plan.nvme_bytes += r.bytes;
    } else {
      plan.peak_memory_bytes += r.bytes;
    }
  }
  return plan;
}

std::vector<MemoryPlan> plan_every_stage(const Config& config, const PlanModel& model) {
  std::vector<MemoryPlan> plans;
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = config;
    c.zero_optimization.stage = stage;
    if (stage < 3) c.zero_optimization.offload_param = OffloadConfig{};  // stage 3 only
    if (stage == 0) c.zero_optimization.offload_optimizer = OffloadConfig{};
    if (stage < 3 && c.compute_dtype != c.param_dtype) c.compute_dtype = c.param_dtype;
    plans.push_back(plan_memory(c, model));
  }
  return plans;
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
  constexpr int kItem = 24, kColumn = 25;
  std::ostringstream out;
  char cell[64];
  std::snprintf(cell, sizeof(cell), "%-*s", kItem, "per rank");
  out << cell;
  for (const MemoryPlan& plan : plans) {
    std::snprintf(cell, sizeof(cell), "%*s", kColumn, ("ZeRO-" + std::to_string(plan.stage)).c_str());
    out << cell;
  }
  out << "\n";
  for (const std::string& item : items) {
    std::snprintf(cell, sizeof(cell), "%-*s", kItem, item.c_str());
    out << cell;
    for (const MemoryPlan& plan : plans) {
      const MemoryPlanRow* r = plan.row(item);
      std::string text = "-";
      if (r != nullptr) {
        text = human(r->bytes);
        if (r->place != MemoryPlace::kHost) text += std::string(" (") + memory_place_name(r->place) + ")";
      }
      std::snprintf(cell, sizeof(cell), "%*s", kColumn, text.c_str());
      out << cell;
    }
    out << "\n";
  }
  std::snprintf(cell, sizeof(cell), "%-*s", kItem, "peak in memory");
  out << cell;
  for (const MemoryPlan& plan : plans) {
    std::snprintf(cell, sizeof(cell), "%*s", kColumn, human(plan.peak_memory_bytes).c_str());
    out << cell;
  }
  out << "\n";
  bool nvme = false;
  for (const MemoryPlan& plan : plans) nvme = nvme || plan.nvme_bytes > 0;
  if (nvme) {
    std::snprintf(cell, sizeof(cell), "%-*s", kItem, "on NVMe");
    out << cell;
    for (const MemoryPlan& plan : plans) {
      std::snprintf(cell, sizeof(cell), "%*s", kColumn, human(plan.nvme_bytes).c_str());
      out << cell;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace zero
