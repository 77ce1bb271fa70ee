// The hand-vectorized Adagrad and Lion loops, written once over a vector type and included
// once per instruction set by src/optim/adagrad_lion.cpp through common/simd_per_isa.h (no
// include guard: on purpose), as adam_kernels_simd.h is for Adam. Each operation of the
// scalar loops (adagrad_kernel, lion_kernel: the reference, and the tail) appears here once,
// in the same order and with the same operands, as one IEEE-rounded vector instruction, so the
// two give the same bits (tests/test_optimizer.cpp).
// Four vectors per iteration, unrolled: their square roots, divisions and blends overlap
// (measured on a Xeon, 5e7 elements on 2 threads: 0.93x -> 0.98x DeepSpeed's cpu_adagrad,
// 0.90x -> 0.98x its cpu_lion). No software prefetch, unlike Adam's loop: with two fp32
// streams and the gradient it measured no faster here (0.87x with, 0.94x without).

template <typename Grad, typename Param>
ZERO_SIMD_TARGET void adagrad_simd(float* master, const Grad* grad, Param* out, float* sum,
                                   int64_t begin, int64_t end, const AdagradScalars& s) {
  using F = typename Ops::F;
  constexpr int64_t W = Ops::kLanes;
  const F grad_multiplier = Ops::set1(s.grad_multiplier);
  const F weight_decay = Ops::set1(s.weight_decay);
  const F eps = Ops::set1(s.eps);
  const F step_size = Ops::set1(s.step_size);
  int64_t i = begin;
  for (; i + 4 * W <= end; i += 4 * W) {
#pragma GCC unroll 4
    for (int64_t j = i; j < i + 4 * W; j += W) {
      F p = Ops::load(master + j);
      F g = Ops::mul(Ops::load_grad(grad + j), grad_multiplier);
      if (s.decay) g = Ops::add(g, Ops::mul(weight_decay, p));
      const F total = Ops::add(Ops::load(sum + j), Ops::mul(g, g));
      Ops::store(sum + j, total);
      const F denom = Ops::add(Ops::sqrt(total), eps);
      p = Ops::sub(p, Ops::mul(step_size, Ops::div(g, denom)));
      Ops::store(master + j, p);
      if constexpr (!std::is_same_v<Param, void>) Ops::store_param(out + j, p);
    }
  }
  adagrad_kernel(master, grad, out, sum, i, end, s);
}

template <typename Grad, typename Param>
ZERO_SIMD_TARGET void lion_simd(float* master, const Grad* grad, Param* out, float* m,
                                int64_t begin, int64_t end, const LionScalars& s) {
  using F = typename Ops::F;
  constexpr int64_t W = Ops::kLanes;
  const F grad_multiplier = Ops::set1(s.grad_multiplier);
  const F decay_factor = Ops::set1(s.decay_factor);
  const F beta1 = Ops::set1(s.beta1);
  const F one_minus_beta1 = Ops::set1(s.one_minus_beta1);
  const F beta2 = Ops::set1(s.beta2);
  const F one_minus_beta2 = Ops::set1(s.one_minus_beta2);
  const F lr = Ops::set1(s.lr);
  int64_t i = begin;
  for (; i + 4 * W <= end; i += 4 * W) {
#pragma GCC unroll 4
    for (int64_t j = i; j < i + 4 * W; j += W) {
      const F g = Ops::mul(Ops::load_grad(grad + j), grad_multiplier);
      const F mi = Ops::load(m + j);
      F p = Ops::mul(Ops::load(master + j), decay_factor);
      const F c = Ops::add(Ops::mul(mi, beta1), Ops::mul(one_minus_beta1, g));
      p = Ops::sub(p, Ops::mul(lr, Ops::sign(c)));
      Ops::store(m + j, Ops::add(Ops::mul(mi, beta2), Ops::mul(one_minus_beta2, g)));
      Ops::store(master + j, p);
      if constexpr (!std::is_same_v<Param, void>) Ops::store_param(out + j, p);
    }
  }
  lion_kernel(master, grad, out, m, i, end, s);
}
