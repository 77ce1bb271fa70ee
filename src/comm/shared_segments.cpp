// See Note [Shared-memory reduce-scatter] in shared_segments.h.
#include "comm/shared_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

#include "zero/error.h"

namespace zero::comm {
namespace {

void check(int rc, const char* what, int rank) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  ZERO_CHECK(false, "shared-memory buffers on rank ", rank, ": ", what, " failed: ",
             std::string(text, static_cast<size_t>(length)));
}

int all_min(MPI_Comm comm, int value, int rank) {
  int result = value;
  check(MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce", rank);
  return result;
}

}  // namespace

SharedSegments::SharedSegments(MPI_Comm comm, int rank, int size, bool single_node)
    : comm_(comm), rank_(rank), size_(size), registry_(std::make_shared<Registry>()) {
  if (size_ < 2) return;
  // One job-wide token keeps segment names of concurrent jobs apart.
  int64_t token[2] = {static_cast<int64_t>(getpid()),
                      std::chrono::steady_clock::now().time_since_epoch().count()};
  check(MPI_Bcast(token, 2, MPI_INT64_T, 0, comm_), "MPI_Bcast", rank_);
  job_token_ = std::to_string(token[0]) + "-" + std::to_string(token[1] % 1000000007);
  enabled_ = single_node;
}

SharedSegments::~SharedSegments() {
  if (mailbox_.local != nullptr) unmap(mailbox_);
  if (progress_.local != nullptr) unmap(progress_);
}

void SharedSegments::map_progress_board() {
  if (!enabled_ || progress_.local != nullptr) return;
  // A cache line of its own per rank (RankProgress), written at every collective.
  static_assert(sizeof(RankProgress) <= 64);
  if (!create_and_map(-1, 64, progress_)) progress_ = Segment{};
}

void SharedSegments::publish_entered(int64_t count) {
  if (progress_.local == nullptr) return;
  auto* slot = reinterpret_cast<RankProgress*>(progress_.local);
  __atomic_store_n(&slot->entered, count, __ATOMIC_RELAXED);
}

void SharedSegments::publish_heartbeat(int64_t now_ns) {
  if (progress_.local == nullptr) return;
  auto* slot = reinterpret_cast<RankProgress*>(progress_.local);
  __atomic_store_n(&slot->heartbeat_ns, now_ns, __ATOMIC_RELAXED);
}

std::vector<RankProgress> SharedSegments::peer_progress() const {
  std::vector<RankProgress> board;
  if (progress_.local == nullptr) return board;
  for (std::byte* peer : progress_.peers) {
    const auto* slot = reinterpret_cast<const RankProgress*>(peer);
    board.push_back({__atomic_load_n(&slot->entered, __ATOMIC_RELAXED),
                     __atomic_load_n(&slot->heartbeat_ns, __ATOMIC_RELAXED)});
  }
  return board;
}

std::string SharedSegments::name(int rank, int64_t id) const {
  return "/zero-" + job_token_ + "-" + std::to_string(rank) + "-" + std::to_string(id);
}

void SharedSegments::unmap(Segment& segment) {
  for (std::byte* p : segment.peers) {
    if (p != nullptr) munmap(p, static_cast<size_t>(segment.bytes));
  }
  segment.peers.clear();
  segment.local = nullptr;
}

// Collective: creates this rank's segment, then maps every peer's. Returns the unanimous result;
// on failure nothing stays mapped or linked on any rank.
bool SharedSegments::create_and_map(int64_t id, int64_t bytes, Segment& segment) {
  segment.bytes = bytes;
  segment.peers.assign(static_cast<size_t>(size_), nullptr);
  const std::string own_name = name(rank_, id);
  bool ok = true;
  int fd = shm_open(own_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ok = fd >= 0;
  if (ok) ok = ftruncate(fd, bytes) == 0 && posix_fallocate(fd, 0, bytes) == 0;
  if (ok) {
    void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ok = p != MAP_FAILED;
    if (ok) segment.peers[rank_] = static_cast<std::byte*>(p);
  }
  if (fd >= 0) close(fd);
  ok = all_min(comm_, ok ? 1 : 0, rank_) == 1;
  if (ok) {
    for (int r = 0; r < size_ && ok; ++r) {
      if (r == rank_) continue;
      const int peer_fd = shm_open(name(r, id).c_str(), O_RDONLY, 0);
      if (peer_fd < 0) {
        ok = false;
        break;
      }
      void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, peer_fd, 0);
      close(peer_fd);
      ok = p != MAP_FAILED;
      if (ok) segment.peers[r] = static_cast<std::byte*>(p);
    }
    ok = all_min(comm_, ok ? 1 : 0, rank_) == 1;  // every rank has mapped every name: unlink is safe
  }
  shm_unlink(own_name.c_str());
  if (!ok) {
    unmap(segment);
    return false;
  }
  segment.local = segment.peers[rank_];
  return true;
}

std::byte* SharedSegments::allocate(int64_t bytes, std::function<void(void*)>* deleter) {
  if (!enabled_ || bytes <= 0) return nullptr;
  if (mailbox_.local == nullptr &&
      !create_and_map(0, static_cast<int64_t>(sizeof(Mailbox)), mailbox_)) {
    enabled_ = false;  // unanimous: no shared memory on this node
    return nullptr;
  }
  const int64_t id = next_id_++;
  Segment segment;
  if (!create_and_map(id, bytes, segment)) return nullptr;
  std::byte* local = segment.local;
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    registry_->segments.emplace(id, std::move(segment));
  }
  std::weak_ptr<Registry> registry = registry_;
  *deleter = [registry, id](void*) {
    if (auto alive = registry.lock()) {
      std::lock_guard<std::mutex> lock(alive->mutex);
      auto it = alive->segments.find(id);
      if (it != alive->segments.end()) {
        unmap(it->second);
        alive->segments.erase(it);
      }
    }
  };
  return local;
}

std::vector<const std::byte*> SharedSegments::locate_inputs(const std::byte* input,
                                                            int64_t bytes) {
  if (mailbox_.local == nullptr) return {};  // no segment was ever allocated (unanimous)
  Mailbox mine;
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    for (const auto& [id, segment] : registry_->segments) {
      if (input >= segment.local && input + bytes <= segment.local + segment.bytes) {
        mine.segment = id;
        mine.offset = input - segment.local;
        break;
      }
    }
  }
  std::memcpy(mailbox_.local, &mine, sizeof(Mailbox));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  check(MPI_Barrier(comm_), "MPI_Barrier", rank_);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::vector<const std::byte*> inputs(static_cast<size_t>(size_), nullptr);
  bool visible = true;
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    for (int r = 0; r < size_ && visible; ++r) {
      Mailbox theirs;
      std::memcpy(&theirs, mailbox_.peers[r], sizeof(Mailbox));
      auto it = registry_->segments.find(theirs.segment);
      visible = theirs.segment > 0 && it != registry_->segments.end() &&
                theirs.offset + bytes <= it->second.bytes;
      if (visible) inputs[r] = it->second.peers[r] + theirs.offset;
    }
  }
  if (all_min(comm_, visible ? 1 : 0, rank_) == 0) return {};
  return inputs;
}

}  // namespace zero::comm
