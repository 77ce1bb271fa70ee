// The causal-LM families zero builds (zero/causal_lm.h), for the family table in causal_lm.cpp:
// each family's config.json reader. A new family adds its reader here and a row there.
#pragma once

#include "models/hf_config_reader.h"
#include "zero/export.h"
#include "zero/gpt2.h"
#include "zero/llama.h"

namespace zero::models {

/// GPT-2's config.json (zero/gpt2_pretrained.h says what is refused).
ZERO_INTERNAL_API gpt2::GPT2Config gpt2_config_from_hf(const HfConfigReader& config);
/// A "llama", "mistral" or "qwen2" config.json (zero/llama.h).
ZERO_INTERNAL_API llama::LlamaConfig llama_config_from_hf(const HfConfigReader& config);

}  // namespace zero::models
