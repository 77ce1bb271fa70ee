// GPT-2 in libtorch with Hugging Face's parameter names and shapes, so weights map one to one
// onto a `transformers` GPT2LMHeadModel state dict:
//   transformer.wte.weight [vocab, n_embd]     transformer.wpe.weight [n_positions, n_embd]
//   transformer.h.{i}.ln_1.{weight,bias}       transformer.h.{i}.attn.c_attn.{weight [n_embd, 3 n_embd], bias}
//   transformer.h.{i}.attn.c_proj.{weight [n_embd, n_embd], bias}
//   transformer.h.{i}.ln_2.{weight,bias}       transformer.h.{i}.mlp.c_fc.{weight [n_embd, 4 n_embd], bias}
//   transformer.h.{i}.mlp.c_proj.{weight [4 n_embd, n_embd], bias}
//   transformer.ln_f.{weight,bias}
// lm_head.weight is tied to transformer.wte.weight: it is not a separate parameter (the
// logits are computed with wte's weight), exactly as HF ties them.
// HF's Conv1D stores weights as [in, out] (the transpose of nn::Linear); we keep that layout.
#pragma once

#include "zero/causal_lm.h"
#include "zero/export.h"
#include "zero/memory_plan.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zero::gpt2 {

/// GPT-2's shape; the causal-LM interface's "gpt2" family (zero/causal_lm.h).
struct ZERO_API GPT2Config : CausalLMConfig {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;  // context length
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  double dropout = 0.0;  // HF's resid/embd/attn pdrop (one value); 0 keeps training deterministic
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  /// Activation checkpointing (zero/activation_checkpointing.h): the first this many blocks
  /// keep only their inputs in forward and are recomputed during backward; 0 (default) none,
  /// n_layer all. Changes memory and time, never results.
  int64_t checkpointed_blocks = 0;

  /// Named sizes: "gpt2-tiny" (4 layers, 128 wide), "gpt2-mini" (6 x 384, ~30M),
  /// "gpt2" (124M), "gpt2-medium" (350M), "gpt2-large" (774M), "gpt2-xl" (1558M).
  /// Unknown names throw zero::Error listing the known ones.
  static GPT2Config preset(const std::string& name);
  /// A preset (above), or a GPT-2 shape beyond them: "L<layers>-C<width>[-H<heads>][-T<context>]",
  /// e.g. "L32-C4096-H32" (6.65B parameters). Heads default to width / 64 (GPT-2's head size),
  /// the context to 1024; the vocabulary is GPT-2's. Anything else throws zero::Error naming
  /// the text, the presets and the shape syntax.
  static GPT2Config named(const std::string& name);
  /// Trainable elements of a model of this shape (GPT2Impl::num_parameters), without building
  /// it: for estimates before anything is allocated.
  int64_t num_parameters() const override;
  static std::vector<std::string> preset_names();

  /// The memory planner's view of this model (zero/memory_plan.h), built without the model:
  /// its parameters per stage-3 unit in registration order, and the activations of one
  /// micro-batch of `micro_batch` x `seq` tokens computed in `compute_dtype` through
  /// GPT2Impl::forward_loss, without and with activation checkpointing (checkpointed_blocks,
  /// or every block when it is 0); `checkpointing` is checkpointed_blocks > 0; `on_host`:
  /// computed on the CPU (false: on a GPU), which decides how fp16 computes. Note [GPT-2
  /// activation memory] in gpt2.cpp derives them.
  PlanModel plan_model(int64_t micro_batch, int64_t seq, c10::ScalarType compute_dtype,
                       bool on_host = true) const override;

  /// Runs the GEMMs of one micro-batch's step once on scratch tensors (the fused LM head and
  /// loss with its gradients, and each block's three matrix shapes forward and backward), so
  /// that the BLAS library's own retained scratch (MKL's packing buffers: 58 MiB on gpt2-mini,
  /// a copy of much of the LM head's weight) is resident before the process baseline of the
  /// plan (PlanModel::process_baseline_bytes) is measured. On the host only; the scratch
  /// tensors are freed and the host block cache emptied before it returns.
  void warm_up_host_gemms(int64_t micro_batch, int64_t seq,
                          c10::ScalarType compute_dtype) const override;

  /// This configuration as Hugging Face's GPT2Config (the config.json that
  /// `transformers.GPT2LMHeadModel.from_pretrained(dir)` reads beside dir/model.safetensors):
  /// the sizes, "gelu_new", the dropout as resid/embd/attn_pdrop, tied embeddings, and
  /// `torch_dtype` = `dtype` ("float32", "bfloat16" or "float16"). Compact JSON text.
  std::string hf_config_json(const std::string& dtype = "float32") const override;

  // The rest of zero/causal_lm.h's CausalLMConfig.
  std::string model_type() const override { return "gpt2"; }
  std::string display_name() const override { return "GPT-2"; }
  CausalLMShape shape() const override;
  std::string describe() const override;
  std::unique_ptr<CausalLMConfig> clone() const override;
  void set_dropout(double p) override { dropout = p; }
  void set_checkpointed_blocks(int64_t blocks) override { checkpointed_blocks = blocks; }
  std::shared_ptr<CausalLM> build() const override;
};

/// HF's Conv1D: y = x @ weight + bias with weight [in, out].
class ZERO_API Conv1DImpl : public torch::nn::Module {
 public:
  Conv1DImpl(int64_t in_features, int64_t out_features);
  at::Tensor forward(const at::Tensor& x);
  /// x @ weight without the bias, for a caller that adds it fused with what follows.
  at::Tensor product(const at::Tensor& x);
  at::Tensor weight;
  at::Tensor bias;
};
TORCH_MODULE(Conv1D);

/// The cache of incremental decoding (zero/causal_lm.h).
using KVCache = zero::KVCache;

class ZERO_API AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& x);  // causal self-attention, x [B, T, C]
  /// The same for x [B, T, C] after the `past_keys`/`past_values` positions (undefined: none),
  /// which are replaced by the keys and values of all of them.
  at::Tensor forward_cached(const at::Tensor& x, at::Tensor& past_keys, at::Tensor& past_values);
  Conv1D c_attn{nullptr};
  Conv1D c_proj{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
};
TORCH_MODULE(Attention);

class ZERO_API MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& x);  // c_proj(gelu_tanh(c_fc(x)))
  Conv1D c_fc{nullptr};
  Conv1D c_proj{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(MLP);

class ZERO_API BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& x);  // x + attn(ln_1(x)), then + mlp(ln_2(.))
  at::Tensor forward_cached(const at::Tensor& x, at::Tensor& past_keys, at::Tensor& past_values);
  torch::nn::LayerNorm ln_1{nullptr};
  Attention attn{nullptr};
  torch::nn::LayerNorm ln_2{nullptr};
  MLP mlp{nullptr};

 private:
  // h = x + attended, then h + mlp(ln_2(h)).
  at::Tensor after_attention(const at::Tensor& x, const at::Tensor& attended);
};
TORCH_MODULE(Block);

/// The transformer body (HF's GPT2Model).
class ZERO_API GPT2ModelImpl : public torch::nn::Module {
 public:
  explicit GPT2ModelImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& idx);  // idx [B, T] int64 -> hidden [B, T, C]
  torch::nn::Embedding wte{nullptr};
  torch::nn::Embedding wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  GPT2Config config_;
};
TORCH_MODULE(GPT2Model);

/// GPT-2 with its language-model head (HF's GPT2LMHeadModel), GPT-2 initialisation:
/// weights N(0, 0.02), c_proj weights N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1/0.
class ZERO_API GPT2Impl : public CausalLM {
 public:
  explicit GPT2Impl(const GPT2Config& config);
  /// idx [B, T] int64 token ids (T <= n_positions, ids < vocab_size) -> logits [B, T, vocab].
  at::Tensor forward(const at::Tensor& idx) override;
  /// Mean cross-entropy of next-token prediction; targets [B, T] int64.
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets);
  /// loss(forward(idx), targets) without ever holding the [B, T, vocab] logits: the tied
  /// head and the loss run fused, a block of rows at a time, and with grad mode on the head's
  /// gradients are computed here and backward only scales them (Note [Fused LM-head
  /// cross-entropy], src/models/lm_head_loss.cpp). Faster and far smaller than the two calls
  /// on CPUs; equal to them to about 1e-6 relative.
  at::Tensor forward_loss(const at::Tensor& idx, const at::Tensor& targets) override;
  /// CausalLM::forward_cached; the cache and the new positions must fit n_positions.
  at::Tensor forward_cached(const at::Tensor& idx, KVCache& cache) override;
  const GPT2Config& config() const { return config_; }
  const CausalLMConfig& causal_lm_config() const override { return config_; }

  // Hugging Face's names (CausalLM): the original gpt2 files drop "transformer." and hold
  // lm_head.weight (wte's) and the attention masks.
  std::string parameter_of_hf_tensor(const std::string& name) const override;
  std::optional<std::string> tied_hf_tensor(const std::string& name) const override;
  bool ignored_hf_tensor(const std::string& name) const override;
  std::string block_prefix() const override { return "transformer.h."; }

  GPT2Model transformer{nullptr};

 private:
  GPT2Config config_;
};
TORCH_MODULE(GPT2);

}  // namespace zero::gpt2
