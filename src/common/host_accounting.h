// Host memory that libtorch's allocator does not see: the communicators' shared-memory
// buffers (POSIX shm mapped by the ranks of a node, Communicator::allocate_buffer). Their
// bytes are reported here so that zero::host_memory_stats() (src/memory/host_memory.cpp)
// counts every byte a rank holds, which is what the memory planner predicts.
#pragma once

#include <cstdint>

namespace zero {

/// `delta` bytes of host memory mapped (> 0) or unmapped (< 0) outside libtorch's allocator.
/// Counted only while zero::track_host_memory is installed (a no-op before).
void count_unallocated_host_bytes(int64_t delta);

}  // namespace zero
