#include "zero/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <malloc.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "common/host_accounting.h"
#include "zero/error.h"

namespace zero {
namespace {

// Wraps the default CPU allocator. Its DataPtrs must stay "simple" (context == data, freed by
// raw_deleter()), because parts of ATen allocate through raw_allocate(); so sizes are kept in
// a side table keyed by the data pointer.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t bytes) override {
#else
  c10::DataPtr allocate(size_t bytes) const override {  // const before libtorch 2.0
#endif
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero-byte allocations
    ZERO_INTERNAL_ASSERT(inner.get_context() == data && inner.get_deleter() != nullptr,
                         "the default CPU allocator returned a non-simple DataPtr");
    inner_deleter_ = inner.get_deleter();
    inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = static_cast<int64_t>(bytes);
    }
    add(static_cast<int64_t>(bytes));
    allocations_.fetch_add(1);
    return c10::DataPtr(data, data, &CountingAllocator::release, c10::Device(c10::kCPU));
  }

  // Bytes now held (or, negative, given back), and the peak they may raise.
  void add(int64_t bytes) {
    const int64_t now = allocated_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  // Pure virtual since libtorch 2.3.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  HostMemoryStats stats() const {
    return {allocated_.load(), peak_.load(), allocations_.load()};
  }
  void reset_peak() { peak_.store(allocated_.load()); }

 private:
  static void release(void* data);

  // mutable: allocate() is const in libtorch 1.x.
  c10::Allocator* inner_;
  mutable std::atomic<c10::DeleterFnPtr> inner_deleter_{nullptr};
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, int64_t> sizes_;
  mutable std::atomic<int64_t> allocated_{0};
  mutable std::atomic<int64_t> peak_{0};
  mutable std::atomic<int64_t> allocations_{0};

};

// Read by deleters and the communicator's thread while track_host_memory may install it.
std::atomic<CountingAllocator*> installed{nullptr};
std::once_flag install_once;

void CountingAllocator::release(void* data) {
  CountingAllocator* self = installed.load();
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(self->mutex_);
    auto it = self->sizes_.find(data);
    ZERO_INTERNAL_ASSERT(it != self->sizes_.end(), "freeing a pointer the counter never saw");
    bytes = it->second;
    self->sizes_.erase(it);
  }
  self->allocated_.fetch_sub(bytes);
  self->inner_deleter_.load()(data);
}

}  // namespace

void track_host_memory() {
  std::call_once(install_once, [] {
    // Lives for the whole process: tensors may be freed during static destruction.
    auto* counter = new CountingAllocator(c10::GetCPUAllocator());
    installed.store(counter);
    c10::SetCPUAllocator(counter, /*priority=*/100);
    set_unallocated_host_bytes_sink([](int64_t delta) { installed.load()->add(delta); });
  });
}


HostMemoryStats host_memory_stats() {
  CountingAllocator* counter = installed.load();
  return counter != nullptr ? counter->stats() : HostMemoryStats{};
}

void reset_host_memory_peak() {
  if (CountingAllocator* counter = installed.load()) counter->reset_peak();
}

void keep_freed_host_memory() {
  // 1 GiB: tensors below this come from the heap and are reused after free instead of being
  // unmapped; the trim threshold keeps freed heap memory instead of returning it.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
}

void release_freed_host_memory() { malloc_trim(0); }

}  // namespace zero
