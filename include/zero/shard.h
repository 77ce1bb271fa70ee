// Shard arithmetic: which rank owns which elements of a flat buffer.
//
// Note [Shard layout]
// ~~~~~~~~~~~~~~~~~~~
// A flat buffer of `numel` elements is padded with zeros to `padded_numel`, a multiple of
// world * alignment, and split into `world` equal, contiguous shards: rank r owns
// [r * shard_numel, (r + 1) * shard_numel). Ownership ignores parameter boundaries. Every
// shard starts on a multiple of `alignment` elements. Padding lives at the end of the buffer,
// so only the last rank(s) hold padding; `valid` excludes it. Every other piece of shard
// arithmetic in zero (bucket-to-owner splits, checkpoint ranges) is derived from shard_layout().
#pragma once

#include "zero/export.h"

#include <cstdint>
#include <vector>

namespace zero {

/// A half-open element range [begin, end).
struct ZERO_API Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const Range& other) const { return begin == other.begin && end == other.end; }
};

/// Intersection of two ranges (empty ranges collapse to {a.begin, a.begin} or similar; only
/// size() and empty() are meaningful for an empty result).
ZERO_API Range intersect(Range a, Range b);

struct ZERO_API ShardLayout {
  int64_t numel = 0;         // real elements
  int world = 1;
  int64_t alignment = 1;     // elements
  int64_t padded_numel = 0;  // multiple of world * alignment, >= numel
  int64_t shard_numel = 0;   // padded_numel / world

  /// Rank r's shard of the padded buffer (padding included).
  Range owned(int rank) const;
  /// Rank r's shard without padding: owned(r) ∩ [0, numel).
  Range valid(int rank) const;
  /// How many elements of `range` (a sub-range of the padded buffer) each rank owns, in rank
  /// order; sums to range.size(). Chunk r of `range` is its intersection with owned(r).
  std::vector<int64_t> owner_counts(Range range) const;
};

/// The alignment of every shard zero makes (engines at every stage, checkpoints, reports): 64
/// elements keep each shard cache-line and SIMD aligned for every dtype.
inline constexpr int64_t kShardAlignment = 64;

/// The one pure function all shard arithmetic derives from. See Note [Shard layout].
/// Requires numel >= 0, world >= 1, alignment >= 1 (zero::Error otherwise).
ZERO_API ShardLayout shard_layout(int64_t numel, int world, int64_t alignment);

}  // namespace zero
