// The causal-LM interface (include/zero/causal_lm.h): the family table, and what every model
// shares (incremental generation, parameter counts).
#include "zero/causal_lm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <sstream>

#include "models/families.h"
#include "zero/error.h"

namespace zero {
namespace {

// One row per family: its Hugging Face model types, its --model names, and how to read both.
struct Family {
  std::vector<std::string> model_types;
  std::function<std::vector<std::string>()> preset_names;
  // Whether a --model name is this family's (a preset or its shape syntax).
  std::function<bool(const std::string&)> claims;
  std::function<std::unique_ptr<CausalLMConfig>(const std::string&)> named;
  std::function<std::unique_ptr<CausalLMConfig>(const models::HfConfigReader&)> from_hf;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {{"gpt2"},
       [] { return gpt2::GPT2Config::preset_names(); },
       // GPT-2's presets and its shape syntax "L<layers>-C<width>...".
       [](const std::string& name) { return name.rfind("gpt2", 0) == 0 || name.rfind("L", 0) == 0; },
       [](const std::string& name) {
         return std::make_unique<gpt2::GPT2Config>(gpt2::GPT2Config::named(name));
       },
       [](const models::HfConfigReader& c) {
         return std::make_unique<gpt2::GPT2Config>(models::gpt2_config_from_hf(c));
       }},
      {{"llama", "mistral", "qwen2"},
       [] { return llama::LlamaConfig::preset_names(); },
       [](const std::string& name) {
         const auto names = llama::LlamaConfig::preset_names();
         return std::find(names.begin(), names.end(), name) != names.end();
       },
       [](const std::string& name) {
         return std::make_unique<llama::LlamaConfig>(llama::LlamaConfig::preset(name));
       },
       [](const models::HfConfigReader& c) {
         return std::make_unique<llama::LlamaConfig>(models::llama_config_from_hf(c));
       }},
  };
  return table;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << '"' << names[i] << '"';
  return out.str();
}

std::unique_ptr<CausalLMConfig> from_reader(const models::HfConfigReader& config) {
  const nlohmann::json* type = config.value("model_type");
  std::vector<std::string> known;
  for (const Family& family : families()) {
    for (const std::string& t : family.model_types) {
      if (type && *type == t) return family.from_hf(config);
      known.push_back(t);
    }
  }
  throw Error(detail::concat(config.where(), ": model_type = ", type ? type->dump() : "(absent)",
                             " is not a model zero builds (allowed: ", quoted_list(known), ")"));
}

}  // namespace

CausalLMConfig::~CausalLMConfig() = default;
CausalLM::~CausalLM() = default;

std::optional<std::string> CausalLM::tied_hf_tensor(const std::string& /*name*/) const {
  return std::nullopt;
}

int64_t CausalLM::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

at::Tensor CausalLM::next_logits(const std::vector<int64_t>& ids, KVCache& cache,
                                 int64_t context) {
  const CausalLMConfig& config = causal_lm_config();
  const int64_t limit = config.shape().context_length;
  ZERO_CHECK(!ids.empty(), config.display_name(), " next_logits: no ids");
  ZERO_CHECK(context >= 1 && context <= limit, config.display_name(), " next_logits: context ",
             context, " must be in [1, the model's context ", limit, "]");
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t first = n - 1;
  if (cache.length() == 0) {
    first = std::max<int64_t>(0, n - context);
  } else if (cache.length() >= context) {
    cache.clear();
    first = std::max<int64_t>(0, n - std::max<int64_t>(1, context / 2));
  }
  const at::Tensor input = at::tensor(std::vector<int64_t>(ids.begin() + first, ids.end()), at::kLong)
                               .unsqueeze(0)
                               .to(parameters().front().device());
  const at::Tensor logits = forward_cached(input, cache);
  return logits.select(1, logits.size(1) - 1).squeeze(0);
}

std::vector<std::string> causal_lm_preset_names() {
  std::vector<std::string> names;
  for (const Family& family : families()) {
    for (const std::string& name : family.preset_names()) names.push_back(name);
  }
  return names;
}

void check_tokenizer_fits(int64_t model_vocab, int64_t tokenizer_vocab,
                          const std::string& model_name, const std::string& tokenizer_name) {
  ZERO_CHECK(tokenizer_vocab <= model_vocab, "the tokenizer ", tokenizer_name, " has ",
             tokenizer_vocab, " ids, more than the ", model_vocab, " embedding rows of ",
             model_name, ": its ids from ", model_vocab, " on have no embedding; use the model's "
             "own tokenizer (a model may have more rows than its tokenizer has ids, not fewer)");
  const int64_t padding = std::max<int64_t>(256, model_vocab / 100);
  ZERO_CHECK(model_vocab - tokenizer_vocab <= padding, "the tokenizer ", tokenizer_name,
             " has ", tokenizer_vocab, " ids, far fewer than the ", model_vocab,
             " embedding rows of ", model_name, " (a vocabulary padded for speed adds at most ",
             padding, " rows): not this model's tokenizer? Use the model's own");
}

std::unique_ptr<CausalLMConfig> causal_lm_named(const std::string& name) {
  for (const Family& family : families()) {
    if (family.claims(name)) return family.named(name);
  }
  throw Error(detail::concat("unknown model \"", name, "\"; allowed: a preset (",
                             quoted_list(causal_lm_preset_names()),
                             "), a GPT-2 shape L<layers>-C<width>[-H<heads>][-T<context>], or a "
                             "Hugging Face directory (--init)"));
}

std::unique_ptr<CausalLMConfig> causal_lm_config_from_hf_json(const std::string& text,
                                                               const std::string& where) {
  return from_reader(models::read_hf_config_text(text, where));
}

std::unique_ptr<CausalLMConfig> causal_lm_config_from_dir(const std::string& dir) {
  return from_reader(models::read_hf_config_dir(dir));
}

}  // namespace zero
