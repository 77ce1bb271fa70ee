#include "comm/collective_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace zero::comm {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(std::string backend, int rank, int size,
                                       int64_t timeout_seconds, Publish publish_entered,
                                       Publish publish_heartbeat, PeerProgress peer_progress,
                                       Abort abort)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      timeout_seconds_(timeout_seconds),
      publish_entered_(std::move(publish_entered)),
      publish_heartbeat_(std::move(publish_heartbeat)),
      peer_progress_(std::move(peer_progress)),
      abort_(std::move(abort)) {
  // One rank alone never waits for a peer.
  if (timeout_seconds_ > 0 && size_ > 1) thread_ = std::thread([this] { watch(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CollectiveWatchdog::Scope::Scope(CollectiveWatchdog& watchdog, const char* op, int64_t bytes,
                                 int64_t timeout_seconds)
    : watchdog_(watchdog) {
  watchdog_.op_.store(op, std::memory_order_relaxed);
  watchdog_.bytes_.store(bytes, std::memory_order_relaxed);
  watchdog_.waiting_on_.store(-1, std::memory_order_relaxed);
  watchdog_.deadline_s_.store(timeout_seconds > 0 ? timeout_seconds : watchdog_.timeout_seconds_,
                              std::memory_order_relaxed);
  const int64_t entered = watchdog_.entered_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (watchdog_.publish_entered_) watchdog_.publish_entered_(entered);
  // Release: the watchdog thread that reads a start time also sees this op and bytes.
  watchdog_.started_ns_.store(now_ns(), std::memory_order_release);
}

CollectiveWatchdog::Scope::~Scope() { watchdog_.started_ns_.store(0, std::memory_order_release); }

int64_t CollectiveWatchdog::poll_ns() const {
  return std::clamp<int64_t>(timeout_seconds_ * 100, 10, 1000) * 1000000;
}

std::string CollectiveWatchdog::timeout_message(const char* op, int64_t bytes, int64_t sequence,
                                                double waited_seconds, int64_t now,
                                                int64_t deadline_seconds) const {
  std::ostringstream out;
  out << "zero: collective timeout on rank " << rank_ << " of " << size_ << ": " << op << " ("
      << backend_ << ", " << bytes << " bytes, this rank's collective #" << sequence
      << ") has waited " << static_cast<int64_t>(waited_seconds) << " s, past the deadline of "
      << (deadline_seconds > 0 ? deadline_seconds : timeout_seconds_) << " s ("
      << (deadline_seconds > 0 && deadline_seconds != timeout_seconds_
              ? "its CollectiveOptions::timeout_seconds"
              : "ZERO_COLLECTIVE_TIMEOUT_S")
      << "); ";
  const std::vector<RankProgress> progress =
      peer_progress_ ? peer_progress_() : std::vector<RankProgress>();
  const int64_t silent_after = std::max(kSilentAfterNs, 4 * poll_ns());
  auto silent_seconds = [&](const RankProgress& p) -> int64_t {
    if (p.heartbeat_ns == 0 || now - p.heartbeat_ns <= silent_after) return -1;
    return (now - p.heartbeat_ns) / 1000000000;
  };
  std::vector<int> behind, silent;
  for (int r = 0; r < static_cast<int>(progress.size()); ++r) {
    if (r == rank_) continue;
    if (progress[r].entered < sequence) {
      behind.push_back(r);
    } else if (silent_seconds(progress[r]) >= 0) {
      silent.push_back(r);
    }
  }
  const int peer = waiting_on_.load(std::memory_order_relaxed);
  if (progress.empty() && peer >= 0 && peer < size_) {
    out << "waiting for rank " << peer;
    if (static_cast<size_t>(peer) < node_of_rank_.size()) {
      out << " on " << node_of_rank_[static_cast<size_t>(peer)];
    }
    out << " (the rank its schedule receives from now: stopped, dead, cut off, or itself "
           "waiting)";
  } else if (progress.empty()) {
    out << "which rank it waits for is unknown (ranks on several nodes have no shared progress "
           "board)";
  } else if (behind.empty() && silent.empty()) {
    out << "every rank has entered this collective and is alive, so one of them is stuck "
           "inside it";
  } else {
    std::vector<std::string> parts;
    if (!behind.empty()) {
      std::ostringstream part;
      part << "waiting for rank" << (behind.size() > 1 ? "s" : "");
      for (size_t i = 0; i < behind.size(); ++i) {
        const RankProgress& p = progress[behind[i]];
        part << (i ? ", " : " ") << behind[i] << " (entered " << p.entered << " collectives";
        if (silent_seconds(p) >= 0) part << ", silent for " << silent_seconds(p) << " s";
        part << ")";
      }
      part << ", stopped, dead or still working before this collective";
      parts.push_back(part.str());
    }
    for (int r : silent) {
      parts.push_back("rank " + std::to_string(r) + " entered it too but has been silent for " +
                      std::to_string(silent_seconds(progress[r])) + " s (stopped or dead)");
    }
    for (size_t i = 0; i < parts.size(); ++i) out << (i ? "; " : "") << parts[i];
  }
  out << "; ending the job";
  return out.str();
}

void CollectiveWatchdog::watch() {
  const auto poll = std::chrono::nanoseconds(poll_ns());
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    // The heartbeat first: peers judge whether this rank is alive by it.
    if (publish_heartbeat_) publish_heartbeat_(now_ns());
    if (wake_.wait_for(lock, poll, [this] { return stopping_; })) return;
    const int64_t started = started_ns_.load(std::memory_order_acquire);
    if (started == 0) continue;
    const int64_t now = now_ns();
    const int64_t waited = now - started;
    const int64_t deadline_s = deadline_s_.load(std::memory_order_relaxed);
    if (waited < deadline_s * 1000000000LL) continue;
    const char* op = op_.load(std::memory_order_relaxed);
    const int64_t bytes = bytes_.load(std::memory_order_relaxed);
    const int64_t sequence = entered_.load(std::memory_order_relaxed);
    // The collective may have ended meanwhile; a stale read here only means a message about a
    // collective that took the whole deadline anyway.
    const std::string message = timeout_message(op, bytes, sequence, waited / 1e9, now, deadline_s);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    abort_();
    return;
  }
}

}  // namespace zero::comm
