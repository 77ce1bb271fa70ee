// estimate_state and check_state_fits (zero/memory.h).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/byte_size.h"
#include "common/host.h"
#include "offload/swap_file.h"
#include "optim/optimizer_state.h"
#include "state/state_store.h"
#include "zero/error.h"
#include "zero/memory.h"
#include "zero/memory_plan.h"

namespace zero {
namespace {

// Need against room, where rounding could make them look equal: both exactly too.
std::string exactly(int64_t bytes) { return byte_size_text(bytes) + " (" + std::to_string(bytes) + " bytes)"; }

}  // namespace

int64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

namespace {
int64_t status_bytes(const char* key) {
  std::ifstream status("/proc/self/status");
  const std::string prefix = key;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return -1;
}
}  // namespace

int64_t resident_bytes() { return status_bytes("VmRSS:"); }
int64_t peak_resident_bytes() { return status_bytes("VmHWM:"); }

int64_t memory_per_rank(Communicator& comm) {
  std::map<std::string, std::pair<int64_t, int64_t>> hosts;  // ranks, MemAvailable
  for (const std::string& text :
       all_gather_texts(comm, host_name() + " " + std::to_string(host_memory_available()))) {
    std::istringstream in(text);
    std::string host;
    int64_t available = -1;
    in >> host >> available;
    hosts[host] = {hosts[host].first + 1, available};
  }
  int64_t least = INT64_MAX;
  for (const auto& [host, entry] : hosts) {
    if (entry.second < 0) return -1;
    least = std::min(least, entry.second / entry.first);
  }
  return least;
}

StateEstimate estimate_state(const Config& config, int64_t num_parameters) {
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  const int64_t n = std::max(1, config.world_size);
  const int64_t psi = num_parameters;
  const int64_t shard = (psi + n - 1) / n;
  const int64_t param = static_cast<int64_t>(c10::elementSize(config.param_dtype));
  const int64_t kept_grad = static_cast<int64_t>(c10::elementSize(kept_gradient_dtype(config)));
  const bool fp32 = config.param_dtype == at::kFloat;
  const auto moments = static_cast<int64_t>(optimizer_state_names(config.optimizer).size());
  StateEstimate e;
  // Stages 0-1 reduce into a full gradient buffer of the parameter dtype; 2-3 keep a shard.
  e.params = zero.stage == 3 ? shard * param : psi * param;
  e.grads = zero.stage <= 1 ? psi * param : shard * kept_grad;
  const int64_t updated = zero.stage == 0 ? psi : shard;
  e.master_params = fp32 ? 0 : updated * 4;
  e.optimizer_state = updated * 4 * moments;
  e.in_memory = e.params + e.grads + e.master_params + e.optimizer_state;
  if (zero.offload_optimizer.device == OffloadDevice::kNvme) {
    const int parts = moments + (fp32 ? 0 : 1);
    const SwapStoreBytes swap =
        swap_store_bytes(parts, updated, zero.sub_group_size, zero.offload_optimizer.buffer_count);
    e.on_nvme = swap.file;
    e.staging = swap.memory;
    e.in_memory += e.staging - e.master_params - e.optimizer_state;
  }
  const OffloadConfig& offload_param = zero.offload_param;
  if (zero.stage == 3 && offload_param.device == OffloadDevice::kNvme) {
    // Note [Parameter offload]: max_in_cpu elements stay; the slots hold the largest unit
    // shard, which the config does not fix: buffer_size is its bound.
    const int64_t swapped = std::max<int64_t>(0, shard - offload_param.max_in_cpu);
    const int64_t slots = std::max<int64_t>(2, offload_param.buffer_count);
    // And the optimizer step's bounce tile for the swapped part (an estimate of
    // largest_bounced_tile over the unpadded shard, which the plan computes exactly).
    const int64_t staging =
        swapped > 0 ? slots * align_up(std::min(offload_param.buffer_size, swapped) * param) +
                          std::min(zero.sub_group_size, shard) * param
                    : 0;
    e.params_on_nvme = swapped * param;
    e.on_nvme += e.params_on_nvme;
    e.staging += staging;
    e.in_memory += staging - e.params_on_nvme;
  }
  return e;
}

namespace {

// The check behind check_state_fits and check_plan_fits: `memory_needed` bytes per rank in
// memory (described by `account`, and `what` in the message), and e's swap files on disk.
std::string check_fits(const Config& config, const StateEstimate& e, int64_t memory_needed,
                       const std::string& account, const char* what,
                       const std::string& first_remedies, Communicator& comm) {
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  // What goes where on disk: each offload section's file under its own nvme_path.
  struct SwapTarget {
    std::string key;
    std::string path;
    int64_t bytes;
  };
  std::vector<SwapTarget> targets;
  if (zero.offload_optimizer.device == OffloadDevice::kNvme) {
    targets.push_back({"zero_optimization.offload_optimizer.nvme_path",
                       zero.offload_optimizer.nvme_path, e.on_nvme - e.params_on_nvme});
  }
  if (e.params_on_nvme > 0) {
    targets.push_back({"zero_optimization.offload_param.nvme_path", zero.offload_param.nvme_path,
                       e.params_on_nvme});
  }
  // Each rank says where it is: its host and what the host has, and per target the file
  // system and its free space.
  std::vector<struct statvfs> spaces(targets.size());
  std::vector<bool> have_space(targets.size(), false);
  std::vector<int> space_errno(targets.size(), 0);
  std::ostringstream mine;
  mine << host_name() << " " << host_memory_available();
  for (size_t t = 0; t < targets.size(); ++t) {
    have_space[t] = ::statvfs(targets[t].path.c_str(), &spaces[t]) == 0;
    if (!have_space[t]) space_errno[t] = errno;
    mine << " " << (have_space[t] ? std::to_string(spaces[t].f_fsid) : std::string("-")) << " "
         << (have_space[t] ? static_cast<int64_t>(spaces[t].f_bavail) *
                                 static_cast<int64_t>(spaces[t].f_frsize)
                           : int64_t{-1});
  }
  const std::vector<std::string> all = all_gather_texts(comm, mine.str());
  std::map<std::string, std::pair<int, int64_t>> hosts;     // ranks, MemAvailable
  std::map<std::string, std::pair<int64_t, int64_t>> disks;  // bytes wanted, free bytes
  for (const std::string& text : all) {
    std::istringstream in(text);
    std::string host;
    int64_t available = 0;
    in >> host >> available;
    hosts[host] = {hosts[host].first + 1, available};
    for (size_t t = 0; t < targets.size(); ++t) {
      std::string fsid;
      int64_t free_bytes = 0;
      in >> fsid >> free_bytes;
      if (fsid == "-") continue;
      auto& disk = disks[host + ":" + fsid];
      disk = {disk.first + targets[t].bytes, free_bytes};
    }
  }
  const std::string here = host_name();
  agree_on_failure(comm, "start-up estimate", capture_error([&] {
    const auto& [ranks, available] = hosts.at(here);
    const int64_t needed = ranks * memory_needed;
    if (available >= 0) {
      std::string remedies = first_remedies;
      // sub_group_size sizes the optimizer's records on NVMe and the step's parameter tile.
      const bool nvme_optimizer = zero.offload_optimizer.device == OffloadDevice::kNvme;
      if (nvme_optimizer) {
        remedies += "lower zero_optimization.sub_group_size or offload_optimizer.buffer_count, ";
      } else if (zero.stage == 3 && zero.offload_param.device == OffloadDevice::kNvme) {
        remedies += "lower zero_optimization.sub_group_size, ";
      }
      if (!nvme_optimizer) {
        remedies += "offload the optimizer state to NVMe "
                    "(zero_optimization.offload_optimizer.device \"nvme\"), ";
      }
      if (zero.stage == 3 && zero.offload_param.device != OffloadDevice::kNvme) {
        remedies += "offload the parameters to NVMe (zero_optimization.offload_param.device "
                    "\"nvme\"), ";
      }
      if (zero.stage < 3) remedies += "use a higher stage, ";
      ZERO_CHECK(needed <= available, config.source, ": ", account, "; the ", ranks,
                 " rank(s) on ", here, " need ", byte_size_text(needed), " of memory for ", what, ", but ",
                 byte_size_text(available), " is available (MemAvailable); ", remedies,
                 "or spread the ranks over more machines");
    }
    for (size_t t = 0; t < targets.size(); ++t) {
      const SwapTarget& target = targets[t];
      ZERO_CHECK(have_space[t] || space_errno[t] != ENOENT, config.source, ": ", target.key,
                 " = \"", target.path, "\" does not exist on ", here,
                 "; allowed: an existing, writable directory for the swap files");
      ZERO_CHECK(have_space[t], config.source, ": cannot read the free space under ", target.key,
                 " = \"", target.path, "\": ", std::strerror(space_errno[t]));
      const auto& [wanted, free_bytes] = disks.at(here + ":" + std::to_string(spaces[t].f_fsid));
      ZERO_CHECK(wanted <= free_bytes, config.source, ": ", account, "; the swap files of the ",
                 "rank(s) on ", here, " need ", exactly(wanted), " on the file system of ", target.key,
                 " = \"", target.path, "\", but ", exactly(free_bytes), " is free");
    }
  }));
  return account;
}

}  // namespace

std::string check_state_fits(const Config& config, int64_t num_parameters, Communicator& comm) {
  const StateEstimate e = estimate_state(config, num_parameters);
  std::string account = "model state per rank: " + byte_size_text(e.in_memory) + " in memory";
  if (e.on_nvme > 0 || e.staging > 0) {
    account += " (" + byte_size_text(e.staging) + " of it NVMe staging), " + byte_size_text(e.on_nvme) + " on NVMe";
  }
  return check_fits(config, e, e.in_memory, account,
                    "it (activations and gathered parameters come on top)", "", comm);
}

std::string check_plan_fits(const Config& config, const MemoryPlan& plan, int64_t num_parameters,
                            Communicator& comm) {
  ZERO_CHECK(plan.stage == config.zero_optimization.stage, "check_plan_fits: the plan is for "
             "stage ", plan.stage, ", the config's stage is ", config.zero_optimization.stage);
  const StateEstimate e = estimate_state(config, num_parameters);
  std::string account = "planned peak per rank: " + byte_size_text(plan.peak_memory_bytes) + " in memory";
  std::string remedies;
  if (const MemoryPlanRow* activations = plan.row("activations")) {
    account += " (activations " + byte_size_text(activations->bytes) + ")";
    // Activations a large part of the peak: what shrinks them first.
    if (4 * activations->bytes > plan.peak_memory_bytes) {
      remedies = plan.row("  with checkpointing") != nullptr
                     ? "checkpoint activations (zero::checkpoint; zero-train "
                       "--activation-checkpointing), lower train_micro_batch_size_per_gpu, "
                     : "lower train_micro_batch_size_per_gpu, ";
    }
  }
  if (plan.nvme_bytes > 0) account += ", " + byte_size_text(plan.nvme_bytes) + " on NVMe";
  return check_fits(config, e, plan.peak_memory_bytes, account,
                    "the training step's peak (zero::format_memory_plans, or zero-train "
                    "--plan, lists every part)",
                    remedies, comm);
}

}  // namespace zero
