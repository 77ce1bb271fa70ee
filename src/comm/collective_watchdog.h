// A deadline for every collective of a communicator: a rank left waiting for a peer that has
// stopped (SIGSTOP, a stuck file system, a deadlock in user code) ends the job with a message
// naming the operation and the peer, instead of hanging forever. Backend-neutral: the MPI
// communicator uses it today; a NCCL one would give it its own abort.
//
// Note [Collective timeout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// - Each public collective of a communicator runs inside a CollectiveWatchdog::Scope, which
//   records the operation, its bytes, the collective's sequence number on this rank (1, 2, ...)
//   and when it started; one collective is in flight at a time per communicator (the
//   Communicator contract), so one slot suffices and a scope costs a few atomic stores.
// - A thread per watchdog wakes every second (or a tenth of the deadline, when shorter) and
//   checks the slot. A collective in flight longer than the deadline (ZERO_COLLECTIVE_TIMEOUT_S,
//   default 600 s, as NCCL's and DeepSpeed's default is 10 to 30 minutes) ends the job through
//   the backend's abort, after printing one line to stderr.
// - Which peer: each rank also publishes, on a shared-memory progress board (one slot per
//   rank, when every rank shares one node), how many collectives it has entered and a
//   heartbeat its watchdog thread renews at every wake-up. A peer that has entered fewer
//   collectives than this rank's current one has not arrived: it is the one waited for. A
//   peer whose heartbeat is older than kSilentAfter (or 4 wake-ups) is stopped or dead, even
//   when it stopped inside this very collective. Across nodes the board does not exist; the
//   message then names the peer the collective's schedule was receiving from when the
//   deadline passed (waiting_on, set by point-to-point schedules such as the ring), with its
//   node, or says the peer is unknown (inside a collective of the MPI library itself).
// - The deadline covers time inside the communicator only. A rank that computes for an hour
//   between two collectives is not timed out itself; its peers, waiting in the next collective,
//   are, which is the intended reading: the job made no progress for the deadline.
// - 0 turns the deadline off (no thread is started), also for collectives that ask for their
//   own deadline (CollectiveOptions::timeout_seconds), which otherwise replaces it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace zero::comm {

/// One rank's slot of the progress board.
struct RankProgress {
  int64_t entered = 0;       // collectives entered
  int64_t heartbeat_ns = 0;  // steady-clock time of its watchdog's last wake-up; 0: none yet
};

class CollectiveWatchdog {
 public:
  /// Every rank's progress, in rank order; empty when unknown.
  using PeerProgress = std::function<std::vector<RankProgress>()>;
  /// Publishes a value of this rank where peers can read it: the count of collectives entered
  /// (by every Scope, on the collective's thread) or the heartbeat (by the watchdog thread).
  using Publish = std::function<void(int64_t)>;
  /// Ends the job; called once, from the watchdog thread, with the message already printed.
  using Abort = std::function<void()>;

  /// `backend` ("mpi") names the communicator in the message. timeout_seconds 0: no deadline.
  CollectiveWatchdog(std::string backend, int rank, int size, int64_t timeout_seconds,
                     Publish publish_entered, Publish publish_heartbeat,
                     PeerProgress peer_progress, Abort abort);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// Marks one collective in flight for its lifetime. `op` must be a string literal.
  /// `timeout_seconds` > 0 replaces the watchdog's deadline for this collective
  /// (CollectiveOptions::timeout_seconds).
  class Scope {
   public:
    Scope(CollectiveWatchdog& watchdog, const char* op, int64_t bytes,
          int64_t timeout_seconds = 0);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CollectiveWatchdog& watchdog_;
  };

  /// The count of collectives this rank has entered (what it publishes on the progress board).
  int64_t entered() const { return entered_.load(std::memory_order_relaxed); }

  /// The rank the collective in flight now waits to receive from (-1: unknown), set by the
  /// schedule before each receive; a Scope starts at -1. Relaxed, from the collective's thread.
  void waiting_on(int rank) { waiting_on_.store(rank, std::memory_order_relaxed); }
  /// Names nodes in messages: node_of_rank[r] is rank r's node's name (empty: no names).
  void set_node_names(std::vector<std::string> node_of_rank) { node_of_rank_ = std::move(node_of_rank); }

  /// The message a timeout prints at steady-clock time `now` for a collective whose deadline
  /// was `deadline_seconds` (0: the watchdog's own), for tests of its wording; does not abort.
  std::string timeout_message(const char* op, int64_t bytes, int64_t sequence,
                              double waited_seconds, int64_t now,
                              int64_t deadline_seconds = 0) const;

  /// A peer whose heartbeat is older than this (and than 4 of the watchdog's wake-ups) is
  /// reported silent: stopped or dead.
  static constexpr int64_t kSilentAfterNs = 2'000'000'000;

 private:
  void watch();

  std::string backend_;
  int rank_;
  int size_;
  int64_t timeout_seconds_;
  int64_t poll_ns() const;

  Publish publish_entered_;
  Publish publish_heartbeat_;
  PeerProgress peer_progress_;
  Abort abort_;

  std::atomic<int64_t> entered_{0};
  std::atomic<int64_t> started_ns_{0};  // steady_clock ns of the collective in flight; 0: none
  std::atomic<int64_t> deadline_s_{0};   // its deadline in seconds
  std::atomic<const char*> op_{nullptr};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int> waiting_on_{-1};
  std::vector<std::string> node_of_rank_;  // set before the first collective, then read only

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace zero::comm
