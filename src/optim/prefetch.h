// Software prefetching for the optimizer's vector loops (adam_kernels_simd.h,
// adagrad_lion_simd.h): they walk their streams in blocks of kSimdBlock elements and, where
// software_prefetch(), prefetch each stream kPrefetchAhead elements ahead.
#pragma once

#include <cstdint>

namespace zero::optim_detail {

// Elements per block of a vector loop: two cache lines of each fp32 stream.
constexpr int64_t kSimdBlock = 32;
// Software prefetch this many elements ahead (2 KiB of each fp32 stream). The loops are bound
// by memory bandwidth. Measured on 50M elements (docs/benchmarks.md): on a Xeon (AVX-512) the
// prefetches raised Adam's by 8-12 % over the hardware prefetchers alone; on an AMD EPYC
// (Zen 4, AVX-512) they lowered it by 15 % on one thread and changed nothing measurable on
// two. software_prefetch() picks per CPU vendor.
constexpr int64_t kPrefetchAhead = 512;

// A prefetch of element `i` of `base` (which may lie past the end: prefetches do not fault).
template <typename T>
[[gnu::always_inline]] inline void prefetch(const T* base, int64_t i) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) +
                                                   static_cast<uintptr_t>(i) * sizeof(T)));
}

// The prefetches of block `i` for fp32 streams `streams` and a gradient of `Grad` (one line of
// a 16-bit gradient covers two blocks' lines of the fp32 ones).
template <typename Grad, typename... Streams>
[[gnu::always_inline]] inline void prefetch_block(int64_t i, const Grad* grad,
                                                  const Streams*... streams) {
  for (int64_t line = 0; line < kSimdBlock; line += 16) {  // 16 fp32 = one 64-byte line
    const int64_t ahead = i + kPrefetchAhead + line;
    (prefetch(streams, ahead), ...);
    if (sizeof(Grad) == 4 || line == 0) prefetch(grad, ahead);
  }
}

// Whether the vector loops issue software prefetches: measured faster on Intel, slower on AMD
// (Zen 4), so only on Intel.
inline bool software_prefetch() {
#if defined(__x86_64__)
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
#else
  return false;
#endif
}

}  // namespace zero::optim_detail
