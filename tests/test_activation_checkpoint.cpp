// Activation checkpointing (zero/activation_checkpointing.h): bitwise the same gradients,
// losses and parameters as without it, alone and under the engine at stages 0-3, with dropout
// (the recompute draws the same masks), and at stage 3 the recompute's gather recorded in the
// trace. Run under mpirun at world sizes 1-3.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include "engine_harness.h"
#include "test_util.h"
#include "zero/activation_checkpointing.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gpt2.h"

namespace zero::test {
namespace {

gpt2::GPT2Config small_gpt2(double dropout, int64_t checkpointed_blocks) {
  gpt2::GPT2Config config;
  config.vocab_size = 97;
  config.n_positions = 16;
  config.n_embd = 32;
  config.n_layer = 3;
  config.n_head = 4;
  config.dropout = dropout;
  config.checkpointed_blocks = checkpointed_blocks;
  return config;
}

ModelSpec gpt2_spec(double dropout, int64_t checkpointed_blocks) {
  ModelSpec spec = tiny_gpt2_spec();
  spec.build = [dropout, checkpointed_blocks] {
    torch::manual_seed(4321);
    return std::static_pointer_cast<torch::nn::Module>(
        std::make_shared<gpt2::GPT2Impl>(small_gpt2(dropout, checkpointed_blocks)));
  };
  spec.loss = [](torch::nn::Module& model, const at::Tensor& x, const at::Tensor& y) {
    return dynamic_cast<gpt2::GPT2Impl&>(model).forward_loss(x, y);
  };
  return spec;
}

// Gradients of one forward and backward, in named_parameters() order.
std::vector<at::Tensor> gradients(double dropout, int64_t checkpointed_blocks) {
  const ModelSpec spec = gpt2_spec(dropout, checkpointed_blocks);
  auto model = spec.build();
  auto [x, y] = spec.batch(0, 3);
  torch::manual_seed(99);  // the dropout masks
  spec.loss(*model, x, y).backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
  // What the run drew after its forward must not depend on the recompute.
  grads.push_back(at::rand({4}));
  return grads;
}

TEST(ActivationCheckpointing, GradientsAreBitwiseTheSameWithDropout) {
  for (double dropout : {0.0, 0.1}) {
    SCOPED_TRACE("dropout " + std::to_string(dropout));
    const std::vector<at::Tensor> plain = gradients(dropout, 0);
    for (int64_t blocks : {1, 3}) {
      const std::vector<at::Tensor> checkpointed = gradients(dropout, blocks);
      ASSERT_EQ(plain.size(), checkpointed.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << "tensor " << i << ", " << blocks
                                                          << " blocks checkpointed";
      }
    }
  }
  // With dropout the masks matter: a recompute drawing other masks would differ.
  EXPECT_FALSE(at::equal(gradients(0.1, 0)[0], gradients(0.0, 0)[0]));
}

TEST(ActivationCheckpointing, CheckpointedModuleAndEvaluation) {
  torch::manual_seed(1);
  torch::nn::Linear linear(5, 3);
  const at::Tensor x = at::randn({4, 5}).requires_grad_(true);
  const at::Tensor expected = at::tanh(linear->forward(x)).sum();
  expected.backward();
  const at::Tensor grad_x = x.grad().clone();
  const at::Tensor grad_w = linear->weight.grad().clone();
  x.mutable_grad().reset();
  linear->weight.mutable_grad().reset();

  reset_activation_checkpoint_profile();
  configure_activation_checkpointing({/*cpu_checkpointing=*/false, /*profile=*/true});
  const at::Tensor y = at::tanh(checkpointed(linear, x)).sum();
  EXPECT_TRUE(at::equal(y, expected));
  y.backward();
  EXPECT_TRUE(at::equal(x.grad(), grad_x));
  EXPECT_TRUE(at::equal(linear->weight.grad(), grad_w));
  const ActivationCheckpointProfile profile = activation_checkpoint_profile();
  EXPECT_EQ(profile.forwards, 1);
  EXPECT_EQ(profile.recomputes, 1);
  EXPECT_GT(profile.forward_seconds, 0.0);
  configure_activation_checkpointing({});

  {  // Evaluation: the body just runs, and nothing needs a backward.
    at::NoGradGuard no_grad;
    EXPECT_FALSE(checkpointed(linear, x).requires_grad());
  }
  // Inputs that do not require grad still give the parameters theirs.
  linear->weight.mutable_grad().reset();
  checkpointed(linear, x.detach()).sum().backward();
  EXPECT_TRUE(linear->weight.grad().defined());
  EXPECT_THROW(checkpoint(CheckpointBody{}, {x}), Error);
}

// Losses and parameters of the engine with and without checkpointing: the same bits, at
// every stage and with dropout.
TEST(ActivationCheckpointing, EngineIsBitwiseTheSameAtEveryStage) {
  auto comm = world();
  for (int stage : {0, 1, 2, 3}) {
    for (double dropout : {0.0, 0.1}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " dropout " + std::to_string(dropout));
      RunOptions options;
      options.stage = stage;
      options.steps = 3;
      options.gradient_accumulation_steps = stage == 2 ? 2 : 1;
      options.gradient_clipping = 1.0;
      if (stage == 3) {
        options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
      }
      torch::manual_seed(7 + comm->rank());
      const RunResult plain = run_engine(gpt2_spec(dropout, 0), options, comm);
      torch::manual_seed(7 + comm->rank());
      reset_activation_checkpoint_profile();
      const RunResult checkpointed = run_engine(gpt2_spec(dropout, 2), options, comm);
      // 2 blocks x (steps x accumulation) micro-steps, each recomputed once.
      const int64_t calls = 2 * options.steps * options.gradient_accumulation_steps;
      EXPECT_EQ(activation_checkpoint_profile().forwards, calls);
      EXPECT_EQ(activation_checkpoint_profile().recomputes, calls);
      EXPECT_EQ(plain.losses, checkpointed.losses);
      EXPECT_TRUE(at::equal(plain.parameters, checkpointed.parameters));
    }
  }
}

// Stage 3: the recompute gathers the unit again during backward as a recorded fetch, so later
// micro-steps replay the trace (prefetching) without departing from it, and a step moves the
// same bytes as without checkpointing: the recompute's gather replaces the backward's.
TEST(ActivationCheckpointing, Stage3RecomputeIsPartOfTheTrace) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.steps = 3;
  options.extra_zero_json =
      "\"stage3_param_persistence_threshold\": 0, \"overlap_comm\": true, "
      "\"stage3_prefetch_bucket_size\": 100000, \"stage3_max_reuse_distance\": 0";
  const RunResult plain = run_engine(gpt2_spec(0.0, 0), options, comm);
  testing::internal::CaptureStderr();
  const RunResult checkpointed = run_engine(gpt2_spec(0.0, 3), options, comm);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("unit order changed"), std::string::npos) << err;
  EXPECT_EQ(plain.losses, checkpointed.losses);
  EXPECT_TRUE(at::equal(plain.parameters, checkpointed.parameters));
  const CommStats a = plain.engine->communication();
  const CommStats b = checkpointed.engine->communication();
  EXPECT_EQ(a.all_gather.bytes, b.all_gather.bytes);
  EXPECT_EQ(a.reduce_scatter.bytes, b.reduce_scatter.bytes);
}

// A parameter used inside a checkpointed call and again outside it gets two gradients in one
// backward (the recompute's backward is its own): refused by name at every stage instead of
// being reduced wrong.
TEST(ActivationCheckpointing, ParameterUsedInsideAndOutsideIsRefused) {
  auto comm = world();
  for (int stage : {0, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    torch::manual_seed(3);
    auto model = std::make_shared<torch::nn::LinearImpl>(4, 4);
    declare_unit(*model);
    RunOptions options;
    options.stage = stage;
    auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"), comm);
    const at::Tensor x = at::randn({2, 4});
    torch::nn::Linear holder(model);
    const at::Tensor y = checkpointed(holder, x);
    const at::Tensor loss = (zero::run(holder, y) + y).sum();
    try {
      engine->backward(loss);
      ADD_FAILURE() << "a parameter's second gradient was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("received its gradient twice"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ActivationCheckpointing, ConfigKeys) {
  const Config config = parse_config(
      R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "activation_checkpointing": {"number_checkpoints": 4,
          "profile": true, "cpu_checkpointing": true, "partition_activations": false}})",
      1, "test config");
  EXPECT_TRUE(config.activation_checkpointing.enabled);
  EXPECT_EQ(config.activation_checkpointing.number_checkpoints, 4);
  EXPECT_TRUE(config.activation_checkpointing.profile);
  EXPECT_TRUE(config.activation_checkpointing.cpu_checkpointing);
  EXPECT_FALSE(parse_config(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})", 1, "c").activation_checkpointing.enabled);
  for (const char* key : {"partition_activations", "contiguous_memory_optimization",
                          "synchronize_checkpoint_boundary"}) {
    const std::string json = std::string(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "activation_checkpointing": {")") +
                             key + R"(": true}})";
    // Keys of model-parallel checkpointing: accepted, with a note saying they change nothing.
    const Config with_key = parse_config(json, 1, "test config");
    ASSERT_EQ(with_key.notes.size(), 1u) << key;
    EXPECT_NE(with_key.notes[0].find(std::string(key) + " = true changes nothing in zero"),
              std::string::npos) << with_key.notes[0];
  }
  EXPECT_THROW(parse_config(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "activation_checkpointing": {"number_checkpoints": -1}})",
                            1, "c"),
               Error);
  EXPECT_THROW(parse_config(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "activation_checkpointing": {"profil": true}})",
                            1, "c"),
               Error);
}

}  // namespace
}  // namespace zero::test
