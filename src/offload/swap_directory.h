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
// start-up every rank looks at every zero-*/rank*/ under nvme_path: one owned by a process of
// this host that no longer runs is removed, with one line saying how many bytes that freed; one
// of a live process or of another host is left alone (that host's next run sweeps it). A
// directory without a readable owner file is left alone too: it may be one being made.

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
