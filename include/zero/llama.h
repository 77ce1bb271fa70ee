// The Llama family in libtorch (Hugging Face's model_type "llama", "mistral" and "qwen2": Llama
// 2/3.x, SmolLM2, Mistral, Qwen2/2.5), one implementation of zero/causal_lm.h: RMSNorm, rotary
// position embeddings (rope_theta; "linear" and Llama 3's "llama3" scaling), a SwiGLU MLP,
// grouped-query attention (num_key_value_heads), head_dim given or hidden / heads, a tied or
// untied head, and the optional biases (Llama's attention_bias and mlp_bias, Qwen2's q/k/v).
// Module names are transformers' (LlamaForCausalLM), so parameters map one to one:
//   model.embed_tokens.weight [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight [hidden]
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight [heads x head_dim or kv heads x head_dim,
//       hidden] ([hidden, heads x head_dim] for o_proj), and .bias where the config has them
//   model.layers.{i}.post_attention_layernorm.weight [hidden]
//   model.layers.{i}.mlp.{gate,up}_proj.weight [intermediate, hidden], down_proj [hidden, inter]
//   model.norm.weight [hidden]
//   lm_head.weight [vocab, hidden] (absent when tied: the head is embed_tokens)
#pragma once

#include "zero/export.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zero/causal_lm.h"

namespace zero::llama {

/// How the rotary frequencies are scaled (HF's rope_parameters / rope_scaling).
struct ZERO_API RopeScaling {
  std::string type = "default";  // "default", "linear" or "llama3"
  double factor = 1.0;           // linear, llama3
  double low_freq_factor = 1.0;  // llama3
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ZERO_API LlamaConfig : CausalLMConfig {
  std::string type = "llama";  // HF model_type: "llama", "mistral" or "qwen2"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  /// Sliding-window attention's window (0: none). Within the window attention is full causal
  /// attention, which is all zero computes: the context is then at most the window.
  int64_t sliding_window = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q, k and v projections (Llama's attention_bias, Qwen2 always)
  bool o_bias = false;    // the output projection (Llama's attention_bias)
  bool mlp_bias = false;  // gate, up and down (Llama's mlp_bias)
  double initializer_range = 0.02;
  int64_t bos_token_id = -1;  // -1: none (written as null)
  int64_t eos_token_id = -1;
  double dropout = 0.0;  // on the attention weights while training
  int64_t checkpointed_blocks = 0;

  /// Named sizes: "llama-tiny" and "llama-mini" (gpt2-tiny's and gpt2-mini's parameter counts,
  /// GPT-2's vocabulary, tied: for the token files zero-train makes), and real shapes to plan
  /// and fine-tune: "smollm2-135m", "smollm2-360m", "llama-3.2-1b", "llama-3.2-3b",
  /// "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-1.5b", "mistral-7b". Unknown names throw.
  static LlamaConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  /// Resolved sizes (head_dim when 0) and every invariant, or zero::Error naming the field.
  void validate() const;
  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  /// The longest sequence: max_position_embeddings, or the sliding window when shorter.
  int64_t context_length() const;
  /// The config key that bounds the context ("max_position_embeddings" or "sliding_window").
  const char* context_key() const;

  // zero/causal_lm.h's CausalLMConfig.
  std::string model_type() const override { return type; }
  std::string display_name() const override;
  CausalLMShape shape() const override;
  std::string describe() const override;
  std::unique_ptr<CausalLMConfig> clone() const override;
  void set_dropout(double p) override { dropout = p; }
  void set_checkpointed_blocks(int64_t blocks) override { checkpointed_blocks = blocks; }
  int64_t num_parameters() const override;
  PlanModel plan_model(int64_t micro_batch, int64_t seq, c10::ScalarType compute_dtype,
                       bool on_host = true) const override;
  void warm_up_host_gemms(int64_t micro_batch, int64_t seq,
                          c10::ScalarType compute_dtype) const override;
  std::string hf_config_json(const std::string& dtype = "float32") const override;
  std::shared_ptr<CausalLM> build() const override;
};

/// The body's and the head's modules are internal (src/models/llama.cpp); the parameters are
/// reached by name (named_parameters()).
class ZERO_API LlamaForCausalLMImpl : public CausalLM {
 public:
  explicit LlamaForCausalLMImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& idx) override;
  at::Tensor forward_loss(const at::Tensor& idx, const at::Tensor& targets) override;
  at::Tensor forward_cached(const at::Tensor& idx, KVCache& cache) override;
  const LlamaConfig& config() const { return config_; }
  const CausalLMConfig& causal_lm_config() const override { return config_; }
  std::optional<std::string> tied_hf_tensor(const std::string& name) const override;
  bool ignored_hf_tensor(const std::string& name) const override;
  std::string block_prefix() const override { return "model.layers."; }

 private:
  // The final norm's output [B, T, hidden] after the positions [past, past + T) of `idx`
  // (cache: nullptr in training, else extended by them).
  at::Tensor hidden_states(const at::Tensor& idx, KVCache* cache);
  // The head's weight [vocab, hidden] and its unit (embed_tokens when tied, else lm_head).
  torch::nn::Module& head_unit();
  const at::Tensor& head_weight();

  LlamaConfig config_;
  std::shared_ptr<torch::nn::Module> body_;  // "model"
  std::shared_ptr<torch::nn::Module> head_;  // "lm_head" (nullptr when tied)
};

}  // namespace zero::llama
