// CUDA ranks for programs that may run without them: libzero_cuda (the NCCL communicator,
// zero/comm_nccl.h) loaded at run time, on first use, instead of linked. A program that links
// zero_cuda loads libtorch's CUDA libraries at start (about 370 MB of resident memory and a
// fifth of a second here, GPU or not); one that calls cuda_support() only when asked to train
// on a GPU (zero-train --device cuda) pays that only then. Part of libzero; includes no CUDA,
// NCCL or MPI header.
#pragma once

#include <cstdint>
#include <memory>

#include "zero/comm.h"
#include "zero/comm_nccl.h"
#include "zero/export.h"

namespace zero {

/// A CUDA device's memory: what the driver reports free and in all, and the peaks of libtorch's
/// caching allocator on it since the last reset (allocated: tensors; reserved: what the
/// allocator holds from the driver, which is what other processes cannot have).
struct ZERO_API CudaMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
};

/// What libzero_cuda offers a program that loaded it (zero/comm_nccl.h has the contracts).
struct ZERO_API CudaSupport {
  std::shared_ptr<Communicator> (*make_nccl_communicator)(Communicator& bootstrap,
                                                          const NcclOptions& options) = nullptr;
  int (*cuda_device_count)() = nullptr;
  /// The device make_nccl_communicator takes for NcclOptions::device -1 on this rank.
  int (*default_cuda_device)() = nullptr;
  /// Device `device`'s memory (throws zero::Error when the driver cannot say).
  CudaMemory (*memory)(int device) = nullptr;
  /// Starts the allocator's peaks of `device` afresh.
  void (*reset_memory_peaks)(int device) = nullptr;
};

/// The GPU a rank takes among `device_count` visible ones: its rank on the machine
/// (`local_rank`, from the launcher; -1 when none says) modulo the count, 0 without a local
/// rank, -1 without devices. make_nccl_communicator's default (NcclOptions::device -1) and
/// the device tests and programs put a rank's tensors on ("cuda:" + it), never "cuda:0".
ZERO_API int cuda_device_for_local_rank(int local_rank, int device_count);

/// Loads libzero_cuda (from beside libzero, else the library search path) on the first call
/// and returns what it offers. Throws zero::Error saying why when it cannot: zero built
/// without CUDA (ZERO_CUDA, cmake/ZeroCuda.cmake), or the library or its CUDA dependencies
/// not loadable (the loader's message).
ZERO_API const CudaSupport& cuda_support();

}  // namespace zero

/// libzero_cuda's entry point for cuda_support() (versioned: a libzero_cuda of another layout
/// is not mistaken for this one).
extern "C" ZERO_API const zero::CudaSupport* zero_cuda_support_v1();
