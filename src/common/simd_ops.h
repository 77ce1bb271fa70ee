// The vector operations zero's hand-written loops are written over (the optimizer's Adam loop,
// src/optim/adam_kernels_simd.h; the fused kernels, src/kernels/), one struct Ops per
// instruction set with the same members: kLanes, the vector type F, and always-inline
// operations, each one IEEE-rounded instruction (no FMA), so a loop written once over Ops and
// its scalar form give the same bits where the loop's order is the scalar one. 16-bit loads
// are exact; 16-bit stores round as c10 does (nearest even; NaN as c10 writes it).
// The callers pick the struct by zero::simd_level() (common/simd_level.h).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

// DEFINE(SUFFIX, ATTRIBUTE) once per level: a loop written in scalar C++ and compiled for each
// instruction set (baseline, avx2, avx512; without x86-64 all three plain), which the caller
// picks by zero::simd_level().
#if defined(__x86_64__)
#define ZERO_FOR_EACH_SIMD_LEVEL(DEFINE) \
  DEFINE(baseline, )                     \
  DEFINE(avx2, ZERO_AVX2_TARGET)         \
  DEFINE(avx512, ZERO_AVX512_TARGET)
#else
#define ZERO_FOR_EACH_SIMD_LEVEL(DEFINE) \
  DEFINE(baseline, )                     \
  DEFINE(avx2, )                         \
  DEFINE(avx512, )
#endif

namespace zero::simd {

#if defined(__x86_64__)
#define ZERO_AVX2_TARGET __attribute__((target("avx2,f16c")))
#define ZERO_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

// The rare lanes of a 16-bit parameter copy whose value is NaN, rewritten by c10's own
// conversion (F16C keeps a NaN's payload, c10::Half need not; c10::BFloat16 makes it 0x7FC0).
template <typename Param, int64_t kLanes>
[[gnu::noinline]] void fix_nan_lanes(Param* out, const float* values, unsigned mask) {
  for (int64_t k = 0; k < kLanes; ++k) {
    if (mask & (1u << k)) out[k] = static_cast<Param>(values[k]);
  }
}

namespace avx512 {
#define ZERO_SIMD_INLINE [[gnu::always_inline]] ZERO_AVX512_TARGET static inline
struct Ops {
  static constexpr int64_t kLanes = 16;
  using F = __m512;
  // All lanes. The masked forms of some intrinsics below compile to the same unmasked
  // instructions; they avoid GCC 12's false -Wmaybe-uninitialized in the unmasked ones
  // (their _mm512_undefined_* source operand, GCC bug 105593).
  static constexpr __mmask16 kAll = 0xFFFF;
  ZERO_SIMD_INLINE F set1(float x) { return _mm512_set1_ps(x); }
  ZERO_SIMD_INLINE F load(const float* p) { return _mm512_loadu_ps(p); }
  ZERO_SIMD_INLINE void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  ZERO_SIMD_INLINE F add(F a, F b) { return _mm512_add_ps(a, b); }
  ZERO_SIMD_INLINE F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  ZERO_SIMD_INLINE F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  ZERO_SIMD_INLINE F div(F a, F b) { return _mm512_div_ps(a, b); }
  ZERO_SIMD_INLINE F sqrt(F a) { return _mm512_mask_sqrt_ps(a, kAll, a); }
  // Beyond the optimizer's needs (the fused kernels of src/kernels/):
  ZERO_SIMD_INLINE F zero() { return _mm512_setzero_ps(); }
  ZERO_SIMD_INLINE F max(F a, F b) { return _mm512_maskz_max_ps(kAll, a, b); }
  ZERO_SIMD_INLINE F min(F a, F b) { return _mm512_maskz_min_ps(kAll, a, b); }
  ZERO_SIMD_INLINE void store_param(float* p, F x) { _mm512_storeu_ps(p, x); }
  // 1 where a > 0, -1 where a < 0, +0 where a is +-0, NaN where a is NaN (torch.sign).
  ZERO_SIMD_INLINE F sign(F a) {
    const F zero = _mm512_setzero_ps();
    F r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, zero, _CMP_EQ_OQ), a, zero);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ), r, _mm512_set1_ps(1.0f));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ), r, _mm512_set1_ps(-1.0f));
  }
  // Round to nearest even, as std::nearbyint in the default rounding mode.
  ZERO_SIMD_INLINE F round(F a) {
    return _mm512_maskz_roundscale_ps(kAll, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-126, 127] held as floats: the exponent field built directly.
  ZERO_SIMD_INLINE F pow2(F n) {
    const __m512i e = _mm512_add_epi32(_mm512_maskz_cvttps_epi32(kAll, n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, e, 23));
  }
  // Lanes summed pairwise in a fixed tree (halves, then quarters, ...).
  ZERO_SIMD_INLINE float reduce_add(F a) {
    // Halves by masked extracts: GCC 12's _mm512_castps512_ps256 and unmasked extract read an
    // "undefined" source it then warns about (the bug above).
    const __m512d d = _mm512_castps_pd(a);
    const __m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0)),
                                   _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1)));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
  }
  ZERO_SIMD_INLINE F load_grad(const float* p) { return _mm512_loadu_ps(p); }
  // bf16 -> fp32 is exact: the 16 bits become the high half.
  ZERO_SIMD_INLINE F load_grad(const c10::BFloat16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
  }
  ZERO_SIMD_INLINE F load_grad(const c10::Half* p) {
    return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // c10::BFloat16's rounding: round to nearest even on the bits, every NaN -> 0x7FC0.
  ZERO_SIMD_INLINE void store_param(c10::BFloat16* p, F x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF));
    __m512i r = _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(u, bias), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(kAll, r));
  }
  // c10::Half's rounding: IEEE round to nearest even, as F16C does; NaN lanes by c10 itself.
  ZERO_SIMD_INLINE void store_param(c10::Half* p, F x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(kAll, x, _MM_FROUND_TO_NEAREST_INT));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    if (__builtin_expect(nan != 0, 0)) {
      alignas(64) float values[kLanes];
      _mm512_store_ps(values, x);
      fix_nan_lanes<c10::Half, kLanes>(p, values, nan);
    }
  }
};
#undef ZERO_SIMD_INLINE
}  // namespace avx512

namespace avx2 {
#define ZERO_SIMD_INLINE [[gnu::always_inline]] ZERO_AVX2_TARGET static inline
struct Ops {
  static constexpr int64_t kLanes = 8;
  using F = __m256;
  ZERO_SIMD_INLINE F set1(float x) { return _mm256_set1_ps(x); }
  ZERO_SIMD_INLINE F load(const float* p) { return _mm256_loadu_ps(p); }
  ZERO_SIMD_INLINE void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  ZERO_SIMD_INLINE F add(F a, F b) { return _mm256_add_ps(a, b); }
  ZERO_SIMD_INLINE F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  ZERO_SIMD_INLINE F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  ZERO_SIMD_INLINE F div(F a, F b) { return _mm256_div_ps(a, b); }
  ZERO_SIMD_INLINE F sqrt(F a) { return _mm256_sqrt_ps(a); }
  // Beyond the optimizer's needs (the fused kernels of src/kernels/):
  ZERO_SIMD_INLINE F zero() { return _mm256_setzero_ps(); }
  ZERO_SIMD_INLINE F max(F a, F b) { return _mm256_max_ps(a, b); }
  ZERO_SIMD_INLINE F min(F a, F b) { return _mm256_min_ps(a, b); }
  ZERO_SIMD_INLINE void store_param(float* p, F x) { _mm256_storeu_ps(p, x); }
  ZERO_SIMD_INLINE F sign(F a) {
    const F zero = _mm256_setzero_ps();
    F r = _mm256_blendv_ps(a, zero, _mm256_cmp_ps(a, zero, _CMP_EQ_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(1.0f), _mm256_cmp_ps(a, zero, _CMP_GT_OQ));
    return _mm256_blendv_ps(r, _mm256_set1_ps(-1.0f), _mm256_cmp_ps(a, zero, _CMP_LT_OQ));
  }
  ZERO_SIMD_INLINE F round(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  ZERO_SIMD_INLINE F pow2(F n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  ZERO_SIMD_INLINE float reduce_add(F a) {
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
  }
  ZERO_SIMD_INLINE F load_grad(const float* p) { return _mm256_loadu_ps(p); }
  ZERO_SIMD_INLINE F load_grad(const c10::BFloat16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  ZERO_SIMD_INLINE F load_grad(const c10::Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  ZERO_SIMD_INLINE void store_param(c10::BFloat16* p, F x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
    // Each lane holds at most 0xFFFF, so the unsigned-saturating pack is exact.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  ZERO_SIMD_INLINE void store_param(c10::Half* p, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    if (__builtin_expect(nan != 0, 0)) {
      alignas(32) float values[kLanes];
      _mm256_store_ps(values, x);
      fix_nan_lanes<c10::Half, kLanes>(p, values, static_cast<unsigned>(nan));
    }
  }
};
#undef ZERO_SIMD_INLINE
}  // namespace avx2
#endif  // defined(__x86_64__)


// exp(x) to ~1 ulp for x clamped to [kExpMin, kExpMax] (below: a normal result), as
// exp_reference computes it lane by lane: n = round(x log2 e), r = x - n ln 2 (in two parts),
// a degree-7 polynomial in r (Cephes' expf coefficients), times 2^n. The vector form is
// written over Ops in each loop file that includes per instruction set (it needs the target's
// attribute), operation for operation this one.
constexpr float kExpMin = -87.0f, kExpMax = 88.0f;
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float exp_reference(float x) {
  x = std::fmin(std::fmax(x, kExpMin), kExpMax);
  const float n = std::nearbyint(x * kLog2e);
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float r2 = r * r;
  float y = kExpP[0];
  for (int i = 1; i < 6; ++i) y = y * r + kExpP[i];
  y = y * r2 + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

}  // namespace zero::simd
