// The Communicator: the one narrow interface through which zero moves data between ranks.
//
// Every collective works on flat, contiguous buffers (at::Tensor handles, any shape; only
// numel, dtype and data pointer matter). Backends: MPI for CPU tensors (this header's
// make_mpi_communicator); an NCCL backend for CUDA tensors can implement the same interface.
// This header deliberately includes no MPI, NCCL or CUDA header.
//
// Note [Deterministic ring reduction]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Reductions (reduce_scatter, all_reduce) split the buffer into per-rank chunks; chunk c is
// the one rank c receives. Every element of chunk c is summed in the fixed rank order
//     ((x[c+1] + x[c+2]) + ...) + x[c]        (indices mod world size),
// whatever the chunk sizes, the number of calls the buffer was split into, or the internal
// segmentation. The result therefore depends only on which rank owns an element. The engine
// relies on this: stage 0 (all-reduce of buckets), stage 1 (one reduce-scatter at the
// boundary) and stage 2 (reduce-scatter per bucket during backward) produce bitwise identical
// gradients when they use the same ownership. all_reduce results are bitwise identical on all
// ranks (reduce-scatter followed by all-gather of the owner's result).
//
// Note [Counting communicated bytes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each collective adds to stats() the bytes that this rank moves over the wire under a ring
// schedule, which is also the volume the ZeRO paper counts:
//   reduce_scatter:  bytes of the chunks owned by other ranks   ((N-1)/N of the input when even)
//   all_gather:      bytes of the chunks owned by other ranks   ((N-1)/N of the output when even)
//   all_reduce:      the sum of the two above                   (2(N-1)/N of the buffer)
//   broadcast:       the buffer's bytes on every rank except the root (what each receives)
// With one rank nothing moves and nothing is counted (calls still are).
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zero {

enum class ReduceOp { kSum, kMax };

/// Calls and bytes of one kind of collective. See Note [Counting communicated bytes].
struct ZERO_API CollectiveCount {
  int64_t calls = 0;
  int64_t bytes = 0;
};

struct ZERO_API CommStats {
  CollectiveCount all_reduce;
  CollectiveCount reduce_scatter;
  CollectiveCount all_gather;
  CollectiveCount broadcast;
  int64_t total_bytes() const {
    return all_reduce.bytes + reduce_scatter.bytes + all_gather.bytes + broadcast.bytes;
  }
};

/// Collectives over the ranks of one group. All ranks must call the same collectives in the
/// same order with matching sizes and dtypes. Reductions accept fp32, fp64, bf16 and fp16
/// (16-bit sums are computed in fp32 and rounded to the 16-bit type after each addition, as
/// NCCL does); all_gather and broadcast also accept uint8 and integer types.
/// Failures throw zero::Error naming the op, the rank, the element counts and the dtype.
/// Collectives may be called from one thread at a time (the engine's communication thread
/// or the main thread, never both concurrently); stats() may be read from any thread.
class ZERO_API Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "nccl", ... for messages and reports.
  virtual std::string backend_name() const = 0;

  /// In place over all of `buffer`: a reduce_scatter over a balanced split (the first
  /// numel % N ranks own one extra element) followed by all_gather. Result bitwise identical
  /// on every rank.
  virtual void all_reduce(const at::Tensor& buffer, ReduceOp op) = 0;

  /// `input` holds sum(counts) elements laid out as chunk 0 | chunk 1 | ... | chunk N-1 with
  /// chunk r of counts[r] elements; `output` receives the reduced chunk rank() and must hold
  /// counts[rank()] elements of the same dtype. An empty `counts` means N equal chunks of
  /// output.numel(). `input` is used as scratch: its contents are unspecified afterwards.
  /// `output` may alias input's own chunk (in place). Order: Note [Deterministic ring reduction].
  virtual void reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                              const std::vector<int64_t>& counts = {}) = 0;

  /// Gathers chunk r = every rank's `input` (counts[r] elements) into `output`
  /// (sum(counts) elements, chunk 0 first). Empty `counts` means equal chunks of
  /// input.numel(). `input` may alias output's own chunk (in place).
  virtual void all_gather(const at::Tensor& input, const at::Tensor& output,
                          const std::vector<int64_t>& counts = {}) = 0;

  /// Copies `root`'s buffer into every rank's buffer.
  virtual void broadcast(const at::Tensor& buffer, int root) = 0;

  virtual void barrier() = 0;

  /// Collective: every rank allocates a zeroed buffer of `numel` elements of `dtype` (the same
  /// numel and dtype on every rank, in the same call order). A backend may place it where
  /// peers read it directly (MPI: POSIX shared memory when all ranks share one node), which
  /// makes reduce_scatter with such inputs faster (Note [Shared-memory reduce-scatter] in
  /// src/comm/shared_segments.h); otherwise it is an ordinary tensor. Results are bitwise the
  /// same either way. Freeing the tensor is local, not collective.
  virtual at::Tensor allocate_buffer(int64_t numel, at::ScalarType dtype) = 0;

  /// Terminates every rank of the job with `exit_code` (MPI: MPI_Abort). For errors after
  /// which other ranks may be blocked in a collective; never returns.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;

  /// Counted since construction or the last reset_stats(). Note [Counting communicated bytes].
  virtual CommStats stats() const = 0;
  virtual void reset_stats() = 0;
};

/// Collective: every rank's `text`, in rank order, on every rank.
ZERO_API std::vector<std::string> all_gather_texts(Communicator& comm, const std::string& text);

// Note [Agreeing on a failure]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Work that can fail on some ranks only (reading a file, creating a directory, checking a
// checkpoint piece) must not throw on those ranks alone: the others would go on into the next
// collective and wait there forever, or be killed by an abort with one message per rank. So
// such work is captured ("" for success, else the error's message), and the ranks agree on the
// outcome in one collective before anything depends on it. Every rank then throws the same
// zero::CollectiveError together, is at the same point, and can end normally; the error's
// origin_rank() (the lowest failing rank, the same everywhere) prints it once.

/// Collective (Note [Agreeing on a failure]). `error` is this rank's outcome: "" when its work
/// succeeded. Returns when every rank succeeded; otherwise every rank throws CollectiveError
/// naming the lowest failing rank R: on R its what() is R's own error, elsewhere "OPERATION
/// failed on rank R: ERROR".
ZERO_API void agree_on_failure(Communicator& comm, const std::string& operation, const std::string& error);

/// The MPI backend for CPU tensors. Initializes MPI (MPI_THREAD_MULTIPLE) on first use if the
/// program has not, and finalizes it at exit in that case. Uses MPI_COMM_WORLD.
ZERO_API std::shared_ptr<Communicator> make_mpi_communicator();

}  // namespace zero
