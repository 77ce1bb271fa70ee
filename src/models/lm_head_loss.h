// The language-model head and its cross-entropy loss as one operation (Note [Fused LM-head
// cross-entropy] in lm_head_loss.cpp), for zero::gpt2::GPT2Impl::forward_loss.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zero::gpt2 {

/// Mean over rows of -log softmax(hidden @ weight^T)[row, targets[row]]: hidden [N, C],
/// weight [V, C] (the tied token embedding), targets [N] int64 in [0, V). Differentiable in
/// hidden and weight. With grad mode on and an input requiring grad, the gradients are
/// computed here, block by block, and the backward only scales them. `block_rows` > 0 sets
/// the rows per block (for bench/bench_lm_head.cpp); 0 chooses them from the vocabulary size.
at::Tensor lm_head_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t block_rows = 0);

/// What lm_head_cross_entropy holds of `rows` x `width` hidden states over a vocabulary of
/// `vocab` in `element_bytes`-byte elements: beyond its inputs at its forward's peak, and what
/// it keeps for backward (its gradients, computed in forward). `widened`: 16-bit inputs whose
/// loop runs in fp32 (half_gemm::computes_in_fp32). For the models' memory plans.
struct LmHeadBytes {
  int64_t forward_peak = 0;
  int64_t saved = 0;
};
LmHeadBytes lm_head_cross_entropy_bytes(int64_t rows, int64_t width, int64_t vocab,
                                        int64_t element_bytes, bool widened);

}  // namespace zero::gpt2
