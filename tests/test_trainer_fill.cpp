// What a config leaves open and what it becomes (Note [Values left to the trainer] in
// src/config/trainer_fill.cpp), the keys accepted because they change nothing in zero, the
// top level's rule for unknown keys (Note [Unknown keys] in src/config/reader.cpp), and the
// gradient-scaling and accumulation-dtype keys (docs/config.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "zero/config.h"
#include "zero/error.h"

namespace zero {
namespace {

constexpr const char* kSource = "hf.json";

// A config written for the Hugging Face Trainer: "auto" wherever the HF templates put it.
constexpr const char* kHfStage2 = R"({
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                           "warmup_num_steps": "auto", "total_num_steps": "auto"}},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "overlap_comm": true},
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto"
})";

// The entry of Config::filled for `key` (fails the test when there is none).
FilledValue filled(const Config& config, const std::string& key) {
  for (const FilledValue& value : config.filled) {
    if (value.key == key) return value;
  }
  ADD_FAILURE() << "nothing filled at " << key;
  return {};
}

bool has_note(const Config& config, const std::string& part) {
  return std::any_of(config.notes.begin(), config.notes.end(),
                     [&](const std::string& note) { return note.find(part) != std::string::npos; });
}

std::string error_of(const std::string& text, const TrainerValues* trainer, int world = 1) {
  try {
    if (trainer != nullptr) {
      parse_config(text, world, kSource, *trainer);
    } else {
      parse_config(text, world, kSource);
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A machine that computes both 16-bit dtypes at the given speeds (no measurement).
TrainerValues trainer_with(bool bf16_fast, bool fp16_fast) {
  TrainerValues trainer;
  trainer.bf16_fast = bf16_fast;
  trainer.fp16_fast = fp16_fast;
  return trainer;
}

TEST(TrainerFill, HuggingFaceConfigGetsTheTrainersValues) {
  TrainerValues trainer = trainer_with(true, true);
  trainer.total_steps = 100;
  trainer.hidden_size = 64;
  trainer.warmup_steps.set(10);
  trainer.learning_rate.set(3e-4);
  trainer.names["learning_rate"] = "--lr";
  const Config c = parse_config(kHfStage2, 2, kSource, trainer);
  // Batch: the HF default micro-batch 8, accumulation 1, the total over 2 ranks.
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.gradient_clipping, 1.0);  // max_grad_norm's default
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.999);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  ASSERT_TRUE(c.scheduler.has_value());
  EXPECT_EQ(c.scheduler->warmup_min_lr, 0.0);
  EXPECT_EQ(c.scheduler->warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 10);
  EXPECT_EQ(c.scheduler->total_num_steps, 100);
  // bf16 where the device computes it fast, never both.
  EXPECT_EQ(c.param_dtype, c10::ScalarType::BFloat16);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 64 * 64);
  // The fitter may lower what the trainer made from the width (it is not the user's).
  EXPECT_FALSE(c.zero_optimization.reduce_bucket_size_given);
  // Where each value came from.
  EXPECT_EQ(filled(c, "optimizer.params.lr").origin, "--lr");
  EXPECT_EQ(filled(c, "optimizer.params.lr").value, "0.0003");
  EXPECT_NE(filled(c, "optimizer.params.eps").origin.find("Hugging Face Trainer's default"),
            std::string::npos);
  EXPECT_EQ(filled(c, "fp16.enabled").value, "false");
  EXPECT_EQ(filled(c, "bf16.enabled").value, "true");
  EXPECT_NE(filled(c, "train_batch_size").origin.find("world size 2"), std::string::npos);
  // Every "auto" is listed, and the effective config holds no "auto".
  EXPECT_EQ(c.filled.size(), 15u);
  EXPECT_EQ(c.effective_json.find("\"auto\""), std::string::npos) << c.effective_json;
  // One start-up line lists them all.
  const std::vector<std::string> lines = config_notices(c);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("optimizer.params.lr = 0.0003 (--lr)"), std::string::npos) << lines[0];
}

TEST(TrainerFill, SixteenBitAutoFollowsTheDevice) {
  const std::string both = R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})";
  EXPECT_EQ(parse_config(both, 1, kSource, trainer_with(true, true)).param_dtype,
            c10::ScalarType::BFloat16);
  EXPECT_EQ(parse_config(both, 1, kSource, trainer_with(false, true)).param_dtype,
            c10::ScalarType::Half);
  EXPECT_EQ(parse_config(both, 1, kSource, trainer_with(false, false)).param_dtype,
            c10::ScalarType::Float);
  // An explicit fp16 wins over an "auto" bf16.
  const std::string fp16_on = R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "fp16": {"enabled": true}, "bf16": {"enabled": "auto"}})";
  const Config c = parse_config(fp16_on, 1, kSource, trainer_with(true, true));
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Half);
  EXPECT_EQ(filled(c, "bf16.enabled").origin, "fp16.enabled is true");
}

// compute_data_type "auto" follows the trainer's verdict on the 16-bit speed (zero-train's is
// agreed by every rank), not each process's own measurement.
TEST(TrainerFill, ComputeDtypeAutoFollowsTheTrainersVerdict) {
  const std::string text = R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "bf16": {"enabled": true}, "compute_data_type": "auto", "zero_optimization": {"stage": 3}})";
  EXPECT_EQ(parse_config(text, 1, kSource, trainer_with(false, false)).compute_dtype,
            c10::ScalarType::Float);
  EXPECT_EQ(parse_config(text, 1, kSource, trainer_with(true, false)).compute_dtype,
            c10::ScalarType::BFloat16);
}

TEST(TrainerFill, BatchKeysTheConfigDeterminesAreSolvedNotFilled) {
  TrainerValues trainer = trainer_with(false, false);
  // train_batch_size 32 with "auto" micro-batch and accumulation at 2 ranks: the micro-batch is
  // the trainer's (8), the accumulation solved (32 / (8 x 2) = 2).
  const std::string total_only = R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto", "optimizer": {"type": "AdamW"}})";
  Config c = parse_config(total_only, 2, kSource, trainer);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(filled(c, "gradient_accumulation_steps").origin, "solved from the other batch keys");
  // A given accumulation is used first, and the micro-batch solved: 32 / (4 x 2) = 4.
  trainer.gradient_accumulation.set(4);
  c = parse_config(total_only, 2, kSource, trainer);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  // A given value that contradicts the config's numbers is an error naming both.
  TrainerValues given = trainer_with(false, false);
  given.micro_batch.set(4);
  given.names["per_device_train_batch_size"] = "--micro-batch";
  const std::string fixed = R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}})";
  EXPECT_NE(error_of(fixed, &given).find(
                "--micro-batch 4 contradicts train_micro_batch_size_per_gpu = 2 in the config"),
            std::string::npos)
      << error_of(fixed, &given);
  const std::string solved = R"({"train_batch_size": 16, "gradient_accumulation_steps": 1,
      "train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW"}})";
  EXPECT_NE(error_of(solved, &given, 2).find(
                "--micro-batch 4 contradicts train_micro_batch_size_per_gpu = 8, which the "
                "config's batch keys give at world size 2"),
            std::string::npos)
      << error_of(solved, &given, 2);
  // A defaulted value never conflicts: the config's number wins.
  EXPECT_EQ(parse_config(fixed, 1, kSource, trainer_with(false, false)).train_micro_batch_size_per_gpu, 2);
}

TEST(TrainerFill, NoBatchSizeAtAllIsTheTrainers) {
  const std::string text = R"({"gradient_accumulation_steps": 4, "optimizer": {"type": "AdamW"}})";
  const Config c = parse_config(text, 2, kSource, trainer_with(false, false));
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.train_batch_size, 8 * 4 * 2);
  EXPECT_NE(filled(c, "train_micro_batch_size_per_gpu").origin.find("the config sets no batch size"),
            std::string::npos);
  // DeepSpeed's error without a trainer.
  EXPECT_NE(error_of(text, nullptr).find("one of train_batch_size or train_micro_batch_size_per_gpu is required"),
            std::string::npos);
}

TEST(TrainerFill, NoOptimizerSectionIsTheTrainersAdamW) {
  const std::string text = R"({"train_micro_batch_size_per_gpu": 2})";
  TrainerValues trainer = trainer_with(false, false);
  trainer.weight_decay.set(0.1);
  const Config c = parse_config(text, 1, kSource, trainer);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c.optimizer.lr, 5e-5);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(filled(c, "optimizer").value, "AdamW");
  EXPECT_TRUE(has_note(c, "no scheduler section: the learning rate stays 5e-05"));
  // Without a trainer, as in DeepSpeed, the section is required, and the message says who
  // fills it.
  const std::string message = error_of(text, nullptr);
  EXPECT_NE(message.find("the 'optimizer' section is required"), std::string::npos);
  EXPECT_NE(message.find("zero-train does"), std::string::npos);
  // A given value contradicting the config's number is an error; a defaulted one is not.
  TrainerValues lr;
  lr.learning_rate.set(1e-3);
  lr.names["learning_rate"] = "--lr";
  const std::string set_lr =
      R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 3e-5}}})";
  EXPECT_NE(error_of(set_lr, &lr).find("--lr 0.001 contradicts optimizer.params.lr = 3e-05"),
            std::string::npos)
      << error_of(set_lr, &lr);
  EXPECT_EQ(parse_config(set_lr, 1, kSource, TrainerValues{}).optimizer.lr, 3e-5);
}

// Without a trainer, "auto" is DeepSpeed's default (or the solver's result), never silently.
TEST(TrainerFill, WithoutATrainerAutoIsDeepSpeedsDefaultAndListed) {
  const Config c = parse_config(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "fp16": {"enabled": "auto"}})",
                                2, kSource);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Float);
  EXPECT_EQ(filled(c, "train_batch_size").origin, "solved from the other batch keys");
  EXPECT_EQ(filled(c, "optimizer.params.lr").origin, "DeepSpeed's default");
  EXPECT_EQ(filled(c, "fp16.enabled").value, "false");
  // All batch keys "auto": the message says who fills them.
  const std::string message = error_of(kHfStage2, nullptr);
  EXPECT_NE(message.find("\"auto\" is filled by a trainer"), std::string::npos) << message;
}

// Keys whose value changes nothing in zero: accepted, each with a note saying why.
TEST(NoEffectKeys, AcceptedWithANote) {
  struct Case {
    const char* name;
    std::string extra;
    const char* note;
  };
  const std::vector<Case> cases = {
      {"untested optimizer", R"("zero_allow_untested_optimizer": true)",
       "zero_allow_untested_optimizer = true changes nothing in zero"},
      {"ds cpu optimizer", R"("zero_force_ds_cpu_optimizer": false)",
       "zero_force_ds_cpu_optimizer = false changes nothing in zero"},
      {"round robin", R"("zero_optimization": {"stage": 2, "round_robin_gradients": true})",
       "round_robin_gradients = true changes nothing in zero"},
      {"sub_group_size 0", R"("zero_optimization": {"stage": 3, "sub_group_size": 0})",
       "sub_group_size = 0"},
      {"reduce_bucket_size 0 at stage 3", R"("zero_optimization": {"stage": 3, "reduce_bucket_size": 0})",
       "reduce_bucket_size = 0 changes nothing at stage 3"},
      {"reduce_bucket_size 0 at stage 2", R"("zero_optimization": {"stage": 2, "reduce_bucket_size": 0})",
       "each gradient is reduced on its own"},
      {"contiguous_gradients off at stage 3",
       R"("zero_optimization": {"stage": 3, "contiguous_gradients": false})",
       "contiguous_gradients = false changes nothing at stage 3"},
      {"reduce_scatter off at stage 3", R"("zero_optimization": {"stage": 3, "reduce_scatter": false})",
       "reduce_scatter = false changes nothing at stage 3"},
      {"partition activations", R"("activation_checkpointing": {"partition_activations": true})",
       "partition_activations = true changes nothing in zero"},
      {"contiguous memory", R"("activation_checkpointing": {"contiguous_memory_optimization": true})",
       "contiguous_memory_optimization = true changes nothing in zero"},
      {"synchronize", R"("activation_checkpointing": {"synchronize_checkpoint_boundary": true})",
       "synchronize_checkpoint_boundary = true changes nothing in zero"},
      {"loss scale in bf16", R"("bf16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16})",
       "bf16.loss_scale ignored: it is an fp16 key"},
      {"comment", R"("_comment": "from a template")", "unknown key '_comment' ignored"},
      {"launcher key", R"("cuda_visible_devices": "0,1")", "unknown key 'cuda_visible_devices' ignored"},
      {"deprecated cpu_offload", R"("zero_optimization": {"stage": 2, "cpu_offload": true})",
       "cpu_offload = true is DeepSpeed's deprecated spelling of zero_optimization.offload_optimizer"},
      {"predivide with prescale", R"("prescale_gradients": true, "gradient_predivide_factor": 2.0)",
       "gradient_predivide_factor = 2.0 has no effect with prescale_gradients true"},
      {"auto_cast", R"("fp16": {"enabled": true, "auto_cast": true})",
       "fp16.auto_cast = true: DeepSpeed casts the forward's floating-point inputs"},
      {"auto_cast without fp16", R"("fp16": {"enabled": false, "auto_cast": true})",
       "fp16.auto_cast = true has no effect: fp16 is not enabled"},
      {"elastic checkpoint", R"("zero_optimization": {"stage": 2, "elastic_checkpoint": true})",
       "elastic_checkpoint = true changes nothing in zero"},
      {"timers", R"("timers": {"throughput": {"enabled": true, "synchronized": false}})",
       "timers = {"},
      {"sequence-parallel dtype", R"("seq_parallel_communication_data_type": "bf16")",
       "it is the dtype of sequence-parallel communication"},
      {"disabled monitor under a wrapper",
       R"("monitor_config": {"enabled": true, "csv_monitor": {"enabled": false}})",
       "unknown key 'monitor_config' ignored"},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    const Config c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
        "params": {"torch_adam": true}}, )" + tc.extra + "}",
                                  1, kSource);
    EXPECT_TRUE(has_note(c, tc.note)) << (c.notes.empty() ? "no notes" : c.notes.back());
    EXPECT_TRUE(has_note(c, "optimizer.params.torch_adam = true changes nothing in zero"));
    // Each note is printed on its own start-up line.
    EXPECT_EQ(config_notices(c).size(), c.notes.size());
  }
  // Accepted without a note: tensor parallelism over one rank, older DeepSpeed's "bfp16".
  const Config quiet = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "tensor_parallel": {"autotp_size": 1}, "communication_data_type": "bfp16",
      "compile": null, "timers": null})",
                                    1, kSource);
  EXPECT_TRUE(quiet.notes.empty());
  EXPECT_EQ(quiet.communication_dtype, c10::ScalarType::BFloat16);
  // What the mapped and normalized keys become.
  const Config mapped = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
      "zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true,
                            "cpu_offload_use_pin_memory": true, "sub_group_size": 0,
                            "contiguous_gradients": false}})",
                                     1, kSource);
  EXPECT_EQ(mapped.zero_optimization.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(mapped.zero_optimization.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(mapped.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_EQ(mapped.zero_optimization.sub_group_size, 1000000000);
  EXPECT_FALSE(mapped.zero_optimization.sub_group_size_given);
  EXPECT_TRUE(mapped.zero_optimization.contiguous_gradients);
  // The effective config parses back to itself (it holds the mapped keys, not the old ones).
  EXPECT_EQ(parse_config(mapped.effective_json, 1, kSource).effective_json, mapped.effective_json);
}

TEST(GradientScaling, HonouredWhereDeepSpeedHonoursIt) {
  auto at_stage = [](int stage, const std::string& extra, int world) {
    return parse_config(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
        "zero_optimization": {"stage": )" + std::to_string(stage) + extra + "}, " +
                            R"("prescale_gradients": true})",
                        world, kSource);
  };
  EXPECT_EQ(pre_reduction_multiplier(at_stage(0, "", 4)), 0.25);
  EXPECT_EQ(pre_reduction_multiplier(at_stage(3, "", 2)), 0.5);
  EXPECT_EQ(pre_reduction_multiplier(at_stage(2, R"(, "reduce_scatter": false)", 2)), 0.5);
  const Config predivide = parse_config(
      R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}, "gradient_predivide_factor": 8})",
      2, kSource);
  EXPECT_EQ(pre_reduction_multiplier(predivide), 0.125);
  EXPECT_EQ(pre_reduction_multiplier(parse_config(
                R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}})", 2, kSource)),
            1.0);
}

TEST(GradAccumDtype, Fp32AtEveryStageAndTheKeptDtypeAccepted) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string zero = R"("zero_optimization": {"stage": )" + std::to_string(stage) + "}";
    const Config c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
        "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}, )" + zero + "}",
                                  1, kSource);
    EXPECT_EQ(kept_gradient_dtype(c), c10::ScalarType::Float);
    // Without it the stages keep bf16 (no accumulation, bf16 communication).
    const Config plain = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
        "bf16": {"enabled": true}, )" + zero + "}",
                                      1, kSource);
    EXPECT_EQ(kept_gradient_dtype(plain), c10::ScalarType::BFloat16);
    // The dtype zero accumulates in anyway is accepted.
    const Config same = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
        "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}, )" + zero + "}",
                                     1, kSource);
    EXPECT_EQ(kept_gradient_dtype(same), c10::ScalarType::BFloat16);
  }
  // At stage 2 with accumulation zero keeps fp32: bf16 is refused, naming what zero keeps.
  const std::string message = error_of(R"({"train_batch_size": 8, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW"}, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2},
      "data_types": {"grad_accum_dtype": "bf16"}})",
                                       nullptr);
  EXPECT_NE(message.find("zero accumulates gradients in fp32 there"), std::string::npos) << message;
}

}  // namespace
}  // namespace zero
