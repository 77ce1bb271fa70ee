// Causal language models: what zero-train, zero-generate, zero-ckpt export, --init and the memory
// planner need from a model, whatever its architecture. A family (GPT-2, the Llama family) is
// one source file implementing the two classes below plus one line in the family table
// (src/models/causal_lm.cpp); the programs only see this interface.
//
//   std::unique_ptr<zero::CausalLMConfig> config = zero::causal_lm_config_from_dir(dir);
//   std::shared_ptr<zero::CausalLM> model = config->build();   // random init, units declared
//   auto engine = zero::initialize(model, ds_config, comm);
//   zero::load_hf_weights(*engine, *model, dir, *comm);        // a transformers directory
//   at::Tensor loss = model->forward_loss(x, y);               // fused LM head and loss
//
// Every family names its modules as Hugging Face's transformers does, so parameter names are
// the names of the model's state dict there: a zero checkpoint exports to a directory
// `from_pretrained` loads, and a transformers directory loads into the model, one to one.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zero/memory_plan.h"

namespace zero {

class Communicator;
class Engine;
class CausalLM;

/// The keys and values of the positions a model has seen, per block ([B, key/value heads, T,
/// head size] each): what incremental decoding reuses, so that each new token costs one
/// position's attention and MLP instead of the whole context's (CausalLM::forward_cached).
struct ZERO_API KVCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  /// Positions held (0 when empty).
  int64_t length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
  void clear() {
    keys.clear();
    values.clear();
  }
};

/// The sizes every causal LM has, for the programs around it.
struct ZERO_API CausalLMShape {
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // the most positions one sequence may have
  int64_t num_layers = 0;      // blocks (each a stage-3 unit and a checkpointable call)
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t checkpointed_blocks = 0;  // the first this many blocks are activation-checkpointed
};

/// A model's architecture and sizes before it is built: enough to plan its memory, write its
/// Hugging Face config.json and build it.
class ZERO_API CausalLMConfig {
 public:
  virtual ~CausalLMConfig();
  /// Hugging Face's model_type: "gpt2", "llama", "mistral", "qwen2".
  virtual std::string model_type() const = 0;
  /// The family's name in messages: "GPT-2", "Llama", "Mistral", "Qwen2".
  virtual std::string display_name() const = 0;
  virtual CausalLMShape shape() const = 0;
  /// "4 layers, width 128, 4 heads" and what else tells this shape from its family's others.
  virtual std::string describe() const = 0;
  virtual std::unique_ptr<CausalLMConfig> clone() const = 0;
  /// Dropout while training, p in [0, 1) (0, the default, keeps training deterministic); where
  /// the family applies it is its own (GPT-2: residual, embedding, attention; Llama: attention).
  virtual void set_dropout(double p) = 0;
  /// Activation checkpointing (zero/activation_checkpointing.h) of the first `blocks` blocks, 0
  /// to num_layers: their inputs only are kept in forward and they are recomputed in backward.
  virtual void set_checkpointed_blocks(int64_t blocks) = 0;
  /// Trainable elements of the built model (a tied head counted once), without building it.
  virtual int64_t num_parameters() const = 0;
  /// The memory planner's view (zero/memory_plan.h): parameters per stage-3 unit in
  /// registration order, and the activations of one micro-batch of `micro_batch` x `seq`
  /// tokens through forward_loss in `compute_dtype`, without and with activation checkpointing;
  /// `on_host`: computed on the CPU (false: a GPU).
  virtual PlanModel plan_model(int64_t micro_batch, int64_t seq, c10::ScalarType compute_dtype,
                               bool on_host = true) const = 0;
  /// Runs one micro-batch's GEMMs once on scratch tensors, so that the BLAS library's retained
  /// scratch is resident before the plan's process baseline is measured (host only).
  virtual void warm_up_host_gemms(int64_t micro_batch, int64_t seq,
                                  c10::ScalarType compute_dtype) const = 0;
  /// This shape as Hugging Face's config.json (compact JSON text), `torch_dtype` = `dtype`
  /// ("float32", "bfloat16" or "float16"): what `from_pretrained` reads beside the weights.
  virtual std::string hf_config_json(const std::string& dtype = "float32") const = 0;
  /// The model, initialised as the family initialises it from the global generator (a
  /// torch::manual_seed before gives every rank the same model), each stage-3 unit declared
  /// as it is built (under zero::ShardedInit the whole model never exists on one rank).
  virtual std::shared_ptr<CausalLM> build() const = 0;
};

/// A built causal LM. Parameter names are Hugging Face's (see the top of this file).
class ZERO_API CausalLM : public torch::nn::Module {
 public:
  ~CausalLM() override;
  /// idx [B, T] int64 token ids (T <= context_length, ids < vocab_size) -> logits [B, T, V].
  virtual at::Tensor forward(const at::Tensor& idx) = 0;
  /// Mean cross-entropy of next-token prediction (targets [B, T] int64) without ever holding
  /// the [B, T, V] logits: the head and the loss run fused, a block of rows at a time (Note
  /// [Fused LM-head cross-entropy], src/models/lm_head_loss.cpp).
  virtual at::Tensor forward_loss(const at::Tensor& idx, const at::Tensor& targets) = 0;
  /// Logits [B, T, V] of `idx` [B, T] as the positions after those in `cache`, which is
  /// extended by them: prefill a prompt with an empty cache, then one token at a time. Equal
  /// to forward() on the whole sequence to rounding. For inference (no grad); under a stage-3
  /// engine a collective, as forward is.
  virtual at::Tensor forward_cached(const at::Tensor& idx, KVCache& cache) = 0;
  /// Incremental generation: the logits [V] of the position after `ids` (one sequence,
  /// non-empty), through `cache`, which is empty or holds what earlier calls fed of the same
  /// sequence, one id shorter. Fed what it lacks: the last `context` ids (1 <= context <=
  /// context_length) when empty, else the newest id; a full cache (context positions) starts
  /// again from the last half of the context. On the device of the model's parameters.
  at::Tensor next_logits(const std::vector<int64_t>& ids, KVCache& cache, int64_t context);
  /// The configuration it was built from.
  virtual const CausalLMConfig& causal_lm_config() const = 0;
  /// Trainable elements (a tied head counted once, as HF's num_parameters()).
  int64_t num_parameters() const;

  // How Hugging Face files name what they hold (load_hf_weights).
  /// The parameter a file's tensor `name` is, as named_parameters() spells it (GPT-2's original
  /// files drop the "transformer." prefix); a name no parameter has is returned unchanged.
  virtual std::string parameter_of_hf_tensor(const std::string& name) const { return name; }
  /// A tensor files may hold that a tied parameter stands for ("lm_head.weight" when the head
  /// is the token embedding): the parameter it must equal, or nullopt.
  virtual std::optional<std::string> tied_hf_tensor(const std::string& name) const;
  /// Buffers files may hold beside the weights that the model recomputes (attention masks,
  /// rotary frequencies): skipped.
  virtual bool ignored_hf_tensor(const std::string& /*name*/) const { return false; }
  /// The prefix of the blocks' parameter names ("transformer.h.", "model.layers."): loading
  /// moves one block's weights at a time.
  virtual std::string block_prefix() const = 0;
};

/// Every model name zero-train's --model takes: each family's presets, in family order.
ZERO_API std::vector<std::string> causal_lm_preset_names();
/// A preset of any family ("gpt2-mini", "llama-mini", "qwen2.5-0.5b", ...) or a family's shape
/// syntax (GPT-2's "L<layers>-C<width>..."); anything else throws zero::Error listing them.
ZERO_API std::unique_ptr<CausalLMConfig> causal_lm_named(const std::string& name);
/// A Hugging Face config.json's text (`where` names it in errors), dispatched on model_type;
/// what the family cannot compute is refused with the key and the value.
ZERO_API std::unique_ptr<CausalLMConfig> causal_lm_config_from_hf_json(const std::string& text,
                                                                        const std::string& where);
/// DIR/config.json, as above.
ZERO_API std::unique_ptr<CausalLMConfig> causal_lm_config_from_dir(const std::string& dir);

/// Note [Padded vocabularies]
/// A model may have more embedding rows than its tokenizer has ids: Qwen2.5's checkpoints have
/// 151936 rows for 151665 tokens, nanoGPT's GPT-2 50304 for 50257 (rounded up for fast GEMMs).
/// Such a model is used with its tokenizer as transformers uses it: an id the model draws with
/// no token (an untrained row's) decodes to nothing, as the tokenizers library's decode skips
/// ids it has no token for. Padding adds a few rows: more than max(256, 1 %) of the model's
/// beyond the tokenizer's ids is taken for the wrong tokenizer and refused. A tokenizer with
/// more ids than the model has rows is refused too: text could become ids the model has no
/// embedding for.
///
/// Throws zero::Error naming the model (`model_name`), the tokenizer (`tokenizer_name`) and
/// both sizes when they do not fit as the Note says.
ZERO_API void check_tokenizer_fits(int64_t model_vocab, int64_t tokenizer_vocab,
                                   const std::string& model_name,
                                   const std::string& tokenizer_name);

/// Collective. Copies the weights of the Hugging Face directory `dir` (config.json, and
/// model.safetensors or model.safetensors.index.json with its shards) into `model`, which
/// `engine` trains (any stage): one block at a time under zero::GatheredParameters with rank 0
/// reading and the others receiving, so at stage 3 no rank holds more than a block of the
/// whole model. A tied tensor must equal its parameter; fp32, bf16 and fp16 tensors are
/// converted. Before any weight moves rank 0 checks every tensor's name, shape and dtype
/// against the model, and every rank fails together (zero::CollectiveError) with one message
/// naming the file and the tensor: a missing one, an unknown one, a wrong shape, a dtype that
/// is not floating point.
ZERO_API void load_hf_weights(Engine& engine, CausalLM& model, const std::string& dir,
                              Communicator& comm);
/// The same checks and copies into a model outside any engine (one process); throws
/// zero::Error.
ZERO_API void load_hf_weights(CausalLM& model, const std::string& dir);

}  // namespace zero
