// The MPI backend of zero::Communicator (zero/comm.h) for CPU tensors, and what only an MPI
// job has. Ranks are the processes of MPI_COMM_WORLD, started by mpirun (or srun), on one
// machine or many (docs/launching.md). This header includes no MPI header either.
#pragma once

#include <memory>

#include "zero/comm.h"
#include "zero/export.h"

namespace zero {

/// The MPI communicator over MPI_COMM_WORLD: a ring of point-to-point messages with zero's own
/// reduction kernels (capabilities(): deterministic_reduction, and shared_buffers when every
/// rank is on one node). Collectives run in issue order on the communicator's progress thread,
/// the only thread that calls MPI; a collective past ZERO_COLLECTIVE_TIMEOUT_S ends the job.
/// Initializes MPI (MPI_THREAD_MULTIPLE, at least MPI_THREAD_SERIALIZED) on first use if the
/// program has not, and finalizes it at exit in that case.
ZERO_API std::shared_ptr<Communicator> make_mpi_communicator();

/// A communicator for tensors on any device (CUDA) whose collectives run on `host` (e.g. the
/// MPI communicator) through host copies: the buffers are copied to the host after their
/// producers on the caller's current stream, reduced or gathered there in the host's order,
/// and copied back; Work::wait() returns with the results on the device. For several ranks on
/// one GPU (NCCL cannot), or GPUs without NCCL; slower than NCCL. CPU tensors go straight to
/// `host`. capabilities() and byte counts are the host's: with MPI the reductions are
/// deterministic (Note [Deterministic reduction]) on GPUs too.
ZERO_API std::shared_ptr<Communicator> make_host_staged_communicator(
    std::shared_ptr<Communicator> host);

/// Ends every rank of the MPI job with `exit_code` (MPI_Abort on MPI_COMM_WORLD): for an error
/// after which other ranks may be blocked in a collective. Never returns.
[[noreturn]] ZERO_API void abort_mpi_job(int exit_code);

}  // namespace zero
