// One job per directory (Note [Directory lock]).
#pragma once

#include <string>

namespace zero::train {

// Note [Directory lock]
// ~~~~~~~~~~~~~~~~~~~~~
// Two zero-train jobs writing one run directory (metrics.csv, config.json) or one checkpoint
// directory lose each other's rows and checkpoints. So rank 0 of each job holds an advisory
// flock(2) on DIR/.zero-lock for the whole run, taken at start-up before anything is written
// there: a second job's rank 0 finds it held and the job ends with one message naming the
// holder (the pid and host the holder wrote into the file). The kernel releases the lock when
// the holder exits in any way, SIGKILL included, so a crashed job never leaves a stale lock;
// the file itself stays (harmless, and rewritten by the next holder). flock is advisory and,
// on network file systems, only as reliable as their lock support (NFSv4 supports it).

/// An exclusive flock on DIR/.zero-lock, held until destruction. DIR is created if missing.
class DirectoryLock {
 public:
  /// Takes the lock or throws zero::Error "<what> DIR is in use by another job (pid P on host
  /// H, lock file DIR/.zero-lock)". Never blocks.
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace zero::train
