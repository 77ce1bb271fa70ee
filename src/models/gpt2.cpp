// GPT-2 (Hugging Face GPT2LMHeadModel layout) in libtorch. See include/zero/gpt2.h.
#include "zero/gpt2.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>
#include <utility>

#include "hardware/half_gemm.h"
#include "kernels/fused_ops.h"
#include "models/lm_head_loss.h"
#include "models/model_common.h"
#include "zero/error.h"
#include "zero/memory.h"
#include "zero/unit.h"

namespace zero::gpt2 {

namespace {

struct Preset {
  const char* name;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_embd;
  int64_t n_positions;
};

// Ordered smallest first; the CPU-sized ones use a shorter context to keep activations small.
constexpr Preset kPresets[] = {
    {"gpt2-tiny", 4, 4, 128, 256},      {"gpt2-mini", 6, 6, 384, 256},
    {"gpt2", 12, 12, 768, 1024},        {"gpt2-medium", 24, 16, 1024, 1024},
    {"gpt2-large", 36, 20, 1280, 1024}, {"gpt2-xl", 48, 25, 1600, 1024},
};

std::string join_preset_names() {
  std::ostringstream out;
  bool first = true;
  for (const auto& p : kPresets) {
    out << (first ? "" : ", ") << '"' << p.name << '"';
    first = false;
  }
  return out.str();
}

void validate(const GPT2Config& c) {
  ZERO_CHECK(c.vocab_size > 0, "GPT2Config.vocab_size must be positive, got ", c.vocab_size);
  ZERO_CHECK(c.n_positions > 0, "GPT2Config.n_positions must be positive, got ", c.n_positions);
  ZERO_CHECK(c.n_embd > 0, "GPT2Config.n_embd must be positive, got ", c.n_embd);
  ZERO_CHECK(c.n_layer > 0, "GPT2Config.n_layer must be positive, got ", c.n_layer);
  ZERO_CHECK(c.n_head > 0, "GPT2Config.n_head must be positive, got ", c.n_head);
  ZERO_CHECK(c.n_embd % c.n_head == 0, "GPT2Config.n_embd (", c.n_embd,
             ") must be divisible by n_head (", c.n_head, ")");
  ZERO_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "GPT2Config.dropout must be in [0, 1), got ",
             c.dropout);
  ZERO_CHECK(c.layer_norm_epsilon > 0.0, "GPT2Config.layer_norm_epsilon must be positive, got ",
             c.layer_norm_epsilon);
  ZERO_CHECK(c.initializer_range > 0.0, "GPT2Config.initializer_range must be positive, got ",
             c.initializer_range);
  ZERO_CHECK(c.checkpointed_blocks >= 0 && c.checkpointed_blocks <= c.n_layer,
             "GPT2Config.checkpointed_blocks must be in [0, n_layer = ", c.n_layer, "], got ",
             c.checkpointed_blocks);
}

// c_attn's output [B, T, 3C] as q, k, v of [B, n_head, T, C / n_head] each.
std::vector<at::Tensor> split_heads(const at::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  std::vector<at::Tensor> heads = qkv.split(C, /*dim=*/2);
  for (at::Tensor& h : heads) h = h.view({B, T, n_head, C / n_head}).transpose(1, 2);
  return heads;
}

torch::nn::LayerNorm make_layer_norm(const GPT2Config& c) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_epsilon).elementwise_affine(true));
}

// The tied LM head's logits, hidden [..., C] @ wte [V, C]^T -> [..., V], as one GEMM (Note
// [fp16 GEMMs on CPUs without fp16 arithmetic]).
at::Tensor tied_head(const at::Tensor& hidden, const at::Tensor& wte) {
  return models::linear(hidden, wte, /*bias=*/{});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// GPT2Config

GPT2Config GPT2Config::preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) {
      GPT2Config c;
      c.vocab_size = 50257;
      c.n_layer = p.n_layer;
      c.n_head = p.n_head;
      c.n_embd = p.n_embd;
      c.n_positions = p.n_positions;
      return c;
    }
  }
  throw Error(detail::concat("unknown GPT-2 preset \"", name,
                             "\"; known presets: ", join_preset_names()));
}

GPT2Config GPT2Config::named(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return preset(name);
  }
  // "L32-C4096-H32-T2048": fields in this order, each a letter and a positive integer.
  const std::string syntax =
      "a shape L<layers>-C<width>[-H<heads>][-T<context>], e.g. L32-C4096-H32";
  auto fail = [&](const std::string& why) -> GPT2Config {
    throw Error(detail::concat("unknown GPT-2 model \"", name, "\"", why.empty() ? "" : ": ", why,
                               "; allowed: a preset (", join_preset_names(), ") or ", syntax));
  };
  if (name.empty() || name.front() != 'L') return fail("");
  GPT2Config c;
  c.n_head = 0;
  const std::string letters = "LCHT";
  size_t next_letter = 0;
  size_t at = 0;
  while (at < name.size()) {
    if (at > 0) {
      if (name[at] != '-') return fail("expected '-' before '" + name.substr(at) + "'");
      ++at;
    }
    const size_t letter = at < name.size() ? letters.find(name[at], next_letter) : std::string::npos;
    if (letter == std::string::npos) return fail("unexpected '" + name.substr(at) + "'");
    ++at;
    size_t digits = 0;
    while (at + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[at + digits]))) {
      ++digits;
    }
    if (digits == 0 || digits > 7) {
      return fail(std::string("'") + letters[letter] + "' needs a positive integer of at most 7 digits");
    }
    const int64_t value = std::stoll(name.substr(at, digits));
    at += digits;
    if (value <= 0) return fail(std::string("'") + letters[letter] + "' must be positive");
    switch (letters[letter]) {
      case 'L': c.n_layer = value; break;
      case 'C': c.n_embd = value; break;
      case 'H': c.n_head = value; break;
      default: c.n_positions = value; break;
    }
    next_letter = letter + 1;
    if (letters[letter] == 'L' && (at >= name.size() || name.compare(at, 2, "-C") != 0)) {
      return fail("the width C<width> must follow the layers");
    }
  }
  if (c.n_head == 0) {
    if (c.n_embd % 64 != 0) {
      return fail("width " + std::to_string(c.n_embd) +
                  " is not a multiple of 64 (the default head size); give the heads with -H");
    }
    c.n_head = c.n_embd / 64;
  }
  if (c.n_embd % c.n_head != 0) {
    return fail("width " + std::to_string(c.n_embd) + " is not divisible by " +
                std::to_string(c.n_head) + " heads");
  }
  validate(c);
  return c;
}

std::string GPT2Config::hf_config_json(const std::string& dtype) const {
  // The fields transformers' GPT2Config defines that differ from its defaults or that a
  // reader should not have to guess; the rest (summary_*, scale_attn_weights, ...) keep HF's
  // defaults, which match this model (attention scaled by 1/sqrt(head dim), no inner-dim
  // override: 4 n_embd).
  const nlohmann::json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", vocab_size},
      {"n_positions", n_positions},
      {"n_ctx", n_positions},
      {"n_embd", n_embd},
      {"n_layer", n_layer},
      {"n_head", n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"resid_pdrop", dropout},
      {"embd_pdrop", dropout},
      {"attn_pdrop", dropout},
      {"layer_norm_epsilon", layer_norm_epsilon},
      {"initializer_range", initializer_range},
      {"bos_token_id", 50256},
      {"eos_token_id", 50256},
      {"tie_word_embeddings", true},
      {"torch_dtype", dtype},
  };
  return config.dump();
}

CausalLMShape GPT2Config::shape() const {
  CausalLMShape s;
  s.vocab_size = vocab_size;
  s.context_length = n_positions;
  s.num_layers = n_layer;
  s.hidden_size = n_embd;
  s.num_heads = n_head;
  s.checkpointed_blocks = checkpointed_blocks;
  return s;
}

std::string GPT2Config::describe() const {
  std::ostringstream out;
  out << n_layer << " layers, width " << n_embd << ", " << n_head << " heads, vocabulary "
      << vocab_size << ", context " << n_positions;
  return out.str();
}

std::unique_ptr<CausalLMConfig> GPT2Config::clone() const {
  return std::make_unique<GPT2Config>(*this);
}

std::shared_ptr<CausalLM> GPT2Config::build() const { return std::make_shared<GPT2Impl>(*this); }

std::vector<std::string> GPT2Config::preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

// ---------------------------------------------------------------------------------------------
// Conv1D

Conv1DImpl::Conv1DImpl(int64_t in_features, int64_t out_features) {
  ZERO_CHECK(in_features > 0 && out_features > 0, "Conv1D sizes must be positive, got in=",
             in_features, " out=", out_features);
  // Values are set by GPT2Impl's initialisation; zeros keep construction cheap and RNG-free.
  weight = register_parameter("weight", at::zeros({in_features, out_features}));
  bias = register_parameter("bias", at::zeros({out_features}));
}

at::Tensor Conv1DImpl::forward(const at::Tensor& x) {
  const int64_t in = weight.size(0);
  const int64_t out = weight.size(1);
  auto out_shape = x.sizes().vec();
  out_shape.back() = out;
  // Note [fp16 GEMMs on CPUs without fp16 arithmetic]: ATen's addmm but where it is slow.
  return half_gemm::addmm(bias, x.reshape({-1, in}), weight).view(out_shape);
}

at::Tensor Conv1DImpl::product(const at::Tensor& x) {
  auto out_shape = x.sizes().vec();
  out_shape.back() = weight.size(1);
  return half_gemm::addmm({}, x.reshape({-1, weight.size(0)}), weight).view(out_shape);
}

// ---------------------------------------------------------------------------------------------
// Attention

AttentionImpl::AttentionImpl(const GPT2Config& config)
    : n_head_(config.n_head), dropout_(config.dropout) {
  c_attn = register_module("c_attn", Conv1D(config.n_embd, 3 * config.n_embd));
  c_proj = register_module("c_proj", Conv1D(config.n_embd, config.n_embd));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x) {
  const std::vector<at::Tensor> qkv = split_heads(c_attn->forward(x), n_head_);
  const double p = is_training() ? dropout_ : 0.0;
  at::Tensor y = models::attend(qkv[0], qkv[1], qkv[2], /*allowed=*/{}, /*causal=*/true, p);
  y = y.transpose(1, 2).contiguous().view(x.sizes());
  return models::maybe_dropout(c_proj->forward(y), dropout_, is_training());
}

at::Tensor AttentionImpl::forward_cached(const at::Tensor& x, at::Tensor& past_keys,
                                         at::Tensor& past_values) {
  const std::vector<at::Tensor> qkv = split_heads(c_attn->forward(x), n_head_);
  at::Tensor y = models::attend_cached(qkv[0], qkv[1], qkv[2], past_keys, past_values,
                                       /*groups=*/1);
  y = y.transpose(1, 2).contiguous().view(x.sizes());
  return c_proj->forward(y);
}

// ---------------------------------------------------------------------------------------------
// MLP

MLPImpl::MLPImpl(const GPT2Config& config) : dropout_(config.dropout) {
  c_fc = register_module("c_fc", Conv1D(config.n_embd, 4 * config.n_embd));
  c_proj = register_module("c_proj", Conv1D(4 * config.n_embd, config.n_embd));
}

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  // HF's "gelu_new" (tanh); c_fc's bias added in the same pass where the kernels are fused
  // (Note [Fused element-wise kernels]).
  const at::Tensor h = fused::fuses(x, c_fc->bias)
                           ? fused::bias_gelu(c_fc->product(x), c_fc->bias)
                           : at::gelu(c_fc->forward(x), "tanh");
  return models::maybe_dropout(c_proj->forward(h), dropout_, is_training());
}

// ---------------------------------------------------------------------------------------------
// Block

BlockImpl::BlockImpl(const GPT2Config& config) {
  ln_1 = register_module("ln_1", make_layer_norm(config));
  attn = register_module("attn", Attention(config));
  ln_2 = register_module("ln_2", make_layer_norm(config));
  mlp = register_module("mlp", MLP(config));
}

at::Tensor BlockImpl::forward(const at::Tensor& x) {
  return after_attention(x, attn->forward(ln_1->forward(x)));
}

at::Tensor BlockImpl::forward_cached(const at::Tensor& x, at::Tensor& past_keys,
                                     at::Tensor& past_values) {
  return after_attention(x, attn->forward_cached(ln_1->forward(x), past_keys, past_values));
}

at::Tensor BlockImpl::after_attention(const at::Tensor& x, const at::Tensor& attended) {
  if (fused::fuses(x, ln_2->weight)) {
    // The residual add and ln_2 in one pass (Note [Fused element-wise kernels]).
    const auto [h, normalized] = fused::residual_layer_norm(x, attended, ln_2->weight,
                                                            ln_2->bias, ln_2->options.eps());
    return h + mlp->forward(normalized);
  }
  const at::Tensor h = x + attended;
  return h + mlp->forward(ln_2->forward(h));
}

// ---------------------------------------------------------------------------------------------
// GPT2Model

GPT2ModelImpl::GPT2ModelImpl(const GPT2Config& config) : config_(config) {
  validate(config_);
  // GPT-2 initialisation from the global generator (a torch::manual_seed before construction
  // gives the same model on every rank), applied to each ZeRO stage-3 unit (zero/unit.h) as
  // soon as it is built, before it is declared: under zero::ShardedInit the declaration
  // partitions the unit at once, so the whole model never exists on one rank. The units are
  // the token embedding (also the tied lm_head), the position embedding, and each block;
  // ln_f is small and stays whole.
  at::NoGradGuard no_grad;
  const double init_std = config.initializer_range;
  const double proj_std = init_std / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  wte = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wte->weight.normal_(0.0, init_std);
  zero::declare_unit(*wte);
  wpe = register_module("wpe", torch::nn::Embedding(config.n_positions, config.n_embd));
  wpe->weight.normal_(0.0, init_std);
  zero::declare_unit(*wpe);
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layer; ++i) {
    Block block(config);
    block->ln_1->weight.fill_(1.0);
    block->ln_1->bias.zero_();
    block->attn->c_attn->weight.normal_(0.0, init_std);
    block->attn->c_attn->bias.zero_();
    block->attn->c_proj->weight.normal_(0.0, proj_std);
    block->attn->c_proj->bias.zero_();
    block->ln_2->weight.fill_(1.0);
    block->ln_2->bias.zero_();
    block->mlp->c_fc->weight.normal_(0.0, init_std);
    block->mlp->c_fc->bias.zero_();
    block->mlp->c_proj->weight.normal_(0.0, proj_std);
    block->mlp->c_proj->bias.zero_();
    h->push_back(block);
    zero::declare_unit(*block);
  }
  ln_f = register_module("ln_f", make_layer_norm(config));
  ln_f->weight.fill_(1.0);
  ln_f->bias.zero_();
}

at::Tensor GPT2ModelImpl::forward(const at::Tensor& idx) {
  models::check_ids(idx, config_.vocab_size, config_.n_positions, "GPT-2");
  const int64_t T = idx.size(1);
  const auto pos = at::arange(T, idx.options());
  auto x = zero::run(wte, idx) + zero::run(wpe, pos);  // [B, T, C] + [T, C]
  x = models::maybe_dropout(x, config_.dropout, is_training());
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    const std::shared_ptr<torch::nn::Module> block = h->ptr(i);
    x = models::run_block(block, [block](const at::Tensor& input) {
      return block->as<BlockImpl>()->forward(input);
    }, x, i < config_.checkpointed_blocks);
  }
  return ln_f->forward(x);
}

// ---------------------------------------------------------------------------------------------
// GPT2 (LM head model)

GPT2Impl::GPT2Impl(const GPT2Config& config) : config_(config) {
  validate(config_);
  transformer = register_module("transformer", GPT2Model(config));  // initialised there
}

at::Tensor GPT2Impl::forward(const at::Tensor& idx) {
  const auto hidden = transformer->forward(idx);
  // Tied lm_head: logits = hidden @ wte.weight^T, a second call of the wte unit.
  const auto& wte = transformer->wte;
  return zero::run_with(*wte, [&] { return tied_head(hidden, wte->weight); });
}

at::Tensor GPT2Impl::forward_cached(const at::Tensor& idx, KVCache& cache) {
  ZERO_CHECK(idx.defined() && idx.scalar_type() == at::kLong && idx.dim() == 2 && idx.numel() > 0,
             "GPT-2 forward_cached: input ids must be non-empty int64 [batch, seq]");
  const int64_t past = cache.length();
  const int64_t T = idx.size(1);
  const int64_t layers = config_.n_layer;
  models::prepare_cache(cache, layers, T, config_.n_positions, "GPT-2", "n_positions");
  // Each unit called as forward calls it (zero/unit.h), so that under a stage-3 engine every
  // unit is gathered for its call (zero-train samples with the cache at every stage).
  GPT2Model& body = transformer;
  const auto pos = at::arange(past, past + T, idx.options());
  at::Tensor x = zero::run(body->wte, idx) + zero::run(body->wpe, pos);
  for (int64_t i = 0; i < layers; ++i) {
    const std::shared_ptr<torch::nn::Module> block = body->h->ptr(i);
    x = zero::run_with(*block, [&] {
      return block->as<BlockImpl>()->forward_cached(x, cache.keys[static_cast<size_t>(i)],
                                                    cache.values[static_cast<size_t>(i)]);
    });
  }
  x = body->ln_f->forward(x);
  const auto& wte = body->wte;
  return zero::run_with(*wte, [&] { return tied_head(x, wte->weight); });
}

std::string GPT2Impl::parameter_of_hf_tensor(const std::string& name) const {
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 || name.rfind("lm_head.", 0) == 0) return name;
  return prefix + name;
}

std::optional<std::string> GPT2Impl::tied_hf_tensor(const std::string& name) const {
  if (name == "lm_head.weight") return std::string("transformer.wte.weight");
  return std::nullopt;
}

bool GPT2Impl::ignored_hf_tensor(const std::string& name) const {
  // Buffers older transformers versions saved beside the weights: the causal mask.
  static const std::regex pattern(R"((transformer\.)?h\.[0-9]+\.attn\.(masked_)?bias)");
  return std::regex_match(name, pattern);
}

at::Tensor GPT2Impl::forward_loss(const at::Tensor& idx, const at::Tensor& targets) {
  ZERO_CHECK(idx.defined(), "GPT-2 input ids are undefined");
  models::check_targets(targets, idx.sizes(), config_.vocab_size, "GPT-2 forward_loss");
  const at::Tensor hidden = transformer->forward(idx);
  const auto& wte = transformer->wte;
  // The tied head is a second call of the wte unit (zero/unit.h), as in forward.
  return zero::run_with(*wte, [&] {
    return lm_head_cross_entropy(hidden.reshape({-1, config_.n_embd}), wte->weight,
                                 targets.reshape({-1}));
  });
}

at::Tensor GPT2Impl::loss(const at::Tensor& logits, const at::Tensor& targets) {
  ZERO_CHECK(logits.defined(), "GPT-2 loss: logits undefined");
  ZERO_CHECK(logits.dim() >= 2, "GPT-2 loss: logits must be [..., vocab], got shape ",
             logits.sizes());
  const int64_t V = logits.size(-1);
  models::check_targets(targets, logits.sizes().slice(0, logits.dim() - 1), V, "GPT-2 loss");
  const auto flat = logits.reshape({-1, V});
  const auto flat_f = flat.scalar_type() == at::kFloat ? flat : flat.to(at::kFloat);
  return at::cross_entropy_loss(flat_f, targets.reshape({-1}));
}

int64_t GPT2Config::num_parameters() const {
  const int64_t d = n_embd;
  // Per block: ln_1 and ln_2 (2d each), c_attn (d x 3d + 3d), attention c_proj (d x d + d),
  // mlp c_fc (d x 4d + 4d) and c_proj (4d x d + d). The lm_head is the tied wte.
  const int64_t block = 12 * d * d + 13 * d;
  return vocab_size * d + n_positions * d + n_layer * block + 2 * d;
}

void GPT2Config::warm_up_host_gemms(int64_t micro_batch, int64_t seq,
                                    c10::ScalarType compute_dtype) const {
  validate(*this);
  {
    const auto options = at::TensorOptions().dtype(compute_dtype);
    const int64_t tokens = micro_batch * seq;
    const int64_t C = n_embd;
    // The LM head and loss as the step runs them (forward, which computes the gradients).
    at::Tensor hidden = at::zeros({tokens, C}, options).requires_grad_(true);
    at::Tensor weight = at::zeros({vocab_size, C}, options).requires_grad_(true);
    lm_head_cross_entropy(hidden, weight, at::zeros({tokens}, at::kLong)).backward();
    // A block's Conv1D shapes (attention in, attention out, MLP in, MLP out): y = x W, and
    // backward's dx = dy W^T, dW = x^T dy.
    for (const auto& [in, out] : std::vector<std::pair<int64_t, int64_t>>{
             {C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
      const at::Tensor x = at::zeros({tokens, in}, options);
      const at::Tensor w = at::zeros({in, out}, options);
      // By the path the step's GEMMs take (Note [fp16 GEMMs on CPUs without fp16 arithmetic]).
      const at::Tensor dy = half_gemm::mm(x, w);
      half_gemm::mm(dy, w.t());
      half_gemm::mm(x.t(), dy);
    }
  }
  release_freed_host_memory();  // the scratch tensors' blocks (zero/memory.h)
}

// Note [GPT-2 activation memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What autograd keeps of one micro-batch (N = batch x seq tokens, e bytes per element of the
// compute dtype), read off the forward above and libtorch's CPU kernels, and checked against
// zero::host_memory_stats() (tests/test_memory_plan.cpp, bench/bench_memory_plan.cpp):
//   - a block saves 16 C N e: its input (ln_1's), ln_1's output (c_attn's input), q, k and v
//     (3C, the c_attn output the attention reads), the attention output (C), the contiguous
//     copy c_proj reads (C), the residual sum (ln_2's input), ln_2's output (c_fc's input),
//     c_fc's output (4C, gelu's input) and gelu's output (4C, mlp c_proj's input); plus
//     fp32 statistics (two LayerNorms' mean and rstd, 4 N; the attention's log-sum-exp, H N).
//     fp16 on a host (bf16 where its GEMMs go via fp32) computes the attention in fp32 (Note
//     [fp16 GEMMs on CPUs without fp16 arithmetic]): q, k, v and the attention output are kept
//     in fp32, 8 C N bytes more.
//     With dropout each resid dropout keeps its mask (2 C N e) and the attention takes the
//     math path, which keeps the probabilities, the mask and the dropped probabilities
//     (3 B H T^2 e): an estimate, the default dropout 0 is the case measured exactly;
//   - a checkpointed block keeps its input only (C N e);
//   - ln_f keeps its input (C N e) and statistics; the fused LM head (Note [Fused LM-head
//     cross-entropy]) computes its gradients in forward and keeps them: the hidden states'
//     (C N e) and the tied embedding's (V C e);
//   - the forward's peak is at the head: an fp32 V x C accumulator and one block of logits
//     (rows = min(N, 2^24 / V), rows x V in the compute dtype; when that is 16-bit also the
//     block's fp32 log-softmax, two compute-dtype copies of the probabilities and the V x C
//     product before it is added to the accumulator; widened (above) the loop runs in fp32:
//     fp32 copies of the hidden states and the weight, an fp32 block, the hidden states'
//     gradient in fp32 and rounded, the weight's rounded);
//   - during backward the head's V x C gradient waits in autograd's input buffer of the tied
//     embedding until the embedding's backward adds its own dense V x C gradient: 2 V C e at
//     the end; before that, the worst is the start (everything saved plus the first block's
//     gradients, about 8 C N e) or, with checkpointing, a recomputed block (its 16 C N e on top
//     of the held V C e and the checkpointed inputs).
PlanModel GPT2Config::plan_model(int64_t micro_batch, int64_t seq, c10::ScalarType compute_dtype,
                                 bool on_host) const {
  validate(*this);
  ZERO_CHECK(micro_batch > 0 && seq > 0 && seq <= n_positions, "GPT2Config::plan_model: ",
             "micro-batch ", micro_batch, " and sequence ", seq, " must be positive, the ",
             "sequence at most n_positions = ", n_positions);
  PlanModel model;
  const int64_t C = n_embd;
  // Each unit's parameters by shape (Conv1D weights are stored [in, out]).
  model.units.push_back(plan_unit("transformer.wte", {{vocab_size, C}}, true));
  model.units.push_back(plan_unit("transformer.wpe", {{n_positions, C}}, true));
  for (int64_t i = 0; i < n_layer; ++i) {
    model.units.push_back(plan_unit("transformer.h." + std::to_string(i),
                               {{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C}, {C}, {C}, {C, 4 * C},
                                {4 * C}, {4 * C, C}, {C}},
                               true, i < checkpointed_blocks));
  }
  model.units.push_back(plan_unit("transformer.ln_f", {{C}, {C}}, false));
  // forward_loss: wte and wpe, the blocks, then wte again for the tied head.
  for (int u = 0; u < static_cast<int>(n_layer) + 2; ++u) model.forward_calls.push_back(u);
  model.forward_calls.push_back(0);
  model.micro_batch = micro_batch;
  model.seq = seq;

  const int64_t e = static_cast<int64_t>(c10::elementSize(compute_dtype));
  const int64_t N = micro_batch * seq;
  const int64_t CNe = C * N * e;
  const int64_t V = vocab_size;
  // Note [fp16 GEMMs on CPUs without fp16 arithmetic]: fp16 on a host (bf16 where its GEMMs
  // go via fp32) computes the attention in fp32 (fp32 q, k, v and output kept, 8 bytes per
  // element more than 16 bits) and runs the LM head's loop in fp32 (below).
  const bool widened = on_host && half_gemm::computes_in_fp32(compute_dtype);
  int64_t block = 16 * CNe + 4 * N * 4 + n_head * N * 4 + (widened ? 8 * C * N : 0);
  if (dropout > 0.0) block += 2 * CNe + 3 * micro_batch * n_head * seq * seq * e;
  const int64_t ids = 2 * N * 8;
  const int64_t ln_f = CNe + 2 * N * 4;
  const LmHeadBytes head = lm_head_cross_entropy_bytes(N, C, V, e, widened);
  const int64_t block_gradients = 8 * CNe;
  auto activations = [&](int64_t checkpointed) {
    return models::causal_lm_activations(n_layer, checkpointed, block, CNe, ids + ln_f,
                                         head.forward_peak, head.saved, block_gradients,
                                         V * C * e, /*tied=*/true);
  };
  model.activations = activations(0);
  model.checkpointed = activations(checkpointed_blocks > 0 ? checkpointed_blocks : n_layer);
  model.checkpointing = checkpointed_blocks > 0;
  return model;
}


}  // namespace zero::gpt2
