// Stage 3's gather schedule: which groups to gather ahead of use and which to release, decided
// from the recorded order of fetches. Pure: no tensors and no communication; the stage-3 engine
// reports events and carries the decisions out, and tests drive it directly
// (tests/test_gather_schedule.cpp).
//
// Note [Stage 3 trace and prefetch]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The first training micro-step records the order in which groups are fetched (forward, then
// backward). Later micro-steps replay it: after each fetch, the gathers of the next groups in
// the trace are issued (with overlap_comm they run while compute continues), up to
// stage3_prefetch_bucket_size elements ahead and stage3_max_live_parameters gathered at once. A
// fetch that differs from the trace invalidates it for the rest of the micro-step (in-flight
// prefetches are waited for and released; no more prefetch), and the order seen in that
// micro-step becomes the trace. When a new trace is adopted, every rank checks that the others
// adopted the same one. Every rank makes the same decisions from the same trace, so collectives
// stay matched. Forwards under NoGradGuard (evaluation) gather on demand, release right after,
// and leave the trace alone.
//
// A fetch has a mode (FetchMode): the forward, the re-gather before a unit's backward, and a
// third, the recompute of a checkpointed unit during backward (activation checkpointing): it is
// recorded in the trace like the others, so it is prefetched and released the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace zero {

enum class FetchMode {
  kForward,    // the unit's forward
  kBackward,   // the gather before the unit's backward
  kRecompute,  // the forward recomputed during backward (activation checkpointing)
};

struct GatherLimits {
  int64_t prefetch_bucket = 0;   // stage3_prefetch_bucket_size: elements gathered ahead
  int64_t max_live = 0;          // stage3_max_live_parameters: elements gathered at once
  int64_t max_reuse_distance = 0;// stage3_max_reuse_distance (0: never keep a group)
  bool prefetch = false;         // overlap_comm with a prefetch bucket > 0
};

class GatherSchedule {
 public:
  /// `numel[g]`: group g's elements (the reuse distance counts these); `padded[g]`: its padded
  /// elements (what a gather holds: the budgets count these).
  GatherSchedule(std::vector<int64_t> numel, std::vector<int64_t> padded, GatherLimits limits);

  /// What a training fetch did to the trace.
  struct Fetch {
    bool invalidated = false;  // it departed from the trace: prefetching stops, the engine
                               // releases what was gathered ahead
    size_t position = 0;       // its position in the trace
    int expected = -1;         // the group the trace expected there (-1: past its end)
  };
  /// A training fetch of group g (a unit's forward, backward or recompute).
  Fetch fetched(int g, FetchMode mode);

  /// The groups to gather ahead now, after a fetch, in trace order: the next ones the trace
  /// uses that are `released`, while the elements gathered ahead (`ahead`, padded) and those
  /// gathered at once (`live`) stay within the limits. Empty unless replaying with prefetch.
  std::vector<int> prefetch(const std::function<bool(int)>& released, int64_t ahead,
                            int64_t live) const;

  /// Whether group g is fetched again within max_reuse_distance elements of the trace (the
  /// elements of the groups fetched in between); false when not replaying or with distance 0.
  bool reused_soon(int g) const;

  /// Of the `candidates` (gathered groups nothing needs now), the one to release to stay within
  /// the live budget: the one whose next use in the trace is farthest (never used again counts
  /// as farthest; without a trace, the first). -1 when there are none.
  int eviction_victim(const std::vector<int>& candidates) const;

  /// The end of a training micro-step's backward: the order seen becomes the trace if it
  /// departed from it (or there was none). Returns true when the trace changed (the engine then
  /// checks that every rank adopted the same one).
  bool adopt();
  /// Autograd failed: forget this micro-step's fetches and replay nothing until the next
  /// adopt().
  void abandon();

  /// The rest of the trace after the last fetch, in order (empty unless replaying).
  std::vector<int> upcoming() const;

  bool replaying() const { return replaying_; }
  const std::vector<int>& trace() const { return trace_; }
  /// Traces departed from so far.
  int invalidations() const { return invalidations_; }

 private:
  std::vector<int64_t> numel_;
  std::vector<int64_t> padded_;
  GatherLimits limits_;
  std::vector<int> trace_;     // adopted order of group fetches
  std::vector<int> recorded_;  // this micro-step's fetches
  size_t cursor_ = 0;          // next trace_ position expected
  bool replaying_ = false;     // trace_ valid for this micro-step so far
  int invalidations_ = 0;
};

}  // namespace zero
