// The hand-vectorized Adam(W) loop, written once over a vector type and included once per
// instruction set by src/optim/shard_optimizer.cpp through common/simd_per_isa.h (no include
// guard: on purpose), which sets ZERO_SIMD_TARGET (the instruction set's function attribute)
// and Ops (common/simd_ops.h: kLanes, the vector type F, set1, load, store, add, sub, mul, div,
// sqrt, load_grad: fp32/bf16/fp16 -> fp32 exactly, store_param: rounded as c10 rounds). The
// includer defines adam_kernel, the scalar loop (the reference), used for the tail.
// adam_simd<kPrefetch> issues software prefetches or leaves them to the hardware
// (optim/prefetch.h).
// Every operation of the scalar loop appears here once, in the same order and with the same
// operands, as one IEEE-rounded vector instruction (mul, add, sub, div, sqrt: no FMA), so the
// two give the same bits (tests/test_optimizer.cpp checks it for every level and dtype).

using optim_detail::kSimdBlock;
using optim_detail::prefetch_block;

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
    if constexpr (kPrefetch) prefetch_block(i, grad, master, m, v);
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
