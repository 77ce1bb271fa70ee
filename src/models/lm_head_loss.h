// The language-model head and its cross-entropy loss as one operation (Note [Fused LM-head
// cross-entropy] in lm_head_loss.cpp), for zero::gpt2::GPT2Impl::forward_loss.
#pragma once

#include <ATen/core/Tensor.h>

namespace zero::gpt2 {

/// Mean over rows of -log softmax(hidden @ weight^T)[row, targets[row]]: hidden [N, C],
/// weight [V, C] (the tied token embedding), targets [N] int64 in [0, V). Differentiable in
/// hidden and weight. With grad mode on and an input requiring grad, the gradients are
/// computed here, block by block, and the backward only scales them. `block_rows` > 0 sets
/// the rows per block (for bench/bench_lm_head.cpp); 0 chooses them from the vocabulary size.
at::Tensor lm_head_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t block_rows = 0);

}  // namespace zero::gpt2
