// The SIMD levels (common/simd_level.h) a test can run on this CPU, for tests that compare a
// hand-vectorized loop at every level with its scalar reference.
#pragma once

#include <vector>

#include "common/simd_level.h"

namespace zero::test {

inline const char* level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

// The levels this CPU can run, the scalar reference first.
inline std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (static_cast<int>(l) <= static_cast<int>(simd_level())) out.push_back(l);
  }
  return out;
}

}  // namespace zero::test
