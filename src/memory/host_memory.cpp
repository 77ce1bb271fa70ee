#include "zero/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <malloc.h>
#include <sys/mman.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/host_accounting.h"
#include "zero/error.h"

namespace zero {
namespace {

// Note [Host block cache]
// A CPU training step frees and allocates the same tensor sizes every step. glibc serves them
// either from fresh mappings (returned on free and faulted in again next step: ~40 % of a
// GPT-2 step here) or, with its thresholds raised, from the heap, where a step's blocks do
// not fit the holes the last step left: the heap grew to 1106 MiB for 488 MiB live on
// gpt2-mini at stage 2, so the resident set ran 22-48 % above the tracked peak. Neither
// malloc setting is both fast and bounded, hence this cache (not a library: jemalloc or
// tcmalloc would be a process-wide malloc replacement, which a library linked into a user's
// program must not impose).
//
// Blocks of at least kCachedBlockBytes come from their own anonymous mappings, and a freed
// one is kept for reuse: a request takes the smallest cached block at least its page-rounded
// size and at most twice it (the most recently freed among equals, whose pages are warm).
// Resident bytes are accounted per block: what its users have touched, at most its length
// (pages past a request fault in on first touch). Invariant: the resident bytes of large
// blocks (live + cached) never exceed the peak of the live ones: a miss first unmaps cached
// blocks, the shortest first, until the new block fits under that peak. (Oldest first threw
// out the LM head's block, which the next step's peak needs again: 77 MiB faulted in per
// step on gpt2-mini.) A step that repeats the last maps little (HostMemoryStats::block_maps
// counts the misses; tests/test_host_memory.cpp), and the cache holds no more than the peak
// the memory planner predicts, up to the unused tails of reused blocks. Those tails are the two modes' difference:
//   exact (the default): the tail goes back to the kernel (MADV_DONTNEED), so resident bytes
//     follow requests: peak RSS 1.003-1.045x the plan over every stage, 1-4 ranks, gpt2-tiny
//     to gpt2 (docs/benchmarks.md); pages fault in again when a block grows back, which
//     measured 0-4 % of a step (gpt2-tiny, gpt2-mini at stage 2, gpt2 at stage 3).
//   fast (hold_host_memory_to_peak(false)): a reused block keeps its tail resident: up to
//     1.12x the plan on gpt2-tiny, for those few percent.
// Smaller blocks stay with the default allocator: their total is small and their count large.
constexpr size_t kCachedBlockBytes = size_t{64} << 10;
constexpr size_t kPageBytes = 4096;

size_t page_rounded(size_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes; }

// Wraps the default CPU allocator, counting every byte (host_memory_stats) and, once
// keep_freed_host_memory asked for it, serving large blocks from the cache above. Its
// DataPtrs must stay "simple" (context == data, freed by raw_deleter()), because parts of
// ATen allocate through raw_allocate(); so sizes are kept in a side table keyed by the data
// pointer.
class HostAllocator final : public c10::Allocator {
 public:
  explicit HostAllocator(c10::Allocator* inner) : inner_(inner) {}

#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t bytes) override {
#else
  c10::DataPtr allocate(size_t bytes) const override {  // const before libtorch 2.0
#endif
    void* data = nullptr;
    if (caching_.load() && bytes >= kCachedBlockBytes) {
      data = take_block(bytes, page_rounded(bytes));
    } else {
      c10::DataPtr inner = inner_->allocate(bytes);
      data = inner.get();
      if (data == nullptr) return inner;  // zero-byte allocations
      ZERO_INTERNAL_ASSERT(inner.get_context() == data && inner.get_deleter() != nullptr,
                           "the default CPU allocator returned a non-simple DataPtr");
      inner_deleter_ = inner.get_deleter();
      inner.release_context();
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[data] = Block{static_cast<int64_t>(bytes), 0, 0};
    }
    add(static_cast<int64_t>(bytes));
    allocations_.fetch_add(1);
    return c10::DataPtr(data, data, &HostAllocator::release, c10::Device(c10::kCPU));
  }

  // Bytes now held (or, negative, given back), and the peak they may raise.
  void add(int64_t bytes) {
    const int64_t now = allocated_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }

  c10::DeleterFnPtr raw_deleter() const override { return &HostAllocator::release; }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  // Pure virtual since libtorch 2.3.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  HostMemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {allocated_.load(), peak_.load(), allocations_.load(),
            static_cast<int64_t>(cached_bytes_),
            static_cast<int64_t>(live_resident_bytes_ + cached_bytes_), block_maps_};
  }
  void reset_peak() { peak_.store(allocated_.load()); }
  void start_caching() { caching_.store(true); }
  void set_exact(bool exact) { exact_.store(exact); }

  // Unmaps every cached block, and lowers the mapped-bytes bound to what is live: after a
  // one-off phase (release_freed_host_memory) the training loop's own peak sets it again.
  void drop_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!cached_.empty()) unmap_cached(cached_.begin());
    resident_bound_ = live_resident_bytes_;
  }

 private:
  struct Block {
    int64_t bytes;    // requested
    size_t mapped;    // length of its own mapping; 0: the inner allocator's
    size_t resident;  // page-rounded bytes its last user asked for (at most mapped)
  };
  struct CachedBlock {
    void* data;
    size_t resident;
  };
  // Mapping length -> the cached blocks of that length, in freeing order (a multimap keeps
  // the insertion order of equal keys).
  using CachedMap = std::multimap<size_t, CachedBlock>;

  static void release(void* data);

  void* take_block(size_t bytes, size_t wanted) const {
    std::lock_guard<std::mutex> lock(mutex_);
    live_resident_bytes_ += wanted;
    resident_bound_ = std::max(resident_bound_, live_resident_bytes_);
    // The smallest fitting length; among blocks of that length the most recently freed.
    auto fitting = cached_.lower_bound(wanted);
    if (fitting != cached_.end() && fitting->first <= 2 * wanted) {
      const size_t length = fitting->first;
      const auto chosen = std::prev(cached_.upper_bound(length));
      const CachedBlock block = chosen->second;
      cached_.erase(chosen);
      cached_bytes_ -= block.resident;
      size_t resident = std::max(wanted, block.resident);
      if (resident > wanted && exact_.load()) {
        madvise(static_cast<char*>(block.data) + wanted, resident - wanted, MADV_DONTNEED);
        resident = wanted;
      }
      live_resident_bytes_ += resident - wanted;
      resident_bound_ = std::max(resident_bound_, live_resident_bytes_);
      blocks_[block.data] = Block{static_cast<int64_t>(bytes), length, resident};
      return block.data;
    }
    while (!cached_.empty() && live_resident_bytes_ + cached_bytes_ > resident_bound_) {
      unmap_cached(cached_.begin());
    }
    ++block_maps_;
    void* data =
        mmap(nullptr, wanted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) {
      live_resident_bytes_ -= wanted;
      throw Error("host memory: could not map " + std::to_string(wanted) +
                  " bytes for a tensor (" + std::to_string(live_resident_bytes_) +
                  " bytes live in large blocks): " + std::strerror(errno));
    }
    blocks_[data] = Block{static_cast<int64_t>(bytes), wanted, wanted};
    return data;
  }

  // Caller holds mutex_.
  void unmap_cached(CachedMap::iterator entry) const {
    munmap(entry->second.data, entry->first);
    cached_bytes_ -= entry->second.resident;
    cached_.erase(entry);
  }

  // mutable: allocate() is const in libtorch 1.x.
  c10::Allocator* inner_;
  mutable std::atomic<c10::DeleterFnPtr> inner_deleter_{nullptr};
  std::atomic<bool> caching_{false};
  std::atomic<bool> exact_{true};  // give back the pages past a reused block's request
  mutable std::mutex mutex_;  // guards everything below it
  mutable std::unordered_map<void*, Block> blocks_;
  mutable CachedMap cached_;
  mutable size_t cached_bytes_ = 0;  // resident
  mutable size_t live_resident_bytes_ = 0;
  // The peak of live_resident_bytes_ (Note [Host block cache]).
  mutable size_t resident_bound_ = 0;
  mutable int64_t block_maps_ = 0;
  mutable std::atomic<int64_t> allocated_{0};
  mutable std::atomic<int64_t> peak_{0};
  mutable std::atomic<int64_t> allocations_{0};
};

// Read by deleters and the communicator's thread while it may be installed.
std::atomic<HostAllocator*> installed{nullptr};
std::once_flag install_once;

HostAllocator& install() {
  std::call_once(install_once, [] {
    // Lives for the whole process: tensors may be freed during static destruction.
    auto* allocator = new HostAllocator(c10::GetCPUAllocator());
    installed.store(allocator);
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    set_unallocated_host_bytes_sink([](int64_t delta) { installed.load()->add(delta); });
  });
  return *installed.load();
}

void HostAllocator::release(void* data) {
  HostAllocator* self = installed.load();
  Block block{};
  {
    std::lock_guard<std::mutex> lock(self->mutex_);
    auto it = self->blocks_.find(data);
    ZERO_INTERNAL_ASSERT(it != self->blocks_.end(), "freeing a pointer the allocator never saw");
    block = it->second;
    self->blocks_.erase(it);
    if (block.mapped != 0) {
      self->live_resident_bytes_ -= block.resident;
      self->cached_bytes_ += block.resident;
      self->cached_.emplace(block.mapped, CachedBlock{data, block.resident});
    }
  }
  self->allocated_.fetch_sub(block.bytes);
  if (block.mapped == 0) self->inner_deleter_.load()(data);
}

}  // namespace

void track_host_memory() { install(); }

HostMemoryStats host_memory_stats() {
  HostAllocator* allocator = installed.load();
  return allocator != nullptr ? allocator->stats() : HostMemoryStats{};
}

void reset_host_memory_peak() {
  if (HostAllocator* allocator = installed.load()) allocator->reset_peak();
}

void keep_freed_host_memory() {
  install().start_caching();
  // The blocks below the cache's size come from glibc's heap: keep what they free mapped too
  // (1 GiB thresholds: nothing that small is unmapped or trimmed on free).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
}

void hold_host_memory_to_peak(bool exact) { install().set_exact(exact); }

void release_freed_host_memory() {
  if (HostAllocator* allocator = installed.load()) allocator->drop_cache();
  malloc_trim(0);
}

}  // namespace zero
