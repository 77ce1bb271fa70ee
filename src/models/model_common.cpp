// See model_common.h.
#include "models/model_common.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "hardware/half_gemm.h"
#include "zero/activation_checkpointing.h"
#include "zero/error.h"
#include "zero/unit.h"

namespace zero::models {

void check_ids(const at::Tensor& idx, int64_t vocab, int64_t context, const char* what) {
  ZERO_CHECK(idx.defined(), what, " input ids are undefined");
  ZERO_CHECK(idx.scalar_type() == at::kLong, what, " input ids must be int64, got ",
             idx.scalar_type());
  ZERO_CHECK(idx.dim() == 2, what, " input ids must be 2-D [batch, seq], got ", idx.dim(),
             "-D with shape ", idx.sizes());
  const int64_t T = idx.size(1);
  ZERO_CHECK(idx.size(0) > 0 && T > 0, what, " input ids must be non-empty, got shape ",
             idx.sizes());
  ZERO_CHECK(T <= context, what, " sequence length ", T, " exceeds the context length ",
             context);
  const auto [lo_t, hi_t] = at::aminmax(idx);
  const int64_t lo = lo_t.item<int64_t>();
  const int64_t hi = hi_t.item<int64_t>();
  ZERO_CHECK(lo >= 0, what, " token id ", lo, " is negative; ids must be in [0, vocab_size ",
             vocab, ")");
  ZERO_CHECK(hi < vocab, what, " token id ", hi, " is out of range; ids must be in [0, vocab_size ",
             vocab, ")");
}

void check_targets(const at::Tensor& targets, c10::IntArrayRef expected, int64_t vocab,
                   const char* what) {
  ZERO_CHECK(targets.defined(), what, ": targets undefined");
  ZERO_CHECK(targets.scalar_type() == at::kLong, what, ": targets must be int64, got ",
             targets.scalar_type());
  ZERO_CHECK(targets.sizes() == expected, what, ": targets shape ", targets.sizes(),
             " does not match ", expected);
  ZERO_CHECK(targets.numel() > 0, what, ": empty targets");
  const auto [lo_t, hi_t] = at::aminmax(targets);
  const int64_t lo = lo_t.item<int64_t>();
  const int64_t hi = hi_t.item<int64_t>();
  ZERO_CHECK(lo >= 0 && hi < vocab, what, ": target id ", (lo < 0 ? lo : hi),
             " is out of range; targets must be in [0, vocab ", vocab, ")");
}

at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p <= 0.0) return x;
  return at::dropout(x, p, /*train=*/true);
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& allowed, bool causal, double p) {
  if (half_gemm::computes_in_fp32(q)) {
    // Note [fp16 GEMMs on CPUs without fp16 arithmetic]: 16-bit attention on a CPU in fp32
    // where that is the faster way, the output rounded once.
    return attend(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), allowed, causal, p)
        .to(q.scalar_type());
  }
  const int64_t groups = q.size(1) / k.size(1);
  // No mask at all unless one is given (an undefined tensor is not "no mask" to every kernel).
  [[maybe_unused]] const std::optional<at::Tensor> mask =
      allowed.defined() ? std::optional<at::Tensor>(allowed) : std::nullopt;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // Grouped-query attention in the kernel (no repeated copies of k and v): 11 % faster on a
  // CPU at llama-mini's shapes, bitwise the repeated form.
  return at::scaled_dot_product_attention(q, k, v, mask, p, causal, std::nullopt,
                                          /*enable_gqa=*/groups > 1);
#else
  // Before torch 2.5 no kernel pairs query heads with fewer key/value heads: k and v repeated.
  const at::Tensor keys = repeat_kv(k, groups), values = repeat_kv(v, groups);
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, keys, values, mask, p, causal);
#else
  // libtorch 1.x (Debian's libtorch-dev) has no fused kernel: the same in ATen operations.
  const int64_t T = q.size(2), S = keys.size(2);
  auto att = at::matmul(q, keys.transpose(-2, -1)) *
             (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  const at::Tensor sees =
      causal ? at::ones({T, S}, q.options().dtype(at::kBool)).tril(/*diagonal=*/S - T) : allowed;
  if (sees.defined()) att = att.masked_fill(sees.logical_not(), -std::numeric_limits<float>::infinity());
  att = maybe_dropout(at::softmax(att, /*dim=*/-1), p, p > 0.0);
  return at::matmul(att, values);
#endif
#endif
}

at::Tensor repeat_kv(const at::Tensor& kv, int64_t groups) {
  if (groups == 1) return kv;
  const int64_t B = kv.size(0), H = kv.size(1), S = kv.size(2), D = kv.size(3);
  return kv.unsqueeze(2).expand({B, H, groups, S, D}).reshape({B, H * groups, S, D});
}

at::Tensor attend_cached(const at::Tensor& q, const at::Tensor& k_new, const at::Tensor& v_new,
                         at::Tensor& past_keys, at::Tensor& past_values, int64_t groups) {
  const int64_t T = q.size(2);
  const int64_t past = past_keys.defined() ? past_keys.size(2) : 0;
  past_keys = past > 0 ? at::cat({past_keys, k_new}, 2) : k_new;
  past_values = past > 0 ? at::cat({past_values, v_new}, 2) : v_new;
  ZERO_INTERNAL_ASSERT(q.size(1) == groups * k_new.size(1), "attend_cached: ", q.size(1),
                       " query heads for ", k_new.size(1), " key/value heads in groups of ", groups);
  const at::Tensor& k = past_keys;
  const at::Tensor& v = past_values;
  if (past == 0 || T == 1) {
    // A prompt from the start is causal; one new token sees every position.
    return attend(q, k, v, /*allowed=*/{}, /*causal=*/past == 0 && T > 1, 0.0);
  }
  // New position i (absolute past + i) sees positions <= past + i.
  const at::Tensor allowed =
      at::ones({T, past + T}, q.options().dtype(at::kBool)).tril(/*diagonal=*/past);
  return attend(q, k, v, allowed, /*causal=*/false, 0.0);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  auto shape = x.sizes().vec();
  shape.back() = weight.size(0);
  // Note [fp16 GEMMs on CPUs without fp16 arithmetic]: ATen's addmm but where it is slow.
  return half_gemm::addmm(bias, x.reshape({-1, x.size(-1)}), weight.t()).view(shape);
}

at::Tensor run_block(const std::shared_ptr<torch::nn::Module>& block,
                     const std::function<at::Tensor(const at::Tensor&)>& forward,
                     const at::Tensor& x, bool checkpointed) {
  const auto call = [block, forward](const at::Tensor& input) {
    return zero::run_with(*block, [&] { return forward(input); });
  };
  if (!checkpointed) return call(x);
  return zero::checkpoint([call](const std::vector<at::Tensor>& in) {
           return std::vector<at::Tensor>{call(in[0])};
         }, {x})[0];
}

void prepare_cache(KVCache& cache, int64_t layers, int64_t new_positions, int64_t context,
                   const char* what, const char* context_key) {
  const int64_t past = cache.length();
  ZERO_CHECK(past + new_positions <= context, what, " forward_cached: ", past, " cached and ",
             new_positions, " new positions exceed ", context_key, " (context length) ", context,
             "; clear the cache and start again from the last positions");
  if (cache.keys.empty()) {
    cache.keys.resize(static_cast<size_t>(layers));
    cache.values.resize(static_cast<size_t>(layers));
  }
  ZERO_CHECK(static_cast<int64_t>(cache.keys.size()) == layers, what,
             " forward_cached: the cache holds ", cache.keys.size(), " blocks, the model has ",
             layers);
}

ActivationBytes causal_lm_activations(int64_t layers, int64_t checkpointed, int64_t block,
                                      int64_t block_input, int64_t other, int64_t head_forward,
                                      int64_t head_saved, int64_t block_gradients,
                                      int64_t head_gradient, bool tied) {
  const int64_t kept = (layers - checkpointed) * block + checkpointed * block_input + other;
  ActivationBytes a;
  a.forward_peak = kept + head_forward;
  a.backward_peak = std::max(kept + head_saved + block_gradients,
                             (tied ? 2 : 1) * head_gradient + 2 * block_input);
  if (checkpointed > 0) {
    // A recomputed block on top of the held head gradient and the checkpointed inputs.
    a.backward_peak = std::max(a.backward_peak, head_gradient + checkpointed * block_input +
                                                    block + block_gradients);
  }
  return a;
}

}  // namespace zero::models
