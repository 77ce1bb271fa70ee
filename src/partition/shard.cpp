// See Note [Shard layout] in zero/shard.h.
#include "zero/shard.h"

#include <algorithm>

#include "zero/error.h"

namespace zero {

Range intersect(Range a, Range b) {
  const int64_t begin = std::max(a.begin, b.begin);
  const int64_t end = std::min(a.end, b.end);
  return end > begin ? Range{begin, end} : Range{begin, begin};
}

ShardLayout shard_layout(int64_t numel, int world, int64_t alignment) {
  ZERO_CHECK(numel >= 0, "shard_layout: numel must be >= 0, got ", numel);
  ZERO_CHECK(world >= 1, "shard_layout: world size must be >= 1, got ", world);
  ZERO_CHECK(alignment >= 1, "shard_layout: alignment must be >= 1 element, got ", alignment);
  ShardLayout layout;
  layout.numel = numel;
  layout.world = world;
  layout.alignment = alignment;
  const int64_t quantum = static_cast<int64_t>(world) * alignment;
  layout.padded_numel = (numel + quantum - 1) / quantum * quantum;
  layout.shard_numel = layout.padded_numel / world;
  return layout;
}

Range ShardLayout::owned(int rank) const {
  ZERO_INTERNAL_ASSERT(rank >= 0 && rank < world, "rank ", rank, " outside world of ", world);
  return Range{rank * shard_numel, (rank + 1) * shard_numel};
}

Range ShardLayout::valid(int rank) const { return intersect(owned(rank), Range{0, numel}); }

std::vector<int64_t> ShardLayout::owner_counts(Range range) const {
  ZERO_INTERNAL_ASSERT(range.begin >= 0 && range.begin <= range.end && range.end <= padded_numel,
                       "range [", range.begin, ", ", range.end, ") outside padded buffer of ",
                       padded_numel);
  std::vector<int64_t> counts(world);
  for (int r = 0; r < world; ++r) counts[r] = intersect(range, owned(r)).size();
  return counts;
}

}  // namespace zero
