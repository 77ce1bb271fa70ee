// Shared-memory buffers of the MPI communicator and its reduce-scatter over them.
//
// Note [Shared-memory reduce-scatter]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Over MPI point-to-point, a reduce-scatter costs a copy (the receiving core copies the
// peer's chunk) plus an add on the same core, so on CPU ranks it runs at about 0.5-0.75x
// the all-gather's bandwidth (docs/benchmarks.md). When every rank shares one node and the
// input lives in a buffer from Communicator::allocate_buffer (a POSIX shared-memory segment
// that every peer has mapped), rank c instead reads chunk c of every peer's input in place
// and adds it up itself: no copy. Protocol per call:
//   1. each rank writes (segment id, byte offset) of its input into its own mailbox slot, or
//      "not shared" when the input is an ordinary tensor, then a barrier;
//   2. each rank reads every mailbox and decides whether it can see every peer's input; an
//      MPI_Allreduce(MIN) makes the decision unanimous (otherwise all ranks take the ring);
//   3. rank c computes ((x[c+1] + x[c+2]) + ...) + x[c] block by block, the order of
//      Note [MPI ring order], so results are bitwise those of the ring;
//   4. a barrier, so no rank returns (and lets its caller overwrite its input) while a peer
//      still reads it.
// Segments are created with shm_open, reserved with posix_fallocate (so a full /dev/shm fails
// the allocation instead of faulting later), mapped by every rank, then unlinked; freeing one
// unmaps it locally. Any failure on any rank makes allocate return nothing on every rank.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collective_watchdog.h"

namespace zero::comm {

class SharedSegments {
 public:
  /// Collective over `comm` (rank/size of it). Disabled unless all ranks share one node
  /// (`single_node`, the same on every rank: Note [Topology] in zero/comm.h).
  SharedSegments(MPI_Comm comm, int rank, int size, bool single_node);
  ~SharedSegments();

  bool enabled() const { return enabled_; }

  /// Collective. Maps a zeroed segment of `bytes` on every rank; nullptr (on every rank) when
  /// disabled or when any rank failed. The memory is released when the returned handle's
  /// deleter runs (local).
  std::byte* allocate(int64_t bytes, std::function<void(void*)>* deleter);

  /// Collective. Maps the progress board of Note [Collective timeout]
  /// (src/comm/collective_watchdog.h): one RankProgress slot per rank. Does nothing when
  /// disabled; then peer_progress() is empty.
  void map_progress_board();
  /// Writes this rank's slot (relaxed atomic stores; no-ops without a board).
  void publish_entered(int64_t count);
  void publish_heartbeat(int64_t now_ns);
  /// Every rank's slot, in rank order; empty without a board. Safe from any thread.
  std::vector<RankProgress> peer_progress() const;

  /// Where `input` lives, published for this call (step 1 of the Note) and the unanimous
  /// decision (step 2). Returns the peers' input base pointers in rank order, or an empty
  /// vector when the ring must be used. Collective.
  std::vector<const std::byte*> locate_inputs(const std::byte* input, int64_t bytes);

 private:
  struct Segment {
    std::byte* local = nullptr;
    int64_t bytes = 0;
    std::vector<std::byte*> peers;  // every rank's mapping of its own segment, [rank] = local
  };
  struct Mailbox {
    int64_t segment = -1;
    int64_t offset = 0;
  };
  bool create_and_map(int64_t id, int64_t bytes, Segment& segment);
  std::string name(int rank, int64_t id) const;
  static void unmap(Segment& segment);

  MPI_Comm comm_;
  int rank_;
  int size_;
  bool enabled_ = false;
  std::string job_token_;
  int64_t next_id_ = 1;  // 0 is the mailbox segment
  Segment mailbox_;
  Segment progress_;
  // Shared with deleters, which may run after this object is gone.
  struct Registry {
    std::mutex mutex;
    std::map<int64_t, Segment> segments;
  };
  std::shared_ptr<Registry> registry_;
};

}  // namespace zero::comm
