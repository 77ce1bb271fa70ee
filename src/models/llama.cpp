// The Llama family (include/zero/llama.h): configuration, Hugging Face config.json both ways,
// the modules, and the memory planner's view.
#include "zero/llama.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <cmath>
#include <sstream>

#include "hardware/half_gemm.h"
#include "kernels/fused_ops.h"
#include "models/families.h"
#include "models/hf_config_reader.h"
#include "models/lm_head_loss.h"
#include "models/model_common.h"
#include "zero/error.h"
#include "zero/memory.h"
#include "zero/unit.h"

namespace zero::llama {
namespace {

using Json = nlohmann::json;

struct Preset {
  const char* name;
  const char* type;
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, context;
  double theta, eps;
  bool tied, qkv_bias;
  double llama3_factor;  // 0: no rope scaling; else Llama 3's, from 8192 positions
  int64_t bos, eos;
};

// The small ones have GPT-2's vocabulary and gpt2-tiny's / gpt2-mini's parameter counts (the
// MLP's width makes a block the size of GPT-2's): they train on zero-train's token files and
// compare with GPT-2 at equal size. The rest are the published shapes (their config.json).
constexpr Preset kPresets[] = {
    {"llama-tiny", "llama", 50257, 128, 384, 4, 4, 2, 0, 256, 10000.0, 1e-5, true, false, 0, 50256, 50256},
    {"llama-mini", "llama", 50257, 384, 1216, 6, 6, 2, 0, 256, 10000.0, 1e-5, true, false, 0, 50256, 50256},
    {"smollm2-135m", "llama", 49152, 576, 1536, 30, 9, 3, 0, 8192, 100000.0, 1e-5, true, false, 0, 0, 0},
    {"smollm2-360m", "llama", 49152, 960, 2560, 32, 15, 5, 0, 8192, 100000.0, 1e-5, true, false, 0, 0, 0},
    {"llama-3.2-1b", "llama", 128256, 2048, 8192, 16, 32, 8, 64, 131072, 500000.0, 1e-5, true, false, 32.0, 128000, 128001},
    {"llama-3.2-3b", "llama", 128256, 3072, 8192, 28, 24, 8, 128, 131072, 500000.0, 1e-5, true, false, 32.0, 128000, 128001},
    {"llama-3.1-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 131072, 500000.0, 1e-5, false, false, 8.0, 128000, 128001},
    {"qwen2.5-0.5b", "qwen2", 151936, 896, 4864, 24, 14, 2, 0, 32768, 1000000.0, 1e-6, true, true, 0, 151643, 151643},
    {"qwen2.5-1.5b", "qwen2", 151936, 1536, 8960, 28, 12, 2, 0, 32768, 1000000.0, 1e-6, true, true, 0, 151643, 151643},
    {"mistral-7b", "mistral", 32768, 4096, 14336, 32, 32, 8, 128, 32768, 1000000.0, 1e-5, false, false, 0, 1, 2},
};

std::string join_preset_names() {
  std::ostringstream out;
  for (size_t i = 0; i < std::size(kPresets); ++i) out << (i ? ", " : "") << '"' << kPresets[i].name << '"';
  return out.str();
}

// The rotary inverse frequencies [head_dim / 2] in fp32, as transformers computes them
// (modeling_rope_utils: the default, "linear" and "llama3" types).
at::Tensor inverse_frequencies(const LlamaConfig& c) {
  const int64_t dim = c.resolved_head_dim();
  const at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, exponents);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") return inv_freq / s.factor;
  if (s.type != "llama3") return inv_freq;
  // Llama 3.1's: long wavelengths (low frequencies) divided by the factor, short ones kept,
  // the band between interpolated smoothly.
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth = (old_context / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

// x [B, H, T, D] rotated by the angles of its positions: x cos + rotate_half(x) sin, with cos
// and sin [T, D] in x's dtype (HF's apply_rotary_pos_emb), rotate_half(x) = [-x2, x1] of its
// halves. An autograd function of its own: the rotation is linear, so backward needs only cos
// and sin (not x), and it runs without the cat and the halves' copies ATen's composition
// records (their backward zero-fills whole tensors). Each element rounds as HF's does: the two
// products, then their sum.
struct Rotary : torch::autograd::Function<Rotary> {
  // [x1 cos1 + sign (-x2 sin1), x2 cos2 + sign x1 sin2]: sign 1 rotates, -1 is the transpose.
  static at::Tensor apply_rotation(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                   bool transpose) {
    const int64_t half = x.size(-1) / 2;
    at::Tensor out = x * cos;
    const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    at::Tensor out1 = out.narrow(-1, 0, half), out2 = out.narrow(-1, half, half);
    if (!transpose) {
      out1.sub_(x2 * sin.narrow(-1, 0, half));
      out2.add_(x1 * sin.narrow(-1, half, half));
    } else {
      out1.add_(x2 * sin.narrow(-1, half, half));
      out2.sub_(x1 * sin.narrow(-1, 0, half));
    }
    return out;
  }
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return apply_rotation(x, cos, sin, /*transpose=*/false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {apply_rotation(grads[0].contiguous(), saved[0], saved[1], /*transpose=*/true),
            at::Tensor(), at::Tensor()};
  }
};

at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return Rotary::apply(x, cos, sin);
}

// ---------------------------------------------------------------------------------------------
// Modules, named as transformers names them.

// nn.Linear's layout, computed by the GEMM path of its dtype (models::linear).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias) {
    weight = register_parameter("weight", at::zeros({out, in}));
    if (bias) this->bias = register_parameter("bias", at::zeros({out}));
  }
  at::Tensor forward(const at::Tensor& x) { return models::linear(x, weight, bias); }
  void init(double std) {
    weight.normal_(0.0, std);
    if (bias.defined()) bias.zero_();
  }
  at::Tensor weight;
  at::Tensor bias;
};
TORCH_MODULE(Linear);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t size, double eps) : eps(eps) {
    weight = register_parameter("weight", at::ones({size}));
  }
  // HF's LlamaRMSNorm, one row pass where the kernels fuse (Note [Fused element-wise
  // kernels]), else its ATen composition.
  at::Tensor forward(const at::Tensor& x) { return fused::rms_norm(x, weight, eps); }
  // {x + a, forward(x + a)}: the residual add in the same pass.
  std::pair<at::Tensor, at::Tensor> after_residual(const at::Tensor& x, const at::Tensor& a) {
    return fused::residual_rms_norm(x, a, weight, eps);
  }
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const LlamaConfig& c)
      : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads),
        head_dim_(c.resolved_head_dim()), dropout_(c.dropout) {
    q_proj = register_module("q_proj", Linear(c.hidden_size, heads_ * head_dim_, c.qkv_bias));
    k_proj = register_module("k_proj", Linear(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias));
    v_proj = register_module("v_proj", Linear(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias));
    o_proj = register_module("o_proj", Linear(heads_ * head_dim_, c.hidden_size, c.o_bias));
  }
  // x [B, T, hidden] at the positions whose cos and sin [T, D] are given; `cache`: nullptr in
  // training, else this block's cached keys and values, extended.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     at::Tensor* past_keys, at::Tensor* past_values) {
    const int64_t B = x.size(0), T = x.size(1);
    auto heads = [&](const at::Tensor& projected, int64_t n) {
      return projected.view({B, T, n, head_dim_}).transpose(1, 2);
    };
    const at::Tensor q = rotate(heads(q_proj->forward(x), heads_), cos, sin);
    const at::Tensor k = rotate(heads(k_proj->forward(x), kv_heads_), cos, sin);
    const at::Tensor v = heads(v_proj->forward(x), kv_heads_);
    const int64_t groups = heads_ / kv_heads_;
    at::Tensor y;
    if (past_keys == nullptr) {
      const double p = is_training() ? dropout_ : 0.0;
      y = models::attend(q, k, v, /*allowed=*/{}, /*causal=*/true, p);
    } else {
      y = models::attend_cached(q, k, v, *past_keys, *past_values, groups);
    }
    return o_proj->forward(y.transpose(1, 2).reshape({B, T, heads_ * head_dim_}));
  }
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double dropout_;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const LlamaConfig& c) {
    gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
  }
  // SwiGLU: down(silu(gate(x)) * up(x)).
  at::Tensor forward(const at::Tensor& x) {
    return down_proj->forward(at::silu(gate_proj->forward(x)) * up_proj->forward(x));
  }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const LlamaConfig& c) {
    self_attn = register_module("self_attn", Attention(c));
    mlp = register_module("mlp", MLP(c));
    input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     at::Tensor* past_keys = nullptr, at::Tensor* past_values = nullptr) {
    const at::Tensor attended =
        self_attn->forward(input_layernorm->forward(x), cos, sin, past_keys, past_values);
    const auto [h, normalized] = post_attention_layernorm->after_residual(x, attended);
    return h + mlp->forward(normalized);
  }
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// HF's LlamaModel: the embedding, the layers and the final norm.
class ModelImpl : public torch::nn::Module {
 public:
  explicit ModelImpl(const LlamaConfig& c) : inv_freq_(inverse_frequencies(c)) {
    // Initialised as transformers initialises (normal(0, initializer_range) weights, zero
    // biases, unit norms) from the global generator, each stage-3 unit as soon as it is built
    // and before it is declared (zero/unit.h): under zero::ShardedInit the declaration
    // partitions it at once. Units: the embedding, each layer; the norm stays whole.
    at::NoGradGuard no_grad;
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
    embed_tokens->weight.normal_(0.0, c.initializer_range);
    zero::declare_unit(*embed_tokens);
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      DecoderLayer layer(c);
      for (Linear* linear : {&layer->self_attn->q_proj, &layer->self_attn->k_proj,
                             &layer->self_attn->v_proj, &layer->self_attn->o_proj,
                             &layer->mlp->gate_proj, &layer->mlp->up_proj, &layer->mlp->down_proj}) {
        (*linear)->init(c.initializer_range);
      }
      layers->push_back(layer);
      zero::declare_unit(*layer);
    }
    norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  }
  // cos and sin [T, head_dim] of positions [first, first + T) in `dtype` on `device`,
  // computed in fp32 as transformers computes them.
  std::pair<at::Tensor, at::Tensor> rotary(int64_t first, int64_t T, at::ScalarType dtype,
                                           const at::Device& device) {
    if (inv_freq_.device() != device) inv_freq_ = inv_freq_.to(device);
    const at::Tensor positions = at::arange(first, first + T, at::TensorOptions(device).dtype(at::kFloat));
    const at::Tensor freqs = positions.unsqueeze(1) * inv_freq_.unsqueeze(0);  // [T, D / 2]
    const at::Tensor angles = at::cat({freqs, freqs}, -1);
    return {angles.cos().to(dtype), angles.sin().to(dtype)};
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

 private:
  at::Tensor inv_freq_;  // [head_dim / 2] fp32: recomputed, not a parameter or saved buffer
};
TORCH_MODULE(Model);

}  // namespace

// ---------------------------------------------------------------------------------------------
// LlamaConfig

LlamaConfig LlamaConfig::preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    LlamaConfig c;
    c.type = p.type;
    c.vocab_size = p.vocab;
    c.hidden_size = p.hidden;
    c.intermediate_size = p.intermediate;
    c.num_hidden_layers = p.layers;
    c.num_attention_heads = p.heads;
    c.num_key_value_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.max_position_embeddings = p.context;
    c.rope_theta = p.theta;
    c.rms_norm_eps = p.eps;
    c.tie_word_embeddings = p.tied;
    c.qkv_bias = p.qkv_bias;
    if (p.llama3_factor > 0) {
      c.rope_scaling.type = "llama3";
      c.rope_scaling.factor = p.llama3_factor;
      c.rope_scaling.original_max_position_embeddings = 8192;
    }
    c.bos_token_id = p.bos;
    c.eos_token_id = p.eos;
    c.validate();
    return c;
  }
  throw Error(detail::concat("unknown Llama-family preset \"", name, "\"; known presets: ",
                             join_preset_names()));
}

std::vector<std::string> LlamaConfig::preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

void LlamaConfig::validate() const {
  ZERO_CHECK(type == "llama" || type == "mistral" || type == "qwen2",
             "LlamaConfig.type must be \"llama\", \"mistral\" or \"qwen2\", got \"", type, "\"");
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"vocab_size", vocab_size}, {"hidden_size", hidden_size},
        {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_hidden_layers},
        {"num_attention_heads", num_attention_heads},
        {"num_key_value_heads", num_key_value_heads},
        {"max_position_embeddings", max_position_embeddings}}) {
    ZERO_CHECK(value > 0, "LlamaConfig.", field, " must be positive, got ", value);
  }
  ZERO_CHECK(num_attention_heads % num_key_value_heads == 0, "LlamaConfig.num_attention_heads (",
             num_attention_heads, ") must be a multiple of num_key_value_heads (",
             num_key_value_heads, ")");
  ZERO_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0, "LlamaConfig.hidden_size (",
             hidden_size, ") is not divisible by num_attention_heads (", num_attention_heads,
             "); give head_dim");
  ZERO_CHECK(head_dim >= 0 && resolved_head_dim() % 2 == 0, "LlamaConfig.head_dim must be even ",
             "(rotary embeddings rotate pairs), got ", resolved_head_dim());
  ZERO_CHECK(sliding_window >= 0, "LlamaConfig.sliding_window must be 0 (none) or positive, got ",
             sliding_window);
  ZERO_CHECK(rms_norm_eps > 0 && rope_theta > 0 && initializer_range > 0,
             "LlamaConfig: rms_norm_eps, rope_theta and initializer_range must be positive");
  const RopeScaling& s = rope_scaling;
  ZERO_CHECK(s.type == "default" || s.type == "linear" || s.type == "llama3",
             "LlamaConfig.rope_scaling.type must be \"default\", \"linear\" or \"llama3\", got \"",
             s.type, "\"");
  ZERO_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                 s.original_max_position_embeddings > 0,
             "LlamaConfig.rope_scaling: factor, low_freq_factor and original_max_position_"
             "embeddings must be positive and high_freq_factor above low_freq_factor");
  ZERO_CHECK(dropout >= 0.0 && dropout < 1.0, "LlamaConfig.dropout must be in [0, 1), got ",
             dropout);
  ZERO_CHECK(checkpointed_blocks >= 0 && checkpointed_blocks <= num_hidden_layers,
             "LlamaConfig.checkpointed_blocks must be in [0, num_hidden_layers = ",
             num_hidden_layers, "], got ", checkpointed_blocks);
}

int64_t LlamaConfig::context_length() const {
  return sliding_window > 0 ? std::min(sliding_window, max_position_embeddings)
                            : max_position_embeddings;
}

const char* LlamaConfig::context_key() const {
  return sliding_window > 0 && sliding_window < max_position_embeddings ? "sliding_window"
                                                                          : "max_position_embeddings";
}

std::string LlamaConfig::display_name() const {
  return type == "mistral" ? "Mistral" : type == "qwen2" ? "Qwen2" : "Llama";
}

CausalLMShape LlamaConfig::shape() const {
  CausalLMShape s;
  s.vocab_size = vocab_size;
  s.context_length = context_length();
  s.num_layers = num_hidden_layers;
  s.hidden_size = hidden_size;
  s.num_heads = num_attention_heads;
  s.checkpointed_blocks = checkpointed_blocks;
  return s;
}

std::string LlamaConfig::describe() const {
  std::ostringstream out;
  out << num_hidden_layers << " layers, width " << hidden_size << ", " << num_attention_heads
      << " heads (" << num_key_value_heads << " key/value) of " << resolved_head_dim()
      << ", MLP " << intermediate_size << ", vocabulary " << vocab_size << ", context "
      << context_length() << (tie_word_embeddings ? ", tied head" : ", untied head");
  return out.str();
}

std::unique_ptr<CausalLMConfig> LlamaConfig::clone() const {
  return std::make_unique<LlamaConfig>(*this);
}

std::shared_ptr<CausalLM> LlamaConfig::build() const {
  return std::make_shared<LlamaForCausalLMImpl>(*this);
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t H = hidden_size, D = resolved_head_dim();
  const int64_t q = num_attention_heads * D, kv = num_key_value_heads * D;
  const int64_t attention = H * q + 2 * H * kv + q * H + (qkv_bias ? q + 2 * kv : 0) + (o_bias ? H : 0);
  const int64_t mlp = 3 * H * intermediate_size + (mlp_bias ? 2 * intermediate_size + H : 0);
  const int64_t layer = attention + mlp + 2 * H;
  return vocab_size * H * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * layer + H;
}

std::string LlamaConfig::hf_config_json(const std::string& dtype) const {
  static const std::map<std::string, std::string> kArchitectures = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}};
  auto token = [](int64_t id) { return id >= 0 ? Json(id) : Json(nullptr); };
  Json rope = {{"rope_type", rope_scaling.type}, {"rope_theta", rope_theta}};
  Json scaling = nullptr;
  if (rope_scaling.type != "default") {
    scaling = {{"rope_type", rope_scaling.type}, {"factor", rope_scaling.factor}};
    if (rope_scaling.type == "llama3") {
      scaling["low_freq_factor"] = rope_scaling.low_freq_factor;
      scaling["high_freq_factor"] = rope_scaling.high_freq_factor;
      scaling["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    rope.update(scaling);
  }
  Json config = {
      {"architectures", {kArchitectures.at(type)}},
      {"model_type", type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", resolved_head_dim()},
      {"max_position_embeddings", max_position_embeddings},
      {"hidden_act", "silu"},
      {"rms_norm_eps", rms_norm_eps},
      {"initializer_range", initializer_range},
      // Both spellings: transformers 5 reads rope_parameters, 4.x rope_theta and rope_scaling.
      {"rope_parameters", rope},
      {"rope_theta", rope_theta},
      {"rope_scaling", scaling},
      {"attention_dropout", dropout},
      {"tie_word_embeddings", tie_word_embeddings},
      {"bos_token_id", token(bos_token_id)},
      {"eos_token_id", token(eos_token_id)},
      {"use_cache", true},
      {"torch_dtype", dtype},
  };
  if (type == "llama") {
    ZERO_INTERNAL_ASSERT(qkv_bias == o_bias, "Llama's attention_bias covers q, k, v and o");
    config["attention_bias"] = qkv_bias;
    config["mlp_bias"] = mlp_bias;
  } else if (type == "mistral") {
    config["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
  } else {
    config["use_sliding_window"] = sliding_window > 0;
    config["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
    config["max_window_layers"] = sliding_window > 0 ? 0 : num_hidden_layers;
  }
  return config.dump();
}

void LlamaConfig::warm_up_host_gemms(int64_t micro_batch, int64_t seq,
                                     c10::ScalarType compute_dtype) const {
  validate();
  {
    const auto options = at::TensorOptions().dtype(compute_dtype);
    const int64_t tokens = micro_batch * seq;
    const int64_t H = hidden_size, D = resolved_head_dim();
    at::Tensor hidden = at::zeros({tokens, H}, options).requires_grad_(true);
    at::Tensor weight = at::zeros({vocab_size, H}, options).requires_grad_(true);
    gpt2::lm_head_cross_entropy(hidden, weight, at::zeros({tokens}, at::kLong)).backward();
    // A layer's projections: y = x W^T, and backward's dx = dy W, dW = dy^T x.
    for (const auto& [in, out] : std::vector<std::pair<int64_t, int64_t>>{
             {H, num_attention_heads * D}, {H, num_key_value_heads * D},
             {num_attention_heads * D, H}, {H, intermediate_size}, {intermediate_size, H}}) {
      const at::Tensor x = at::zeros({tokens, in}, options);
      const at::Tensor w = at::zeros({out, in}, options);
      const at::Tensor dy = half_gemm::mm(x, w.t());
      half_gemm::mm(dy, w);
      half_gemm::mm(dy.t(), x);
    }
  }
  release_freed_host_memory();
}

// Note [Llama activation memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What autograd keeps of one micro-batch (N = batch x seq tokens, e bytes per element of the
// compute dtype, H hidden, Q = heads x head_dim, K = key/value heads x head_dim, I the MLP's
// width), read off the forward above:
//   - per layer (4H + 3Q + 2K + 4I elements per token): its input and the residual sum (H
//     each, the two RMSNorms' inputs) and each RMSNorm's output (H) and fp32 rstd where the
//     norms are fused (the host's kernels, or a GPU's from libzero_cuda); composed by ATen
//     (no kernels for the device, or ZERO_FUSED_KERNELS=0) each
//     keeps its normalised value too (6H), and in 16 bits its input's fp32 copy (4H bytes); v
//     as projected (K), q
//     and k rotated (Q + K; the rotation keeps neither input, Rotary), the attention output and
//     its contiguous copy (2Q) and SDPA's log-sum-exp (heads x 4 bytes; grouped-query attention
//     in the kernel repeats nothing); the gate and up outputs (2I), silu's output (I) and the
//     product (I); where 16-bit attention computes in fp32 (Note [fp16 GEMMs on CPUs without
//     fp16 arithmetic]), fp32 q, k, v and output too (4 (2Q + 2K) bytes);
//   - a checkpointed layer keeps its input only (H e);
//   - the final norm and the head as GPT-2's (Note [GPT-2 activation memory] in gpt2.cpp),
//     with an untied head's V x H gradient held on its own parameter instead of the tied
//     embedding's input buffer.
// tests/test_memory_plan.cpp checks the sum against the measured peak (llama-tiny, fp32:
// within 0.2 % at every stage, with and without checkpointing, tied and untied; fp16 and bf16
// by either GEMM path within 0.5 %, but bf16 by ATen's kernels 5 % under, as GPT-2's).
PlanModel LlamaConfig::plan_model(int64_t micro_batch, int64_t seq, c10::ScalarType compute_dtype,
                                  bool on_host) const {
  validate();
  ZERO_CHECK(micro_batch > 0 && seq > 0 && seq <= context_length(), "LlamaConfig::plan_model: ",
             "micro-batch ", micro_batch, " and sequence ", seq, " must be positive, the ",
             "sequence at most the context ", context_length());
  PlanModel model;
  const int64_t H = hidden_size, D = resolved_head_dim(), I = intermediate_size;
  const int64_t Q = num_attention_heads * D, K = num_key_value_heads * D;
  // Each unit's parameters by shape (Linear weights are stored [out, in]).
  model.units.push_back(plan_unit("model.embed_tokens", {{vocab_size, H}}, true));
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    std::vector<std::vector<int64_t>> shapes = {{Q, H}};
    if (qkv_bias) shapes.push_back({Q});
    shapes.push_back({K, H});
    if (qkv_bias) shapes.push_back({K});
    shapes.push_back({K, H});
    if (qkv_bias) shapes.push_back({K});
    shapes.push_back({H, Q});
    if (o_bias) shapes.push_back({H});
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{H, I}, {H, I}, {I, H}}) {
      shapes.push_back({out, in});
      if (mlp_bias) shapes.push_back({out});
    }
    shapes.push_back({H});
    shapes.push_back({H});
    model.units.push_back(plan_unit("model.layers." + std::to_string(i), std::move(shapes), true,
                               i < checkpointed_blocks));
  }
  // Declared units in module order, then the parameters outside every unit (the final norm),
  // as plan_model_of lists a built model.
  const int head_unit = tie_word_embeddings ? 0 : static_cast<int>(model.units.size());
  if (!tie_word_embeddings) model.units.push_back(plan_unit("lm_head", {{vocab_size, H}}, true));
  model.units.push_back(plan_unit("model.norm", {{H}}, false));
  for (int u = 0; u <= static_cast<int>(num_hidden_layers); ++u) model.forward_calls.push_back(u);
  model.forward_calls.push_back(head_unit);
  model.micro_batch = micro_batch;
  model.seq = seq;

  const int64_t e = static_cast<int64_t>(c10::elementSize(compute_dtype));
  const int64_t N = micro_batch * seq;
  const int64_t V = vocab_size;
  const bool widened = on_host && half_gemm::computes_in_fp32(compute_dtype);
  // Per token, in elements of the compute dtype and fp32 bytes. A fused RMSNorm (Note [Fused
  // element-wise kernels]) keeps its input and fp32 rstd; ATen's composition keeps its
  // normalised value and rsqrt, and in 16 bits its input's fp32 copy (4H bytes) besides.
  const bool fused_norms = fused::fuses_where(on_host);
  const int64_t norm_fp32_bytes = 4 + (fused_norms || e == 4 ? 0 : 4 * H);
  const int64_t layer_elements = (fused_norms ? 4 : 6) * H + 3 * Q + 2 * K + 4 * I;
  const int64_t layer_fp32_bytes = 2 * norm_fp32_bytes + num_attention_heads * 4 +
                                   (widened ? 4 * (2 * Q + 2 * K) : 0);
  int64_t layer = N * (layer_elements * e + layer_fp32_bytes);
  if (dropout > 0.0) layer += 3 * micro_batch * num_attention_heads * seq * seq * e;
  const int64_t HNe = H * N * e;
  const int64_t ids = 2 * N * 8;
  const int64_t final_norm = 2 * HNe + N * norm_fp32_bytes;
  const gpt2::LmHeadBytes head = gpt2::lm_head_cross_entropy_bytes(N, H, V, e, widened);
  const int64_t layer_gradients = N * e * (4 * H + 2 * I);
  auto activations = [&](int64_t checkpointed) {
    return models::causal_lm_activations(num_hidden_layers, checkpointed, layer, HNe,
                                         ids + final_norm, head.forward_peak, head.saved,
                                         layer_gradients, V * H * e, tie_word_embeddings);
  };
  model.activations = activations(0);
  model.checkpointed = activations(checkpointed_blocks > 0 ? checkpointed_blocks : num_hidden_layers);
  model.checkpointing = checkpointed_blocks > 0;
  return model;
}

// ---------------------------------------------------------------------------------------------
// LlamaForCausalLMImpl

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& config) : config_(config) {
  config_.validate();
  Model body(config_);
  body_ = register_module("model", body.ptr());
  if (!config_.tie_word_embeddings) {
    at::NoGradGuard no_grad;
    Linear head(config_.hidden_size, config_.vocab_size, /*bias=*/false);
    head->init(config_.initializer_range);
    head_ = register_module("lm_head", head.ptr());
    zero::declare_unit(*head_);
  }
}

torch::nn::Module& LlamaForCausalLMImpl::head_unit() {
  if (head_) return *head_;
  return *body_->as<ModelImpl>()->embed_tokens;
}

const at::Tensor& LlamaForCausalLMImpl::head_weight() {
  if (head_) return head_->as<LinearImpl>()->weight;
  return body_->as<ModelImpl>()->embed_tokens->weight;
}

at::Tensor LlamaForCausalLMImpl::hidden_states(const at::Tensor& idx, KVCache* cache) {
  ModelImpl& body = *body_->as<ModelImpl>();
  const std::string what = config_.display_name();
  const int64_t past = cache ? cache->length() : 0;
  const int64_t layers = config_.num_hidden_layers;
  if (cache) {
    ZERO_CHECK(idx.defined() && idx.scalar_type() == at::kLong && idx.dim() == 2 && idx.numel() > 0,
               what, " forward_cached: input ids must be non-empty int64 [batch, seq]");
    models::prepare_cache(*cache, layers, idx.size(1), config_.context_length(), what.c_str(),
                          config_.context_key());
  } else {
    models::check_ids(idx, config_.vocab_size, config_.context_length(), what.c_str());
  }
  at::Tensor x = zero::run(body.embed_tokens, idx);
  const std::pair<at::Tensor, at::Tensor> rotary =
      body.rotary(past, idx.size(1), x.scalar_type(), x.device());
  const at::Tensor& cos = rotary.first;
  const at::Tensor& sin = rotary.second;
  for (int64_t i = 0; i < layers; ++i) {
    const std::shared_ptr<torch::nn::Module> layer = body.layers->ptr(i);
    if (cache) {
      x = zero::run_with(*layer, [&] {
        return layer->as<DecoderLayerImpl>()->forward(x, cos, sin, &cache->keys[i],
                                                      &cache->values[i]);
      });
    } else {
      x = models::run_block(layer, [layer, cos, sin](const at::Tensor& input) {
        return layer->as<DecoderLayerImpl>()->forward(input, cos, sin);
      }, x, i < config_.checkpointed_blocks);
    }
  }
  return body.norm->forward(x);
}

at::Tensor LlamaForCausalLMImpl::forward(const at::Tensor& idx) {
  const at::Tensor hidden = hidden_states(idx, nullptr);
  return zero::run_with(head_unit(), [&] { return models::linear(hidden, head_weight(), {}); });
}

at::Tensor LlamaForCausalLMImpl::forward_cached(const at::Tensor& idx, KVCache& cache) {
  const at::Tensor hidden = hidden_states(idx, &cache);
  return zero::run_with(head_unit(), [&] { return models::linear(hidden, head_weight(), {}); });
}

at::Tensor LlamaForCausalLMImpl::forward_loss(const at::Tensor& idx, const at::Tensor& targets) {
  const std::string what = config_.display_name() + " forward_loss";
  ZERO_CHECK(idx.defined(), what, ": input ids are undefined");
  models::check_targets(targets, idx.sizes(), config_.vocab_size, what.c_str());
  const at::Tensor hidden = hidden_states(idx, nullptr);
  return zero::run_with(head_unit(), [&] {
    return gpt2::lm_head_cross_entropy(hidden.reshape({-1, config_.hidden_size}), head_weight(),
                                       targets.reshape({-1}));
  });
}

std::optional<std::string> LlamaForCausalLMImpl::tied_hf_tensor(const std::string& name) const {
  if (config_.tie_word_embeddings && name == "lm_head.weight") {
    return std::string("model.embed_tokens.weight");
  }
  return std::nullopt;
}

bool LlamaForCausalLMImpl::ignored_hf_tensor(const std::string& name) const {
  // Older transformers versions saved the rotary frequencies of each layer.
  const std::string suffix = ".rotary_emb.inv_freq";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace zero::llama

// ---------------------------------------------------------------------------------------------
// config.json in

namespace zero::models {

llama::LlamaConfig llama_config_from_hf(const HfConfigReader& config) {
  using llama::LlamaConfig;
  const std::string& where = config.where();
  config.refuse_unless("model_type", nlohmann::json::array({"llama", "mistral", "qwen2"}),
                       "zero builds the Llama family from this file");
  LlamaConfig c;
  c.type = config.json().at("model_type").get<std::string>();
  const std::string family = c.display_name();
  config.refuse_unless("hidden_act", "silu", family + "'s MLP is SwiGLU (silu)");
  config.refuse_unless("pretraining_tp", 1, "tensor-parallel pretraining's sliced projections");
  config.refuse_unless("partial_rotary_factor", 1.0, "zero rotates the whole head");
  c.vocab_size = config.integer("vocab_size", c.vocab_size);
  c.hidden_size = config.integer("hidden_size", c.hidden_size);
  c.intermediate_size = config.integer("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = config.integer("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = config.integer("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = config.integer("num_key_value_heads", c.num_attention_heads);
  c.head_dim = config.integer("head_dim", 0);
  c.max_position_embeddings = config.integer("max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = config.number("rms_norm_eps", c.rms_norm_eps);
  c.initializer_range = config.number("initializer_range", c.initializer_range);
  c.tie_word_embeddings = config.boolean("tie_word_embeddings", false);
  // The rotary embedding: transformers 5's rope_parameters, or 4.x's rope_theta and
  // rope_scaling ("type" in older files, "rope_type" since).
  const nlohmann::json* parameters = config.value("rope_parameters");
  const nlohmann::json* scaling = parameters ? parameters : config.value("rope_scaling");
  const std::string scaling_key = parameters ? "rope_parameters" : "rope_scaling";
  c.rope_theta = config.number("rope_theta", c.rope_theta);
  if (scaling) {
    const HfConfigReader rope(*scaling, where + ": " + scaling_key);
    c.rope_theta = rope.number("rope_theta", c.rope_theta);
    std::string type = "default";
    for (const char* key : {"rope_type", "type"}) {
      if (const nlohmann::json* v = rope.value(key)) {
        ZERO_CHECK(v->is_string(), where, ": ", scaling_key, ".", key, " must be a string, got ",
                   v->dump());
        type = v->get<std::string>();
      }
    }
    rope.refuse_unless("rope_type", nlohmann::json::array({"default", "linear", "llama3"}),
                       "zero computes the default, linear and llama3 rotary embeddings");
    rope.refuse_unless("type", nlohmann::json::array({"default", "linear", "llama3"}),
                       "zero computes the default, linear and llama3 rotary embeddings");
    c.rope_scaling.type = type;
    if (type != "default") c.rope_scaling.factor = rope.number("factor", 1.0);
    if (type == "llama3") {
      c.rope_scaling.low_freq_factor = rope.number("low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = rope.number("high_freq_factor", 4.0);
      c.rope_scaling.original_max_position_embeddings =
          rope.integer("original_max_position_embeddings", 8192);
    }
  }
  if (c.type == "llama") {
    c.qkv_bias = c.o_bias = config.boolean("attention_bias", false);
    c.mlp_bias = config.boolean("mlp_bias", false);
  } else if (c.type == "qwen2") {
    c.qkv_bias = true;
  }
  // Sliding-window attention equals full causal attention within the window: the context is
  // then the window (a longer sequence is refused naming sliding_window).
  const bool windowed = c.type == "mistral" ||
                        (c.type == "qwen2" && config.boolean("use_sliding_window", false));
  if (windowed) c.sliding_window = config.integer("sliding_window", 0);
  if (const nlohmann::json* types = config.value("layer_types")) {
    for (const nlohmann::json& t : *types) {
      ZERO_CHECK(t == "full_attention" || (t == "sliding_attention" && config.value("sliding_window")),
                 where, ": layer_types holds ", t.dump(),
                 " (allowed: \"full_attention\", \"sliding_attention\" with a sliding_window)");
      if (t == "sliding_attention") c.sliding_window = config.integer("sliding_window", 0);
    }
  }
  auto token = [&](const char* key) -> int64_t {
    const nlohmann::json* v = config.value(key);
    if (v && v->is_array() && !v->empty()) v = &(*v)[0];  // several end tokens: the first
    return v && v->is_number_integer() ? v->get<int64_t>() : -1;
  };
  c.bos_token_id = token("bos_token_id");
  c.eos_token_id = token("eos_token_id");
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(detail::concat(where, ": ", e.what()));
  }
  return c;
}

}  // namespace zero::models
