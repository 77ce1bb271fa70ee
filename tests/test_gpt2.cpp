// GPT-2 model: HF parameter names/shapes, tied lm_head, initialisation, causality, 16-bit
// dtypes, SDPA vs. a manual attention reference, input validation, and a training sanity check.
#include <gtest/gtest.h>

#include <iostream>

#include "test_util.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "zero/error.h"
#include "zero/gpt2.h"

namespace zero::gpt2 {
namespace {

GPT2Config small_config(int64_t n_layer = 2) {
  GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 32;
  c.n_embd = 32;
  c.n_layer = n_layer;
  c.n_head = 4;
  return c;
}

// Expected parameter count from the shapes: wte + wpe + per-layer + ln_f.
int64_t count_from_shapes(const GPT2Config& c) {
  const int64_t C = c.n_embd;
  const int64_t per_layer = 2 * C                    // ln_1
                            + C * 3 * C + 3 * C      // c_attn
                            + C * C + C              // attn.c_proj
                            + 2 * C                  // ln_2
                            + C * 4 * C + 4 * C      // c_fc
                            + 4 * C * C + C;         // mlp.c_proj
  return c.vocab_size * C + c.n_positions * C + c.n_layer * per_layer + 2 * C;
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const zero::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO EXCEPTION";
}

at::Tensor random_ids(int64_t B, int64_t T, int64_t vocab) {
  return at::randint(vocab, {B, T}, at::TensorOptions().dtype(at::kLong));
}

TEST(GPT2, ParameterNamesAndShapesMatchHF) {
  const auto c = small_config(2);
  GPT2 model(c);
  const int64_t C = c.n_embd;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"transformer.wte.weight", {c.vocab_size, C}},
      {"transformer.wpe.weight", {c.n_positions, C}},
  };
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    expected.push_back({p + "ln_1.weight", {C}});
    expected.push_back({p + "ln_1.bias", {C}});
    expected.push_back({p + "attn.c_attn.weight", {C, 3 * C}});
    expected.push_back({p + "attn.c_attn.bias", {3 * C}});
    expected.push_back({p + "attn.c_proj.weight", {C, C}});
    expected.push_back({p + "attn.c_proj.bias", {C}});
    expected.push_back({p + "ln_2.weight", {C}});
    expected.push_back({p + "ln_2.bias", {C}});
    expected.push_back({p + "mlp.c_fc.weight", {C, 4 * C}});
    expected.push_back({p + "mlp.c_fc.bias", {4 * C}});
    expected.push_back({p + "mlp.c_proj.weight", {4 * C, C}});
    expected.push_back({p + "mlp.c_proj.bias", {C}});
  }
  expected.push_back({"transformer.ln_f.weight", {C}});
  expected.push_back({"transformer.ln_f.bias", {C}});

  const auto params = model->named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  size_t i = 0;
  for (const auto& item : params) {
    EXPECT_EQ(item.key(), expected[i].first) << "at index " << i;
    EXPECT_EQ(item.value().sizes().vec(), expected[i].second) << item.key();
    EXPECT_TRUE(item.value().requires_grad()) << item.key();
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
    EXPECT_EQ(item.key().find("lm_head"), std::string::npos);
    ++i;
  }
  EXPECT_EQ(model->num_parameters(), count_from_shapes(c));
}

// A small GPT-2 (2 layers, width 64, context 32, vocab 97) from `seed`, in eval mode.
GPT2 small_eval_model(uint64_t seed) {
  GPT2Config c = GPT2Config::named("L2-C64-H4-T32");
  c.vocab_size = 97;
  torch::manual_seed(seed);
  GPT2 model(c);
  model->eval();
  return model;
}

// The KV cache (forward_cached): a prompt prefilled, then one token at a time, then a chunk of
// three after a cached past (the masked path) give forward()'s logits of the whole sequence.
TEST(GPT2, CachedForwardGivesTheLogitsOfTheWholeSequence) {
  GPT2 model = small_eval_model(5);
  at::NoGradGuard no_grad;
  const at::Tensor ids = at::randint(0, 97, {2, 20}, at::kLong);
  const at::Tensor whole = model->forward(ids);
  KVCache cache;
  std::vector<at::Tensor> pieces = {model->forward_cached(ids.narrow(1, 0, 8), cache)};
  for (int64_t t = 8; t < 17; ++t) pieces.push_back(model->forward_cached(ids.narrow(1, t, 1), cache));
  pieces.push_back(model->forward_cached(ids.narrow(1, 17, 3), cache));
  EXPECT_EQ(cache.length(), 20);
  const at::Tensor cached = at::cat(pieces, 1);
  EXPECT_TRUE(at::allclose(cached, whole, 1e-5, 1e-5))
      << (cached - whole).abs().max().item<double>();
  // Past the context: refused with what to do.
  KVCache full;
  (void)model->forward_cached(at::zeros({1, 32}, at::kLong), full);
  try {
    (void)model->forward_cached(at::zeros({1, 1}, at::kLong), full);
    ADD_FAILURE() << "a token past the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed n_positions"), std::string::npos) << e.what();
  }
}

// Incremental generation (next_logits, as zero-generate and zero-train's samples run it): each
// token's logits are those of forward() over what the cache holds then, the prompt's last
// `context` ids first and, once the cache is full, the last half of the context again.
TEST(GPT2, NextLogitsFollowTheWindowOfTheContext) {
  GPT2 model = small_eval_model(6);
  at::NoGradGuard no_grad;
  const at::Tensor all = at::randint(0, 97, {30}, at::kLong);
  const int64_t context = 8;
  std::vector<int64_t> ids(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + 11);  // a prompt
  KVCache cache;
  int64_t window_start = 11 - context;  // what the cache covers
  for (int64_t n = 11; n <= 30; ++n) {
    if (n > 11 && n - 1 - window_start == context) window_start = n - context / 2;  // refilled
    const at::Tensor ours = model->next_logits(ids, cache, context);
    const at::Tensor window = all.narrow(0, window_start, n - window_start).unsqueeze(0);
    const at::Tensor expected = model->forward(window).select(1, n - window_start - 1).squeeze(0);
    EXPECT_TRUE(at::allclose(ours, expected, 1e-5, 1e-5)) << "after " << n << " ids";
    EXPECT_EQ(cache.length(), n - window_start);
    if (n < 30) ids.push_back(all[n].item<int64_t>());
  }
}

TEST(GPT2, NamedShapes) {
  // Presets by name are the presets.
  EXPECT_EQ(GPT2Config::named("gpt2-xl").num_parameters(), 1557611200);
  // The size anchors of the GPU issue: L32 C4096 with head size 128 is 6.65B.
  const GPT2Config big = GPT2Config::named("L32-C4096-H32");
  EXPECT_EQ(big.n_layer, 32);
  EXPECT_EQ(big.n_embd, 4096);
  EXPECT_EQ(big.n_head, 32);
  EXPECT_EQ(big.n_positions, 1024);
  EXPECT_EQ(big.vocab_size, 50257);
  EXPECT_NEAR(static_cast<double>(big.num_parameters()), 6.65e9, 0.01e9);
  EXPECT_EQ(big.num_parameters(), count_from_shapes(big));
  const GPT2Config wide = GPT2Config::named("L36-C2560");
  EXPECT_EQ(wide.n_head, 40);  // width / 64
  EXPECT_NEAR(static_cast<double>(wide.num_parameters()), 2.97e9, 0.01e9);
  const GPT2Config context = GPT2Config::named("L2-C128-H2-T64");
  EXPECT_EQ(context.n_positions, 64);
  EXPECT_EQ(GPT2(context)->num_parameters(), count_from_shapes(context));
  // Every malformed name is refused with the text, the presets and the syntax.
  for (const char* bad : {"", "L", "L32", "C4096", "L32-C", "L32-C4096-", "L32-H4-C128",
                          "L32-C4096-H32-H32", "L0-C128", "L2-C100", "L2-C128-H3", "L2-C128-X4",
                          "L2-C128-T0", "L99999999-C128", "gpt3", "l2-c128"}) {
    try {
      (void)GPT2Config::named(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string("\"") + bad + "\""), std::string::npos) << message;
      EXPECT_NE(message.find("gpt2-medium"), std::string::npos) << message;
      EXPECT_NE(message.find("L<layers>-C<width>"), std::string::npos) << message;
    }
  }
}

TEST(GPT2, PresetParameterCounts) {
  // HF's GPT2LMHeadModel.num_parameters() for the public checkpoints.
  const std::vector<std::pair<std::string, int64_t>> hf = {{"gpt2", 124439808},
                                                           {"gpt2-medium", 354823168},
                                                           {"gpt2-large", 774030080},
                                                           {"gpt2-xl", 1557611200}};
  for (const auto& [name, count] : hf) {
    EXPECT_EQ(count_from_shapes(GPT2Config::preset(name)), count) << name;
    EXPECT_EQ(GPT2Config::preset(name).num_parameters(), count) << name;  // without building
  }
  for (const auto& name : GPT2Config::preset_names()) {
    const auto c = GPT2Config::preset(name);
    EXPECT_EQ(c.vocab_size, 50257) << name;
    EXPECT_EQ(c.n_embd % c.n_head, 0) << name;
    std::cout << "[ preset   ] " << name << ": " << c.n_layer << " layers, " << c.n_head
              << " heads, n_embd " << c.n_embd << ", n_positions " << c.n_positions << ", "
              << count_from_shapes(c) << " parameters" << std::endl;
  }
  const auto tiny = GPT2Config::preset("gpt2-tiny");
  EXPECT_EQ(tiny.n_layer, 4);
  EXPECT_EQ(tiny.n_head, 4);
  EXPECT_EQ(tiny.n_embd, 128);
  EXPECT_EQ(tiny.n_positions, 256);
  const auto mini = GPT2Config::preset("gpt2-mini");
  EXPECT_EQ(mini.n_layer, 6);
  EXPECT_EQ(mini.n_head, 6);
  EXPECT_EQ(mini.n_embd, 384);
  EXPECT_EQ(mini.n_positions, 256);
  EXPECT_EQ(GPT2Config::preset("gpt2").n_positions, 1024);
  // The small ones, built for real.
  EXPECT_EQ(GPT2(tiny)->num_parameters(), count_from_shapes(tiny));
  EXPECT_EQ(GPT2(mini)->num_parameters(), count_from_shapes(mini));
  EXPECT_EQ(tiny.num_parameters(), count_from_shapes(tiny));
  EXPECT_EQ(mini.num_parameters(), count_from_shapes(mini));
}

TEST(GPT2, FullGPT2Has124MParameters) {
  GPT2 model(GPT2Config::preset("gpt2"));  // ~500 MB of fp32
  EXPECT_EQ(model->num_parameters(), 124439808);
}

TEST(GPT2, UnknownPresetListsKnownNames) {
  const auto msg = error_message([] { GPT2Config::preset("gpt3-huge"); });
  EXPECT_NE(msg.find("gpt3-huge"), std::string::npos) << msg;
  for (const auto& name : GPT2Config::preset_names()) {
    EXPECT_NE(msg.find("\"" + name + "\""), std::string::npos) << name << " missing in: " << msg;
  }
}

TEST(GPT2, BadConfigIsRejected) {
  auto c = small_config();
  c.n_head = 5;  // 32 % 5 != 0
  const auto msg = error_message([&] { GPT2 m(c); });
  EXPECT_NE(msg.find("n_head"), std::string::npos) << msg;
}

TEST(GPT2, InitialisationStatistics) {
  torch::manual_seed(0);
  auto c = GPT2Config::preset("gpt2-tiny");
  GPT2 model(c);
  at::NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  auto& t = model->transformer;
  EXPECT_NEAR(t->wte->weight.std().item<double>(), 0.02, 0.0005);
  EXPECT_NEAR(t->wte->weight.mean().item<double>(), 0.0, 0.0005);
  EXPECT_NEAR(t->wpe->weight.std().item<double>(), 0.02, 0.001);
  for (const auto& m : *t->h) {
    auto* b = m->as<BlockImpl>();
    EXPECT_NEAR(b->attn->c_attn->weight.std().item<double>(), 0.02, 0.001);
    EXPECT_NEAR(b->mlp->c_fc->weight.std().item<double>(), 0.02, 0.001);
    EXPECT_NEAR(b->attn->c_proj->weight.std().item<double>(), proj_std, 0.0005);
    EXPECT_NEAR(b->mlp->c_proj->weight.std().item<double>(), proj_std, 0.0005);
    for (const auto& bias : {b->attn->c_attn->bias, b->attn->c_proj->bias, b->mlp->c_fc->bias,
                             b->mlp->c_proj->bias, b->ln_1->bias, b->ln_2->bias}) {
      EXPECT_EQ(bias.abs().max().item<float>(), 0.0f);
    }
    EXPECT_TRUE(b->ln_1->weight.eq(1).all().item<bool>());
    EXPECT_TRUE(b->ln_2->weight.eq(1).all().item<bool>());
  }
  EXPECT_TRUE(t->ln_f->weight.eq(1).all().item<bool>());
  EXPECT_TRUE(t->ln_f->bias.eq(0).all().item<bool>());
}

TEST(GPT2, SameSeedSameModel) {
  const auto c = small_config();
  torch::manual_seed(1234);
  GPT2 a(c);
  torch::manual_seed(1234);
  GPT2 b(c);
  torch::manual_seed(4321);
  GPT2 d(c);
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  const auto pd = d->named_parameters();
  bool any_differs = false;
  for (const auto& item : pa) {
    EXPECT_TRUE(at::equal(item.value(), pb[item.key()])) << item.key();
    if (!at::equal(item.value(), pd[item.key()])) any_differs = true;
  }
  EXPECT_TRUE(any_differs);
}

TEST(GPT2, ForwardShapeAndInitialLoss) {
  torch::manual_seed(0);
  const auto c = GPT2Config::preset("gpt2-tiny");
  GPT2 model(c);
  const auto idx = random_ids(2, 64, c.vocab_size);
  const auto targets = random_ids(2, 64, c.vocab_size);
  const auto logits = model->forward(idx);
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, 64, c.vocab_size}));
  EXPECT_EQ(logits.scalar_type(), at::kFloat);
  const auto loss = model->loss(logits, targets);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_NEAR(loss.item<double>(), std::log(static_cast<double>(c.vocab_size)), 0.5);
}

TEST(GPT2, Causality) {
  torch::manual_seed(0);
  const auto c = small_config();
  GPT2 model(c);
  model->eval();
  const int64_t T = 16;
  const auto idx = random_ids(2, T, c.vocab_size);
  const auto base = model->forward(idx);
  for (int64_t t : {0, 5, 14}) {
    auto changed = idx.clone();
    changed.narrow(1, t + 1, T - t - 1).copy_(random_ids(2, T - t - 1, c.vocab_size));
    changed.select(1, t + 1).add_(1).remainder_(c.vocab_size);  // at least one change
    const auto out = model->forward(changed);
    EXPECT_TRUE(at::allclose(out.narrow(1, 0, t + 1), base.narrow(1, 0, t + 1), 1e-5, 1e-6))
        << "prefix up to t=" << t << " changed";
    EXPECT_FALSE(at::allclose(out.narrow(1, t + 1, 1), base.narrow(1, t + 1, 1), 1e-5, 1e-6))
        << "position t+1=" << t + 1 << " unchanged";
  }
}

TEST(GPT2, TiedWeightsGetBothGradients) {
  torch::manual_seed(0);
  const auto c = small_config();
  GPT2 model(c);
  const auto idx = random_ids(2, 8, 10);  // only ids < 10 are embedded
  const auto targets = random_ids(2, 8, c.vocab_size);

  // Reference: the embedding path and the head path through separate leaves.
  auto& wte = model->transformer->wte->weight;
  const auto head_w = wte.detach().clone().requires_grad_(true);
  const auto hidden = model->transformer->forward(idx);
  const auto ref_loss = model->loss(at::matmul(hidden, head_w.t()), targets);
  ref_loss.backward();
  const auto emb_grad = wte.grad().clone();
  const auto head_grad = head_w.grad().clone();
  model->zero_grad();

  const auto loss = model->loss(model->forward(idx), targets);
  EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), 1e-6);
  loss.backward();
  const auto grad = wte.grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_TRUE(at::allclose(grad, emb_grad + head_grad, 1e-5, 1e-7));
  // Rows never embedded still get a gradient (from the head); embedded rows get both.
  EXPECT_GT(grad.narrow(0, 10, c.vocab_size - 10).abs().sum().item<double>(), 0.0);
  EXPECT_GT(emb_grad.narrow(0, 0, 10).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(emb_grad.narrow(0, 10, c.vocab_size - 10).abs().sum().item<double>(), 0.0);
}

// forward_loss (the fused head and loss, Note [Fused LM-head cross-entropy]) against
// loss(forward): the loss and every parameter's gradient, in fp32 and bf16, for a batch larger
// than one block of rows (GPT-2's vocabulary, so a block is 166 rows) and for a small one.
TEST(GPT2, FusedHeadLossMatchesLogitsThenLoss) {
  for (const bool bf16 : {false, true}) {
    for (const int64_t rows : {int64_t{3}, int64_t{2 * 200}}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16 " : "fp32 ") + std::to_string(rows) + " rows");
      torch::manual_seed(3);
      GPT2Config c = small_config();
      c.vocab_size = 50257;
      GPT2 model(c);
      if (bf16) model->to(at::kBFloat16);
      const int64_t T = rows > 100 ? 20 : 3;
      const auto idx = random_ids(rows / T, T, c.vocab_size);
      const auto targets = random_ids(rows / T, T, c.vocab_size);
      const auto reference = model->loss(model->forward(idx), targets);
      reference.backward();
      std::vector<at::Tensor> expected;
      for (const auto& p : model->parameters()) expected.push_back(p.grad().clone());
      model->zero_grad();
      const auto fused = model->forward_loss(idx, targets);
      EXPECT_EQ(fused.scalar_type(), at::kFloat);
      EXPECT_NEAR(fused.item<double>(), reference.item<double>(),
                  (bf16 ? 1e-3 : 1e-6) * reference.item<double>());
      fused.backward();
      const auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        const auto got = params[i].grad().to(at::kFloat);
        const auto want = expected[i].to(at::kFloat);
        const double error = (got - want).norm().item<double>() / want.norm().item<double>();
        EXPECT_LE(error, bf16 ? 5e-2 : 1e-5) << "parameter " << i;  // bf16: rounding differs
      }
      // Without grad mode: the loss alone, nothing kept for backward.
      at::NoGradGuard no_grad;
      EXPECT_NEAR(model->forward_loss(idx, targets).item<double>(), fused.item<double>(),
                  1e-6 * fused.item<double>());
    }
  }
  GPT2 model(small_config());
  auto bad = random_ids(1, 8, 97);
  bad[0][1] = 300;
  const std::string msg = error_message([&] { model->forward_loss(random_ids(1, 8, 97), bad); });
  EXPECT_NE(msg.find("300"), std::string::npos) << msg;
  EXPECT_NE(error_message([&] { model->forward_loss(random_ids(1, 8, 97), random_ids(1, 7, 97)); })
                .find("shape"),
            std::string::npos);
}

// Manual causal attention with the module's own weights: softmax(q k^T / sqrt(d) + mask) v.
at::Tensor manual_attention(AttentionImpl& attn, const at::Tensor& x, int64_t n_head) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / n_head;
  const auto qkv = at::matmul(x, attn.c_attn->weight) + attn.c_attn->bias;
  auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * C, C).reshape({B, T, n_head, hd}).permute({0, 2, 1, 3});
  };
  const auto q = heads(0), k = heads(1), v = heads(2);
  auto att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  const auto future = at::ones({T, T}, at::TensorOptions().dtype(at::kBool)).triu(1);
  att = at::softmax(att.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
  const auto y = at::matmul(att, v).permute({0, 2, 1, 3}).reshape({B, T, C});
  return at::matmul(y, attn.c_proj->weight) + attn.c_proj->bias;
}

TEST(GPT2, AttentionMatchesManualReference) {
  torch::manual_seed(0);
  const auto c = small_config();
  GPT2 model(c);
  auto* attn = model->transformer->h[0]->as<BlockImpl>()->attn.get();
  // Non-trivial biases so they are covered too.
  {
    at::NoGradGuard g;
    attn->c_attn->bias.normal_(0, 0.1);
    attn->c_proj->bias.normal_(0, 0.1);
  }
  const auto x = at::randn({3, 17, c.n_embd});
  const auto got = attn->forward(x);
  const auto want = manual_attention(*attn, x, c.n_head);
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5))
      << "max diff " << (got - want).abs().max().item<double>();
}

TEST(GPT2, SixteenBitDtypesTrain) {
  torch::manual_seed(0);
  const auto c = GPT2Config::preset("gpt2-tiny");
  GPT2 ref(c);
  const auto idx = random_ids(2, 32, c.vocab_size);
  const auto targets = random_ids(2, 32, c.vocab_size);
  const double ref_loss = ref->loss(ref->forward(idx), targets).item<double>();
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    if (dtype == at::kHalf && !zero::test::cpu_supports_half()) {
      std::cout << "[ note ] fp16 part skipped: this libtorch has no fp16 CPU kernels\n";
      continue;
    }
    torch::manual_seed(0);
    GPT2 model(c);
    model->to(dtype);
    const auto logits = model->forward(idx);
    EXPECT_EQ(logits.scalar_type(), dtype);
    const auto loss = model->loss(logits, targets);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    EXPECT_TRUE(std::isfinite(loss.item<double>())) << dtype;
    EXPECT_NEAR(loss.item<double>(), ref_loss, 0.05) << dtype;
    loss.backward();
    for (const auto& item : model->named_parameters()) {
      const auto& g = item.value().grad();
      ASSERT_TRUE(g.defined()) << item.key() << " " << dtype;
      EXPECT_EQ(g.scalar_type(), dtype) << item.key();
      EXPECT_TRUE(at::isfinite(g).all().item<bool>()) << item.key() << " " << dtype;
    }
  }
}

TEST(GPT2, InvalidInputsNameTheValue) {
  const auto c = small_config();  // vocab 97, n_positions 32
  GPT2 model(c);
  auto ids = random_ids(1, 8, c.vocab_size);
  ids[0][3] = 123;
  auto msg = error_message([&] { model->forward(ids); });
  EXPECT_NE(msg.find("123"), std::string::npos) << msg;
  EXPECT_NE(msg.find("97"), std::string::npos) << msg;

  ids[0][3] = -7;
  msg = error_message([&] { model->forward(ids); });
  EXPECT_NE(msg.find("-7"), std::string::npos) << msg;

  msg = error_message([&] { model->forward(random_ids(1, 33, c.vocab_size)); });
  EXPECT_NE(msg.find("33"), std::string::npos) << msg;
  EXPECT_NE(msg.find("32"), std::string::npos) << msg;

  msg = error_message([&] { model->forward(random_ids(1, 8, c.vocab_size).to(at::kInt)); });
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;

  msg = error_message([&] { model->forward(random_ids(1, 8, c.vocab_size).view({8})); });
  EXPECT_NE(msg.find("2-D"), std::string::npos) << msg;

  const auto logits = model->forward(random_ids(1, 8, c.vocab_size));
  msg = error_message([&] { model->loss(logits, random_ids(1, 7, c.vocab_size)); });
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  auto bad_targets = random_ids(1, 8, c.vocab_size);
  bad_targets[0][0] = 500;
  msg = error_message([&] { model->loss(logits, bad_targets); });
  EXPECT_NE(msg.find("500"), std::string::npos) << msg;
}

TEST(GPT2, DropoutOnlyWhenTraining) {
  torch::manual_seed(0);
  auto c = small_config();
  c.dropout = 0.1;
  GPT2 model(c);
  const auto idx = random_ids(2, 8, c.vocab_size);
  model->train();
  EXPECT_FALSE(at::equal(model->forward(idx), model->forward(idx)));
  model->eval();
  EXPECT_TRUE(at::equal(model->forward(idx), model->forward(idx)));
  c.dropout = 0.0;
  GPT2 no_dropout(c);
  no_dropout->train();
  EXPECT_TRUE(at::equal(no_dropout->forward(idx), no_dropout->forward(idx)));
}

TEST(GPT2, AdamWStepsReduceLoss) {
  torch::manual_seed(0);
  const auto c = small_config();
  GPT2 model(c);
  const auto data = random_ids(4, 17, c.vocab_size);
  const auto idx = data.narrow(1, 0, 16);
  const auto targets = data.narrow(1, 1, 16);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    const auto loss = model->loss(model->forward(idx), targets);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
}

TEST(GPT2, TinyForwardBackwardTiming) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::manual_seed(0);
  const auto c = GPT2Config::preset("gpt2-tiny");
  GPT2 model(c);
  const auto idx = random_ids(4, 128, c.vocab_size);
  const auto targets = random_ids(4, 128, c.vocab_size);
  auto step = [&] {
    model->zero_grad();
    model->loss(model->forward(idx), targets).backward();
  };
  step();  // warm-up
  const int iters = 3;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      iters;
  std::cout << "[ timing   ] gpt2-tiny B=4 T=128 forward+backward, 1 thread: " << ms << " ms"
            << std::endl;
  at::set_num_threads(threads);
}

}  // namespace
}  // namespace zero::gpt2
