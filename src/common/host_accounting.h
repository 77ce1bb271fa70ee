// Host memory that libtorch's allocator does not see: the communicators' shared-memory
// buffers (POSIX shm mapped by the ranks of a node, Communicator::allocate_buffer) and NVMe
// offload's aligned staging buffers (offload/swap_file.h). Their bytes are reported here so that zero::host_memory_stats() (src/memory/host_memory.cpp)
// counts every byte a rank holds, which is what the memory planner predicts.
#pragma once

#include <cstdint>

namespace zero {

/// `delta` bytes of host memory mapped (> 0) or unmapped (< 0) outside libtorch's allocator.
/// Counted only once zero::track_host_memory is installed; returns whether it was, so that the
/// unmapping of memory mapped before is not subtracted (pass it to the matching call).
bool count_unallocated_host_bytes(int64_t delta, bool counted = true);

/// Where the counts go: set by zero::track_host_memory (src/memory/host_memory.cpp), which is
/// not in every build of the library's folders (the sanitizer builds of comm/ alone).
void set_unallocated_host_bytes_sink(void (*add)(int64_t));

}  // namespace zero
