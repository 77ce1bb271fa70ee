// Host (CPU) memory: measuring what libtorch allocates, and keeping freed memory mapped.
#pragma once

#include "zero/export.h"

#include <cstdint>

namespace zero {

struct ZERO_API HostMemoryStats {
  int64_t allocated_bytes = 0;  // live bytes allocated through libtorch's CPU allocator
  int64_t peak_bytes = 0;       // maximum of allocated_bytes since install or reset_peak
  int64_t allocations = 0;      // allocation calls since install
};

/// Routes libtorch's CPU allocations through a counting wrapper (idempotent). Call it before
/// creating the tensors you want counted; tensors allocated earlier are not counted when freed.
ZERO_API void track_host_memory();
/// Zeros when tracking is not installed.
ZERO_API HostMemoryStats host_memory_stats();
ZERO_API void reset_host_memory_peak();

/// glibc returns large freed blocks to the kernel at once and faults them in again on the next
/// allocation, which measured ~40% of a CPU GPT-2 step here. This raises glibc's mmap and trim
/// thresholds so freed memory stays mapped for reuse (process-wide; call once at start-up).
ZERO_API void keep_freed_host_memory();

}  // namespace zero
