// estimate_state and check_state_fits (zero/memory.h).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/capture_error.h"
#include "common/host.h"
#include "state/state_store.h"
#include "zero/error.h"
#include "zero/memory.h"

namespace zero {
namespace {

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

// MemAvailable of /proc/meminfo in bytes; -1 when it cannot be read.
int64_t memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

}  // namespace

StateEstimate estimate_state(const Config& config, int64_t num_parameters) {
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  const int64_t n = std::max(1, config.world_size);
  const int64_t psi = num_parameters;
  const int64_t shard = (psi + n - 1) / n;
  const int64_t param = static_cast<int64_t>(c10::elementSize(config.param_dtype));
  const int64_t kept_grad = static_cast<int64_t>(c10::elementSize(kept_gradient_dtype(config)));
  const bool fp32 = config.param_dtype == at::kFloat;
  const int moments = config.optimizer.type != OptimizerType::kSGD ? 2
                      : config.optimizer.momentum != 0.0           ? 1
                                                                   : 0;
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
  return e;
}

std::string check_state_fits(const Config& config, int64_t num_parameters, Communicator& comm) {
  const StateEstimate e = estimate_state(config, num_parameters);
  const OffloadConfig& offload = config.zero_optimization.offload_optimizer;
  const bool nvme = offload.device == OffloadDevice::kNvme;
  // Each rank says where it is: its host and what the host has, and its swap file system.
  struct statvfs space {};
  bool have_space = false;
  if (nvme) have_space = ::statvfs(offload.nvme_path.c_str(), &space) == 0;
  std::ostringstream mine;
  mine << host_name() << " " << memory_available() << " "
       << (have_space ? std::to_string(space.f_fsid) : std::string("-")) << " "
       << (have_space ? static_cast<int64_t>(space.f_bavail) * static_cast<int64_t>(space.f_frsize)
                      : int64_t{-1});
  const std::vector<std::string> all = all_gather_texts(comm, mine.str());
  std::map<std::string, std::pair<int, int64_t>> hosts;        // ranks, MemAvailable
  std::map<std::string, std::pair<int, int64_t>> file_systems;  // ranks, free bytes
  for (const std::string& text : all) {
    std::istringstream in(text);
    std::string host, fsid;
    int64_t available = 0, free_bytes = 0;
    in >> host >> available >> fsid >> free_bytes;
    hosts[host] = {hosts[host].first + 1, available};
    if (fsid != "-") file_systems[host + ":" + fsid] = {file_systems[host + ":" + fsid].first + 1, free_bytes};
  }
  const std::string here = host_name();
  std::string account = "model state per rank: " + gib(e.in_memory) + " in memory";
  if (nvme) account += " (" + gib(e.staging) + " of it NVMe staging), " + gib(e.on_nvme) + " on NVMe";
  agree_on_failure(comm, "start-up estimate", capture_error([&] {
    const auto& [ranks, available] = hosts.at(here);
    const int64_t needed = ranks * e.in_memory;
    if (available >= 0) {
      std::string remedies = nvme ? "lower zero_optimization.sub_group_size or "
                                    "offload_optimizer.buffer_count, "
                                  : "offload the optimizer state to NVMe "
                                    "(zero_optimization.offload_optimizer.device \"nvme\"), ";
      if (config.zero_optimization.stage < 3) remedies += "use a higher stage, ";
      ZERO_CHECK(needed <= available, config.source, ": ", account, "; the ", ranks,
                 " rank(s) on ", here, " need ", gib(needed),
                 " of memory for it (activations and gathered parameters come on top), but ",
                 gib(available), " is available (MemAvailable); ", remedies,
                 "or spread the ranks over more machines");
    }
    if (nvme) {
      ZERO_CHECK(have_space, config.source, ": cannot read the free space under "
                 "zero_optimization.offload_optimizer.nvme_path = \"", offload.nvme_path, "\"");
      const std::string key = here + ":" + std::to_string(space.f_fsid);
      const auto& [writers, free_bytes] = file_systems.at(key);
      ZERO_CHECK(writers * e.on_nvme <= free_bytes, config.source, ": ", account, "; the ",
                 writers, " rank(s) writing to zero_optimization.offload_optimizer.nvme_path = \"",
                 offload.nvme_path, "\" need ", gib(writers * e.on_nvme), " there, but ",
                 gib(free_bytes), " is free");
    }
  }));
  return account;
}

}  // namespace zero
