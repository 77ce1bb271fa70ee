// The Communicator: the one narrow interface through which zero moves data between ranks.
//
// Every collective works on flat, contiguous buffers (at::Tensor handles, any shape; only
// numel, dtype and data pointer matter) and returns a Work handle at once: the collective runs
// asynchronously, in issue order, and the caller waits on the handle (or tests it) before it
// reads the results or reuses the buffers. Backends: MPI for CPU tensors (zero/comm_mpi.h); a
// device backend (NCCL) implements the same interface on its communication stream. This
// header includes no MPI, NCCL or CUDA header.
//
// Note [Deterministic reduction]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A backend whose capabilities() say deterministic_reduction sums every element of a
// reduction in an order that depends only on which rank owns the element (its chunk), never on
// the chunk sizes, on how many calls a buffer is split into, or on timing. The engine's
// bitwise guarantees rest on it: stage 0 (all-reduce of buckets), stage 1 (one reduce-scatter
// at the boundary) and stage 2 (reduce-scatter per bucket during backward) then give bitwise
// identical gradients, and all_reduce results are bitwise identical on every rank. The MPI
// backend's order is in src/comm/mpi_communicator.cpp (Note [MPI ring order]); tests that
// assert bitwise equality require the capability. With capabilities().hierarchical the order
// depends on the topology as well (nodes and ranks per node), not on where the nodes are.
//
// Note [Counting communicated bytes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each collective adds to stats() (and reports in its Work's stats()) the bytes that this rank
// moves over the wire under a ring schedule, which is also the volume the ZeRO paper counts:
//   reduce_scatter:  bytes of the chunks owned by other ranks   ((N-1)/N of the input when even)
//   all_gather:      bytes of the chunks owned by other ranks   ((N-1)/N of the output when even)
//   all_reduce:      the sum of the two above                   (2(N-1)/N of the buffer)
//   broadcast:       the buffer's bytes on every rank except the root (what each receives)
//   all_to_all:      bytes of the chunks sent to other ranks     ((N-1)/N of the input)
// where N and "other ranks" are those of the collective's group (CollectiveGroup).
// With one rank nothing moves and nothing is counted (calls still are). Counted when the
// collective is issued.
// Of those, CommStats::inter_node_bytes counts what crosses the node boundary (Note
// [Topology]): the bytes this rank receives under the schedule the backend runs from a rank on
// another node. Under the flat ring a rank receives everything from rank r-1, so the first
// rank of each node counts all of its bytes and the others none: a step of k nodes moves
// k x (the per-rank volume above) across nodes in all.
//
// Note [Topology]
// ~~~~~~~~~~~~~~~
// Ranks that share a node (a host: one kernel, one /dev/shm) are found once, when the
// communicator is made: the MPI backend asks MPI which ranks share memory with it
// (MPI_COMM_TYPE_SHARED) and names each node by its lowest rank's hostname; device backends
// take their bootstrap communicator's. Nodes are numbered in the order of their lowest rank.
// The topology decides which schedule a collective runs where several exist, what is counted
// as crossing nodes, and is printed by programs at start-up (Topology::describe).
#pragma once

#include "zero/error.h"
#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
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
  CollectiveCount all_to_all;
  /// Of the bytes above, those received from another node (Note [Counting communicated bytes]).
  int64_t inter_node_bytes = 0;
  int64_t total_bytes() const {
    return all_reduce.bytes + reduce_scatter.bytes + all_gather.bytes + broadcast.bytes +
           all_to_all.bytes;
  }
  CommStats& operator+=(const CommStats& other);
};

/// Where the ranks run (Note [Topology]).
struct ZERO_API Topology {
  std::vector<int> node_of_rank;        // one per rank: its node, 0 .. nodes() - 1
  std::vector<std::string> node_names;  // one per node: its lowest rank's hostname

  int nodes() const { return static_cast<int>(node_names.size()); }
  int world_size() const { return static_cast<int>(node_of_rank.size()); }
  /// Ranks of `node`, ascending.
  std::vector<int> ranks_of(int node) const;
  /// Every node has the same number of ranks, and they are consecutive (rank r on node
  /// r / ranks_per_node()): the layout of mpirun's default mapping (--map-by slot) on nodes of
  /// equal slots, which the hierarchical schedules need.
  bool blocked() const;
  /// The largest number of ranks on one node.
  int ranks_per_node() const;
  /// "1 node (vm), 2 ranks" or "2 nodes x 2 ranks: node1 (ranks 0-1), node2 (ranks 2-3)".
  std::string describe() const;

  /// From each rank's node key (ranks with equal keys share a node) and hostname; nodes
  /// numbered in the order of their lowest rank, named by its hostname.
  static Topology from_node_keys(const std::vector<int64_t>& key_of_rank,
                                 const std::vector<std::string>& hostname_of_rank);
  /// Every rank on one node.
  static Topology single_node(int world_size, const std::string& name);
};

/// The ranks one collective runs over. Groups other than kAll need a blocked topology
/// (Topology::blocked: m consecutive ranks on each of k nodes) and a backend whose
/// capabilities() say node_groups; inside a group, ranks are numbered in rank order, and
/// counts, chunks and roots refer to those numbers.
enum class CollectiveGroup {
  kAll,          // every rank of the communicator
  kNode,         // the m ranks of this rank's node: nothing crosses nodes
  kAcrossNodes,  // the k ranks with this rank's local index, one per node: everything does
};

/// What one collective asks for beyond its buffers.
struct ZERO_API CollectiveOptions {
  /// Seconds this collective may take before the job is ended (Note [Collective timeout] in
  /// src/comm/collective_watchdog.h); 0: the communicator's deadline (ZERO_COLLECTIVE_TIMEOUT_S).
  int64_t timeout_seconds = 0;
  /// Device backends: the stream the collective is ordered after (a cudaStream_t); null: the
  /// backend's own communication stream. CPU backends ignore it.
  void* stream = nullptr;
  /// reduce_scatter, all_gather and all_to_all: the ranks it runs over (others: kAll only).
  CollectiveGroup group = CollectiveGroup::kAll;
  /// What the collective is for ("stage-3 gather of unit 'h.1', forward pass"): part of its
  /// signature, which every rank's copy must match (Note [Collective signatures] in
  /// src/comm/collective_signature.h), and named when they do not. The same on every rank.
  std::string label;
};

/// What a backend guarantees beyond the interface.
struct ZERO_API CommCapabilities {
  /// Note [Deterministic reduction].
  bool deterministic_reduction = false;
  /// allocate_buffer may return memory peers read directly (reduce_scatter is faster from it).
  bool shared_buffers = false;
  /// Across nodes, reduce_scatter, all_gather and all_reduce run inside each node first and
  /// between nodes on one rank per node and chunk group (the MPI backend's Note [Hierarchical
  /// collectives]); the reduction order then depends on the topology too.
  bool hierarchical = false;
  /// Collectives over CollectiveGroup::kNode and kAcrossNodes (on a blocked topology).
  bool node_groups = false;
};

/// One collective (or in_order task) in flight. Collectives of a communicator complete in the
/// order they were issued. When an in_order task fails, every later collective and task fails
/// too, with an error naming it: the task may have issued fewer collectives than its peers,
/// so the sequence the ranks share is broken. A failed collective alone breaks nothing.
class ZERO_API Work {
 public:
  virtual ~Work() = default;
  /// Blocks until it has completed; rethrows its error (zero::Error naming op, rank, sizes).
  virtual void wait() = 0;
  /// Blocks at most `timeout`: true when it completed (rethrowing its error), false when it is
  /// still in flight. A collective past the communicator's deadline ends the job regardless.
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
  /// Whether it has completed, successfully or not (never blocks or throws).
  virtual bool completed() const = 0;
  /// What it moved (Note [Counting communicated bytes]); zero for tasks.
  virtual CommStats stats() const = 0;
};
using WorkHandle = std::shared_ptr<Work>;

/// Collectives over the ranks of one group. All ranks must issue the same collectives in the
/// same order with matching sizes and dtypes. Reductions accept fp32, fp64, bf16 and fp16
/// (16-bit sums are computed in fp32 and rounded to the 16-bit type after each addition, as
/// NCCL does); all_gather and broadcast also accept uint8 and integer types.
/// Argument errors throw zero::Error (naming the op, the rank, the element counts and the
/// dtype) when the collective is issued; failures while it runs are rethrown by its Work.
/// Every method may be called from any thread; the order of issue is the order of execution.
/// Buffers must stay alive and untouched until the Work completes.
class ZERO_API Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "nccl", ... for messages and reports.
  virtual std::string backend_name() const = 0;
  virtual CommCapabilities capabilities() const = 0;
  /// Which ranks share a node (Note [Topology]); found when the communicator was made.
  virtual const Topology& topology() const = 0;

  /// In place over all of `buffer`: a reduce_scatter over a balanced split (the first
  /// numel % N ranks own one extra element) followed by all_gather. With
  /// deterministic_reduction the result is bitwise identical on every rank.
  [[nodiscard]] virtual WorkHandle all_reduce(const at::Tensor& buffer, ReduceOp op,
                                              const CollectiveOptions& options = {}) = 0;

  /// `input` holds sum(counts) elements laid out as chunk 0 | chunk 1 | ... | chunk N-1 with
  /// chunk r of counts[r] elements; `output` receives the reduced chunk rank() and must hold
  /// counts[rank()] elements of the same dtype. An empty `counts` means N equal chunks of
  /// output.numel(). `input` is used as scratch: its contents are unspecified afterwards.
  /// `output` may alias input's own chunk (in place).
  [[nodiscard]] virtual WorkHandle reduce_scatter(const at::Tensor& input,
                                                  const at::Tensor& output, ReduceOp op,
                                                  const std::vector<int64_t>& counts = {},
                                                  const CollectiveOptions& options = {}) = 0;

  /// Gathers chunk r = every rank's `input` (counts[r] elements) into `output`
  /// (sum(counts) elements, chunk 0 first). Empty `counts` means equal chunks of
  /// input.numel(). `input` may alias output's own chunk (in place).
  [[nodiscard]] virtual WorkHandle all_gather(const at::Tensor& input, const at::Tensor& output,
                                              const std::vector<int64_t>& counts = {},
                                              const CollectiveOptions& options = {}) = 0;

  /// Chunk j of `input` (N equal chunks, N the group's size) goes to the group's rank j, and
  /// chunk j of `output` (the same numel and dtype) comes from it. `input` and `output` must
  /// not overlap. Any copyable dtype.
  [[nodiscard]] virtual WorkHandle all_to_all(const at::Tensor& input, const at::Tensor& output,
                                              const CollectiveOptions& options = {}) = 0;

  /// Copies `root`'s buffer into every rank's buffer.
  [[nodiscard]] virtual WorkHandle broadcast(const at::Tensor& buffer, int root,
                                             const CollectiveOptions& options = {}) = 0;

  [[nodiscard]] virtual WorkHandle barrier(const CollectiveOptions& options = {}) = 0;

  /// Runs `task` in this communicator's order: after every collective issued before it and
  /// before every one issued after it, as the backend runs its collectives (MPI: on its
  /// progress thread; a device backend: with its communication stream current). Collectives
  /// the task issues run at once, inside it. For work that must follow a collective before the
  /// next one starts (copying a reduced shard out, releasing its buffer) without the issuing
  /// thread waiting for it. The task's exception fails its Work, and the later ones (Work).
  [[nodiscard]] virtual WorkHandle in_order(std::function<void()> task) = 0;

  /// Collective: every rank allocates a zeroed buffer of `numel` elements of `dtype` (the same
  /// numel and dtype on every rank, in the same call order), blocking until it exists. With
  /// capabilities().shared_buffers it is placed where peers read it directly (MPI: POSIX
  /// shared memory when all ranks share one node), which makes reduce_scatter from it faster
  /// (Note [Shared-memory reduce-scatter] in src/comm/shared_segments.h); otherwise, and by
  /// default, it is an ordinary tensor. Results are bitwise the same either way. Freeing the
  /// tensor is local, not collective.
  virtual at::Tensor allocate_buffer(int64_t numel, at::ScalarType dtype);

  /// Counted since construction or the last reset_stats(). Note [Counting communicated bytes].
  virtual CommStats stats() const = 0;
  virtual void reset_stats() = 0;
};

/// Collective: every rank's `text`, in rank order, on every rank.
ZERO_API std::vector<std::string> all_gather_texts(Communicator& comm, const std::string& text);

/// Collective: every rank's `local` (one-dimensional, contiguous, on the CPU; the same dtype
/// on every rank, any length), in rank order, on every rank.
ZERO_API std::vector<at::Tensor> all_gather_varying(Communicator& comm, const at::Tensor& local);

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

/// Collective (Note [Agreeing on a failure]): runs `work` on this rank, catching the
/// std::exception it throws (capture_error, zero/error.h), then agrees on the outcome with
/// agree_on_failure: returns when `work` returned on every rank; otherwise every rank throws the
/// same CollectiveError. Every rank must call it (with its own `work`, which may do nothing).
template <typename Work>
void run_and_agree(Communicator& comm, const std::string& operation, Work&& work) {
  agree_on_failure(comm, operation, capture_error(std::forward<Work>(work)));
}


}  // namespace zero
