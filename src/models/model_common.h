// What every causal LM family computes the same way (src/models/gpt2.cpp, llama.cpp): input
// checks, dropout, scaled dot-product attention with and without the KV cache, and a linear
// layer by the GEMM path of its dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "zero/causal_lm.h"
#include "zero/export.h"

namespace torch::nn {
class Module;
}

namespace zero::models {

/// Token ids `idx` [B, T] int64, non-empty, T <= context, ids in [0, vocab); `what` names the
/// model and the call in the error ("GPT-2", "Llama forward_cached").
ZERO_INTERNAL_API void check_ids(const at::Tensor& idx, int64_t vocab, int64_t context,
                                 const char* what);
/// Targets of shape `expected` (the logits' without the vocab dimension), int64 ids < vocab.
ZERO_INTERNAL_API void check_targets(const at::Tensor& targets, c10::IntArrayRef expected,
                                     int64_t vocab, const char* what);

ZERO_INTERNAL_API at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training);

/// Scaled dot-product attention (scale 1/sqrt(head size)) of q [B, H, T, D] over k, v [B, Hkv,
/// S, D] (H a multiple of Hkv: grouped-query attention pairs each key/value head with H / Hkv
/// query heads): causal (query i sees keys <= i, with T == S), or query i sees key j where `allowed`
/// [T, S] is true, with dropout p on the weights. 16-bit on a CPU computes in fp32 where that
/// is the faster way (Note [fp16 GEMMs on CPUs without fp16 arithmetic]), rounded once.
ZERO_INTERNAL_API at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& allowed, bool causal, double p);

/// Attention of the new positions' q [B, H, T, D] over the cache's keys and values followed
/// by the new k, v [B, Hkv, T, D], which `past_keys`/`past_values` (undefined: none) are
/// replaced by; `groups` = H / Hkv query heads share each key/value head (grouped-query
/// attention; 1: multi-head). Without dropout (inference).
ZERO_INTERNAL_API at::Tensor attend_cached(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, at::Tensor& past_keys,
                                           at::Tensor& past_values, int64_t groups);

/// k or v [B, Hkv, S, D] with each head repeated `groups` times, [B, Hkv groups, S, D], as
/// grouped-query attention pairs query heads with them (HF's repeat_kv); `groups` 1: itself.
ZERO_INTERNAL_API at::Tensor repeat_kv(const at::Tensor& kv, int64_t groups);

/// x [..., in] @ weight^T + bias for an nn.Linear-layout weight [out, in] (bias undefined:
/// none), by the GEMM path of x's dtype (half_gemm::addmm).
ZERO_INTERNAL_API at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias);

/// forward(x) of `block` as one call of its stage-3 unit (zero/unit.h), activation-checkpointed
/// (zero/activation_checkpointing.h) when `checkpointed`: a model's loop over its blocks.
/// `forward` runs again in backward when checkpointed: it must hold what it uses by value.
ZERO_INTERNAL_API at::Tensor run_block(const std::shared_ptr<torch::nn::Module>& block,
                                       const std::function<at::Tensor(const at::Tensor&)>& forward,
                                       const at::Tensor& x, bool checkpointed);

/// Sizes `cache` for `layers` blocks when empty and checks that its positions and `new_positions`
/// more fit `context`; `what` names the model ("GPT-2"), `context_key` its config key.
ZERO_INTERNAL_API void prepare_cache(KVCache& cache, int64_t layers, int64_t new_positions,
                                     int64_t context, const char* what, const char* context_key);

/// A causal LM's activations without and with `checkpointed` blocks checkpointed, the shape
/// both families' memory notes derive (Note [GPT-2 activation memory]): `layers` blocks each
/// keeping `block` bytes (a checkpointed one only its input, `block_input`), `other` bytes kept
/// beside them (ids, the final norm), the fused head's `head_forward` peak and `head_saved`
/// bytes, `block_gradients` at the start of backward, and the head weight's gradient
/// (`head_gradient`) held until the end, where a tied one meets the embedding's own.
ZERO_INTERNAL_API ActivationBytes causal_lm_activations(int64_t layers, int64_t checkpointed,
                                                       int64_t block, int64_t block_input,
                                                       int64_t other, int64_t head_forward,
                                                       int64_t head_saved, int64_t block_gradients,
                                                       int64_t head_gradient, bool tied);

}  // namespace zero::models
