// Host (CPU) memory: measuring what libtorch allocates, and keeping freed memory mapped.
#pragma once

#include "zero/export.h"

#include <cstdint>

namespace zero {

struct ZERO_API HostMemoryStats {
  /// Live bytes allocated through libtorch's CPU allocator, plus the communicator's
  /// shared-memory buffers (Communicator::allocate_buffer) and NVMe offload's aligned staging
  /// buffers, which bypass it.
  int64_t allocated_bytes = 0;
  int64_t peak_bytes = 0;       // maximum of allocated_bytes since install or reset_peak
  int64_t allocations = 0;      // allocation calls since install
  /// Of keep_freed_host_memory's block cache (Note [Host block cache], host_memory.cpp):
  /// the resident bytes of freed large blocks kept for reuse, and of every large block (live +
  /// cached; never above the peak of the live ones).
  int64_t cached_bytes = 0;
  int64_t mapped_bytes = 0;
  int64_t block_maps = 0;  // large blocks mapped since install: the cache's misses
};

/// Routes libtorch's CPU allocations through a counting wrapper (idempotent). Call it before
/// creating the tensors you want counted; tensors allocated earlier are not counted when freed.
ZERO_API void track_host_memory();
/// Zeros when tracking is not installed.
ZERO_API HostMemoryStats host_memory_stats();
ZERO_API void reset_host_memory_peak();

/// glibc returns large freed blocks to the kernel at once and faults them in again on the next
/// allocation, which measured ~40% of a CPU GPT-2 step here; kept in its heap instead, they
/// fragment it (the resident set ran 22-48 % above the live peak). This routes libtorch's CPU
/// allocations through zero's allocator (as track_host_memory does), which keeps freed large
/// blocks mapped and reuses them by size without ever holding more than the peak of live
/// ones, and raises glibc's thresholds for the small rest (process-wide; call once at
/// start-up, before the tensors it should serve).
ZERO_API void keep_freed_host_memory();

/// With keep_freed_host_memory: whether the block cache gives back the unused tail of every
/// reused block, so that the resident set follows the live peak (true, the default: within 5 %
/// of the memory plan) or keeps it for fewer page faults (false: up to 12 % more resident on
/// small models, a few percent faster at most). Note [Host block cache] has the measurements.
ZERO_API void hold_host_memory_to_peak(bool exact);

/// Returns the block cache and the heap's free memory to the kernel now (glibc malloc_trim).
/// keep_freed_host_memory is right for the training loop, whose next step reuses what this one freed, but a one-off
/// phase leaves holes nothing reuses: building and partitioning a model unit by unit under
/// ShardedInit left 4.3 GiB resident per rank for 1.5 GiB live on gpt2-large (2 ranks).
/// zero calls it after each ShardedInit unit and at the end of zero::initialize.
ZERO_API void release_freed_host_memory();

}  // namespace zero

#include <string>

#include "zero/comm.h"
#include "zero/config.h"

namespace zero {

/// What one rank will hold of a model's training state, from the config alone (before anything
/// is allocated): the ModelStateBytes categories (zero/engine.h) by the ZeRO formulas, with the
/// offloaded ones on NVMe. Per rank, for a model of `num_parameters` trainable elements.
/// Leaves out what the config does not fix: activations, stage 3's gathered units, the
/// communicator's buffers.
struct ZERO_API StateEstimate {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t master_params = 0;
  int64_t optimizer_state = 0;
  int64_t staging = 0;  // host buffers of NVMe offload (offload_param's: at most)
  int64_t in_memory = 0;
  int64_t on_nvme = 0;
  int64_t params_on_nvme = 0;  // of on_nvme: offload_param's file (the rest: offload_optimizer's)
};
ZERO_API StateEstimate estimate_state(const Config& config, int64_t num_parameters);

/// This process's resident memory now (VmRSS) and at its peak so far (VmHWM), from
/// /proc/self/status, in bytes; -1 when it cannot be read.
ZERO_API int64_t resident_bytes();
ZERO_API int64_t peak_resident_bytes();

/// This host's MemAvailable (/proc/meminfo) in bytes; -1 when it cannot be read.
ZERO_API int64_t host_memory_available();

/// Collective. The host memory each rank can plan with: the least, over the hosts, of a host's
/// MemAvailable divided by its ranks there (-1 when a host cannot tell). The same on every rank.
ZERO_API int64_t memory_per_rank(Communicator& comm);

/// Collective. Compares estimate_state(config, num_parameters) with what each machine has: the
/// memory of every rank on a host against that host's MemAvailable (/proc/meminfo), and with
/// NVMe offload the swap files of every rank on a file system against its free space under
/// nvme_path. Throws zero::Error on every rank when one falls short, naming what is needed and
/// what is available, so a job that cannot fit stops at start-up instead of meeting the OOM
/// killer or a full disk mid-step. Returns a one-line account of the estimate.
ZERO_API std::string check_state_fits(const Config& config, int64_t num_parameters,
                                      Communicator& comm);

}  // namespace zero
