// Reduction kernels of the ring collectives. See reduce_kernels.h.
//
// The library is compiled for baseline x86-64 (SSE2), so the fast kernels carry target
// attributes and are chosen once at run time. All families implement exactly the same
// arithmetic (IEEE fp32 add, round-to-nearest-even to the 16-bit type, NaN -> 0x7FC0 for
// bf16 like c10), so the choice never changes a result; only NaN payloads of fp16 sums may
// differ from the reference (both are NaN).
//
// Why AVX-512 for the 16-bit sums only: fp32/fp64 sums are bound by memory bandwidth already
// with AVX2, while the bf16 convert-add-round sequence is bound by instructions (AVX2: ~8 GB/s
// in cache on the benchmark machine; docs/benchmarks.md).
#include "comm/reduce_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

#include "common/simd_level.h"
#include "zero/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns "'__Y' may be used uninitialized" inside its own AVX-512 intrinsics
// (_mm512_undefined_epi32; GCC bug 105593). The warning is about the header, not this code.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define ZERO_COMM_X86_KERNELS 1
#else
#define ZERO_COMM_X86_KERNELS 0
#endif

namespace zero::comm {
namespace {

// ---- Reference: plain loops over c10 types -----------------------------------------------

template <typename T>
inline T sum_one(T a, T b) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return a + b;
  } else {
    // One fp32 addition, rounded once to the 16-bit type (c10 rounds to nearest even).
    return T(static_cast<float>(a) + static_cast<float>(b));
  }
}

// The winner of a max: b if b > a or b is NaN, else a (so a NaN in a also survives).
template <typename T>
inline T max_one(T a, T b) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return (b > a || std::isnan(b)) ? b : a;
  } else {
    const float fa = static_cast<float>(a);
    const float fb = static_cast<float>(b);
    return (fb > fa || std::isnan(fb)) ? b : a;
  }
}

template <typename T>
void reference_loop(ReduceOp op, void* out_raw, const void* a_raw, const void* b_raw,
                    int64_t n) {
  T* out = static_cast<T*>(out_raw);
  const T* a = static_cast<const T*>(a_raw);
  const T* b = static_cast<const T*>(b_raw);
  if (op == ReduceOp::kSum) {
    for (int64_t i = 0; i < n; ++i) out[i] = sum_one(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = max_one(a[i], b[i]);
  }
}

#if ZERO_COMM_X86_KERNELS
// ---- AVX2 + F16C ----------------------------------------------------------------------------
#define ZERO_AVX2 __attribute__((target("avx2,f16c")))

ZERO_AVX2 inline __m256 bf16_to_f32(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Lanes where b wins a max against a: b > a, or b is NaN.
ZERO_AVX2 inline __m256 max_mask(__m256 a, __m256 b) {
  return _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}

// 32-bit lane mask -> 16-bit lane mask (0 / -1 survive signed saturation).
ZERO_AVX2 inline __m128i narrow_mask(__m256 m) {
  const __m256i mi = _mm256_castps_si256(m);
  return _mm_packs_epi32(_mm256_castsi256_si128(mi), _mm256_extracti128_si256(mi, 1));
}

ZERO_AVX2 void sum_f32_avx2(float* o, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 r0 = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 r1 = _mm256_add_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    const __m256 r2 = _mm256_add_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
    const __m256 r3 = _mm256_add_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
    _mm256_storeu_ps(o + i, r0);
    _mm256_storeu_ps(o + i + 8, r1);
    _mm256_storeu_ps(o + i + 16, r2);
    _mm256_storeu_ps(o + i + 24, r3);
  }
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) o[i] = a[i] + b[i];
}

ZERO_AVX2 void max_f32_avx2(float* o, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 va = _mm256_loadu_ps(a + i);
    const __m256 vb = _mm256_loadu_ps(b + i);
    _mm256_storeu_ps(o + i, _mm256_blendv_ps(va, vb, max_mask(va, vb)));
  }
  for (; i < n; ++i) o[i] = max_one(a[i], b[i]);
}

ZERO_AVX2 void sum_f64_avx2(double* o, const double* a, const double* b, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256d r0 = _mm256_add_pd(_mm256_loadu_pd(a + i), _mm256_loadu_pd(b + i));
    const __m256d r1 = _mm256_add_pd(_mm256_loadu_pd(a + i + 4), _mm256_loadu_pd(b + i + 4));
    const __m256d r2 = _mm256_add_pd(_mm256_loadu_pd(a + i + 8), _mm256_loadu_pd(b + i + 8));
    const __m256d r3 = _mm256_add_pd(_mm256_loadu_pd(a + i + 12), _mm256_loadu_pd(b + i + 12));
    _mm256_storeu_pd(o + i, r0);
    _mm256_storeu_pd(o + i + 4, r1);
    _mm256_storeu_pd(o + i + 8, r2);
    _mm256_storeu_pd(o + i + 12, r3);
  }
  for (; i + 4 <= n; i += 4) {
    _mm256_storeu_pd(o + i, _mm256_add_pd(_mm256_loadu_pd(a + i), _mm256_loadu_pd(b + i)));
  }
  for (; i < n; ++i) o[i] = a[i] + b[i];
}

ZERO_AVX2 void max_f64_avx2(double* o, const double* a, const double* b, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d va = _mm256_loadu_pd(a + i);
    const __m256d vb = _mm256_loadu_pd(b + i);
    const __m256d m =
        _mm256_or_pd(_mm256_cmp_pd(vb, va, _CMP_GT_OQ), _mm256_cmp_pd(vb, vb, _CMP_UNORD_Q));
    _mm256_storeu_pd(o + i, _mm256_blendv_pd(va, vb, m));
  }
  for (; i < n; ++i) o[i] = max_one(a[i], b[i]);
}

// Rounds 8 fp32 lanes to bf16 (nearest even, NaN -> 0x7FC0, as c10::detail::
// round_to_nearest_even), leaving each result in the low 16 bits of its 32-bit lane.
ZERO_AVX2 inline __m256i round_bf16_lanes(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
}

// 16 bf16 at a time. Interleaving a zero word below each bf16 (unpacklo/hi) turns it into its
// fp32 value; both operands get the same lane permutation, and packus undoes it per 128-bit
// lane, so the results land in input order.
ZERO_AVX2 void sum_bf16_avx2(c10::BFloat16* o, const c10::BFloat16* a, const c10::BFloat16* b,
                             int64_t n) {
  const __m256i zero = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256 lo = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, va)),
                                    _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, vb)));
    const __m256 hi = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, va)),
                                    _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, vb)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i),
                        _mm256_packus_epi32(round_bf16_lanes(lo), round_bf16_lanes(hi)));
  }
  for (; i < n; ++i) o[i] = sum_one(a[i], b[i]);
}

ZERO_AVX2 void max_bf16_avx2(c10::BFloat16* o, const c10::BFloat16* a, const c10::BFloat16* b,
                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i ha = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m128i m = narrow_mask(max_mask(bf16_to_f32(ha), bf16_to_f32(hb)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm_blendv_epi8(ha, hb, m));
  }
  for (; i < n; ++i) o[i] = max_one(a[i], b[i]);
}

ZERO_AVX2 void sum_f16_avx2(c10::Half* o, const c10::Half* a, const c10::Half* b, int64_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const auto* pa = reinterpret_cast<const __m128i*>(a + i);
    const auto* pb = reinterpret_cast<const __m128i*>(b + i);
    auto* po = reinterpret_cast<__m128i*>(o + i);
    const __m256 r0 = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128(pa)),
                                    _mm256_cvtph_ps(_mm_loadu_si128(pb)));
    const __m256 r1 = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128(pa + 1)),
                                    _mm256_cvtph_ps(_mm_loadu_si128(pb + 1)));
    _mm_storeu_si128(po, _mm256_cvtps_ph(r0, kRound));
    _mm_storeu_si128(po + 1, _mm256_cvtps_ph(r1, kRound));
  }
  for (; i < n; ++i) o[i] = sum_one(a[i], b[i]);
}

ZERO_AVX2 void max_f16_avx2(c10::Half* o, const c10::Half* a, const c10::Half* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i ha = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m128i m = narrow_mask(max_mask(_mm256_cvtph_ps(ha), _mm256_cvtph_ps(hb)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm_blendv_epi8(ha, hb, m));
  }
  for (; i < n; ++i) o[i] = max_one(a[i], b[i]);
}

#undef ZERO_AVX2

// ---- AVX-512 (F + BW): the 16-bit sums --------------------------------------------------------
#define ZERO_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

// As round_bf16_lanes, 16 lanes.
ZERO_AVX512 inline __m512i round_bf16_lanes_512(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7FC0));
}

// 32 bf16 at a time; the unpack/packus scheme of sum_bf16_avx2.
ZERO_AVX512 void sum_bf16_avx512(c10::BFloat16* o, const c10::BFloat16* a,
                                 const c10::BFloat16* b, int64_t n) {
  const __m512i zero = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i va = _mm512_loadu_si512(a + i);
    const __m512i vb = _mm512_loadu_si512(b + i);
    const __m512 lo = _mm512_add_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, va)),
                                    _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, vb)));
    const __m512 hi = _mm512_add_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, va)),
                                    _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, vb)));
    _mm512_storeu_si512(o + i,
                        _mm512_packus_epi32(round_bf16_lanes_512(lo), round_bf16_lanes_512(hi)));
  }
  for (; i < n; ++i) o[i] = sum_one(a[i], b[i]);
}

ZERO_AVX512 void sum_f16_avx512(c10::Half* o, const c10::Half* a, const c10::Half* b,
                                int64_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const auto* pa = reinterpret_cast<const __m256i*>(a + i);
    const auto* pb = reinterpret_cast<const __m256i*>(b + i);
    auto* po = reinterpret_cast<__m256i*>(o + i);
    const __m512 r0 = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(pa)),
                                    _mm512_cvtph_ps(_mm256_loadu_si256(pb)));
    const __m512 r1 = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(pa + 1)),
                                    _mm512_cvtph_ps(_mm256_loadu_si256(pb + 1)));
    _mm256_storeu_si256(po, _mm512_cvtps_ph(r0, kRound));
    _mm256_storeu_si256(po + 1, _mm512_cvtps_ph(r1, kRound));
  }
  for (; i < n; ++i) o[i] = sum_one(a[i], b[i]);
}

#undef ZERO_AVX512

KernelFamily detect_family() {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return KernelFamily::kAvx512;
    case SimdLevel::kAvx2: return KernelFamily::kAvx2;
    case SimdLevel::kScalar: break;
  }
  return KernelFamily::kScalar;
}
#else
KernelFamily detect_family() { return KernelFamily::kScalar; }
#endif  // ZERO_COMM_X86_KERNELS

[[noreturn]] void unsupported(c10::ScalarType dtype) {
  ZERO_INTERNAL_ASSERT(false, "reduction kernel called with dtype ", c10::toString(dtype),
                       " (callers validate dtypes first)");
  __builtin_unreachable();
}

}  // namespace

KernelFamily best_kernel_family() {
  static const KernelFamily value = detect_family();
  return value;
}

void reduce_to(KernelFamily family, ReduceOp op, c10::ScalarType dtype, void* out,
               const void* a, const void* b, int64_t n) {
  ZERO_INTERNAL_ASSERT(static_cast<int>(family) <= static_cast<int>(best_kernel_family()),
                       "reduction kernel family ", static_cast<int>(family),
                       " is not available on this CPU");
  if (n <= 0) return;
#if ZERO_COMM_X86_KERNELS
  if (family != KernelFamily::kScalar) {
    const bool sum = op == ReduceOp::kSum;
    const bool wide = family == KernelFamily::kAvx512;
    switch (dtype) {
      case c10::kFloat: {
        auto* o = static_cast<float*>(out);
        const auto* x = static_cast<const float*>(a);
        const auto* y = static_cast<const float*>(b);
        return sum ? sum_f32_avx2(o, x, y, n) : max_f32_avx2(o, x, y, n);
      }
      case c10::kDouble: {
        auto* o = static_cast<double*>(out);
        const auto* x = static_cast<const double*>(a);
        const auto* y = static_cast<const double*>(b);
        return sum ? sum_f64_avx2(o, x, y, n) : max_f64_avx2(o, x, y, n);
      }
      case c10::kBFloat16: {
        auto* o = static_cast<c10::BFloat16*>(out);
        const auto* x = static_cast<const c10::BFloat16*>(a);
        const auto* y = static_cast<const c10::BFloat16*>(b);
        if (!sum) return max_bf16_avx2(o, x, y, n);
        return wide ? sum_bf16_avx512(o, x, y, n) : sum_bf16_avx2(o, x, y, n);
      }
      case c10::kHalf: {
        auto* o = static_cast<c10::Half*>(out);
        const auto* x = static_cast<const c10::Half*>(a);
        const auto* y = static_cast<const c10::Half*>(b);
        if (!sum) return max_f16_avx2(o, x, y, n);
        return wide ? sum_f16_avx512(o, x, y, n) : sum_f16_avx2(o, x, y, n);
      }
      default: unsupported(dtype);
    }
  }
#endif
  switch (dtype) {
    case c10::kFloat: return reference_loop<float>(op, out, a, b, n);
    case c10::kDouble: return reference_loop<double>(op, out, a, b, n);
    case c10::kBFloat16: return reference_loop<c10::BFloat16>(op, out, a, b, n);
    case c10::kHalf: return reference_loop<c10::Half>(op, out, a, b, n);
    default: unsupported(dtype);
  }
}

const char* kernel_family_name(KernelFamily family) {
  switch (family) {
    case KernelFamily::kAvx512: return "avx512";
    case KernelFamily::kAvx2: return "avx2";
    default: return "scalar";
  }
}

}  // namespace zero::comm
