// Property tests of the shard arithmetic (Note [Shard layout]).
#include <gtest/gtest.h>

#include <numeric>

#include "zero/error.h"
#include "zero/shard.h"

namespace zero {
namespace {

TEST(ShardLayout, PropertiesHoldForAwkwardSizes) {
  const int64_t large_prime = 1000003;
  for (int world = 1; world <= 16; ++world) {
    const std::vector<int64_t> sizes = {0, 1, world - 1, world + 1, large_prime, 7 * world};
    for (int64_t numel : sizes) {
      for (int64_t alignment : {int64_t{1}, int64_t{2}, int64_t{64}}) {
        SCOPED_TRACE(testing::Message() << "numel=" << numel << " world=" << world
                                        << " alignment=" << alignment);
        const ShardLayout layout = shard_layout(numel, world, alignment);
        // Padded size: a multiple of world * alignment, the smallest one >= numel.
        EXPECT_EQ(layout.padded_numel % (world * alignment), 0);
        EXPECT_GE(layout.padded_numel, numel);
        EXPECT_LT(layout.padded_numel - numel, world * alignment);
        EXPECT_EQ(layout.shard_numel * world, layout.padded_numel);
        // Shards are contiguous, aligned, in rank order and cover every element exactly once.
        int64_t next = 0;
        int64_t valid_total = 0;
        for (int r = 0; r < world; ++r) {
          const Range owned = layout.owned(r);
          EXPECT_EQ(owned.begin, next);
          EXPECT_EQ(owned.begin % alignment, 0);
          EXPECT_EQ(owned.size(), layout.shard_numel);
          next = owned.end;
          const Range valid = layout.valid(r);
          EXPECT_LE(valid.size(), owned.size());
          if (!valid.empty()) {
            EXPECT_EQ(valid.begin, owned.begin);
            EXPECT_LE(valid.end, numel);
          }
          valid_total += valid.size();
        }
        EXPECT_EQ(next, layout.padded_numel);
        EXPECT_EQ(valid_total, numel);
        // Only a suffix of ranks holds padding: once a shard is not full of real elements,
        // every later shard holds none.
        bool seen_padding = false;
        for (int r = 0; r < world; ++r) {
          if (seen_padding) {
            EXPECT_TRUE(layout.valid(r).empty());
          }
          if (layout.valid(r).size() < layout.shard_numel) seen_padding = true;
        }
      }
    }
  }
}

TEST(ShardLayout, OwnerCountsSplitAnyRangeByOwner) {
  for (int world = 1; world <= 16; ++world) {
    const ShardLayout layout = shard_layout(1009, world, 4);
    for (int64_t begin = 0; begin <= layout.padded_numel; begin += 97) {
      for (int64_t end = begin; end <= layout.padded_numel; end += 131) {
        const std::vector<int64_t> counts = layout.owner_counts({begin, end});
        ASSERT_EQ(static_cast<int>(counts.size()), world);
        EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), end - begin);
        // Chunks are consecutive in rank order: chunk r starts where chunks < r end.
        int64_t cursor = begin;
        for (int r = 0; r < world; ++r) {
          if (counts[r] > 0) {
            EXPECT_EQ(cursor, std::max(begin, layout.owned(r).begin));
            EXPECT_LE(cursor + counts[r], layout.owned(r).end);
          }
          cursor += counts[r];
        }
      }
    }
  }
}

TEST(ShardLayout, RejectsInvalidArguments) {
  EXPECT_THROW(shard_layout(-1, 2, 1), Error);
  EXPECT_THROW(shard_layout(10, 0, 1), Error);
  EXPECT_THROW(shard_layout(10, 2, 0), Error);
}

TEST(Range, Intersect) {
  EXPECT_EQ(intersect({0, 10}, {5, 20}), (Range{5, 10}));
  EXPECT_TRUE(intersect({0, 5}, {5, 10}).empty());
  EXPECT_TRUE(intersect({8, 9}, {0, 3}).empty());
}

}  // namespace
}  // namespace zero
