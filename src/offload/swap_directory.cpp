#include "offload/swap_directory.h"

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/host.h"
#include "zero/comm.h"
#include "zero/error.h"
#include "zero/files.h"

namespace zero {
namespace fs = std::filesystem;
namespace {

constexpr const char* kOwnerFile = "owner";

// Field 22 of /proc/<pid>/stat: the start time in clock ticks since boot; "" when the process
// does not exist.
std::string process_start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return "";
  // The command name (field 2) is in parentheses and may hold spaces: count after its end.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

long long bytes_under(const fs::path& dir) {
  long long bytes = 0;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    std::error_code size_error;
    if (it->is_regular_file(size_error)) {
      const auto size = it->file_size(size_error);
      if (!size_error) bytes += static_cast<long long>(size);
    }
  }
  return bytes;
}

}  // namespace

std::string swap_owner_text() {
  const long pid = static_cast<long>(::getpid());
  return host_name() + " " + std::to_string(pid) + " " + process_start_time(pid);
}

long long sweep_stale_swap_directories(const std::string& nvme_path) {
  long long freed = 0;
  const std::string host = host_name();
  std::error_code error;
  for (const fs::directory_entry& job : fs::directory_iterator(nvme_path, error)) {
    if (job.path().filename().string().rfind("zero-", 0) != 0) continue;
    std::error_code job_error;
    if (!job.is_directory(job_error)) continue;
    // The job's rank directories owned by processes of this host, and whether one of those
    // processes is gone: then the job is dead (its ranks live and die together), and all of
    // them go, those of ranks still exiting too (their open files stay valid until they do).
    std::vector<fs::path> here;
    bool dead = false;
    for (const fs::directory_entry& rank : fs::directory_iterator(job.path(), job_error)) {
      std::ifstream in(rank.path() / kOwnerFile);
      std::string owner_host, start;
      long pid = 0;
      if (!(in >> owner_host >> pid >> start)) continue;  // being made, or not ours
      if (owner_host != host) continue;                   // that host's runs sweep it
      here.push_back(rank.path());
      if (process_start_time(pid) != start) dead = true;
    }
    if (!dead) continue;
    for (const fs::path& rank : here) {
      const long long bytes = bytes_under(rank);
      std::error_code remove_error;
      fs::remove_all(rank, remove_error);  // another rank may be sweeping it too
      if (!remove_error) freed += bytes;
    }
    std::error_code ignored;
    if (fs::is_empty(job.path(), ignored) && !ignored) fs::remove(job.path(), ignored);
  }
  return freed;
}

SwapDirectory::SwapDirectory(const std::string& nvme_path, const std::string& key,
                             Communicator& comm)
    : nvme_path_(nvme_path) {
  const int rank = comm.rank();
  long long freed = 0;
  agree_on_failure(comm, "NVMe offload set-up", capture_error([&] {
    std::error_code error;
    const fs::file_status status = fs::status(nvme_path, error);
    ZERO_CHECK(fs::exists(status), key, " = \"", nvme_path, "\" does not exist on rank ", rank,
               "; allowed: an existing, writable directory for the swap files");
    ZERO_CHECK(fs::is_directory(status), key, " = \"", nvme_path,
               "\" is not a directory; allowed: an existing, writable directory");
    ZERO_CHECK(::access(nvme_path.c_str(), W_OK | X_OK) == 0, key, " = \"", nvme_path,
               "\" is not writable on rank ", rank, ": ", std::strerror(errno));
    freed = sweep_stale_swap_directories(nvme_path);
  }));
  // One line for the job: what every rank removed (ranks of one host race to remove the same
  // directories; each counts what it removed).
  long long total = 0;
  for (const std::string& text : all_gather_texts(comm, std::to_string(freed))) total += std::stoll(text);
  if (total > 0 && rank == 0) {
    std::fprintf(stderr, "zero: removed %.1f MiB of swap files that killed runs left under %s\n",
                 static_cast<double>(total) / (1 << 20), nvme_path.c_str());
  }
  // One job name for all ranks: rank 0's host, process and time.
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const std::string mine = host_name() + "-" + std::to_string(::getpid()) + "-" + std::to_string(now);
  const std::string job = "zero-" + all_gather_texts(comm, mine).front();
  job_dir_ = (fs::path(nvme_path) / job).string();
  rank_dir_ = (fs::path(job_dir_) / ("rank" + std::to_string(rank))).string();
  agree_on_failure(comm, "NVMe offload set-up", capture_error([&] {
    std::error_code error;
    fs::create_directories(rank_dir_, error);
    ZERO_CHECK(!error, "cannot make swap directory '", rank_dir_, "' (", key, "): ",
               error.message());
    write_file_atomically(file(kOwnerFile), swap_owner_text() + "\n");
  }));
}

SwapDirectory::~SwapDirectory() {
  std::error_code ignored;
  fs::remove_all(rank_dir_, ignored);
  if (fs::is_empty(job_dir_, ignored) && !ignored) fs::remove(job_dir_, ignored);
}

}  // namespace zero
