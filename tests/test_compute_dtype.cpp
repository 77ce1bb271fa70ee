// Note [Compute dtype] (zero/config.h): compute_data_type in the config, "auto" against this
// CPU's GEMM rates (zero/gemm_rates.h), and stage 3 computing in fp32 from 16-bit partitioned
// shards: equivalent to a single-process libtorch reference that computes in fp32 on the
// 16-bit-rounded master weights, with the model state and communication of the 16-bit run
// (half the fp32 run's bytes on the wire). Runs under mpirun at world sizes 1-3.
//
// ZERO_GEMM_RATES (src/common/env.h) decides what "auto" sees: ctest runs this binary once
// acting as a CPU with slow 16-bit GEMMs and once with fast ones (tests/engine.cmake).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine_harness.h"
#include "test_util.h"
#include "zero/error.h"
#include "zero/gemm_rates.h"
#include "zero/shard.h"
#include "zero/sharded_init.h"

namespace zero::test {
namespace {

constexpr const char* kPartitioned = "\"stage3_param_persistence_threshold\": 0";

std::string config_text(const std::string& precision, int stage, const std::string& extra = "") {
  std::string text = R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}, )" + precision +
                     R"(, "zero_optimization": {"stage": )" + std::to_string(stage) + "}";
  if (!extra.empty()) text += ", " + extra;
  return text + "}";
}

std::string error_of(const std::string& text) {
  try {
    parse_config(text, 1, "ds_config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

bool sixteen_bit_is_slow_here() { return measured_gemm_rates().slow(at::kBFloat16); }

TEST(ComputeDtype, DefaultsToTheParameterDtype) {
  const Config plain = parse_config(config_text(R"("bf16": {"enabled": true})", 2), 1);
  EXPECT_EQ(plain.param_dtype, at::kBFloat16);
  EXPECT_EQ(plain.compute_dtype, at::kBFloat16);
  EXPECT_FALSE(plain.compute_dtype_auto);
  EXPECT_NE(plain.effective_json.find(R"("compute_data_type":"bf16")"), std::string::npos);
  const Config fp32 = parse_config(config_text(R"("fp16": {"enabled": false})", 0), 1);
  EXPECT_EQ(fp32.compute_dtype, at::kFloat);
}

TEST(ComputeDtype, Fp32FromSixteenBitAtStageThreeOnly) {
  const Config c = parse_config(
      config_text(R"("bf16": {"enabled": true}, "compute_data_type": "FP32")", 3), 1);
  EXPECT_EQ(c.param_dtype, at::kBFloat16);
  EXPECT_EQ(c.communication_dtype, at::kBFloat16);
  EXPECT_EQ(c.compute_dtype, at::kFloat);
  // The effective config parses back to itself.
  EXPECT_EQ(parse_config(c.effective_json, 1).effective_json, c.effective_json);
  // Stages 0-2 compute with the parameters themselves: refused, naming the key, the stage
  // and what to do instead.
  const std::string stage2 =
      error_of(config_text(R"("bf16": {"enabled": true}, "compute_data_type": "fp32")", 2));
  for (const char* part : {"ds_config.json: compute_data_type = \"fp32\" with bf16.enabled",
                           "needs zero_optimization.stage 3 (got 2)", "bf16.enabled false",
                           "\"auto\""}) {
    EXPECT_NE(stage2.find(part), std::string::npos) << stage2;
  }
  // No autocast: 16-bit compute from fp32 parameters, or one 16-bit dtype from the other.
  const std::string autocast = error_of(config_text(R"("compute_data_type": "bf16")", 3));
  EXPECT_NE(autocast.find("compute_data_type = \"bf16\" with fp32 parameters is not supported"),
            std::string::npos)
      << autocast;
  EXPECT_NE(autocast.find("set bf16.enabled true"), std::string::npos) << autocast;
  const std::string mixed = error_of(
      config_text(R"("fp16": {"enabled": true}, "compute_data_type": "bf16")", 3));
  EXPECT_NE(mixed.find("with fp16 parameters is not supported"), std::string::npos) << mixed;
  const std::string bad = error_of(config_text(R"("compute_data_type": "int8")", 3));
  EXPECT_NE(bad.find("compute_data_type = \"int8\" is invalid; expected one of \"auto\""),
            std::string::npos)
      << bad;
  EXPECT_NE(error_of(config_text(R"("compute_data_type": 32)", 3)).find("is invalid"),
            std::string::npos);
  // null: the parameter dtype.
  EXPECT_EQ(parse_config(config_text(R"("bf16": {"enabled": true}, "compute_data_type": null)", 2),
                         1)
                .compute_dtype,
            at::kBFloat16);
}

// "auto" follows what this process measured (or what ZERO_GEMM_RATES says it measured).
TEST(ComputeDtype, AutoFollowsTheGemmRates) {
  const bool slow = sixteen_bit_is_slow_here();
  const Config stage3 =
      parse_config(config_text(R"("bf16": {"enabled": true}, "compute_data_type": "auto")", 3), 1);
  EXPECT_TRUE(stage3.compute_dtype_auto);
  EXPECT_EQ(stage3.configured_param_dtype, at::kBFloat16);
  EXPECT_EQ(stage3.param_dtype, at::kBFloat16);  // stage 3 keeps 16-bit storage either way
  EXPECT_EQ(stage3.communication_dtype, at::kBFloat16);
  EXPECT_EQ(stage3.compute_dtype, slow ? at::kFloat : at::kBFloat16);

  const Config stage2 =
      parse_config(config_text(R"("bf16": {"enabled": true}, "compute_data_type": "auto")", 2), 1);
  EXPECT_EQ(stage2.param_dtype, slow ? at::kFloat : at::kBFloat16);
  EXPECT_EQ(stage2.compute_dtype, stage2.param_dtype);
  EXPECT_EQ(stage2.communication_dtype, stage2.param_dtype);  // follows, not given
  const Config given = parse_config(
      config_text(R"("bf16": {"enabled": true}, "compute_data_type": "auto",
                     "communication_data_type": "bf16")", 2), 1);
  EXPECT_EQ(given.communication_dtype, at::kBFloat16);  // given: kept
  // fp32 parameters: nothing to decide.
  const Config fp32 = parse_config(config_text(R"("compute_data_type": "auto")", 1), 1);
  EXPECT_EQ(fp32.compute_dtype, at::kFloat);

  // The notice zero::initialize prints on rank 0.
  const std::string notice = compute_dtype_notice(stage3);
  EXPECT_NE(notice.find("zero: compute_data_type \"auto\": bf16 GEMMs run"), std::string::npos)
      << notice;
  EXPECT_NE(notice.find(slow ? "; computing in fp32 from bf16 parameters (stage 3"
                             : "; computing in bf16"),
            std::string::npos)
      << notice;
  const std::string explicit_bf16 =
      compute_dtype_notice(parse_config(config_text(R"("bf16": {"enabled": true})", 2), 1));
  if (slow) {
    for (const char* part : {"zero: warning: bf16 GEMMs run", "x slower than fp32",
                             "training computes in bf16 as configured",
                             "\"compute_data_type\": \"auto\"", "bf16.enabled false"}) {
      EXPECT_NE(explicit_bf16.find(part), std::string::npos) << explicit_bf16;
    }
  } else {
    EXPECT_EQ(explicit_bf16, "");
  }
  EXPECT_EQ(compute_dtype_notice(parse_config(config_text(R"("fp16": {"enabled": false})", 2), 1)),
            "");
}

TEST(ComputeDtype, GemmRatesDescribeThisCpu) {
  const GemmRates& rates = measured_gemm_rates();
  EXPECT_GT(rates.gflops(at::kFloat), 0);
  EXPECT_GT(rates.gflops(at::kBFloat16), 0);
  EXPECT_DOUBLE_EQ(rates.slowdown(at::kFloat), 1.0);
  EXPECT_FALSE(rates.slow(at::kFloat));
  EXPECT_EQ(rates.slow(at::kBFloat16), rates.slowdown(at::kBFloat16) >= kSlowGemmFactor);
  EXPECT_FALSE(rates.cpu_model().empty());
  const std::string line = rates.describe(at::kBFloat16);
  EXPECT_EQ(line.rfind("bf16 GEMMs run ", 0), 0u) << line;
  EXPECT_NE(line.find(rates.cpu_model()), std::string::npos) << line;
  EXPECT_NE(line.find("GFLOP/s"), std::string::npos) << line;
  EXPECT_THROW(rates.gflops(at::kDouble), Error);
}

// The single-process libtorch reference of Note [Compute dtype]: fp32 master weights updated
// by torch::optim::AdamW; every forward and backward runs in fp32 on the master weights
// rounded to `stored` (what the engine's gathers give), with the whole global batch.
RunResult run_rounded_reference(const ModelSpec& spec, const RunOptions& options, int world,
                                at::ScalarType stored) {
  RunResult result;
  result.model = spec.build();
  std::vector<at::Tensor> parameters = unique_parameters(*result.model);
  std::vector<at::Tensor> masters;
  for (const auto& p : parameters) {
    // The engine starts from the stored (rounded) values.
    masters.push_back(p.detach().to(stored).to(at::kFloat).requires_grad_(true));
  }
  torch::optim::AdamW optimizer(
      masters, torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
  auto round_into_model = [&] {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters.size(); ++i) {
      parameters[i].copy_(masters[i].to(stored).to(at::kFloat));
    }
  };
  const int64_t rows = world * options.micro_batch * options.gradient_accumulation_steps;
  for (int step = 0; step < options.steps; ++step) {
    round_into_model();
    auto [x, y] = spec.batch(step, rows);
    for (auto& p : parameters) p.mutable_grad() = at::Tensor();
    at::Tensor loss = spec.loss(*result.model, x, y);
    loss.backward();
    for (size_t i = 0; i < parameters.size(); ++i) {
      masters[i].mutable_grad() = parameters[i].grad().defined() ? parameters[i].grad().clone()
                                                                  : at::zeros_like(masters[i]);
    }
    double norm = 0;
    if (options.gradient_clipping > 0) {
      norm = torch::nn::utils::clip_grad_norm_(masters, options.gradient_clipping);
    }
    optimizer.step();
    result.losses.push_back(loss.item<double>());
    result.norms.push_back(norm);
  }
  round_into_model();
  result.parameters = flatten_parameters(*result.model);
  return result;
}

// Stage 3, bf16 or fp16 shards, fp32 compute, fp32 gradient communication: every step's loss
// and the final (gathered, widened) parameters equal the rounded reference's.
TEST(ComputeDtype, Stage3Fp32ComputeMatchesRoundedReference) {
  auto comm = world();
  for (const bool gpt2 : {false, true}) {
    for (const char* dtype : {"bf16", "fp16"}) {
      SCOPED_TRACE(std::string(gpt2 ? "gpt2 " : "mlp ") + dtype);
      const ModelSpec spec = gpt2 ? tiny_gpt2_spec() : mlp_spec();
      RunOptions options;
      options.stage = 3;
      options.dtype = dtype;
      options.steps = 5;
      options.gradient_clipping = 1.0;
      options.extra_top_json = R"("compute_data_type": "fp32", "communication_data_type": "fp32")";
      options.extra_zero_json = std::string(kPartitioned) + R"(, "overlap_comm": true)";
      if (std::string(dtype) == "fp16") {
        // A static scale of 1: no step is skipped, so the reference needs no scaler.
        options.extra_top_json += R"(, "fp16": {"enabled": true, "loss_scale": 1})";
        options.dtype = "fp32";  // the fp16 section comes from extra_top_json
      }
      const RunResult run = run_engine(spec, options, comm);
      const RunResult reference = run_rounded_reference(
          spec, options, comm->size(), std::string(dtype) == "bf16" ? at::kBFloat16 : at::kHalf);
      ASSERT_EQ(run.losses.size(), reference.losses.size());
      for (size_t s = 0; s < run.losses.size(); ++s) {
        EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5 * std::abs(reference.losses[s]))
            << "step " << s;
        EXPECT_NEAR(run.norms[s], reference.norms[s], 1e-5 * reference.norms[s]) << "step " << s;
      }
      // Rounding the master weights may flip the last bit of an element whose master differs
      // from the reference's in the 7th digit (the optimizers are not bitwise the same).
      EXPECT_LE(relative_error(run.parameters, reference.parameters), 1e-4);
      // The parameters the model computed with are the 16-bit values, widened.
      const at::ScalarType stored = std::string(dtype) == "bf16" ? at::kBFloat16 : at::kHalf;
      EXPECT_TRUE(at::equal(run.parameters, run.parameters.to(stored).to(at::kFloat)));
    }
  }
}

// The model state and the bytes on the wire are those of the 16-bit run: the shards,
// gradient shard, master and Adam state are the same tensors, every all-gather and
// reduce-scatter moves 16-bit elements (half of the fp32 run's bytes). Only what is
// gathered for compute is fp32 (twice the 16-bit run's gathered bytes).
TEST(ComputeDtype, Stage3Fp32ComputeKeepsSixteenBitStateAndCommunication) {
  auto comm = world();
  const ModelSpec spec = mlp_spec();  // every parameter in a unit: nothing persistent
  RunOptions options;
  options.stage = 3;
  options.steps = 3;
  options.extra_zero_json = std::string(kPartitioned) + R"(, "stage3_max_reuse_distance": 0)";
  const RunResult fp32 = run_engine(spec, options, comm);
  options.dtype = "bf16";
  const RunResult bf16 = run_engine(spec, options, comm);
  options.extra_top_json = R"("compute_data_type": "fp32")";
  const RunResult policy = run_engine(spec, options, comm);

  const ModelStateBytes& p = policy.state_bytes;
  const ModelStateBytes& b = bf16.state_bytes;
  EXPECT_EQ(p.params, b.params);
  EXPECT_EQ(p.grads, b.grads);
  EXPECT_EQ(p.master_params, b.master_params);
  EXPECT_EQ(p.optimizer_state, b.optimizer_state);
  EXPECT_EQ(p.total(), b.total());
  EXPECT_EQ(p.gathered_peak, 2 * b.gathered_peak);
  // 16 bytes per owned element in all three (fp32: 4 param/master + 4 grad + 8 Adam).
  EXPECT_EQ(p.total(), fp32.state_bytes.total());

  const CommStats moved_policy = policy.engine->communication();
  const CommStats moved_bf16 = bf16.engine->communication();
  const CommStats moved_fp32 = fp32.engine->communication();
  EXPECT_EQ(moved_policy.all_gather.bytes, moved_bf16.all_gather.bytes);
  EXPECT_EQ(moved_policy.reduce_scatter.bytes, moved_bf16.reduce_scatter.bytes);
  EXPECT_EQ(2 * moved_policy.all_gather.bytes, moved_fp32.all_gather.bytes);
  EXPECT_EQ(2 * moved_policy.reduce_scatter.bytes, moved_fp32.reduce_scatter.bytes);
  if (comm->size() > 1) {
    EXPECT_GT(moved_policy.all_gather.bytes, 0);
  }
}

// Built under zero::ShardedInit (each unit partitioned as it is declared, its full copy fp32),
// training is bitwise the same as partitioning the finished model; a ShardedInit made for bf16
// compute is refused by an engine computing in fp32.
TEST(ComputeDtype, Stage3Fp32ComputeWithShardedInit) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.dtype = "bf16";
  options.steps = 3;
  options.extra_top_json = R"("compute_data_type": "fp32")";
  options.extra_zero_json = kPartitioned;
  const ModelSpec plain = tiny_gpt2_spec();
  const RunResult expected = run_engine(plain, options, comm);
  const Config config = parse_config(make_config_json(options), comm->size(), "test config");
  ModelSpec sharded = plain;
  sharded.build = [&] {
    ShardedInit scope(config, comm);
    return plain.build();
  };
  const RunResult run = run_engine(sharded, options, comm);
  EXPECT_TRUE(at::equal(run.parameters, expected.parameters));
  EXPECT_EQ(run.state_bytes.total(), expected.state_bytes.total());

  RunOptions bf16_compute = options;
  bf16_compute.extra_top_json = "";
  std::shared_ptr<torch::nn::Module> model;
  {
    ShardedInit scope(
        parse_config(make_config_json(bf16_compute), comm->size(), "bf16 compute"), comm);
    model = plain.build();
  }
  try {
    initialize(model, config, comm);
    ADD_FAILURE() << "expected zero::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 parameters computed in bf16"), std::string::npos)
        << e.what();
  }
}

// On tests' tiny GPT-2, fp32 compute from bf16 shards stays close to plain fp32 training. It
// cannot be bitwise: the weights it computes with are the bf16 roundings of the master
// weights (16 bits per element is all the wire carries), and that rounding, not the compute
// precision, is most of the difference; bf16 compute measured about as close (1.5e-4 vs
// 1.6e-4 relative). The numbers go to the log.
TEST(ComputeDtype, Stage3Fp32ComputeTracksTheFp32LossCurve) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  RunOptions options;
  options.stage = 3;
  options.steps = 8;
  options.lr = 3e-3;
  options.fixed_batch = true;  // learn something: the loss falls step after step
  options.extra_zero_json = kPartitioned;
  const RunResult fp32 = run_engine(spec, options, comm);
  options.dtype = "bf16";
  const RunResult bf16 = run_engine(spec, options, comm);
  options.extra_top_json = R"("compute_data_type": "fp32")";
  const RunResult policy = run_engine(spec, options, comm);
  double worst_policy = 0, worst_bf16 = 0;
  for (size_t s = 0; s < fp32.losses.size(); ++s) {
    worst_policy = std::max(worst_policy, std::abs(policy.losses[s] - fp32.losses[s]) / fp32.losses[s]);
    worst_bf16 = std::max(worst_bf16, std::abs(bf16.losses[s] - fp32.losses[s]) / fp32.losses[s]);
  }
  if (comm->rank() == 0) {
    std::printf("largest relative loss difference from fp32 over %d steps: fp32 compute from "
                "bf16 shards %.2e, bf16 compute %.2e (losses %.6f -> %.6f)\n",
                options.steps, worst_policy, worst_bf16, fp32.losses.front(), fp32.losses.back());
  }
  EXPECT_LT(fp32.losses.back(), fp32.losses.front() - 0.1);
  EXPECT_LE(worst_policy, 1e-3);
}

}  // namespace
}  // namespace zero::test
