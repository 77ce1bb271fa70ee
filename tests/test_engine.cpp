// Engine behaviour beyond fp32 equivalence: mixed precision and loss scaling, model-state
// memory per the ZeRO formulas, communication volume, start-up agreement, misuse errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "engine_harness.h"
#include "test_util.h"
#include "zero/error.h"
#include "zero/gpt2.h"
#include "zero/memory.h"
#include "zero/scheduler.h"
#include "zero/shard.h"

namespace zero::test {
namespace {

// bf16 and fp16 training on the same data tracks the fp32 loss curve.
TEST(MixedPrecision, Bf16AndFp16TrackFp32LossCurve) {
  auto comm = world();
  RunOptions options;
  options.stage = 2;
  options.steps = 12;
  options.lr = 3e-3;
  options.micro_batch = 4;
  options.fixed_batch = true;
  const ModelSpec spec = tiny_gpt2_spec();
  const RunResult fp32 = run_engine(spec, options, comm);
  EXPECT_LT(fp32.losses.back(), fp32.losses.front() - 0.05) << "fp32 run did not learn";
  for (const char* dtype : {"bf16", "fp16"}) {
    SCOPED_TRACE(dtype);
    if (std::string(dtype) == "fp16" && !cpu_supports_half()) continue;  // libtorch 1.x
    options.dtype = dtype;
    const RunResult run = run_engine(spec, options, comm);
    ASSERT_EQ(run.losses.size(), fp32.losses.size());
    for (size_t s = 0; s < run.losses.size(); ++s) {
      EXPECT_NEAR(run.losses[s], fp32.losses[s], 0.02 * fp32.losses[s]) << "step " << s;
    }
    EXPECT_EQ(run.engine->skipped_steps(), 0);
    EXPECT_EQ(run.engine->model_state_bytes().master_params > 0, true);
  }
}

// An overflow on one rank skips the step on every rank and lowers the scale (hysteresis 1:
// halves at once; the default hysteresis 2 first spends one unit).
TEST(MixedPrecision, InjectedFp16OverflowSkipsStepOnEveryRank) {
  if (!cpu_supports_half()) GTEST_SKIP() << "this libtorch has no fp16 CPU kernels (1.x)";
  auto comm = world();
  for (int hysteresis : {1, 2}) {
    SCOPED_TRACE("hysteresis " + std::to_string(hysteresis));
    RunOptions options;
    options.stage = 2;
    options.dtype = "fp16";
    options.fp16_hysteresis = hysteresis;
    auto model = mlp_spec().build();
    const Config config = parse_config(make_config_json(options), comm->size(), "test config");
    auto engine = initialize(model, config, comm);
    const ModelSpec spec = mlp_spec();
    const int victim = comm->size() - 1;
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = spec.batch(step, 2);
      at::Tensor loss = spec.loss(*model, x, y);
      if (step == 1 && comm->rank() == victim) loss = loss * std::numeric_limits<float>::infinity();
      const at::Tensor before = flatten_parameters(*model);
      const double scale_before = engine->loss_scale();
      engine->backward(loss);
      engine->step();
      const at::Tensor after = flatten_parameters(*model);
      if (step == 1) {
        EXPECT_TRUE(at::equal(before, after)) << "the overflowing step must not update";
        EXPECT_EQ(engine->skipped_steps(), 1);
        EXPECT_EQ(engine->loss_scale(), hysteresis == 1 ? scale_before / 2 : scale_before);
      } else {
        EXPECT_FALSE(at::equal(before, after));
      }
    }
    EXPECT_EQ(engine->global_steps(), 2);
  }
}

// Model-state bytes per rank follow the ZeRO paper for 16-bit params with Adam:
// 16, 4 + 12/N and 2 + 14/N bytes per (padded) parameter for stages 0, 1, 2.
TEST(Memory, ModelStateBytesFollowZeroFormulas) {
  auto comm = world();
  const int n = comm->size();
  for (int stage = 0; stage <= 2; ++stage) {
    RunOptions options;
    options.stage = stage;
    options.dtype = "bf16";
    options.steps = 1;
    const RunResult run = run_engine(tiny_gpt2_spec(), options, comm);
    const ShardLayout layout = shard_layout(run.engine->num_parameters(), n, kShardAlignment);
    const int64_t p = layout.padded_numel;
    const ModelStateBytes bytes = run.engine->model_state_bytes();
    SCOPED_TRACE("stage " + std::to_string(stage));
    EXPECT_EQ(bytes.params, 2 * p);
    EXPECT_EQ(bytes.grads, stage < 2 ? 2 * p : 2 * p / n);
    EXPECT_EQ(bytes.master_params, stage == 0 ? 4 * p : 4 * p / n);
    EXPECT_EQ(bytes.optimizer_state, stage == 0 ? 8 * p : 8 * p / n);
    const int64_t expected_total = stage == 0 ? 16 * p : stage == 1 ? 4 * p + 12 * p / n
                                                                    : 2 * p + 14 * p / n;
    EXPECT_EQ(bytes.total(), expected_total);
  }
}

// Stage 2 keeps no full-size gradient after backward: measured with a counting allocator. The
// bucket buffers gradients are copied into come from the engine's pool (Note [Flat groups]),
// which keeps them for the next backward: the first backward leaves at most the buckets that
// were in flight at once (here about 4 of 2,000 elements, a quarter of the full gradient), and
// later ones reuse them and allocate nothing more.
TEST(Memory, Stage2KeepsNoFullGradientAfterBackward) {
  track_host_memory();
  auto comm = world();
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    RunOptions options;
    options.stage = stage;
    options.reduce_bucket_size = 2000;  // several buckets: the full model is ~57k elements
    auto model = tiny_gpt2_spec().build();
    auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"), comm);
    const int64_t full_grad_bytes = engine->num_parameters() * 4;
    const ModelSpec spec = tiny_gpt2_spec();
    for (int step = 0; step < 2; ++step) {
      auto [x, y] = spec.batch(step, 2);
      const int64_t before = host_memory_stats().allocated_bytes;
      engine->backward(spec.loss(*model, x, y));
      const int64_t after = host_memory_stats().allocated_bytes;
      // Stage 1 presets .grad as views of its persistent flat buffer (allocated at start-up);
      // stage 2 drops every gradient once copied into a bucket: neither grows by a full copy.
      EXPECT_LT(after - before, step == 0 ? full_grad_bytes / 2 : full_grad_bytes / 16)
          << "step " << step;
      if (stage == 2) {
        for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
      }
      engine->step();
    }
    const ModelStateBytes bytes = engine->model_state_bytes();
    if (stage == 2) {
      EXPECT_LT(bytes.grads, full_grad_bytes / comm->size() + 64 * 4);
    } else {
      EXPECT_GE(bytes.grads, full_grad_bytes);
    }
  }
}

// Counted bytes per step for stages 1 and 2 equal reduce-scatter + all-gather: (N-1)/N of the
// padded buffer each; stage 0 moves the same through its all-reduce (RS + AG per bucket).
TEST(Communication, BytesPerStepEqualReduceScatterPlusAllGather) {
  auto comm = world();
  const int n = comm->size();
  for (const char* dtype : {"fp32", "bf16"}) {
    for (int stage = 0; stage <= 2; ++stage) {
      SCOPED_TRACE(std::string(dtype) + " stage " + std::to_string(stage));
      RunOptions options;
      options.stage = stage;
      options.dtype = dtype;
      auto model = tiny_gpt2_spec().build();
      auto engine =
          initialize(model, parse_config(make_config_json(options), n, "t"), comm);
      const ModelSpec spec = tiny_gpt2_spec();
      const ShardLayout layout = shard_layout(engine->num_parameters(), n, kShardAlignment);
      const int64_t element = std::string(dtype) == "fp32" ? 4 : 2;
      const int64_t moved = (layout.padded_numel - layout.shard_numel) * element;
      for (int step = 0; step < 2; ++step) {
        const CommStats before = engine->communication();
        auto [x, y] = spec.batch(step, 2);
        engine->backward(spec.loss(*model, x, y));
        engine->step();
        const CommStats after = engine->communication();
        EXPECT_EQ(after.reduce_scatter.bytes - before.reduce_scatter.bytes, moved);
        EXPECT_EQ(after.all_gather.bytes - before.all_gather.bytes, moved);
        EXPECT_EQ(after.broadcast.bytes, before.broadcast.bytes);
        // The only other traffic: the 8-byte global norm.
        EXPECT_LE(after.all_reduce.bytes - before.all_reduce.bytes, 16);
      }
    }
  }
}

// communication_data_type selects the reduction dtype: bf16 parameters reduced in fp32 move
// 4-byte gradients and 2-byte parameters, and still train like the bf16-reduced run.
TEST(Communication, Fp32ReductionOfBf16Gradients) {
  auto comm = world();
  const int n = comm->size();
  RunOptions options;
  options.dtype = "bf16";
  options.steps = 3;
  std::vector<double> reference_losses;
  for (int stage = 0; stage <= 2; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    options.stage = stage;
    options.extra_top_json = "\"communication_data_type\": \"fp32\"";
    const RunResult fp32_comm = run_engine(tiny_gpt2_spec(), options, comm);
    const ShardLayout layout = shard_layout(fp32_comm.engine->num_parameters(), n, kShardAlignment);
    const int64_t moved = layout.padded_numel - layout.shard_numel;
    const CommStats stats = fp32_comm.engine->communication();
    EXPECT_EQ(stats.reduce_scatter.bytes, options.steps * moved * 4);
    EXPECT_EQ(stats.all_gather.bytes, options.steps * moved * (stage == 0 ? 4 : 2));
    options.extra_top_json.clear();
    const RunResult bf16_comm = run_engine(tiny_gpt2_spec(), options, comm);
    for (int s = 0; s < options.steps; ++s) {
      EXPECT_NEAR(fp32_comm.losses[s], bf16_comm.losses[s], 0.01 * bf16_comm.losses[s]);
    }
    if (stage == 0) reference_losses = fp32_comm.losses;
    // Stages 0 and 1 round the fp32 sum to bf16 in the gradient buffer; all stages agree closely.
    for (int s = 0; s < options.steps; ++s) {
      EXPECT_NEAR(fp32_comm.losses[s], reference_losses[s], 1e-3 * reference_losses[s]);
    }
  }
}

TEST(StartUp, RanksThatDisagreeFailTogetherNamingTheRank) {
  auto comm = world();
  if (comm->size() == 1) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  const int odd_rank = comm->size() - 1;
  gpt2::GPT2Config config;
  config.vocab_size = 97;
  config.n_positions = 16;
  config.n_embd = 32;
  config.n_layer = comm->rank() == odd_rank ? 3 : 2;
  config.n_head = 4;
  auto model = std::make_shared<gpt2::GPT2Impl>(config);
  RunOptions options;
  try {
    initialize(model, parse_config(make_config_json(options), comm->size(), "t"), comm);
    ADD_FAILURE() << "initialize accepted ranks with different models";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank " + std::to_string(odd_rank)), std::string::npos) << message;
    EXPECT_NE(message.find("transformer.h."), std::string::npos) << message;
  }
}

// A failure on one rank alone during initialize (rank 0 cannot make csv_monitor's directory)
// fails every rank together, with rank 0 as the origin, instead of leaving the others waiting
// in the start-up collective (Note [Agreeing on a failure]).
TEST(StartUp, AFailureOnOneRankFailsEveryRank) {
  auto comm = world();
  const std::string dir = shared_temp_dir("startup-monitor");
  if (comm->rank() == 0) std::ofstream(std::filesystem::path(dir) / "a-file") << "x\n";
  comm->barrier()->wait();
  const std::string path = (std::filesystem::path(dir) / "a-file" / "monitor").string();
  RunOptions options;
  options.extra_top_json = "\"csv_monitor\": {\"enabled\": true, \"output_path\": \"" + path +
                           "\", \"job_name\": \"job\"}";
  try {
    initialize(mlp_spec().build(), parse_config(make_config_json(options), comm->size(), "t"),
               comm);
    ADD_FAILURE() << "initialize accepted an unwritable csv_monitor path";
  } catch (const CollectiveError& error) {
    EXPECT_EQ(error.origin_rank(), 0);
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  }
}

TEST(Misuse, PlainLossBackwardIsRejected) {
  auto comm = world();
  RunOptions options;
  auto model = mlp_spec().build();
  auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"), comm);
  auto [x, y] = mlp_spec().batch(0, 2);
  at::Tensor loss = mlp_spec().loss(*model, x, y);
  try {
    loss.backward();
    ADD_FAILURE() << "loss.backward() outside the engine was accepted";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("engine.backward"), std::string::npos) << error.what();
  }
}

TEST(Misuse, ConfigSolvedForAnotherWorldSizeIsRejected) {
  auto comm = world();
  RunOptions options;
  const Config wrong = parse_config(make_config_json(options), comm->size() + 1, "t");
  EXPECT_THROW(initialize(mlp_spec().build(), wrong, comm), Error);
}

TEST(Misuse, HandBuiltInvalidConfigIsRejectedWithTheParsersMessage) {
  auto comm = world();
  Config config;  // built in code, never parsed
  config.world_size = comm->size();
  config.train_batch_size = comm->size();
  config.gradient_accumulation_steps = 0;
  try {
    initialize(mlp_spec().build(), config, comm);
    ADD_FAILURE() << "initialize accepted gradient_accumulation_steps = 0";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("gradient_accumulation_steps"), std::string::npos) << message;
  }
}


// Note [CPU offload on CPU ranks]: offload device "cpu" keeps the shard state in host memory,
// where a CPU rank's state is anyway: bitwise the same training, the same bytes.
TEST(Offload, CpuDeviceOnCpuRanksChangesNoBit) {
  auto comm = world();
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    RunOptions options;
    options.stage = stage;
    options.dtype = "bf16";
    options.extra_zero_json = stage == 3 ? "\"stage3_param_persistence_threshold\": 0" : "";
    const RunResult plain = run_engine(mlp_spec(), options, comm);
    options.extra_zero_json += std::string(stage == 3 ? ", " : "") +
                               "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}" +
                               (stage == 3 ? ", \"offload_param\": {\"device\": \"cpu\"}" : "");
    const RunResult offloaded = run_engine(mlp_spec(), options, comm);
    EXPECT_TRUE(at::equal(plain.parameters, offloaded.parameters));
    EXPECT_EQ(plain.losses, offloaded.losses);
    EXPECT_EQ(plain.state_bytes.total(), offloaded.state_bytes.total());
  }
}

TEST(StartUp, ConfigsThatDisagreeNameTheKey) {
  auto comm = world();
  if (comm->size() == 1) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  RunOptions options;
  options.stage = comm->rank() == 1 ? 2 : 1;
  try {
    initialize(mlp_spec().build(), parse_config(make_config_json(options), comm->size(), "t"),
               comm);
    ADD_FAILURE() << "initialize accepted ranks with different configs";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
    EXPECT_NE(message.find("zero_optimization.stage = 1"), std::string::npos) << message;
    EXPECT_NE(message.find("zero_optimization.stage = 2"), std::string::npos) << message;
  }
}

// A branch used by some ranks and not others in a step (conditional forward): no rank hangs,
// the unused parameters count as zero gradients there, and all ranks stay identical.
class TwoBranchImpl : public torch::nn::Module {
 public:
  TwoBranchImpl() {
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(4, 3));
  }
  at::Tensor forward(const at::Tensor& x, bool use_b) { return use_b ? a(x) + b(x) : a(x); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

TEST(Backward, ParametersUnusedOnSomeRanksDoNotHang) {
  auto comm = world();
  for (int stage = 0; stage <= 2; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    torch::manual_seed(7);
    auto model = std::make_shared<TwoBranchImpl>();
    RunOptions options;
    options.stage = stage;
    options.reduce_bucket_size = 10;
    auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"),
                             comm);
    for (int step = 0; step < 3; ++step) {
      const bool use_b = (comm->rank() + step) % 2 == 0;
      at::Tensor x = at::ones({2, 4}) * (step + 1);
      engine->backward(model->forward(x, use_b).pow(2).mean());
      engine->step();
    }
    const at::Tensor mine = flatten_parameters(*model);
    at::Tensor all = at::empty({comm->size() * mine.numel()}, mine.options());
    comm->all_gather(mine, all)->wait();
    for (int r = 0; r < comm->size(); ++r) {
      EXPECT_TRUE(at::equal(all.narrow(0, r * mine.numel(), mine.numel()), mine)) << "rank " << r;
    }
    EXPECT_EQ(engine->global_steps(), 3);
  }
}


// The config's scheduler sets the rate of every applied step and does not advance on a step
// skipped for fp16 overflow (DeepSpeed's engine steps the scheduler only after applied steps).
TEST(Scheduler, AdvancesOnlyOnAppliedSteps) {
  if (!cpu_supports_half()) GTEST_SKIP() << "this libtorch has no fp16 CPU kernels (1.x)";
  auto comm = world();
  RunOptions options;
  options.stage = 1;
  options.dtype = "fp16";
  options.extra_top_json =
      "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.0001, "
      "\"warmup_max_lr\": 0.001, \"warmup_num_steps\": 5, \"warmup_type\": \"linear\"}}";
  options.fp16_hysteresis = 1;
  const Config config = parse_config(make_config_json(options), comm->size(), "test config");
  const auto schedule = make_scheduler(config);
  ASSERT_NE(schedule, nullptr);
  auto model = mlp_spec().build();
  auto engine = initialize(model, config, comm);
  EXPECT_THROW(engine->set_learning_rate(0.5), Error);
  const ModelSpec spec = mlp_spec();
  int64_t applied = 0;
  for (int step = 0; step < 6; ++step) {
    auto [x, y] = spec.batch(step, 2);
    at::Tensor loss = spec.loss(*model, x, y);
    if (step == 2) loss = loss * std::numeric_limits<float>::infinity();
    engine->backward(loss);
    engine->step();
    if (step == 2) {
      EXPECT_EQ(engine->skipped_steps(), 1);
      EXPECT_DOUBLE_EQ(engine->learning_rate(), schedule->lr_at(applied - 1));
    } else {
      EXPECT_DOUBLE_EQ(engine->learning_rate(), schedule->lr_at(applied)) << "step " << step;
      ++applied;
    }
  }
  EXPECT_EQ(engine->global_steps(), 5);
  EXPECT_GT(schedule->lr_at(4), schedule->lr_at(0));
}


TEST(Monitor, CsvMonitorWritesOneRowPerStepOnRankZero) {
  auto comm = world();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("zero-csv-" + std::to_string(comm->size()))).string();
  if (comm->rank() == 0) std::filesystem::remove_all(dir);
  comm->barrier()->wait();
  RunOptions options;
  options.stage = 2;
  options.steps = 3;
  options.extra_top_json = "\"steps_per_print\": 1, \"wall_clock_breakdown\": true, "
                           "\"csv_monitor\": {\"enabled\": true, \"output_path\": \"" + dir +
                           "\", \"job_name\": \"job\"}";
  testing::internal::CaptureStdout();
  const RunResult run = run_engine(mlp_spec(), options, comm);
  const std::string printed = testing::internal::GetCapturedStdout();
  comm->barrier()->wait();
  if (comm->rank() != 0) {
    EXPECT_EQ(printed.find("[zero] step="), std::string::npos) << "only rank 0 reports";
    return;
  }
  for (int step = 1; step <= 3; ++step) {
    EXPECT_NE(printed.find("[zero] step=" + std::to_string(step) + ","), std::string::npos)
        << printed;
  }
  EXPECT_NE(printed.find("backward"), std::string::npos) << printed;
  for (const char* name : {"Train_Samples_train_loss.csv", "Train_Samples_lr.csv"}) {
    std::ifstream file(dir + "/job/" + name);
    ASSERT_TRUE(file.good()) << name;
    std::string line;
    int rows = -1;  // header
    while (std::getline(file, line)) ++rows;
    EXPECT_EQ(rows, 3) << name;
  }
  std::ifstream loss(dir + "/job/Train_Samples_train_loss.csv");
  std::string header, first;
  std::getline(loss, header);
  std::getline(loss, first);
  EXPECT_EQ(header, "step,train_loss");
  EXPECT_EQ(first.substr(0, first.find(',')), std::to_string(2 * comm->size()))
      << "x axis is global samples: micro-batch 2 x " << comm->size() << " ranks";
  (void)run;
}

}  // namespace
}  // namespace zero::test
