// The memory planner (zero/memory_plan.h): the planned peak of a training step within 10 % of
// the peak a run holds (zero::host_memory_stats, shared memory included), for gpt2-tiny at
// stages 0-3 with and without activation checkpointing, and 16-bit, and llama-tiny likewise; the
// plan of a built model equals the preset's; the table. Run under mpirun at world sizes 1, 2 and 4.
#include <gtest/gtest.h>

#include <sstream>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "hardware/half_gemm.h"
#include "test_util.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gpt2.h"
#include "zero/llama.h"
#include "zero/memory.h"
#include "zero/memory_plan.h"

namespace zero::test {
namespace {

Config config_at(int stage, int world, const std::string& extra = "",
                 const std::string& top = "") {
  return parse_config(
      "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_clipping\": 1.0, \"optimizer\": "
      "{\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}}, " + top +
          "\"zero_optimization\": {\"stage\": " + std::to_string(stage) + extra + "}}",
      world, "test config");
}

// The peak of every byte this rank holds during the last of three steps (the first two fill
// the engine's pools and record stage 3's trace), the largest over ranks; and in
// `step_added`, what engine.step() alone added at its peak (the largest over ranks).
double measured_peak(const CausalLMConfig& preset, const Config& config, int64_t seq,
                     const std::shared_ptr<Communicator>& comm,
                     ModelStateBytes* state = nullptr, double* step_added = nullptr) {
  torch::manual_seed(0);
  std::shared_ptr<CausalLM> model = preset.build();
  auto engine = initialize(model, config, comm);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5 + comm->rank());
  double peak = 0, added = 0;
  for (int step = 0; step < 3; ++step) {
    const at::Tensor tokens = at::randint(0, preset.shape().vocab_size, {2, seq + 1}, generator);
    reset_host_memory_peak();
    engine->backward(model->forward_loss(tokens.narrow(1, 0, seq).contiguous(),
                                         tokens.narrow(1, 1, seq).contiguous()));
    const double backward_peak = static_cast<double>(host_memory_stats().peak_bytes);
    const double before_step = static_cast<double>(host_memory_stats().allocated_bytes);
    reset_host_memory_peak();
    engine->step();
    const double step_peak = static_cast<double>(host_memory_stats().peak_bytes);
    peak = std::max(backward_peak, step_peak);
    added = step_peak - before_step;
  }
  if (state != nullptr) *state = engine->model_state_bytes();
  at::Tensor t = at::full({2}, 0.0, at::kDouble);
  t[0] = peak;
  t[1] = added;
  comm->all_reduce(t, ReduceOp::kMax)->wait();
  if (step_added != nullptr) *step_added = t[1].item<double>();
  return t[0].item<double>();
}

// Micro-batches of 2 x 64 tokens.
MemoryPlan expect_plan_within_ten_percent(const CausalLMConfig& preset, const Config& config,
                                          const std::shared_ptr<Communicator>& comm,
                                          ModelStateBytes* state = nullptr,
                                          double* step_added = nullptr) {
  constexpr int64_t kSeq = 64;
  const MemoryPlan plan = plan_memory(config, preset.plan_model(2, kSeq, config.compute_dtype));
  const double measured = measured_peak(preset, config, kSeq, comm, state, step_added);
  const double planned = static_cast<double>(plan.peak_memory_bytes);
  EXPECT_NEAR(measured / planned, 1.0, 0.10)
      << "planned " << planned / (1 << 20) << " MiB, measured " << measured / (1 << 20)
      << " MiB\n" << format_memory_plans({plan});
  return plan;
}

TEST(MemoryPlan, PlannedPeakIsWithinTenPercentOfTheMeasuredOne) {
  track_host_memory();
  auto comm = world();
  for (int stage : {0, 1, 2, 3}) {
    for (bool checkpointing : {false, true}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (checkpointing ? ", checkpointing" : ""));
      gpt2::GPT2Config preset = gpt2::GPT2Config::preset("gpt2-tiny");
      preset.checkpointed_blocks = checkpointing ? preset.n_layer : 0;
      const Config config = config_at(stage, comm->size());
      expect_plan_within_ten_percent(preset, config, comm);
    }
  }
}

// The Llama family's plan (Note [Llama activation memory]): llama-tiny (tied, grouped-query
// attention) at every stage, with and without checkpointing, an untied variant with every bias
// at stages 0 and 3, and computing in bf16.
TEST(MemoryPlan, LlamaPlannedPeakIsWithinTenPercentOfTheMeasuredOne) {
  track_host_memory();
  auto comm = world();
  llama::LlamaConfig untied = llama::LlamaConfig::preset("llama-tiny");
  untied.tie_word_embeddings = false;
  untied.qkv_bias = untied.o_bias = untied.mlp_bias = true;
  for (const llama::LlamaConfig& base : {llama::LlamaConfig::preset("llama-tiny"), untied}) {
    const bool tied = base.tie_word_embeddings;
    for (int stage : {0, 1, 2, 3}) {
      for (bool checkpointing : {false, true}) {
        // The untied variant at the stages that differ most (within the suite's time).
        if (!tied && (checkpointing || stage == 1 || stage == 2)) continue;
        SCOPED_TRACE(base.describe() + " at stage " + std::to_string(stage) +
                     (checkpointing ? ", checkpointing" : ""));
        llama::LlamaConfig preset = base;
        preset.checkpointed_blocks = checkpointing ? preset.num_hidden_layers : 0;
        expect_plan_within_ten_percent(preset, config_at(stage, comm->size()), comm);
      }
    }
  }
  SCOPED_TRACE("bf16 at stage 2");
  expect_plan_within_ten_percent(
      llama::LlamaConfig::preset("llama-tiny"),
      config_at(2, comm->size(), "", "\"bf16\": {\"enabled\": true}, \"compute_data_type\": \"bf16\", "),
      comm);
}

// bf16 parameters: computing in bf16 at stage 2, and in fp32 from bf16 shards at stage 3
// (a 16-bit staging buffer per gather, Note [Compute dtype]), with a small prefetch bucket;
// at stage 1 accumulating in fp32 (data_types.grad_accum_dtype: a whole fp32 gradient buffer).
TEST(MemoryPlan, SixteenBitParametersToo) {
  track_host_memory();
  auto comm = world();
  const std::string bf16 = "\"bf16\": {\"enabled\": true}, ";
  const std::vector<Config> configs = {
      config_at(2, comm->size(), "", bf16 + "\"compute_data_type\": \"bf16\", "),
      config_at(3, comm->size(), ", \"stage3_prefetch_bucket_size\": 1e5, "
                "\"stage3_max_reuse_distance\": 0",
                bf16 + "\"compute_data_type\": \"fp32\", "),
      config_at(1, comm->size(), "", bf16 + "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, ")};
  for (const Config& config : configs) {
    SCOPED_TRACE("stage " + std::to_string(config.zero_optimization.stage));
    const gpt2::GPT2Config preset = gpt2::GPT2Config::preset("gpt2-tiny");
    expect_plan_within_ten_percent(preset, config, comm);
  }
}

// 16-bit compute at stage 2 by both ways of Note [fp16 GEMMs on CPUs without fp16
// arithmetic]: ATen's kernels, and fp32 GEMMs, with (bf16 via fp32, fp16 always) the attention
// and LM head computing in fp32, which the plan counts (this CPU's choices restored after).
TEST(MemoryPlan, SixteenBitComputeByEitherGemmPath) {
  track_host_memory();
  auto comm = world();
  for (const at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    const bool half = dtype == at::kHalf;
    const half_gemm::Path chosen = half_gemm::path(dtype);
    const Config config = config_at(
        2, comm->size(), "",
        std::string(half ? "\"fp16\"" : "\"bf16\"") + ": {\"enabled\": true}, " +
            "\"compute_data_type\": \"" + (half ? "fp16" : "bf16") + "\", ");
    for (const half_gemm::Path path : {half_gemm::Path::kNative, half_gemm::Path::kViaFp32}) {
      SCOPED_TRACE(std::string(half ? "fp16 " : "bf16 ") + half_gemm::path_name(path));
      half_gemm::set_path(path, dtype);
      expect_plan_within_ten_percent(gpt2::GPT2Config::preset("gpt2-tiny"), config, comm);
      SCOPED_TRACE("llama-tiny");
      expect_plan_within_ten_percent(llama::LlamaConfig::preset("llama-tiny"), config, comm);
    }
    half_gemm::set_path(chosen, dtype);
  }
}

// A device model's offloaded optimizer, run through its CPU stand-in (ZERO_EMULATE_DEVICE_OFFLOAD:
// the "device" and the host are both this process's memory, so the measured peak is the
// device rows and the host rows together): stages 1-3, bf16, the device plan within 10 %. The
// device rows alone are then what the GPU would hold: the parameters, buckets and activations,
// without the optimizer state.
TEST(MemoryPlan, DeviceModelWithOffloadedOptimizer) {
  track_host_memory();
  auto comm = world();
  // The plan's arithmetic per rank is the same at any world size; 4 ranks on this suite's 2
  // cores add time and nothing else.
  if (comm->size() > 2) ZERO_SKIP_AT_THIS_RANK_COUNT("checked at 1 and 2 ranks");
  constexpr int64_t kSeq = 64;
  const std::string bf16 = "\"bf16\": {\"enabled\": true}, \"compute_data_type\": \"bf16\", ";
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const Config config = config_at(
        stage, comm->size(), ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}",
        bf16);
    const gpt2::GPT2Config preset = gpt2::GPT2Config::preset("gpt2-tiny");
    const PlanModel model = preset.plan_model(2, kSeq, config.compute_dtype);
    const MemoryPlan plan = plan_memory(config, model, PlanTarget::kDevice);
    setenv("ZERO_EMULATE_DEVICE_OFFLOAD", "1", 1);
    const double measured = measured_peak(preset, config, kSeq, comm);
    unsetenv("ZERO_EMULATE_DEVICE_OFFLOAD");
    const double planned = static_cast<double>(plan.device_bytes + plan.peak_memory_bytes);
    EXPECT_NEAR(measured / planned, 1.0, 0.10)
        << "planned " << planned / (1 << 20) << " MiB, measured " << measured / (1 << 20)
        << " MiB\n" << format_memory_plans({plan});
    // The optimizer's state is not on the device; the host holds it, pinned but the moments.
    const MemoryPlan on_host = plan_memory(config, model);
    EXPECT_LT(plan.device_bytes, on_host.peak_memory_bytes);
    EXPECT_EQ(plan.row("optimizer state")->place, MemoryPlace::kHost);
    EXPECT_EQ(plan.row("parameters")->place, MemoryPlace::kDevice);
    EXPECT_EQ(plan.row("activations")->place, MemoryPlace::kDevice);
    EXPECT_EQ(plan.row("gradient shard (host)")->place, MemoryPlace::kPinnedHost);
    EXPECT_GT(plan.pinned_bytes, 0);
    // Without the offload the device holds it all, and offload_that_fits names the keys that
    // bring it under what the offloaded plan needs.
    Config in_device = config;
    in_device.zero_optimization.offload_optimizer = OffloadConfig{};
    const MemoryPlan all_on_device = plan_memory(in_device, model, PlanTarget::kDevice);
    EXPECT_EQ(all_on_device.peak_memory_bytes, 0);
    EXPECT_GT(all_on_device.device_bytes, plan.device_bytes);
    const std::string fits =
        offload_that_fits(in_device, model, plan.device_bytes, int64_t{1} << 40);
    EXPECT_NE(fits.find("offload_optimizer"), std::string::npos) << fits;
    EXPECT_EQ(offload_that_fits(in_device, model, 1000, int64_t{1} << 40), "");
  }
  // Stage 3 with the shards on the host too (offload_param "cpu"): only the gathered units,
  // the persistent parameters, a shard's upload and the buffers stay on the device.
  const Config both = config_at(
      3, comm->size(),
      ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, "
      "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}",
      bf16);
  const gpt2::GPT2Config preset = gpt2::GPT2Config::preset("gpt2-tiny");
  const PlanModel model = preset.plan_model(2, kSeq, both.compute_dtype);
  const MemoryPlan plan = plan_memory(both, model, PlanTarget::kDevice);
  setenv("ZERO_EMULATE_DEVICE_OFFLOAD", "1", 1);
  const double measured = measured_peak(preset, both, kSeq, comm);
  unsetenv("ZERO_EMULATE_DEVICE_OFFLOAD");
  const double planned = static_cast<double>(plan.device_bytes + plan.peak_memory_bytes);
  EXPECT_NEAR(measured / planned, 1.0, 0.10)
      << "planned " << planned / (1 << 20) << " MiB, measured " << measured / (1 << 20)
      << " MiB\n" << format_memory_plans({plan});
  EXPECT_EQ(plan.row("parameters")->place, MemoryPlace::kPinnedHost);
  EXPECT_EQ(plan.row("shard upload")->place, MemoryPlace::kDevice);
  EXPECT_EQ(plan.row("parameter copy (host)"), nullptr);
}

// Stage 3 with the optimizer state and the unit shards on NVMe: the swap files and their
// staging buffers as the engine makes them, and the peak in memory.
TEST(MemoryPlan, OffloadedStateIsPlannedAsTheEngineHoldsIt) {
  track_host_memory();
  auto comm = world();
  const std::string dir = shared_temp_dir("memory-plan");
  const Config config = config_at(
      3, comm->size(),
      ", \"stage3_param_persistence_threshold\": 0, \"sub_group_size\": 100000, "
      "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" + dir + "\"}, "
      "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" + dir +
          "\", \"buffer_count\": 3, \"max_in_cpu\": 1000000}");
  ModelStateBytes state;
  const MemoryPlan plan =
      expect_plan_within_ten_percent(gpt2::GPT2Config::preset("gpt2-tiny"), config, comm, &state);
  EXPECT_EQ(plan.row("NVMe staging")->bytes, state.staging);
  EXPECT_EQ(plan.row("parameters on NVMe")->bytes, state.params_on_nvme);
  EXPECT_EQ(plan.nvme_bytes, state.on_nvme);
}

// Each optimizer's state in the plan as the engine holds it: AdamW two fp32 values per owned
// element, SGD with momentum, Adagrad (its sum) and Lion (its momentum) one, plain SGD none;
// the row says which, and the whole plan stays within ten percent of the measured peak.
TEST(MemoryPlan, EachOptimizersStateIsPlannedAsTheEngineHoldsIt) {
  track_host_memory();
  auto comm = world();
  struct Case {
    const char* optimizer;
    int values;
    const char* row_note;
  };
  int64_t per_value = 0;  // AdamW's state / 2, the first case
  for (const Case& c : {Case{"{\"type\": \"AdamW\"}", 2, "Adam m and v"},
                        Case{"{\"type\": \"SGD\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}", 1,
                             "momentum"},
                        Case{"{\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}", 0, nullptr},
                        Case{"{\"type\": \"Adagrad\"}", 1, "Adagrad's sum of squares"},
                        Case{"{\"type\": \"Lion\"}", 1, "Lion's momentum"},
                        Case{"{\"type\": \"Lamb\"}", 2, "LAMB's m and v"},
                        Case{"{\"type\": \"Muon\"}", 2, "Muon's momentum and AdamW's m and v"}}) {
    SCOPED_TRACE(c.optimizer);
    const Config config = parse_config(
        std::string("{\"train_micro_batch_size_per_gpu\": 2, \"optimizer\": ") + c.optimizer +
            ", \"zero_optimization\": {\"stage\": 2}}",
        comm->size(), "test config");
    ModelStateBytes state;
    const MemoryPlan plan = expect_plan_within_ten_percent(
        gpt2::GPT2Config::preset("gpt2-tiny"), config, comm, &state);
    // 4 bytes per value per owned element (the shard, padded as the engine pads it).
    if (per_value == 0 && c.values > 0) per_value = state.optimizer_state / c.values;
    EXPECT_EQ(state.optimizer_state, c.values * per_value);
    const MemoryPlanRow* row = plan.row("optimizer state");
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->bytes, state.optimizer_state);
    if (c.row_note != nullptr) {
      EXPECT_NE(row->basis.find(c.row_note), std::string::npos) << row->basis;
    }
  }
}

// Muon's step (Note [Muon under partitioning]): its row (Newton-Schulz's working set, the
// exchange's buffers, u in fp32 beside a bf16 gradient) keeps the whole plan within ten percent
// of the measured peak at stage 3 with every matrix partitioned, where the exchange is largest,
// in fp32 and bf16.
TEST(MemoryPlan, MuonsStepIsPlanned) {
  track_host_memory();
  auto comm = world();
  for (const char* precision : {"", "\"bf16\": {\"enabled\": true}, "}) {
    SCOPED_TRACE(precision);
    const Config config = parse_config(
        std::string("{\"train_micro_batch_size_per_gpu\": 2, ") + precision +
            "\"optimizer\": {\"type\": \"Muon\"}, \"zero_optimization\": {\"stage\": 3, "
            "\"stage3_param_persistence_threshold\": 0}}",
        comm->size(), "test config");
    double step_added = 0;
    const MemoryPlan plan = expect_plan_within_ten_percent(gpt2::GPT2Config::preset("gpt2-tiny"),
                                                           config, comm, nullptr, &step_added);
    const MemoryPlanRow* row = plan.row("Muon's step");
    ASSERT_NE(row, nullptr);
    EXPECT_NE(row->basis.find("Newton-Schulz of the largest matrix (128 x 512)"),
              std::string::npos)
        << row->basis;
    if (comm->size() > 1) EXPECT_NE(row->basis.find("the exchange's buffers"), std::string::npos);
    if (*precision != '\0') EXPECT_NE(row->basis.find("u in fp32"), std::string::npos);
    // The row against what the step itself adds at its peak (the activations are gone by
    // then, so the whole plan cannot tell).
    EXPECT_NEAR(step_added / static_cast<double>(row->bytes), 1.0, 0.15)
        << "planned " << row->bytes / 1048576.0 << " MiB, the step added "
        << step_added / 1048576.0 << " MiB";
  }
}

TEST(MemoryPlan, BuiltModelPlansLikeThePreset) {
  gpt2::GPT2Config preset = gpt2::GPT2Config::preset("gpt2-tiny");
  const PlanModel from_preset = preset.plan_model(1, 16, at::kFloat);
  torch::manual_seed(0);
  const gpt2::GPT2 model(preset);
  const PlanModel built = plan_model_of(*model);
  EXPECT_EQ(built.num_parameters(), model->num_parameters());
  EXPECT_EQ(from_preset.num_parameters(), model->num_parameters());
  ASSERT_EQ(built.units.size(), from_preset.units.size());
  for (size_t i = 0; i < built.units.size(); ++i) {
    EXPECT_EQ(built.units[i].parameter_numels, from_preset.units[i].parameter_numels) << i;
    EXPECT_EQ(built.units[i].parameter_shapes, from_preset.units[i].parameter_shapes) << i;
    EXPECT_EQ(built.units[i].declared, from_preset.units[i].declared) << i;
  }
  // Frozen parameters are the module's, whole: not planned as trainable state.
  torch::nn::Linear partly_frozen(4, 3);
  partly_frozen->bias.set_requires_grad(false);
  const PlanModel partly = plan_model_of(*partly_frozen);
  EXPECT_EQ(partly.num_parameters(), 12);
  EXPECT_EQ(partly.frozen_parameter_bytes, 3 * 4);
  EXPECT_EQ(plan_memory(config_at(0, 1), partly).row("frozen parameters")->bytes, 12);
  // Stage 3 at 4 ranks: both give the same plan.
  const Config config = config_at(3, 4);
  EXPECT_EQ(plan_memory(config, built).row("gathered units")->bytes,
            plan_memory(config, from_preset).row("gathered units")->bytes);
}

TEST(MemoryPlan, BuiltLlamaPlansLikeThePreset) {
  llama::LlamaConfig untied = llama::LlamaConfig::preset("llama-tiny");
  untied.tie_word_embeddings = false;
  untied.qkv_bias = true;
  for (const llama::LlamaConfig& preset : {llama::LlamaConfig::preset("llama-tiny"), untied}) {
    const PlanModel from_preset = preset.plan_model(1, 16, at::kFloat);
    torch::manual_seed(0);
    const std::shared_ptr<CausalLM> model = preset.build();
    const PlanModel built = plan_model_of(*model);
    EXPECT_EQ(model->num_parameters(), preset.num_parameters());
    EXPECT_EQ(from_preset.num_parameters(), model->num_parameters());
    ASSERT_EQ(built.units.size(), from_preset.units.size());
    for (size_t i = 0; i < built.units.size(); ++i) {
      EXPECT_EQ(built.units[i].parameter_numels, from_preset.units[i].parameter_numels) << i;
      EXPECT_EQ(built.units[i].parameter_shapes, from_preset.units[i].parameter_shapes) << i;
    EXPECT_EQ(built.units[i].parameter_shapes, from_preset.units[i].parameter_shapes) << i;
      EXPECT_EQ(built.units[i].declared, from_preset.units[i].declared) << i;
    }
  }
}

TEST(MemoryPlan, EveryStageSideBySide) {
  gpt2::GPT2Config preset = gpt2::GPT2Config::preset("gpt2");
  const Config config = config_at(2, 8, ", \"stage3_max_reuse_distance\": 0");
  const std::vector<MemoryPlan> plans =
      plan_every_stage(config, preset.plan_model(2, 1024, config.compute_dtype));
  ASSERT_EQ(plans.size(), 4u);
  for (int stage = 0; stage < 4; ++stage) EXPECT_EQ(plans[stage].stage, stage);
  // Model state falls with the stage at 8 ranks; stage 3 adds gathered units.
  EXPECT_GT(plans[0].row("optimizer state")->bytes, plans[1].row("optimizer state")->bytes);
  EXPECT_GT(plans[1].row("gradients")->bytes, plans[2].row("gradients")->bytes);
  EXPECT_GT(plans[2].row("parameters")->bytes, plans[3].row("parameters")->bytes);
  EXPECT_NE(plans[3].row("gathered units"), nullptr);
  EXPECT_EQ(plans[0].row("gathered units"), nullptr);
  // Checkpointing shrinks the activations; the other variant is shown, not counted.
  const MemoryPlanRow* activations = plans[0].row("activations");
  const MemoryPlanRow* other = plans[0].row("  with checkpointing");
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->in_peak);
  EXPECT_LT(other->bytes, activations->bytes / 2);
  const std::string table = format_memory_plans(plans);
  for (const char* text : {"ZeRO-0", "ZeRO-3", "activations", "gathered units", "peak in memory",
                           "(RAM, shared on a node)"}) {
    EXPECT_NE(table.find(text), std::string::npos) << text << "\n" << table;
  }
  EXPECT_THROW(preset.plan_model(1, 2048, at::kFloat), Error);
}

}  // namespace
}  // namespace zero::test

namespace zero::test {
namespace {

// Stages 0-1 on several ranks read each peer's gradient chunk in place (Note [Shared-memory
// reduce-scatter]): the plan's resident set carries those pages, its peak (memory of the
// rank's own, what the host check adds up) does not.
TEST(MemoryPlan, PeersGradientChunksAreInTheResidentSetOnly) {
  const PlanModel model = gpt2::GPT2Config::preset("gpt2-tiny").plan_model(2, 64, at::kFloat);
  for (int world : {1, 2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("world " + std::to_string(world) + " stage " + std::to_string(stage));
      const MemoryPlan plan = plan_memory(config_at(stage, world), model);
      const MemoryPlanRow* peers = plan.row("peers' gradient chunks");
      if (stage <= 1 && world > 1) {
        ASSERT_NE(peers, nullptr);
        EXPECT_FALSE(peers->in_peak);
        EXPECT_EQ(peers->bytes, plan.row("gradients")->bytes / world * (world - 1));
        EXPECT_EQ(plan.resident_bytes, plan.peak_memory_bytes + peers->bytes);
      } else {
        EXPECT_EQ(peers, nullptr);
        EXPECT_EQ(plan.resident_bytes, plan.peak_memory_bytes);
      }
    }
  }
}

// --plan's table stays aligned whatever its cells hold: a placement note ("(RAM, shared on a
// node)", "(NVMe)") widens its column for every row, so every line of the table has the same
// length and every column ends where the header's does.
TEST(MemoryPlan, TheTableIsAlignedWithPlacementNotes) {
  const PlanModel model = gpt2::GPT2Config::named("L36-C2560").plan_model(1, 128, at::kFloat);
  const std::string offload =
      ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}, "
      "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}";
  const std::string table = format_memory_plans(plan_every_stage(config_at(3, 2, offload), model));
  ASSERT_NE(table.find("(RAM, shared on a node)"), std::string::npos) << table;
  ASSERT_NE(table.find("(NVMe)"), std::string::npos) << table;
  std::vector<std::string> lines;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  ASSERT_GT(lines.size(), 10u);
  for (const std::string& line : lines) {
    EXPECT_EQ(line.size(), lines.front().size()) << "'" << line << "'\n" << table;
  }
  // The header's stage names end each column: every row has a non-blank character there.
  const std::string& header = lines.front();
  for (size_t end = header.find("ZeRO-"); end != std::string::npos;
       end = header.find("ZeRO-", end + 1)) {
    const size_t last = end + 5;  // the stage digit
    for (const std::string& line : lines) EXPECT_NE(line[last], ' ') << line;
  }
}

// Note [Fitting the defaults]: gpt2-xl's ZeRO-Infinity config at DeepSpeed's defaults (stage 3,
// both offloads on NVMe, sub_group_size 1e9) plans a peak far above a 10 GiB share; zero lowers
// sub_group_size (and only what was not set) until it fits, says so, and keeps the config's
// own values; what cannot fit changes nothing.
TEST(MemoryPlan, DefaultsAreLoweredToFitAndSetValuesAreNot) {
  const PlanModel model = gpt2::GPT2Config::preset("gpt2-xl").plan_model(1, 256, at::kFloat);
  const std::string offload =
      ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}, "
      "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}";
  const int64_t budget = int64_t{10} << 30;
  Config config = config_at(3, 2, offload);
  const int64_t before = plan_memory(config, model).peak_memory_bytes;
  ASSERT_GT(before, budget) << format_memory_plans({plan_memory(config, model)});
  const std::string line = fit_defaults_to_memory(config, model, budget);
  EXPECT_NE(line.find("zero_optimization.sub_group_size"), std::string::npos) << line;
  EXPECT_NE(line.find("(default 1e9)"), std::string::npos) << line;
  EXPECT_LT(config.zero_optimization.sub_group_size, 1000000000);
  EXPECT_LE(plan_memory(config, model).peak_memory_bytes, budget);
  // The largest value of the ladder that fits: the next one up does not.
  Config bigger = config;
  const int64_t chosen = config.zero_optimization.sub_group_size;
  int64_t decade = 1;
  while (chosen / decade >= 10) decade *= 10;
  const int64_t lead = chosen / decade;  // 1, 2 or 5
  bigger.zero_optimization.sub_group_size = lead == 2 ? 5 * decade : 2 * lead * decade;
  EXPECT_GT(plan_memory(bigger, model).peak_memory_bytes, budget);
  EXPECT_NE(config.effective_json.find("\"sub_group_size\":" + std::to_string(chosen)),
            std::string::npos) << "effective_json not refreshed";
  // Set in the config: honoured, whatever it costs (the start-up check then decides).
  Config set = config_at(3, 2, ", \"sub_group_size\": 1000000000, "
                               "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
                               "\"/tmp\", \"buffer_count\": 4}, \"offload_param\": {\"device\": "
                               "\"nvme\", \"nvme_path\": \"/tmp\", \"buffer_count\": 5}");
  EXPECT_EQ(fit_defaults_to_memory(set, model, budget), "");
  EXPECT_EQ(set.zero_optimization.sub_group_size, 1000000000);
  // Nothing makes it fit in 100 MiB: nothing changes.
  Config tiny = config_at(3, 2, offload);
  EXPECT_EQ(fit_defaults_to_memory(tiny, model, int64_t{100} << 20), "");
  EXPECT_EQ(tiny.zero_optimization.sub_group_size, 1000000000);
  // With SGD (no moments, fp32 parameters) the optimizer's records on NVMe are a page each, but
  // the step's pass copies the swapped parameters through a bounce tile of sub_group_size
  // elements: lowering it lowers the plan (measured: the 3B model's RSS 25 % above a plan that
  // left this tile out, with sub_group_size at 1e9).
  auto sgd_config = [&](const std::string& zero_json) {
    return parse_config(
        "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"SGD\", \"params\": "
        "{\"lr\": 1e-4}}, \"zero_optimization\": {\"stage\": 3" + zero_json + "}}",
        2, "test config");
  };
  Config sgd = sgd_config(offload);
  const int64_t sgd_peak = plan_memory(sgd, model).peak_memory_bytes;
  const std::string sgd_line = fit_defaults_to_memory(sgd, model, sgd_peak - 1);
  EXPECT_NE(sgd_line.find("sub_group_size 5e8"), std::string::npos) << sgd_line;
  EXPECT_LT(plan_memory(sgd, model).peak_memory_bytes, sgd_peak);
  // Needing more, sub_group_size goes to its floor and the parameters' slots go down; the
  // optimizer's buffer_count, whose records are a page each, is left alone.
  Config sgd_tight = sgd_config(offload);
  const int64_t floor_peak = [&] {
    Config c = sgd_config(offload);
    c.zero_optimization.sub_group_size = 1000000;
    return plan_memory(c, model).peak_memory_bytes;
  }();
  const std::string tight_line = fit_defaults_to_memory(sgd_tight, model, floor_peak - 1);
  EXPECT_EQ(sgd_tight.zero_optimization.sub_group_size, 1000000) << tight_line;
  EXPECT_EQ(tight_line.find("offload_optimizer.buffer_count"), std::string::npos) << tight_line;
  EXPECT_NE(tight_line.find("offload_param.buffer_count"), std::string::npos) << tight_line;
  // A knob no value of which lowers the plan is left alone: with the parameters in memory,
  // SGD's step tiles views of them, and smaller tiles only mean more page-sized records.
  Config in_memory = sgd_config(", \"offload_optimizer\": {\"device\": \"nvme\", "
                                "\"nvme_path\": \"/tmp\"}");
  const int64_t in_memory_peak = plan_memory(in_memory, model).peak_memory_bytes;
  const std::string in_memory_line = fit_defaults_to_memory(in_memory, model, in_memory_peak - 1);
  EXPECT_EQ(in_memory_line.find("sub_group_size"), std::string::npos) << in_memory_line;
  EXPECT_EQ(in_memory.zero_optimization.sub_group_size, 1000000000);
  EXPECT_NE(in_memory_line.find("stage3_prefetch_bucket_size"), std::string::npos)
      << in_memory_line;
  EXPECT_LT(plan_memory(in_memory, model).peak_memory_bytes, in_memory_peak);
  // ... but when nothing else is left to lower (the others set), a small gain is taken rather
  // than refusing a job it makes fit: the optimizer's buffer_count, one page-sized record less.
  Config only_records = sgd_config(
      ", \"sub_group_size\": 1e6, \"stage3_prefetch_bucket_size\": 5e7, "
      "\"stage3_max_live_parameters\": 1e9, \"offload_optimizer\": {\"device\": \"nvme\", "
      "\"nvme_path\": \"/tmp\"}");
  const int64_t records_peak = plan_memory(only_records, model).peak_memory_bytes;
  const std::string records_line = fit_defaults_to_memory(only_records, model, records_peak - 1);
  EXPECT_NE(records_line.find("offload_optimizer.buffer_count 3 (default 4)"), std::string::npos)
      << records_line;
  EXPECT_LT(plan_memory(only_records, model).peak_memory_bytes, records_peak);
  // Already fitting: nothing to do.
  Config roomy = config_at(3, 2, offload);
  EXPECT_EQ(fit_defaults_to_memory(roomy, model, before), "");
}

}  // namespace
}  // namespace zero::test
