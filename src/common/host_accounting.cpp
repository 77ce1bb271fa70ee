#include "common/host_accounting.h"

#include <atomic>

namespace zero {
namespace {

// Set once by zero::track_host_memory (src/memory/host_memory.cpp); read from any thread.
std::atomic<void (*)(int64_t)> sink{nullptr};

}  // namespace

void set_unallocated_host_bytes_sink(void (*add)(int64_t)) { sink.store(add); }

bool count_unallocated_host_bytes(int64_t delta, bool counted) {
  void (*add)(int64_t) = sink.load();
  if (add == nullptr || !counted) return false;
  add(delta);
  return true;
}

}  // namespace zero
