#include "engine/gather_schedule.h"

#include <limits>
#include <utility>

#include "zero/error.h"

namespace zero {

GatherSchedule::GatherSchedule(std::vector<int64_t> numel, std::vector<int64_t> padded,
                               GatherLimits limits)
    : numel_(std::move(numel)), padded_(std::move(padded)), limits_(limits) {
  ZERO_INTERNAL_ASSERT(numel_.size() == padded_.size(), "gather schedule over ", numel_.size(),
                       " groups with ", padded_.size(), " padded sizes");
}

GatherSchedule::Fetch GatherSchedule::fetched(int g, FetchMode /*mode*/) {
  // Every mode is recorded alike: a recompute is a fetch at its place in the order.
  Fetch fetch;
  fetch.position = cursor_;
  recorded_.push_back(g);
  if (!replaying_) return fetch;
  if (cursor_ < trace_.size() && trace_[cursor_] == g) {
    ++cursor_;
    return fetch;
  }
  fetch.invalidated = true;
  fetch.expected = cursor_ < trace_.size() ? trace_[cursor_] : -1;
  replaying_ = false;
  ++invalidations_;
  return fetch;
}

std::vector<int> GatherSchedule::prefetch(const std::function<bool(int)>& released,
                                          int64_t ahead, int64_t live) const {
  std::vector<int> chosen;
  if (!replaying_ || !limits_.prefetch) return chosen;
  for (size_t j = cursor_; j < trace_.size(); ++j) {
    const int g = trace_[j];
    if (!released(g)) continue;
    bool already = false;  // a group used twice ahead is gathered once
    for (int c : chosen) already = already || c == g;
    if (already) continue;
    const int64_t n = padded_[g];
    if (ahead + n > limits_.prefetch_bucket) break;
    if (live + n > limits_.max_live) break;
    chosen.push_back(g);
    ahead += n;
    live += n;
  }
  return chosen;
}

bool GatherSchedule::reused_soon(int g) const {
  if (!replaying_ || limits_.max_reuse_distance == 0) return false;
  int64_t distance = 0;
  for (size_t j = cursor_; j < trace_.size(); ++j) {
    if (trace_[j] == g) return true;
    distance += numel_[trace_[j]];
    if (distance > limits_.max_reuse_distance) return false;
  }
  return false;
}

int GatherSchedule::eviction_victim(const std::vector<int>& candidates) const {
  int victim = -1;
  size_t victim_next = 0;
  for (int h : candidates) {
    size_t next = std::numeric_limits<size_t>::max();
    if (replaying_) {
      for (size_t j = cursor_; j < trace_.size(); ++j) {
        if (trace_[j] == h) {
          next = j;
          break;
        }
      }
    }
    if (victim < 0 || next > victim_next) {
      victim = h;
      victim_next = next;
    }
  }
  return victim;
}

bool GatherSchedule::adopt() {
  const bool changed = !replaying_ || cursor_ != trace_.size();
  if (changed) trace_ = recorded_;
  replaying_ = true;
  recorded_.clear();
  cursor_ = 0;
  return changed;
}

void GatherSchedule::abandon() {
  recorded_.clear();
  replaying_ = false;
  cursor_ = 0;
}

std::vector<int> GatherSchedule::upcoming() const {
  if (!replaying_ || cursor_ >= trace_.size()) return {};
  return std::vector<int>(trace_.begin() + static_cast<std::ptrdiff_t>(cursor_), trace_.end());
}

}  // namespace zero
