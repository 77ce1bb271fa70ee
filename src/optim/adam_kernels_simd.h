// The hand-vectorized Adam(W) loop, written once over a vector type and included once per
// instruction set by src/optim/shard_optimizer.cpp through common/simd_per_isa.h (no include
// guard: on purpose), which sets ZERO_SIMD_TARGET (the instruction set's function attribute)
// and Ops (common/simd_ops.h: kLanes, the vector type F, set1, load, store, add, sub, mul, div,
// sqrt, load_grad: fp32/bf16/fp16 -> fp32 exactly, store_param: rounded as c10 rounds). The
// includer defines adam_kernel, the scalar loop (the reference), used for the tail.
// adam_simd<kPrefetch> issues software prefetches or leaves them to the hardware.
// Every operation of the scalar loop appears here once, in the same order and with the same
// operands, as one IEEE-rounded vector instruction (mul, add, sub, div, sqrt: no FMA), so the
// two give the same bits (tests/test_optimizer.cpp checks it for every level and dtype).

// Elements per iteration: two cache lines of each fp32 stream.
constexpr int64_t kSimdBlock = 32;
// Software prefetch this many elements ahead (2 KiB of each fp32 stream), where kPrefetch.
// The loop is bound by memory bandwidth. Measured on 50M elements (docs/benchmarks.md): on a
// Xeon (AVX-512) the prefetches raised it by 8-12 % over the hardware prefetchers alone; on an
// AMD EPYC (Zen 4, AVX-512) they lowered it by 15 % on one thread and changed nothing
// measurable on two. The includer picks per CPU vendor (software_prefetch()).
constexpr int64_t kPrefetchAhead = 512;

// A prefetch of element `i` of `base` (which may lie past the end: prefetches do not fault).
template <typename T>
[[gnu::always_inline]] inline void prefetch(const T* base, int64_t i) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) +
                                                   static_cast<uintptr_t>(i) * sizeof(T)));
}

template <bool kPrefetch, typename Grad, typename Param>
ZERO_SIMD_TARGET void adam_simd(float* master, const Grad* grad, Param* out, float* m, float* v,
                                int64_t begin, int64_t end, const AdamScalars& s) {
  using F = typename Ops::F;
  constexpr int64_t W = Ops::kLanes;
  static_assert(kSimdBlock % W == 0);
  const F grad_multiplier = Ops::set1(s.grad_multiplier);
  const F decay_factor = Ops::set1(s.decay_factor);
  const F l2 = Ops::set1(s.l2);
  const F beta1 = Ops::set1(s.beta1);
  const F one_minus_beta1 = Ops::set1(s.one_minus_beta1);
  const F beta2 = Ops::set1(s.beta2);
  const F one_minus_beta2 = Ops::set1(s.one_minus_beta2);
  const F bias_correction2_sqrt = Ops::set1(s.bias_correction2_sqrt);
  const F eps = Ops::set1(s.eps);
  const F step_size = Ops::set1(s.step_size);
  int64_t i = begin;
  for (; i + kSimdBlock <= end; i += kSimdBlock) {
    if constexpr (kPrefetch) {
      for (int64_t line = 0; line < kSimdBlock; line += 16) {  // 16 fp32 = one 64-byte line
        const int64_t ahead = i + kPrefetchAhead + line;
        prefetch(master, ahead);
        prefetch(m, ahead);
        prefetch(v, ahead);
        if (sizeof(Grad) == 4 || line == 0) prefetch(grad, ahead);
      }
    }
    for (int64_t j = i; j < i + kSimdBlock; j += W) {
      F p = Ops::load(master + j);
      F g = Ops::mul(Ops::load_grad(grad + j), grad_multiplier);
      p = Ops::mul(p, decay_factor);
      g = Ops::add(g, Ops::mul(l2, p));
      const F mi = Ops::add(Ops::mul(Ops::load(m + j), beta1), Ops::mul(one_minus_beta1, g));
      const F vi = Ops::add(Ops::mul(Ops::load(v + j), beta2),
                            Ops::mul(Ops::mul(one_minus_beta2, g), g));
      Ops::store(m + j, mi);
      Ops::store(v + j, vi);
      const F denom = Ops::add(Ops::div(Ops::sqrt(vi), bias_correction2_sqrt), eps);
      p = Ops::sub(p, Ops::mul(step_size, Ops::div(mi, denom)));
      Ops::store(master + j, p);
      if constexpr (!std::is_same_v<Param, void>) Ops::store_param(out + j, p);
    }
  }
  adam_kernel(master, grad, out, m, v, i, end, s);
}
