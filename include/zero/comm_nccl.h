// The NCCL backend of zero::Communicator (zero/comm.h), for ranks that compute on CUDA GPUs:
// libzero_cuda (CMake target zero::cuda), built when the torch package has CUDA
// (cmake/ZeroCuda.cmake). This header includes no NCCL or CUDA header.
//
// Start-up: the ranks are those of an existing communicator over the same processes (the MPI
// one: zero's launcher is mpirun, docs/launching.md), which shares NCCL's unique id from rank
// 0; one GPU per rank, NCCL cannot put two ranks on one GPU (for several ranks on one GPU, or
// without NCCL, make_host_staged_communicator in zero/comm_mpi.h).
#pragma once

#include <cstdint>
#include <memory>

#include "zero/comm.h"
#include "zero/export.h"

namespace zero {

struct ZERO_API NcclOptions {
  /// The CUDA device of this rank; -1: the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
  /// SLURM_LOCALID, LOCAL_RANK) modulo the devices visible, else device 0.
  int device = -1;
  /// Seconds a collective may take before the job is ended (Note [Collective timeout]); -1:
  /// ZERO_COLLECTIVE_TIMEOUT_S (default 600), 0: no deadline.
  int64_t timeout_seconds = -1;
};

/// Collective over `bootstrap`: an NCCL communicator over the same ranks, in the same order.
/// Buffers are CUDA tensors on the rank's device, ordered after the stream they were made on
/// (CollectiveOptions::stream, else the caller's current stream) with no host synchronisation;
/// Work::wait() orders the caller's current stream after the collective. CPU tensors are
/// accepted too, for small host-side exchanges: copied through the device, and complete
/// (host-visible) when the call returns. Errors name the op, rank, world size and buffers; a
/// collective past the deadline aborts the NCCL communicator and ends the job (exit 3). Throws
/// zero::Error on every rank if there is no CUDA device, two ranks share one, or NCCL fails.
ZERO_API std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap,
                                                              const NcclOptions& options = {});

/// CUDA devices this process sees (0 without a driver or device; never throws).
ZERO_API int cuda_device_count();

/// The device make_nccl_communicator takes for NcclOptions::device -1: the launcher's local rank
/// modulo the devices visible, else 0 (-1 without a device). Never throws.
ZERO_API int default_cuda_device();

}  // namespace zero
