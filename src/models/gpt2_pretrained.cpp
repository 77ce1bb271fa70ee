// Hugging Face GPT-2 checkpoints in (include/zero/gpt2_pretrained.h).
#include "zero/gpt2_pretrained.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "models/families.h"
#include "models/hf_config_reader.h"
#include "zero/error.h"

namespace zero::gpt2 {

GPT2Config hf_config_from_dir(const std::string& dir) {
  return models::gpt2_config_from_hf(models::read_hf_config_dir(dir));
}

GPT2Config hf_config_from_json(const std::string& text, const std::string& path) {
  return models::gpt2_config_from_hf(models::read_hf_config_text(text, path));
}

}  // namespace zero::gpt2

namespace zero::models {

using Json = nlohmann::json;

gpt2::GPT2Config gpt2_config_from_hf(const HfConfigReader& config) {
  auto integer = [&](const char* key, int64_t fallback) { return config.integer(key, fallback); };
  auto number = [&](const char* key, double fallback) { return config.number(key, fallback); };
  auto refuse_unless = [&](const char* key, const Json& allowed, const char* why) {
    config.refuse_unless(key, allowed, why);
  };
  const std::string& path = config.where();
  refuse_unless("model_type", "gpt2", "zero builds GPT-2");
  refuse_unless("activation_function", Json::array({"gelu_new", "gelu_pytorch_tanh"}),
                "zero's GPT-2 uses GELU's tanh approximation");
  refuse_unless("tie_word_embeddings", true, "zero's GPT-2 ties the LM head to wte");
  refuse_unless("scale_attn_weights", true, "attention is scaled by 1/sqrt(head size)");
  refuse_unless("scale_attn_by_inverse_layer_idx", false, "attention is scaled by 1/sqrt(head size)");
  refuse_unless("add_cross_attention", false, "zero's GPT-2 is a decoder only");
  gpt2::GPT2Config c;
  c.vocab_size = integer("vocab_size", 50257);
  c.n_positions = integer("n_positions", integer("n_ctx", 1024));
  c.n_embd = integer("n_embd", 768);
  c.n_layer = integer("n_layer", 12);
  c.n_head = integer("n_head", 12);
  c.layer_norm_epsilon = number("layer_norm_epsilon", 1e-5);
  c.initializer_range = number("initializer_range", 0.02);
  if (const Json* inner = config.value("n_inner")) {
    ZERO_CHECK(*inner == 4 * c.n_embd, path, ": n_inner = ", inner->dump(),
               " is not supported (allowed: null or 4 n_embd = ", 4 * c.n_embd,
               "): zero's MLP is 4 n_embd wide");
  }
  ZERO_CHECK(c.n_embd % c.n_head == 0, path, ": n_embd ", c.n_embd, " is not divisible by n_head ",
             c.n_head);
  return c;
}

}  // namespace zero::models

namespace zero::gpt2 {

void load_hf_weights(GPT2Impl& model, const std::string& dir) {
  zero::load_hf_weights(static_cast<CausalLM&>(model), dir);
}

void load_hf_weights(Engine& engine, GPT2Impl& model, const std::string& dir,
                     Communicator& comm) {
  zero::load_hf_weights(engine, static_cast<CausalLM&>(model), dir, comm);
}

}  // namespace zero::gpt2
