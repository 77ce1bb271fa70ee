// The directory a rank's swap files live in: nvme_path/zero-<job>/rank<r>/. See
// Note [NVMe offload] (src/offload/swap_file.h) and Note [Stale swap directories].
#pragma once

#include <memory>
#include <string>

namespace zero {

class Communicator;

// Note [Stale swap directories]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A killed run cannot remove its swap files, and they are as large as its optimizer state. Each
// rank directory holds an `owner` file: the host name, the process id and the process's start
// time (field 22 of /proc/<pid>/stat, so a recycled pid is not mistaken for the owner). At
// start-up every rank looks at every job's zero-*/rank*/ under nvme_path: when a process of
// this host that owns one of a job's rank directories no longer runs, the job is dead (its
// ranks live and die together), and every rank directory of it owned on this host is removed,
// also those of ranks still exiting (a killed rank's peers end at the collective timeout,
// often after the next start has begun); rank 0 prints one line saying how many bytes all
// ranks freed. A job whose processes here all run is left alone, as are directories of other
// hosts (that host's next run sweeps them) and those without a readable owner file (one may
// be being made).

class SwapDirectory {
 public:
  /// Collective. Checks nvme_path on every rank (it exists, is a directory, is writable;
  /// `key` names the config key in errors), sweeps stale directories, agrees on the job name
  /// (rank 0's) and makes this rank's directory. Every rank throws when one fails.
  SwapDirectory(const std::string& nvme_path, const std::string& key, Communicator& comm);
  /// Removes this rank's directory and, when it is the last, the job's. Never throws.
  ~SwapDirectory();
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  /// The path of a file of this rank's directory.
  std::string file(const std::string& name) const { return rank_dir_ + "/" + name; }
  const std::string& rank_dir() const { return rank_dir_; }
  const std::string& nvme_path() const { return nvme_path_; }

 private:
  std::string nvme_path_;
  std::string job_dir_;
  std::string rank_dir_;
};

/// Removes the stale rank directories under `nvme_path` (Note [Stale swap directories]) and
/// returns the bytes freed. Exposed for tests.
long long sweep_stale_swap_directories(const std::string& nvme_path);

/// The `owner` text of the calling process: "<host> <pid> <start time>".
std::string swap_owner_text();

}  // namespace zero
