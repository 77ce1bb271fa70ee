// Hugging Face GPT-2 checkpoints in: a directory as `transformers`' save_pretrained writes it
// (config.json, and model.safetensors or model.safetensors.index.json with its shards), the
// same layout `zero-ckpt export` writes out. zero-train --init DIR fine-tunes from one.
#pragma once

#include "zero/export.h"

#include <memory>
#include <string>

#include "zero/comm.h"
#include "zero/engine.h"
#include "zero/gpt2.h"

namespace zero::gpt2 {

/// DIR/config.json as a GPT2Config: vocab_size, n_positions (or n_ctx), n_embd, n_layer, n_head,
/// layer_norm_epsilon, initializer_range. What zero's GPT-2 cannot compute is refused with the
/// key and the value: a model_type other than "gpt2", an activation other than "gelu_new" (or
/// its equal "gelu_pytorch_tanh"), n_inner other than null or 4 n_embd, untied embeddings,
/// attention scaled other than by 1/sqrt(head size), cross-attention. Dropout is the
/// caller's (zero-train --dropout), not the file's.
ZERO_API GPT2Config hf_config_from_dir(const std::string& dir);
/// The same from the text of such a config.json (`where` names it in errors), e.g. the
/// "model_config" zero-train records in a checkpoint's client state.
ZERO_API GPT2Config hf_config_from_json(const std::string& text, const std::string& where);

/// Collective. Copies the weights of the Hugging Face directory `dir` into `model`, which
/// `engine` trains (any stage): one block at a time under zero::GatheredParameters with rank 0
/// reading and the others receiving, so at stage 3 no rank holds more than a block of the whole
/// model. Names may carry "transformer." or not (the original gpt2 files do not); a tied
/// lm_head.weight must equal wte's; attention mask buffers (attn.bias, attn.masked_bias) are
/// ignored; fp32, bf16 and fp16 tensors are converted. Before any weight moves, rank 0 checks
/// every tensor's name, shape and dtype against the model and every rank fails together
/// (zero::CollectiveError) with one message naming the file and the tensor: a missing one, an
/// unknown one, a wrong shape, a dtype that is not floating point.
ZERO_API void load_hf_weights(Engine& engine, GPT2Impl& model, const std::string& dir,
                              Communicator& comm);
/// The same checks and copies into a model outside any engine (one process: generation,
/// evaluation); throws zero::Error.
ZERO_API void load_hf_weights(GPT2Impl& model, const std::string& dir);

}  // namespace zero::gpt2
