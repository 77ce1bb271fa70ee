// The host block cache (Note [Host block cache], src/memory/host_memory.cpp): a step that
// repeats the last maps nothing new; the resident bytes of large blocks never exceed the peak
// of the live ones, whatever the sizes do from phase to phase; the exact mode (the default)
// gives a reused block's unused tail back, the fast mode keeps it; release_freed_host_memory
// empties it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <vector>

#include "zero/memory.h"

namespace zero::test {
namespace {

constexpr int64_t kPage = 4096;
int64_t pages(int64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// Float tensors of these byte sizes (all above the cache's 64 KiB threshold), written to, so
// that their pages are resident.
std::vector<at::Tensor> allocate(const std::vector<int64_t>& bytes) {
  std::vector<at::Tensor> tensors;
  for (int64_t b : bytes) tensors.push_back(at::full({b / 4}, 1.5f));
  return tensors;
}

int64_t sum_pages(const std::vector<int64_t>& bytes) {
  int64_t total = 0;
  for (int64_t b : bytes) total += pages(b);
  return total;
}

class HostBlockCache : public ::testing::Test {
 protected:
  void SetUp() override {
    keep_freed_host_memory();
    hold_host_memory_to_peak(false);
    release_freed_host_memory();
  }
  void TearDown() override {
    hold_host_memory_to_peak(true);  // the default
    release_freed_host_memory();
  }
};

TEST_F(HostBlockCache, ARepeatedStepMapsNothingNew) {
  const std::vector<int64_t> step = {1 << 20, 3 << 20, 200000, 1 << 20, 70000, 5 << 20};
  const int64_t before = host_memory_stats().mapped_bytes;
  { auto first = allocate(step); }
  const HostMemoryStats warm = host_memory_stats();
  EXPECT_EQ(warm.mapped_bytes - before, sum_pages(step));
  EXPECT_EQ(warm.cached_bytes, sum_pages(step));
  for (int i = 0; i < 5; ++i) {
    auto again = allocate(step);
    for (const at::Tensor& t : again) EXPECT_EQ(t[0].item<float>(), 1.5f);
  }
  EXPECT_EQ(host_memory_stats().block_maps, warm.block_maps);
  EXPECT_EQ(host_memory_stats().mapped_bytes, warm.mapped_bytes);
}

// Phases of disjoint sizes (each more than twice the last, so no block serves the next):
// every miss unmaps cached blocks first, so the mapped bytes stay at the largest phase.
TEST_F(HostBlockCache, ResidentBytesNeverExceedTheLivePeak) {
  const int64_t base = host_memory_stats().mapped_bytes;
  const std::vector<std::vector<int64_t>> phases = {
      {1 << 20, 1 << 20, 1 << 20, 1 << 20},  // 4 MiB in 1 MiB blocks
      {3 << 20},                             // 3 MiB in one
      {7 << 20, 7 << 20},                    // 14 MiB
      {100000, 100000, 100000},              // small
      {30 << 20}};                           // 30 MiB
  int64_t live_peak = 0;
  for (int round = 0; round < 3; ++round) {
    for (const auto& phase : phases) {
      live_peak = std::max(live_peak, sum_pages(phase));
      auto tensors = allocate(phase);
      EXPECT_LE(host_memory_stats().mapped_bytes - base, live_peak);
    }
    EXPECT_LE(host_memory_stats().mapped_bytes - base, live_peak);
  }
}

TEST_F(HostBlockCache, TheExactModeGivesATailBackAndTheFastModeKeepsIt) {
  const int64_t base = host_memory_stats().mapped_bytes;
  { auto large = allocate({8 << 20}); }
  const int64_t maps = host_memory_stats().block_maps;
  {
    // Fast: 5 MiB served by the cached 8 MiB block (within twice), whose 8 MiB stay resident.
    auto smaller = allocate({5 << 20});
    EXPECT_EQ(host_memory_stats().block_maps, maps);
    EXPECT_EQ(host_memory_stats().mapped_bytes - base, 8 << 20);
  }
  hold_host_memory_to_peak(true);
  {
    // Exact: the same block again, its last 3 MiB given back.
    auto smaller = allocate({5 << 20});
    EXPECT_EQ(host_memory_stats().block_maps, maps);
    EXPECT_EQ(host_memory_stats().mapped_bytes - base, 5 << 20);
  }
  {
    // Growing back within the mapping: the tail faults in again, no new mapping.
    auto again = allocate({8 << 20});
    EXPECT_EQ(host_memory_stats().block_maps, maps);
    EXPECT_EQ(host_memory_stats().mapped_bytes - base, 8 << 20);
    EXPECT_EQ(again[0][(2 << 20) - 1].item<float>(), 1.5f);
  }
}

TEST_F(HostBlockCache, ReleaseEmptiesTheCache) {
  auto kept = allocate({2 << 20});
  { auto freed = allocate({1 << 20, 4 << 20}); }
  EXPECT_GE(host_memory_stats().cached_bytes, 5 << 20);
  release_freed_host_memory();
  EXPECT_EQ(host_memory_stats().cached_bytes, 0);
  EXPECT_EQ(kept[0][0].item<float>(), 1.5f);
}

}  // namespace
}  // namespace zero::test
