// An exact, order-independent sum of squares of fp32 values: LAMB's per-parameter norms
// (Note [LAMB's norms across shards] in optim/lamb.h).
//
// Every fp32 value is m 2^(e - 150) with m a 24-bit integer (the implicit bit included) and e
// its biased exponent (1 for subnormals), so its square is m^2 2^(2e - 300) exactly, m^2 < 2^48.
// That square is added as two 24-bit integers, m^2 mod 2^24 into bucket 2e and m^2 / 2^24 into
// bucket 2e + 24 (bucket k weighs 2^(k - 300)), to int64 sums. Integer sums are exact and
// associative: however the values are split into pieces, summed in any order and merged, the
// buckets are the same, and so is value(), which adds them in bucket order in double. 2^39
// values fit before a bucket could overflow. Infinities and NaNs are counted apart: value()
// is then infinite (an infinity among finite values) or NaN.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace zero {

struct ExactSquares {
  static constexpr int kBuckets = 2 * 254 + 24 + 1;  // bucket 2e + 24 for e <= 254
  // The buckets, then the counts of infinities and of NaNs: what a merge adds element-wise
  // (as int64, e.g. by an all-reduce of a tensor of kWords elements).
  static constexpr int kWords = kBuckets + 2;
  std::array<int64_t, kWords> words{};

  [[gnu::always_inline]] void add(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    const uint32_t e = (bits >> 23) & 0xFF;
    const uint64_t fraction = bits & 0x7FFFFF;
    if (e == 0xFF) {
      ++words[fraction == 0 ? kBuckets : kBuckets + 1];
      return;
    }
    const uint64_t m = e == 0 ? fraction : fraction | 0x800000;
    const uint64_t square = m * m;
    const int k = 2 * static_cast<int>(e == 0 ? 1 : e);
    words[k] += static_cast<int64_t>(square & 0xFFFFFF);
    words[k + 24] += static_cast<int64_t>(square >> 24);
  }

  void merge(const ExactSquares& other) {
    for (int i = 0; i < kWords; ++i) words[i] += other.words[i];
  }

  /// The sum, rounded once per bucket as it is added in bucket order (the same buckets give
  /// the same bits); +inf with an infinity, NaN with a NaN.
  double value() const {
    if (words[kBuckets + 1] > 0) return std::nan("");
    if (words[kBuckets] > 0) return INFINITY;
    double total = 0;
    for (int k = 0; k < kBuckets; ++k) {
      if (words[k] != 0) total += std::ldexp(static_cast<double>(words[k]), k - 300);
    }
    return total;
  }
};

}  // namespace zero
