// parse_config / load_config: DeepSpeed JSON, the batch-triple solver, strict validation and
// the messages users see (docs/config.md).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "zero/config.h"
#include "zero/error.h"

namespace zero {
namespace {

constexpr const char* kSource = "ds_config.json";

// A minimal valid config plus `extra` top-level members.
std::string with(const std::string& extra) {
  std::string text = R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"})";
  if (!extra.empty()) text += ", " + extra;
  return text + "}";
}

// The message of the zero::Error that parsing throws, or "<no error>".
std::string error_of(const std::string& text, int world_size = 1) {
  try {
    parse_config(text, world_size, kSource);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Config, Defaults) {
  const Config c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "Adam"}})", 1);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.source, "<string>");
  EXPECT_EQ(c.gradient_clipping, 0.0);
  // DeepSpeed: "Adam" means AdamW (adam_w_mode defaults to true).
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_TRUE(c.optimizer.bias_correction);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Float);
  EXPECT_EQ(c.communication_dtype, c10::ScalarType::Float);
  // Documented fp16 defaults (not DeepSpeed's silent 2^32 / hysteresis 1).
  EXPECT_TRUE(c.loss_scale.dynamic);
  EXPECT_EQ(c.loss_scale.initial_scale_power, 16);
  EXPECT_EQ(c.loss_scale.scale_window, 1000);
  EXPECT_EQ(c.loss_scale.hysteresis, 2);
  EXPECT_FALSE(c.loss_scale.consecutive_hysteresis);
  EXPECT_DOUBLE_EQ(c.loss_scale.min_loss_scale, 1.0);
  EXPECT_EQ(c.zero_optimization.stage, 0);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 500000000);
  EXPECT_FALSE(c.zero_optimization.overlap_comm_enabled());
  EXPECT_TRUE(c.zero_optimization.contiguous_gradients);
  EXPECT_TRUE(c.zero_optimization.reduce_scatter);
  EXPECT_TRUE(c.zero_optimization.allgather_partitions);
}

TEST(Config, DeepSpeedExample) {
  const std::string text = R"({
    "train_batch_size": 16,
    "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 5e-5}},
    "fp16": {"enabled": true},
    "zero_optimization": {
      "stage": 2,
      "allgather_partitions": true,
      "allgather_bucket_size": 2e8,
      "reduce_scatter": true,
      "reduce_bucket_size": 2e8,
      "overlap_comm": true
    }
  })";
  const Config c = parse_config(text, 2, kSource);
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 2);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.source, kSource);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 5e-5);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Half);
  EXPECT_EQ(c.communication_dtype, c10::ScalarType::Half);
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 200000000);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 200000000);
  EXPECT_TRUE(c.zero_optimization.overlap_comm_enabled());
  EXPECT_TRUE(c.zero_optimization.reduce_scatter);
}

struct TripleCase {
  const char* name;
  const char* keys;  // batch members of the JSON object
  int world_size;
  int64_t tbs, mbs, gas;
};

TEST(Config, BatchTripleSolver) {
  const std::vector<TripleCase> cases = {
      {"all three", R"("train_batch_size": 24, "train_micro_batch_size_per_gpu": 3,
                       "gradient_accumulation_steps": 2)", 4, 24, 3, 2},
      {"tbs+mbs", R"("train_batch_size": 24, "train_micro_batch_size_per_gpu": 3)", 4, 24, 3, 2},
      {"tbs+gas", R"("train_batch_size": 24, "gradient_accumulation_steps": 2)", 4, 24, 3, 2},
      {"mbs+gas", R"("train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2)", 4,
       24, 3, 2},
      {"tbs only", R"("train_batch_size": 24)", 4, 24, 6, 1},
      {"mbs only", R"("train_micro_batch_size_per_gpu": 3)", 4, 12, 3, 1},
      {"auto is unset", R"("train_batch_size": "auto", "train_micro_batch_size_per_gpu": 3,
                           "gradient_accumulation_steps": "auto")", 2, 6, 3, 1},
      {"null is unset", R"("train_batch_size": 12, "train_micro_batch_size_per_gpu": null,
                           "gradient_accumulation_steps": 3)", 2, 12, 2, 3},
      {"integral float", R"("train_batch_size": 1.6e1, "gradient_accumulation_steps": 2.0)", 1,
       16, 8, 2},
      {"world 1", R"("train_batch_size": 7)", 1, 7, 7, 1},
  };
  for (const TripleCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    const std::string text =
        std::string("{") + tc.keys + R"(, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})";
    const Config c = parse_config(text, tc.world_size);
    EXPECT_EQ(c.train_batch_size, tc.tbs);
    EXPECT_EQ(c.train_micro_batch_size_per_gpu, tc.mbs);
    EXPECT_EQ(c.gradient_accumulation_steps, tc.gas);
  }
}

TEST(Config, Optimizers) {
  Config c = parse_config(with(R"("gradient_clipping": 1.0)"), 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);

  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "adam", "params": {
      "lr": 0.01, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1,
      "bias_correction": false, "adam_w_mode": false, "amsgrad": false, "torch_adam": false}}})",
                   1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_FALSE(c.optimizer.bias_correction);

  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "ADAMW",
      "params": {"adam_w_mode": true}}})", 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);

  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {
      "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 1e-4}}})", 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kSGD);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.dampening, 0.0);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 1e-4);
  EXPECT_TRUE(c.optimizer.nesterov);

  // Adagrad: torch.optim.Adagrad's defaults (lr 1e-2, eps 1e-10) and keys.
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "adagrad"}})", 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdagrad);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-2);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-10);
  EXPECT_DOUBLE_EQ(c.optimizer.initial_accumulator_value, 0.0);
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "Adagrad", "params": {
      "lr": 0.05, "eps": 1e-8, "weight_decay": 0.01, "lr_decay": 0.001,
      "initial_accumulator_value": 0.1, "amsgrad": false, "foreach": null}}})", 1);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.lr_decay, 0.001);
  EXPECT_DOUBLE_EQ(c.optimizer.initial_accumulator_value, 0.1);
  // Lion: DeepSpeed's defaults (lr 1e-3, betas [0.9, 0.999]).
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "Lion"}})", 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kLion);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "lion", "params": {
      "lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 1.0}}})", 1);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 1.0);
  // LAMB: DeepSpeed's FusedLamb defaults and keys.
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "LAMB"}})", 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kLamb);
  EXPECT_DOUBLE_EQ(c.optimizer.max_coeff, 10.0);
  EXPECT_DOUBLE_EQ(c.optimizer.min_coeff, 0.01);
  EXPECT_FALSE(c.optimizer.eps_inside_sqrt);
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "Lamb", "params": {
      "lr": 2e-3, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01,
      "bias_correction": false, "max_coeff": 5, "min_coeff": 0.1, "eps_inside_sqrt": true}}})",
                   1);
  EXPECT_DOUBLE_EQ(c.optimizer.max_coeff, 5.0);
  EXPECT_DOUBLE_EQ(c.optimizer.min_coeff, 0.1);
  EXPECT_TRUE(c.optimizer.eps_inside_sqrt);
  EXPECT_FALSE(c.optimizer.bias_correction);
  // Muon: DeepSpeed's MuonWithAuxAdam defaults for each half; lr is both halves' unless
  // muon_lr / adam_lr say otherwise.
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "Muon"}})", 1);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kMuon);
  EXPECT_DOUBLE_EQ(c.optimizer.muon_lr, 0.02);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-10);
  EXPECT_EQ(c.optimizer.ns_method, MuonNsMethod::kGram);
  EXPECT_EQ(c.optimizer.ns_dtype, c10::ScalarType::Float);
  EXPECT_TRUE(c.optimizer.aux_adam_w_mode);
  c = parse_config(R"({"train_batch_size": 4, "optimizer": {"type": "muon", "params": {
      "lr": 0.01, "adam_lr": 1e-3, "momentum": 0.9, "weight_decay": 0.1,
      "ns_method": "standard", "ns_dtype": "bf16", "adam_w_mode": false,
      "per_head_muon": false}}})", 1);
  EXPECT_DOUBLE_EQ(c.optimizer.muon_lr, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_EQ(c.optimizer.ns_method, MuonNsMethod::kStandard);
  EXPECT_EQ(c.optimizer.ns_dtype, c10::ScalarType::BFloat16);
  EXPECT_FALSE(c.optimizer.aux_adam_w_mode);
  {
    const Config again = parse_config(c.effective_json, 1);
    EXPECT_DOUBLE_EQ(again.optimizer.muon_lr, 0.01);
    EXPECT_DOUBLE_EQ(again.optimizer.lr, 1e-3);
    EXPECT_EQ(again.optimizer.ns_method, MuonNsMethod::kStandard);
    EXPECT_EQ(again.optimizer.ns_dtype, c10::ScalarType::BFloat16);
    EXPECT_FALSE(again.optimizer.aux_adam_w_mode);
  }
  // Each writes itself back as it was read.
  for (const char* type : {"Adagrad", "Lion", "Lamb", "Muon"}) {
    const std::string json = std::string(R"({"train_batch_size": 4, "optimizer": {"type": ")") +
                             type + R"(", "params": {"lr": 0.003}}})";
    const Config first = parse_config(json, 1);
    const Config again = parse_config(first.effective_json, 1);
    EXPECT_EQ(again.optimizer.type, first.optimizer.type) << type;
    EXPECT_DOUBLE_EQ(again.optimizer.lr, 0.003) << type;
    EXPECT_DOUBLE_EQ(again.optimizer.eps, first.optimizer.eps) << type;
    EXPECT_DOUBLE_EQ(again.optimizer.beta1, first.optimizer.beta1) << type;
  }
}

TEST(Config, Precision) {
  Config c = parse_config(with(R"("bf16": {"enabled": true})"), 1);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::BFloat16);
  EXPECT_EQ(c.communication_dtype, c10::ScalarType::BFloat16);

  c = parse_config(with(R"("bfloat16": {"enabled": true}, "communication_data_type": "FP32")"), 1);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::BFloat16);
  EXPECT_EQ(c.communication_dtype, c10::ScalarType::Float);

  c = parse_config(with(R"("fp16": {"enabled": true, "loss_scale": 128, "hysteresis": 3,
      "initial_scale_power": 12, "loss_scale_window": 500, "min_loss_scale": 0.5,
      "consecutive_hysteresis": true}, "communication_data_type": "bf16")"), 1);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Half);
  EXPECT_EQ(c.communication_dtype, c10::ScalarType::BFloat16);
  EXPECT_FALSE(c.loss_scale.dynamic);
  EXPECT_DOUBLE_EQ(c.loss_scale.static_scale, 128.0);
  EXPECT_EQ(c.loss_scale.hysteresis, 3);
  EXPECT_EQ(c.loss_scale.initial_scale_power, 12);
  EXPECT_EQ(c.loss_scale.scale_window, 500);
  EXPECT_DOUBLE_EQ(c.loss_scale.min_loss_scale, 0.5);
  EXPECT_TRUE(c.loss_scale.consecutive_hysteresis);

  // fp16 present but disabled: fp32 parameters, the loss-scale keys are still validated.
  c = parse_config(with(R"("fp16": {"enabled": false, "loss_scale": 0}, "bf16": {"enabled": false})"), 1);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Float);
}

TEST(Config, LegacyZeroForm) {
  Config c = parse_config(with(R"("zero_optimization": true, "allgather_size": 1000)"), 1);
  EXPECT_EQ(c.zero_optimization.stage, 1);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 1000);
  c = parse_config(with(R"("zero_optimization": false)"), 1);
  EXPECT_EQ(c.zero_optimization.stage, 0);
}

// A config that spells out DeepSpeed defaults (and Hugging Face "auto" values) everywhere runs.
TEST(Config, SpelledOutDefaultsAreAccepted) {
  const std::string text = R"({
    // comments are allowed, as with DeepSpeed's hjson loader
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "legacy_fusion": false,
                  "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto",
                             "set_grad_none": true}},
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1, "auto_cast": false},
    "bf16": {"enabled": false, "immediate_grad_update": false},
    "communication_data_type": null,
    "zero_optimization": {
      "stage": 2, "offload_optimizer": {"device": "none", "pin_memory": true},
      "offload_param": null, "allgather_partitions": true, "allgather_bucket_size": 5e8,
      "overlap_comm": null, "reduce_scatter": true, "reduce_bucket_size": "auto",
      "contiguous_gradients": true, "round_robin_gradients": false, "cpu_offload": false,
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": 1e5,
      "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
      "stage3_model_persistence_threshold": 9223372036854775807, "sub_group_size": 1e9,
      "stage3_gather_16bit_weights_on_model_save": false, "use_multi_rank_bucket_allreduce": true,
      "load_from_fp32_weights": true, "ignore_unused_parameters": true,
      "zero_hpz_partition_size": 1, "zero_quantized_weights": false, "mics_shard_size": -1,
      "memory_efficient_linear": true
    },
    "steps_per_print": null,
    "wall_clock_breakdown": false,
    "prescale_gradients": false,
    "gradient_predivide_factor": 1.0,
    "zero_allow_untested_optimizer": false,
    "checkpoint": {"tag_validation": "warn", "parallel_write": {}},
    "aio": {"block_size": 1048576, "queue_depth": 8, "single_submit": false},
    "activation_checkpointing": {"partition_activations": false, "number_checkpoints": null},
    "tensorboard": {"enabled": false, "output_path": "logs/"},
    "wandb": {}, "csv_monitor": null, "amp": {"enabled": false, "opt_level": "O1"},
    "flops_profiler": {"enabled": false}, "scheduler": null, "data_types": {}
  })";
  const Config c = parse_config(text, 2, kSource);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.param_dtype, c10::ScalarType::Float);
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_FALSE(c.zero_optimization.overlap_comm_enabled());
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500000000);
}

TEST(Config, EffectiveJson) {
  const Config a = parse_config(with(R"("zero_optimization": {"stage": 1}, "fp16": {"enabled": true})"), 2);
  EXPECT_EQ(a.effective_json,
            R"({"aio":{"block_size":1048576,"intra_op_parallelism":1,"overlap_events":true,)"
            R"("queue_depth":8,"single_submit":false},)"
            R"("bf16":{"enabled":false,"immediate_grad_update":false},)"
            R"("communication_data_type":"fp16","compute_data_type":"fp16",)"
            R"("csv_monitor":{"enabled":false,"job_name":"DeepSpeedJobName","output_path":""},)"
            R"("data_types":{"grad_accum_dtype":null},)"
            R"("fp16":{"auto_cast":false,"consecutive_hysteresis":false,"enabled":true,)"
            R"("fp16_master_weights_and_grads":false,"hysteresis":2,"initial_scale_power":16,)"
            R"("loss_scale":0.0,"loss_scale_window":1000,"min_loss_scale":1.0},)"
            R"("gradient_accumulation_steps":1,"gradient_clipping":0.0,)"
            R"("gradient_predivide_factor":1.0,)"
            R"("optimizer":{"params":{"adam_w_mode":true,"betas":[0.9,0.999],)"
            R"("bias_correction":true,"eps":1e-08,"lr":0.001,"weight_decay":0.0},"type":"AdamW"},)"
            R"("prescale_gradients":false,"scheduler":null,"seed":1234,"steps_per_print":null,)"
            R"("tensorboard":{"enabled":false,"job_name":"DeepSpeedJobName","output_path":""},)"
            R"("train_batch_size":8,"train_micro_batch_size_per_gpu":4,)"
            R"("wall_clock_breakdown":false,)"
            R"("zero_optimization":{"allgather_bucket_size":500000000,"allgather_partitions":true,)"
            R"("contiguous_gradients":true,"offload_optimizer":{"device":"none","pin_memory":false},)"
            R"("offload_param":{"device":"none","pin_memory":false},)"
            R"("overlap_comm":false,"reduce_bucket_size":500000000,)"
            R"("reduce_scatter":true,"stage":1,)"
            R"("stage3_gather_16bit_weights_on_model_save":false,)"
            R"("stage3_max_live_parameters":1000000000,"stage3_max_reuse_distance":1000000000,)"
            R"("stage3_model_persistence_threshold":9223372036854775807,)"
            R"("stage3_param_persistence_threshold":100000,)"
            R"("stage3_prefetch_bucket_size":50000000,"sub_group_size":1000000000,)"
            R"("zero_hpz_partition_size":1,"zero_quantized_gradients":false,)"
            R"("zero_quantized_weights":false}})");
  // The effective JSON is itself a config that parses to the same effective JSON.
  EXPECT_EQ(parse_config(a.effective_json, 2).effective_json, a.effective_json);
  // Equivalent configs have the same canonical form ("Adam" is AdamW by default; the triple
  // can be given in any solvable way).
  const Config b = parse_config(R"({"train_micro_batch_size_per_gpu": 4,
      "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
      "fp16": {"enabled": true, "hysteresis": 2}})", 2);
  EXPECT_EQ(b.effective_json, a.effective_json);
  const Config sgd = parse_config(
      R"({"train_batch_size": 4, "optimizer": {"type": "sgd", "params": {"lr": 0.5}}})", 1);
  EXPECT_EQ(parse_config(sgd.effective_json, 1).effective_json, sgd.effective_json);
  EXPECT_NE(sgd.effective_json.find(R"("type":"SGD")"), std::string::npos);
  const Config adam = parse_config(
      R"({"train_batch_size": 4, "optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})", 1);
  EXPECT_EQ(parse_config(adam.effective_json, 1).optimizer.type, OptimizerType::kAdam);
}

TEST(Config, SchedulerAndLogging) {
  // Defaults of the new keys.
  Config c = parse_config(with(""), 1);
  EXPECT_FALSE(c.scheduler.has_value());
  EXPECT_FALSE(c.steps_per_print.has_value());
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_EQ(c.seed, 1234u);
  EXPECT_FALSE(c.csv_monitor.enabled);
  EXPECT_EQ(c.csv_monitor.output_path, "");
  EXPECT_EQ(c.csv_monitor.job_name, "DeepSpeedJobName");

  // null and {} mean no scheduler, as in DeepSpeed.
  EXPECT_FALSE(parse_config(with(R"("scheduler": null)"), 1).scheduler.has_value());
  EXPECT_FALSE(parse_config(with(R"("scheduler": {})"), 1).scheduler.has_value());

  // WarmupLR with DeepSpeed's defaults.
  c = parse_config(with(R"("scheduler": {"type": "WarmupLR"})"), 1);
  ASSERT_TRUE(c.scheduler.has_value());
  EXPECT_EQ(c.scheduler->type, SchedulerType::kWarmupLR);
  EXPECT_EQ(c.scheduler->warmup_type, WarmupType::kLog);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler->effective_warmup_steps(), 1000);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_max_lr, 0.001);
  EXPECT_EQ(c.scheduler->total_num_steps, 0);

  // WarmupDecayLR, Hugging Face style with "auto" and a spelled-out last_batch_iteration.
  c = parse_config(with(R"("scheduler": {"type": "WarmupDecayLR", "params": {
      "warmup_min_lr": "auto", "warmup_max_lr": 3e-4, "warmup_num_steps": 1,
      "total_num_steps": 2, "warmup_type": "linear", "last_batch_iteration": -1}})"), 1);
  ASSERT_TRUE(c.scheduler.has_value());
  EXPECT_EQ(c.scheduler->type, SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(c.scheduler->warmup_type, WarmupType::kLinear);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 1);
  EXPECT_EQ(c.scheduler->effective_warmup_steps(), 2);  // DeepSpeed's minimum
  EXPECT_EQ(c.scheduler->total_num_steps, 2);

  // WarmupCosineLR with its defaults.
  c = parse_config(with(R"("scheduler": {"type": "WarmupCosineLR",
      "params": {"total_num_steps": 1001}})"), 1);
  ASSERT_TRUE(c.scheduler.has_value());
  EXPECT_EQ(c.scheduler->type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(c.scheduler->total_num_steps, 1001);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler->warmup_type, WarmupType::kLog);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_min_ratio, 0.0);
  EXPECT_DOUBLE_EQ(c.scheduler->cos_min_ratio, 0.0001);

  // Logging, monitor, seed.
  c = parse_config(with(R"("steps_per_print": 10, "wall_clock_breakdown": true, "seed": 0,
      "csv_monitor": {"enabled": true, "output_path": "logs/", "job_name": "run1"})"), 1);
  EXPECT_EQ(c.steps_per_print, std::optional<int64_t>(10));
  EXPECT_TRUE(c.wall_clock_breakdown);
  EXPECT_EQ(c.seed, 0u);
  EXPECT_TRUE(c.csv_monitor.enabled);
  EXPECT_EQ(c.csv_monitor.output_path, "logs/");
  EXPECT_EQ(c.csv_monitor.job_name, "run1");
  c = parse_config(with(R"("steps_per_print": "auto", "seed": 9223372036854775807,
      "csv_monitor": {"enabled": false}, "wall_clock_breakdown": "auto")"), 1);
  EXPECT_FALSE(c.steps_per_print.has_value());
  EXPECT_EQ(c.seed, 9223372036854775807u);
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_FALSE(c.csv_monitor.enabled);
  EXPECT_EQ(c.csv_monitor.job_name, "DeepSpeedJobName");
  // DeepSpeed's disabled monitor with other keys still spelled out (values are checked).
  c = parse_config(with(R"("csv_monitor": {"enabled": false, "output_path": "x", "job_name": "y"})"), 1);
  EXPECT_EQ(c.csv_monitor.output_path, "x");
}

TEST(Config, SchedulerEffectiveJsonRoundTrips) {
  const std::vector<std::string> configs = {
      with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linear"}})"),
      with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 5000,
          "warmup_min_lr": 1e-6, "warmup_max_lr": 1e-4, "warmup_num_steps": 100}})"),
      with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 5000,
          "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_num_steps": 1}},
          "steps_per_print": 7, "seed": 42, "wall_clock_breakdown": true,
          "csv_monitor": {"enabled": true, "output_path": "/tmp/x", "job_name": "j"})"),
  };
  for (const std::string& text : configs) {
    SCOPED_TRACE(text);
    const Config a = parse_config(text, 1);
    const Config b = parse_config(a.effective_json, 1);
    EXPECT_EQ(b.effective_json, a.effective_json);
    ASSERT_TRUE(b.scheduler.has_value());
    EXPECT_EQ(b.scheduler->type, a.scheduler->type);
    EXPECT_EQ(b.scheduler->warmup_num_steps, a.scheduler->warmup_num_steps);
    EXPECT_EQ(b.scheduler->total_num_steps, a.scheduler->total_num_steps);
  }
  const Config cosine = parse_config(configs[2], 1);
  EXPECT_NE(cosine.effective_json.find(
                R"("scheduler":{"params":{"cos_min_ratio":0.01,"total_num_steps":5000,)"
                R"("warmup_min_ratio":0.1,"warmup_num_steps":1,"warmup_type":"log"},)"
                R"("type":"WarmupCosineLR"})"),
            std::string::npos)
      << cosine.effective_json;
  EXPECT_NE(cosine.effective_json.find(R"("seed":42,"steps_per_print":7,)"), std::string::npos);
  // The effective config lines name the scheduler keys for the rank-agreement check.
  const std::vector<std::string> lines = effective_config_lines(cosine);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "scheduler.params.total_num_steps = 5000"),
            lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "scheduler.type = \"WarmupCosineLR\""),
            lines.end());
  const std::vector<std::string> plain = effective_config_lines(parse_config(with(""), 1));
  EXPECT_NE(std::find(plain.begin(), plain.end(), "scheduler = null"), plain.end());
}

struct InvalidCase {
  const char* name;
  std::string text;
  int world_size;
  std::vector<std::string> expected;  // substrings of the message
};

TEST(Config, InvalidConfigsNameKeyAndValue) {
  const std::string sgd_no_lr =
      R"({"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {"momentum": 0.9}}})";
  const std::vector<InvalidCase> cases = {
      // unknown and misplaced keys
      {"top-level typo", with(R"("zero_optimizaton": {"stage": 1})"), 1,
       {"unknown key 'zero_optimizaton'", "did you mean 'zero_optimization'?"}},
      {"nested typo", with(R"("zero_optimization": {"stagee": 1})"), 1,
       {"unknown key 'zero_optimization.stagee'", "did you mean 'zero_optimization.stage'?"}},
      {"misplaced top-level key", with(R"("zero_optimization": {"aio": {}})"), 1,
       {"unknown key 'zero_optimization.aio'", "'aio' is a top-level key"}},
      {"fp16 enabled key under bf16", with(R"("bf16": {"enabled": true, "auto_cast": false})"), 1,
       {"unknown key 'bf16.auto_cast'", "'fp16.auto_cast'"}},
      {"stage at top level", with(R"("stage": 2)"), 1,
       {"unknown key 'stage'", "did you mean 'zero_optimization.stage'?"}},
      {"offload at the top level", with(R"("offload_optimizer": {"device": "none"})"), 1,
       {"unknown key 'offload_optimizer'", "did you mean 'zero_optimization.offload_optimizer'?"}},
      {"disabled section not an object", with(R"("wandb": true)"), 1,
       {"wandb = true is invalid", "{\"enabled\": false}"}},
      {"docs-only grad_hooks", with(R"("zero_optimization": {"grad_hooks": true})"), 1,
       {"unknown key 'zero_optimization.grad_hooks'"}},
      {"optimizer params typo",
       R"({"train_batch_size": 4, "optimizer": {"type": "Adam", "params": {"weight_decy": 0.1}}})",
       1, {"unknown key 'optimizer.params.weight_decy'", "'optimizer.params.weight_decay'"}},
      {"SGD with betas",
       R"({"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {"lr": 1, "betas": [0.9, 0.9]}}})",
       1, {"unknown key 'optimizer.params.betas'"}},
      {"checkpoint typo", with(R"("checkpoint": {"tag_validaton": "Warn"})"), 1,
       {"unknown key 'checkpoint.tag_validaton'", "'checkpoint.tag_validation'"}},
      {"offload typo", with(R"("zero_optimization": {"offload_optimizer": {"devic": "none"}})"), 1,
       {"unknown key 'zero_optimization.offload_optimizer.devic'",
        "'zero_optimization.offload_optimizer.device'"}},
      // zero_optimization values
      {"stage 4", with(R"("zero_optimization": {"stage": 4})"), 1,
       {"zero_optimization.stage = 4 is invalid", "allowed: 0, 1, 2, 3"}},
      {"stage -1", with(R"("zero_optimization": {"stage": -1})"), 1,
       {"zero_optimization.stage = -1 is invalid", "allowed: 0, 1, 2, 3"}},
      {"stage string", with(R"("zero_optimization": {"stage": "2"})"), 1,
       {"zero_optimization.stage = \"2\" is invalid", "integer"}},
      {"fractional bucket", with(R"("zero_optimization": {"reduce_bucket_size": 1.5})"), 1,
       {"zero_optimization.reduce_bucket_size = 1.5", "integer"}},
      {"zero bucket", with(R"("zero_optimization": {"allgather_bucket_size": 0})"), 1,
       {"zero_optimization.allgather_bucket_size = 0", "> 0"}},
      {"allgather_partitions false", with(R"("zero_optimization": {"allgather_partitions": false})"), 1,
       {"zero_optimization.allgather_partitions = false is not supported yet"}},
      {"overlap_comm string", with(R"("zero_optimization": {"overlap_comm": "yes"})"), 1,
       {"zero_optimization.overlap_comm = \"yes\"", "true, false or null"}},
      {"offload at stage 0", with(R"("zero_optimization": {"offload_optimizer": {"device": "cpu"}})"), 1,
       {"zero_optimization.offload_optimizer.device = \"cpu\" needs zero_optimization.stage 1 or "
        "higher (got 0)"}},
      {"offload_param below stage 3",
       with(R"("zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}})"), 1,
       {"zero_optimization.offload_param.device = \"cpu\" needs zero_optimization.stage 3",
        "(got 2)"}},
      {"parameters to nvme below stage 3",
       with(R"("zero_optimization": {"stage": 2, "offload_param": {"device": "nvme", "nvme_path": "/x"}})"), 1,
       {"zero_optimization.offload_param.device = \"nvme\" needs zero_optimization.stage 3",
        "only stage 3 partitions the parameters"}},
      {"one parameter buffer",
       with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x", "buffer_count": 1}})"), 1,
       {"zero_optimization.offload_param.buffer_count = 1 is invalid",
        "an integer number of staging buffers in [2, 1024]"}},
      {"nvme without a path",
       with(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}})"), 1,
       {"zero_optimization.offload_optimizer.nvme_path = null is invalid",
        "required with device \"nvme\""}},
      {"nvme at stage 0",
       with(R"("zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/x"}})"), 1,
       {"zero_optimization.offload_optimizer.device = \"nvme\" needs zero_optimization.stage 1"}},
      {"no staging buffer",
       with(R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/x", "buffer_count": 0}})"), 1,
       {"zero_optimization.offload_optimizer.buffer_count = 0 is invalid", "[1, 1024]"}},
      {"aio block not a multiple of 4 KiB", with(R"("aio": {"block_size": 5000})"), 1,
       {"aio.block_size = 5000 is invalid", "a multiple of 4096"}},
      {"aio typo", with(R"("aio": {"queue_dept": 4})"), 1, {"unknown key 'aio.queue_dept'"}},
      {"gpudirect storage", with(R"("aio": {"use_gds": true})"), 1,
       {"aio.use_gds = true is not supported yet"}},
      {"offload device typo",
       with(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}})"), 1,
       {"zero_optimization.offload_optimizer.device = \"gpu\" is invalid",
        "\"none\", \"cpu\" or \"nvme\""}},
      {"partial offload",
       with(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}})"), 1,
       {"zero_optimization.offload_optimizer.ratio = 0.3 is not supported yet", "only 1.0"}},
      {"offload_param key of offload_optimizer",
       with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pipeline_read": true}})"), 1,
       {"unknown key 'zero_optimization.offload_param.pipeline_read'"}},
      {"non-default unimplemented stage3 key",
       with(R"("zero_optimization": {"stage": 3, "stage3_module_granularity_threshold": 7})"), 1,
       {"zero_optimization.stage3_module_granularity_threshold = 7 is not supported yet",
        "a DeepSpeed stage-3 internal that zero does not implement"}},
      {"sub_group_size negative", with(R"("zero_optimization": {"sub_group_size": -1})"), 1,
       {"zero_optimization.sub_group_size = -1", "an integer number of elements >= 0"}},
      {"ZeRO++ below stage 3", with(R"("zero_optimization": {"zero_quantized_gradients": true})"), 1,
       {"zero_optimization.zero_quantized_gradients = true needs zero_optimization.stage 3",
        "the stage is 0", "allowed at this stage: the default (false)"}},
      {"hpZ below stage 3", with(R"("zero_optimization": {"stage": 2, "zero_hpz_partition_size": 4})"), 1,
       {"zero_optimization.zero_hpz_partition_size = 4 needs zero_optimization.stage 3"}},
      {"hpZ zero", with(R"("zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0})"), 1,
       {"zero_optimization.zero_hpz_partition_size = 0", "1 (off) or the number of ranks per node"}},
      {"quantized weights not a bool", with(R"("zero_optimization": {"stage": 3, "zero_quantized_weights": "yes"})"), 1,
       {"zero_optimization.zero_quantized_weights"}},
      {"ZeRO++ frozen weights", with(R"("zero_optimization": {"stage": 3, "zero_quantized_nontrainable_weights": true})"), 1,
       {"zero_optimization.zero_quantized_nontrainable_weights = true is not supported yet",
        "quantized frozen weights and LoCo error feedback are not implemented"}},
      {"legacy cpu_offload at stage 0", with(R"("zero_optimization": {"cpu_offload": true})"), 1,
       {"zero_optimization.cpu_offload = true needs zero_optimization.stage 1 or higher (got 0)"}},
      {"legacy cpu_offload with offload_optimizer",
       with(R"("zero_optimization": {"stage": 2, "cpu_offload": true, "offload_optimizer": {"device": "cpu"}})"), 1,
       {"both 'zero_optimization.cpu_offload'", "keep offload_optimizer"}},
      {"pin memory without cpu_offload",
       with(R"("zero_optimization": {"stage": 2, "cpu_offload_use_pin_memory": true})"), 1,
       {"cpu_offload_use_pin_memory = true needs cpu_offload or cpu_offload_param true"}},
      {"zero_optimization number", with(R"("zero_optimization": 2)"), 1,
       {"zero_optimization = 2 is invalid", "legacy"}},
      {"allgather_size without legacy form", with(R"("allgather_size": 1000)"), 1,
       {"allgather_size = 1000", "zero_optimization.allgather_bucket_size"}},
      // batch triple
      {"triple mismatch",
       R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 3,
           "gradient_accumulation_steps": 1, "optimizer": {"type": "Adam"}})", 2,
       {"train_batch_size 16 is not equal to train_micro_batch_size_per_gpu 3 * "
        "gradient_accumulation_steps 1 * world size 2 = 6"}},
      {"no batch size", R"({"optimizer": {"type": "Adam"}})", 1,
       {"one of train_batch_size or train_micro_batch_size_per_gpu is required"}},
      {"only gas", R"({"gradient_accumulation_steps": 4, "optimizer": {"type": "Adam"}})", 1,
       {"one of train_batch_size or train_micro_batch_size_per_gpu is required",
        "gradient_accumulation_steps 4"}},
      {"tbs not divisible by world", R"({"train_batch_size": 10, "optimizer": {"type": "Adam"}})",
       4, {"train_batch_size 10 is not divisible by world size 4"}},
      {"tbs not divisible by world*gas",
       R"({"train_batch_size": 12, "gradient_accumulation_steps": 4, "optimizer": {"type": "Adam"}})",
       2, {"train_batch_size 12 is not divisible by world size 2 * gradient_accumulation_steps 4 = 8"}},
      {"tbs not divisible by mbs*world",
       R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 3, "optimizer": {"type": "Adam"}})",
       2, {"train_batch_size 16 is not divisible by train_micro_batch_size_per_gpu 3 * world size 2 = 6"}},
      {"tbs zero", R"({"train_batch_size": 0, "optimizer": {"type": "Adam"}})", 1,
       {"train_batch_size = 0 is invalid", "> 0"}},
      {"gas beyond int", R"({"train_batch_size": 16, "gradient_accumulation_steps": 4294967297, "optimizer": {"type": "Adam"}})", 1,
       {"gradient_accumulation_steps = 4294967297 is invalid", "<= 2147483647"}},
      {"mbs 2^31", R"({"train_micro_batch_size_per_gpu": 2147483648, "optimizer": {"type": "Adam"}})", 1,
       {"train_micro_batch_size_per_gpu = 2147483648 is invalid", "<= 2147483647"}},
      {"mbs negative", R"({"train_micro_batch_size_per_gpu": -1, "optimizer": {"type": "Adam"}})", 1,
       {"train_micro_batch_size_per_gpu = -1 is invalid"}},
      {"tbs string", R"({"train_batch_size": "16", "optimizer": {"type": "Adam"}})", 1,
       {"train_batch_size = \"16\" is invalid", "integer"}},
      {"gas fractional", R"({"train_batch_size": 16, "gradient_accumulation_steps": 2.5, "optimizer": {"type": "Adam"}})", 1,
       {"gradient_accumulation_steps = 2.5 is invalid"}},
      // top-level scalars
      {"negative clipping", with(R"("gradient_clipping": -1)"), 1,
       {"gradient_clipping = -1 is invalid", ">= 0"}},
      {"clipping string", with(R"("gradient_clipping": "1.0")"), 1,
       {"gradient_clipping = \"1.0\" is invalid"}},
      // optimizer
      {"missing optimizer", R"({"train_batch_size": 8})", 1,
       {"'optimizer' section is required"}},
      {"missing optimizer type", R"({"train_batch_size": 8, "optimizer": {"params": {}}})", 1,
       {"optimizer.type is required", "Adam, AdamW, SGD, Adagrad, Lion, Lamb, Muon"}},
      {"Lamb min above max", R"({"train_batch_size": 8, "optimizer": {"type": "Lamb",
       "params": {"min_coeff": 2, "max_coeff": 1}}})", 1,
       {"optimizer.params.min_coeff = 2", "optimizer.params.max_coeff = 1"}},
      {"Lamb amsgrad", R"({"train_batch_size": 8, "optimizer": {"type": "Lamb",
       "params": {"amsgrad": true}}})", 1, {"optimizer.params.amsgrad = true"}},
      {"MuAdam", R"({"train_batch_size": 8, "optimizer": {"type": "MuAdam"}})", 1,
       {"optimizer.type = \"MuAdam\" is not supported yet"}},
      {"Muon per head", R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
       "params": {"per_head_muon": true}}})", 1, {"optimizer.params.per_head_muon = true"}},
      {"Muon ns_method", R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
       "params": {"ns_method": "polar"}}})", 1,
       {"optimizer.params.ns_method = \"polar\" is invalid", "\"gram\" or \"standard\""}},
      {"Muon ns_dtype", R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
       "params": {"ns_dtype": "fp16"}}})", 1,
       {"optimizer.params.ns_dtype = \"fp16\" is invalid", "fp16 is not supported"}},
      {"Muon lr 0", R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
       "params": {"lr": 0}}})", 1, {"optimizer.params.lr = 0", "adam_lr"}},
      {"Muon momentum", R"({"train_batch_size": 8, "optimizer": {"type": "Muon",
       "params": {"momentum": 1}}})", 1, {"optimizer.params.momentum = 1", "[0, 1)"}},
      {"Adagrad amsgrad", R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad",
       "params": {"amsgrad": true}}})", 1, {"optimizer.params.amsgrad = true"}},
      {"Adagrad betas", R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad",
       "params": {"betas": [0.9, 0.99]}}})", 1, {"optimizer.params.betas", "lr_decay"}},
      {"Lion eps", R"({"train_batch_size": 8, "optimizer": {"type": "Lion",
       "params": {"eps": 1e-8}}})", 1, {"optimizer.params.eps"}},
      {"Lion beta 1", R"({"train_batch_size": 8, "optimizer": {"type": "Lion",
       "params": {"betas": [0.9, 1.0]}}})", 1, {"optimizer.params.betas", "[0, 1)"}},
      {"Adagrad negative lr_decay", R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad",
       "params": {"lr_decay": -1}}})", 1, {"optimizer.params.lr_decay = -1", ">= 0"}},
      {"typo in type", R"({"train_batch_size": 8, "optimizer": {"type": "Adamm"}})", 1,
       {"optimizer.type = \"Adamm\" is invalid", "did you mean 'Adam'?"}},
      {"torch optimizer", R"({"train_batch_size": 8, "optimizer": {"type": "RMSprop"}})", 1,
       {"optimizer.type = \"RMSprop\" is invalid", "Adam, AdamW, SGD"}},
      {"max_grad_norm",
       R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})", 1,
       {"optimizer.params.max_grad_norm = 1.0", "gradient_clipping"}},
      {"beta out of range",
       R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}}})", 1,
       {"optimizer.params.betas = [0.9,1.0] is invalid", "[0, 1)"}},
      {"eps zero", R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"eps": 0}}})", 1,
       {"optimizer.params.eps = 0 is invalid", "> 0"}},
      {"negative weight decay",
       R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"weight_decay": -0.1}}})", 1,
       {"optimizer.params.weight_decay = -0.1 is invalid"}},
      {"lr string", R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": "1e-3"}}})", 1,
       {"optimizer.params.lr = \"1e-3\" is invalid"}},
      {"amsgrad", R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"amsgrad": true}}})", 1,
       {"optimizer.params.amsgrad = true is not supported yet"}},
      {"torch_adam not a boolean", R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"torch_adam": 1}}})", 1,
       {"optimizer.params.torch_adam = 1 is invalid", "false"}},
      {"1-bit Adam", R"({"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}})", 1,
       {"optimizer.type = \"OneBitAdam\": zero does not have DeepSpeed's 1-bit optimizers"}},
      {"AdamW without adam_w_mode",
       R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})", 1,
       {"optimizer.params.adam_w_mode = false contradicts optimizer.type \"AdamW\""}},
      {"legacy_fusion", R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "legacy_fusion": true}})", 1,
       {"optimizer.legacy_fusion = true is not supported yet"}},
      {"SGD without lr", sgd_no_lr, 1, {"optimizer.params.lr is required for SGD"}},
      {"nesterov without momentum",
       R"({"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.1, "nesterov": true}}})", 1,
       {"optimizer.params.nesterov = true requires momentum > 0 and dampening 0", "momentum 0.0"}},
      // precision
      {"fp16 and bf16", with(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})"), 1,
       {"fp16.enabled and bf16.enabled are both true"}},
      {"bf16 and bfloat16", with(R"("bf16": {"enabled": true}, "bfloat16": {"enabled": true})"), 1,
       {"both 'bf16' and its alias 'bfloat16'"}},
      {"fp16 enabled string", with(R"("fp16": {"enabled": "true"})"), 1,
       {"fp16.enabled = \"true\" is invalid", "true or false"}},
      {"auto_cast not a boolean", with(R"("fp16": {"enabled": true, "auto_cast": 1})"), 1,
       {"fp16.auto_cast = 1 is invalid"}},
      {"fp16 master weights", with(R"("fp16": {"fp16_master_weights_and_grads": true})"), 1,
       {"fp16.fp16_master_weights_and_grads = true is not supported yet"}},
      {"negative loss scale", with(R"("fp16": {"loss_scale": -1})"), 1,
       {"fp16.loss_scale = -1 is invalid"}},
      {"hysteresis zero", with(R"("fp16": {"hysteresis": 0})"), 1,
       {"fp16.hysteresis = 0 is invalid", ">= 1"}},
      {"scale power too large", with(R"("fp16": {"initial_scale_power": 128})"), 1,
       {"fp16.initial_scale_power = 128 is invalid", "[0, 127]"}},
      {"min loss scale negative", with(R"("fp16": {"min_loss_scale": -1})"), 1,
       {"fp16.min_loss_scale = -1 is invalid", "a number >= 0"}},
      {"bf16 immediate update", with(R"("bf16": {"enabled": true, "immediate_grad_update": true})"), 1,
       {"bf16.immediate_grad_update = true is not supported yet"}},
      {"communication dtype", with(R"("communication_data_type": "fp8")"), 1,
       {"communication_data_type = \"fp8\" is invalid", "\"fp32\", \"fp16\", \"bf16\""}},
      // other DeepSpeed keys: only their defaults
      {"prescale_gradients at stage 2",
       with(R"("prescale_gradients": true, "zero_optimization": {"stage": 2})"), 1,
       {"prescale_gradients = true at zero_optimization.stage 2 with reduce_scatter true",
        "DeepSpeed's stage 1-2 optimizer asserts it", "reduce_scatter false"}},
      {"gradient_predivide_factor at stage 1",
       with(R"("gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 1})"), 1,
       {"gradient_predivide_factor = 2.0 at zero_optimization.stage 1"}},
      {"gradient_predivide_factor zero", with(R"("gradient_predivide_factor": 0)"), 1,
       {"gradient_predivide_factor = 0 is invalid", "a number > 0"}},
      {"wandb enabled", with(R"("wandb": {"enabled": true, "project": "x"})"), 1,
       {"wandb.enabled = true is not supported", "no network", "tensorboard"}},
      {"tensorboard not an object", with(R"("tensorboard": true)"), 1, {"tensorboard", "true"}},
      {"tensorboard unknown key", with(R"("tensorboard": {"enabled": true, "path": "x"})"), 1,
       {"unknown key 'tensorboard.path'"}},
      {"section without enabled", with(R"("wandb": {"project": "p"})"), 1,
       {"wandb = {\"project\":\"p\"} is not supported yet", "\"enabled\": false"}},
      {"amp enabled", with(R"("amp": {"enabled": true})"), 1,
       {"amp.enabled = true: zero does not have NVIDIA apex AMP", "remove the section"}},
      {"autotuning enabled", with(R"("autotuning": {"enabled": true})"), 1,
       {"autotuning.enabled = true: zero does not have the DeepSpeed Autotuner"}},
      {"compression", with(R"("compression_training": {"weight_quantization": {}})"), 1,
       {"compression_training = ", "zero does not have DeepSpeed Compression"}},
      {"sparse attention", with(R"("sparse_attention": {"mode": "fixed"})"), 1,
       {"sparse_attention = ", "zero does not have DeepSpeed Sparse Attention"}},
      {"eigenvalue enabled", with(R"("eigenvalue": {"enabled": true})"), 1,
       {"eigenvalue.enabled = true: zero does not have the eigenvalue computation"}},
      // scheduler
      {"scheduler not an object", with(R"("scheduler": "WarmupLR")"), 1,
       {"scheduler = \"WarmupLR\" is invalid", "an object"}},
      {"scheduler without type", with(R"("scheduler": {"params": {"warmup_num_steps": 10}})"), 1,
       {"scheduler.type is required", "WarmupLR, WarmupDecayLR, WarmupCosineLR"}},
      {"scheduler type typo", with(R"("scheduler": {"type": "WarmupLr"})"), 1,
       {"scheduler.type = \"WarmupLr\" is invalid", "did you mean 'WarmupLR'?"}},
      {"scheduler type unknown", with(R"("scheduler": {"type": "Constant"})"), 1,
       {"scheduler.type = \"Constant\" is invalid", "WarmupLR, WarmupDecayLR, WarmupCosineLR"}},
      {"scheduler type number", with(R"("scheduler": {"type": 1})"), 1,
       {"scheduler.type = 1 is invalid", "a string"}},
      {"OneCycle", with(R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0}})"), 1,
       {"scheduler.type = \"OneCycle\" is not supported yet", "WarmupCosineLR"}},
      {"LRRangeTest", with(R"("scheduler": {"type": "LRRangeTest"})"), 1,
       {"scheduler.type = \"LRRangeTest\" is not supported yet"}},
      {"torch scheduler", with(R"("scheduler": {"type": "StepLR", "params": {"step_size": 10}})"), 1,
       {"scheduler.type = \"StepLR\" is not supported yet", "torch.optim.lr_scheduler"}},
      {"scheduler section typo", with(R"("scheduler": {"type": "WarmupLR", "param": {}})"), 1,
       {"unknown key 'scheduler.param'", "did you mean 'scheduler.params'?"}},
      {"scheduler params typo",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 10}})"), 1,
       {"unknown key 'scheduler.params.warmup_num_step'",
        "did you mean 'scheduler.params.warmup_num_steps'?"}},
      {"param of another scheduler",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 10}})"), 1,
       {"scheduler.params.total_num_steps is not a parameter of WarmupLR", "WarmupDecayLR",
        "warmup_max_lr"}},
      {"lr param for cosine",
       with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_min_lr": 0}})"), 1,
       {"scheduler.params.warmup_min_lr is not a parameter of WarmupCosineLR", "warmup_min_ratio"}},
      {"negative min lr",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": -1e-5}})"), 1,
       {"scheduler.params.warmup_min_lr = -1e-05 is invalid", ">= 0"}},
      {"max lr string",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "3e-4"}})"), 1,
       {"scheduler.params.warmup_max_lr = \"3e-4\" is invalid", "number"}},
      {"warmup steps zero",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}})"), 1,
       {"scheduler.params.warmup_num_steps = 0 is invalid", ">= 1"}},
      {"warmup steps fractional",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10.5}})"), 1,
       {"scheduler.params.warmup_num_steps = 10.5 is invalid", "integer"}},
      {"warmup type",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}})"), 1,
       {"scheduler.params.warmup_type = \"cosine\" is invalid", "\"log\" or \"linear\""}},
      {"warmup type null",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": null}})"), 1,
       {"scheduler.params.warmup_type = null is invalid"}},
      {"last_batch_iteration",
       with(R"("scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 100}})"), 1,
       {"scheduler.params.last_batch_iteration = 100 is not supported yet", "-1"}},
      {"decay without total", with(R"("scheduler": {"type": "WarmupDecayLR", "params": {}})"), 1,
       {"scheduler.params.total_num_steps is required for WarmupDecayLR"}},
      {"cosine without params", with(R"("scheduler": {"type": "WarmupCosineLR"})"), 1,
       {"scheduler.params.total_num_steps is required for WarmupCosineLR"}},
      {"total auto",
       with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}})"), 1,
       {"scheduler.params.total_num_steps is required for WarmupDecayLR", "(got \"auto\")"}},
      {"total zero",
       with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 0}})"), 1,
       {"scheduler.params.total_num_steps = 0 is invalid", ">= 1"}},
      {"decay total below warmup",
       with(R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 500}})"), 1,
       {"scheduler.params.total_num_steps = 500 is invalid for WarmupDecayLR",
        ">= the warmup length 1000"}},
      {"cosine total equal to warmup",
       with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_num_steps": 100}})"), 1,
       {"scheduler.params.total_num_steps = 100 is invalid for WarmupCosineLR",
        "> the warmup length 100"}},
      {"cosine total within minimum warmup",
       with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 2, "warmup_num_steps": 1}})"), 1,
       {"scheduler.params.total_num_steps = 2 is invalid", "warmup_num_steps 1 raised to DeepSpeed's minimum of 2"}},
      {"cos_min_ratio above 1",
       with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 2000, "cos_min_ratio": 1.5}})"), 1,
       {"scheduler.params.cos_min_ratio = 1.5 is invalid", "[0, 1]"}},
      {"warmup_min_ratio negative",
       with(R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 2000, "warmup_min_ratio": -0.1}})"), 1,
       {"scheduler.params.warmup_min_ratio = -0.1 is invalid", "[0, 1]"}},
      {"scheduler param at top level", with(R"("warmup_num_steps": 100)"), 1,
       {"unknown key 'warmup_num_steps'", "did you mean 'scheduler.params.warmup_num_steps'?"}},
      // logging, monitoring, seed
      {"steps_per_print zero", with(R"("steps_per_print": 0)"), 1,
       {"steps_per_print = 0 is invalid", "an integer >= 1, or null"}},
      {"steps_per_print fractional", with(R"("steps_per_print": 2.5)"), 1,
       {"steps_per_print = 2.5 is invalid"}},
      {"steps_per_print string", with(R"("steps_per_print": "10")"), 1,
       {"steps_per_print = \"10\" is invalid"}},
      {"wall_clock_breakdown string", with(R"("wall_clock_breakdown": "yes")"), 1,
       {"wall_clock_breakdown = \"yes\" is invalid", "true or false"}},
      {"seed negative", with(R"("seed": -1)"), 1, {"seed = -1 is invalid", "an integer in [0, "}},
      {"seed fractional", with(R"("seed": 1.5)"), 1, {"seed = 1.5 is invalid"}},
      {"seed too large", with(R"("seed": 18446744073709551615)"), 1,
       {"seed = 18446744073709551615 is invalid"}},
      {"csv_monitor typo", with(R"("csv_monitor": {"enabled": true, "outputpath": "x"})"), 1,
       {"unknown key 'csv_monitor.outputpath'", "did you mean 'csv_monitor.output_path'?"}},
      {"csv_monitor unknown", with(R"("csv_monitor": {"enabled": true, "output_dir": "x"})"), 1,
       {"unknown key 'csv_monitor.output_dir'", "known keys: enabled, output_path, job_name"}},
      {"csv_monitor enabled string", with(R"("csv_monitor": {"enabled": "true"})"), 1,
       {"csv_monitor.enabled = \"true\" is invalid", "true or false"}},
      {"csv_monitor path number", with(R"("csv_monitor": {"output_path": 3})"), 1,
       {"csv_monitor.output_path = 3 is invalid", "a string"}},
      {"csv_monitor not an object", with(R"("csv_monitor": true)"), 1,
       {"csv_monitor = true is invalid", "an object"}},
      {"checkpoint tag validation", with(R"("checkpoint": {"tag_validation": "Fail"})"), 1,
       {"checkpoint.tag_validation = \"Fail\" is not supported yet", "\"Warn\""}},
      {"grad accum dtype below the kept one", with(R"("data_types": {"grad_accum_dtype": "bf16"})"), 1,
       {"data_types.grad_accum_dtype = \"bf16\" is not supported with fp32 parameters",
        "zero accumulates gradients in fp32"}},
      {"grad accum dtype name", with(R"("data_types": {"grad_accum_dtype": "fp8"})"), 1,
       {"data_types.grad_accum_dtype = \"fp8\" is invalid"}},
      {"unknown top-level key close to a known one", with(R"("gradient_clippin": 1.0)"), 1,
       {"unknown key 'gradient_clippin'; did you mean 'gradient_clipping'?"}},
      {"unknown top-level object holding a top-level key", with(R"("log": {"steps_per_print": 50})"), 1,
       {"unknown key 'log'; it holds 'steps_per_print'", "did you mean 'steps_per_print'?"}},
      {"unknown top-level object holding a section's key", with(R"("extras": {"overlap_comm": true})"), 1,
       {"unknown key 'extras'; it holds 'overlap_comm'", "'zero_optimization.overlap_comm'"}},
      // JSON structure
      {"duplicate nested key", with(R"("zero_optimization": {"stage": 1, "stage": 2})"), 1,
       {"duplicate key 'zero_optimization.stage'"}},
      {"duplicate top-level key", with(R"("train_batch_size": 8)"), 1,
       {"duplicate key 'train_batch_size'"}},
      {"syntax error", "{\n  \"train_batch_size\": 8,\n  \"optimizer\": {\"type\": \"Adam\",}\n}", 1,
       {"invalid JSON at line 3", "parse error"}},
      {"not an object", "[1, 2]", 1, {"the config must be a JSON object", "[1,2]"}},
      {"world size", with(""), 0, {"world_size must be >= 1 (got 0)"}},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const InvalidCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    const std::string message = error_of(tc.text, tc.world_size);
    EXPECT_EQ(message.rfind(std::string(kSource) + ": ", 0), 0u) << message;
    for (const std::string& part : tc.expected) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message: " << message << "\nexpected to contain: " << part;
    }
  }
}

// ZeRO stage 3 and its keys (DeepSpeedZeroConfig): DeepSpeed's names, aliases and defaults.
TEST(Config, Stage3) {
  Config c = parse_config(with(R"("zero_optimization": {"stage": 3})"), 1);
  const ZeroOptimizationConfig& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 3);
  EXPECT_TRUE(z.overlap_comm_enabled());  // DeepSpeed: None -> true for stage 3
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z.stage3_model_persistence_threshold, INT64_MAX);
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);

  // overlap_comm: null / "auto" / absent follow the stage; an explicit value wins.
  for (const char* overlap : {"", R"(, "overlap_comm": null)", R"(, "overlap_comm": "auto")"}) {
    SCOPED_TRACE(overlap);
    EXPECT_TRUE(parse_config(with(std::string(R"("zero_optimization": {"stage": 3)") + overlap +
                                  "}"), 1).zero_optimization.overlap_comm_enabled());
    for (int stage : {0, 1, 2}) {
      EXPECT_FALSE(parse_config(with(R"("zero_optimization": {"stage": )" +
                                     std::to_string(stage) + overlap + "}"), 1)
                       .zero_optimization.overlap_comm_enabled());
    }
  }
  EXPECT_FALSE(parse_config(with(R"("zero_optimization": {"stage": 3, "overlap_comm": false})"), 1)
                   .zero_optimization.overlap_comm_enabled());
  EXPECT_TRUE(parse_config(with(R"("zero_optimization": {"stage": 2, "overlap_comm": true})"), 1)
                  .zero_optimization.overlap_comm_enabled());
  EXPECT_FALSE(parse_config(with(""), 1).zero_optimization.overlap_comm_enabled());  // stage 0
  EXPECT_FALSE(parse_config(with(R"("zero_optimization": true)"), 1).zero_optimization.overlap_comm_enabled());

  // Every key under its stage3_ name, with JSON numbers like 5e7.
  c = parse_config(with(R"("zero_optimization": {"stage": 3,
      "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e4,
      "stage3_model_persistence_threshold": 123456789, "stage3_max_live_parameters": 3e8,
      "stage3_max_reuse_distance": 0, "stage3_gather_16bit_weights_on_model_save": true})"), 1);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 10000);
  EXPECT_EQ(c.zero_optimization.stage3_model_persistence_threshold, 123456789);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 300000000);
  EXPECT_EQ(c.zero_optimization.stage3_max_reuse_distance, 0);
  EXPECT_TRUE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  // The effective config names them (canonical stage3_ names) and parses back to itself.
  EXPECT_EQ(parse_config(c.effective_json, 1).effective_json, c.effective_json);
  const std::vector<std::string> lines = effective_config_lines(c);
  for (const char* line :
       {"zero_optimization.stage = 3", "zero_optimization.overlap_comm = true",
        "zero_optimization.stage3_prefetch_bucket_size = 50000000",
        "zero_optimization.stage3_param_persistence_threshold = 10000",
        "zero_optimization.stage3_model_persistence_threshold = 123456789",
        "zero_optimization.stage3_max_live_parameters = 300000000",
        "zero_optimization.stage3_max_reuse_distance = 0",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save = true"}) {
    EXPECT_NE(std::find(lines.begin(), lines.end(), line), lines.end()) << line;
  }

  // The same under DeepSpeed's aliases (the pydantic field names) gives the same config.
  const Config alias = parse_config(with(R"("zero_optimization": {"stage": 3,
      "prefetch_bucket_size": 50000000, "param_persistence_threshold": 10000,
      "model_persistence_threshold": 1.23456789e8, "max_live_parameters": 300000000,
      "max_reuse_distance": 0, "gather_16bit_weights_on_model_save": true})"), 1);
  EXPECT_EQ(alias.effective_json, c.effective_json);
  // The deprecated stage3_gather_fp16_weights_on_model_save maps to the 16-bit key.
  EXPECT_TRUE(parse_config(with(R"("zero_optimization": {"stage": 3,
      "stage3_gather_fp16_weights_on_model_save": true})"), 1)
                  .zero_optimization.stage3_gather_16bit_weights_on_model_save);

  // 0 is allowed for every size (0 = no prefetch).
  c = parse_config(with(R"("zero_optimization": {"stage": 3, "prefetch_bucket_size": 0,
      "param_persistence_threshold": 0, "model_persistence_threshold": 0,
      "max_live_parameters": 0, "max_reuse_distance": 0})"), 1);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 0);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 0);
  EXPECT_EQ(c.zero_optimization.stage3_model_persistence_threshold, 0);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 0);
  EXPECT_EQ(c.zero_optimization.stage3_max_reuse_distance, 0);
  // "auto" means the default.
  EXPECT_EQ(parse_config(with(R"("zero_optimization": {"stage": 3,
      "stage3_prefetch_bucket_size": "auto"})"), 1).zero_optimization.stage3_prefetch_bucket_size,
            50000000);

  // Accepted (and recorded) at stages 0-2 too, where they have no effect, as in DeepSpeed.
  c = parse_config(with(R"("zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": 1000,
      "stage3_max_live_parameters": 2e9, "stage3_gather_16bit_weights_on_model_save": true})"), 1);
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 1000);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 2000000000);
  EXPECT_TRUE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
}

TEST(Config, ZeroPlusPlus) {
  const ZeroPlusPlusConfig off = parse_config(with(R"("zero_optimization": {"stage": 3})"), 1)
                                     .zero_optimization.zeropp;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.hpz_partition_size, 1);
  const Config c = parse_config(
      with(R"("zero_optimization": {"stage": 3, "zero_quantized_weights": true,
               "zero_hpz_partition_size": 8, "zero_quantized_gradients": true})"), 1);
  const ZeroPlusPlusConfig& z = c.zero_optimization.zeropp;
  EXPECT_TRUE(z.enabled());
  EXPECT_TRUE(z.quantized_weights);
  EXPECT_TRUE(z.quantized_gradients);
  EXPECT_EQ(z.hpz_partition_size, 8);
  // Spelled-out defaults are accepted at every stage.
  for (int stage : {0, 1, 2, 3}) {
    EXPECT_NO_THROW(parse_config(with(R"("zero_optimization": {"stage": )" + std::to_string(stage) +
                                      R"(, "zero_quantized_weights": false, "zero_hpz_partition_size": 1,
                                      "zero_quantized_gradients": false})"), 1));
  }
}

TEST(Config, Stage3InvalidValues) {
  const std::vector<InvalidCase> cases = {
      {"negative prefetch", with(R"("zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": -1})"), 1,
       {"zero_optimization.stage3_prefetch_bucket_size = -1 is invalid", ">= 0"}},
      {"fractional prefetch alias", with(R"("zero_optimization": {"prefetch_bucket_size": 1.5})"), 1,
       {"zero_optimization.prefetch_bucket_size = 1.5 is invalid", "integer"}},
      {"string persistence", with(R"("zero_optimization": {"stage3_param_persistence_threshold": "1e5"})"), 1,
       {"zero_optimization.stage3_param_persistence_threshold = \"1e5\" is invalid", "integer"}},
      {"negative model persistence", with(R"("zero_optimization": {"model_persistence_threshold": -5})"), 1,
       {"zero_optimization.model_persistence_threshold = -5 is invalid", ">= 0"}},
      {"null max live", with(R"("zero_optimization": {"stage3_max_live_parameters": null})"), 1,
       {"zero_optimization.stage3_max_live_parameters = null is invalid", "integer"}},
      {"negative max live alias", with(R"("zero_optimization": {"max_live_parameters": -1e9})"), 1,
       {"zero_optimization.max_live_parameters = -1000000000.0 is invalid", ">= 0"}},
      {"negative reuse distance", with(R"("zero_optimization": {"stage3_max_reuse_distance": -2})"), 1,
       {"zero_optimization.stage3_max_reuse_distance = -2 is invalid", ">= 0"}},
      {"too large reuse distance", with(R"("zero_optimization": {"max_reuse_distance": 1e19})"), 1,
       {"zero_optimization.max_reuse_distance = 1e+19 is invalid", "integer"}},
      {"gather weights number", with(R"("zero_optimization": {"stage3_gather_16bit_weights_on_model_save": 1})"), 1,
       {"zero_optimization.stage3_gather_16bit_weights_on_model_save = 1 is invalid", "true or false"}},
      {"deprecated gather weights string", with(R"("zero_optimization": {"stage3_gather_fp16_weights_on_model_save": "yes"})"), 1,
       {"zero_optimization.stage3_gather_fp16_weights_on_model_save = \"yes\" is invalid"}},
      // A key given under two of its names.
      {"prefetch and alias",
       with(R"("zero_optimization": {"stage3_prefetch_bucket_size": 1, "prefetch_bucket_size": 1})"), 1,
       {"both 'zero_optimization.stage3_prefetch_bucket_size' and its alias "
        "'zero_optimization.prefetch_bucket_size' are given"}},
      {"persistence and alias (auto)",
       with(R"("zero_optimization": {"param_persistence_threshold": 1, "stage3_param_persistence_threshold": "auto"})"), 1,
       {"'zero_optimization.stage3_param_persistence_threshold'",
        "'zero_optimization.param_persistence_threshold'", "keep one of them"}},
      {"model persistence and alias",
       with(R"("zero_optimization": {"stage3_model_persistence_threshold": 1, "model_persistence_threshold": 2})"), 1,
       {"'zero_optimization.stage3_model_persistence_threshold'",
        "'zero_optimization.model_persistence_threshold'"}},
      {"max live and alias",
       with(R"("zero_optimization": {"stage3_max_live_parameters": 1, "max_live_parameters": 1})"), 1,
       {"'zero_optimization.stage3_max_live_parameters'", "'zero_optimization.max_live_parameters'"}},
      {"reuse distance and alias",
       with(R"("zero_optimization": {"stage3_max_reuse_distance": 1, "max_reuse_distance": 1})"), 1,
       {"'zero_optimization.stage3_max_reuse_distance'", "'zero_optimization.max_reuse_distance'"}},
      {"16-bit and deprecated fp16 gather",
       with(R"("zero_optimization": {"stage3_gather_16bit_weights_on_model_save": true, "stage3_gather_fp16_weights_on_model_save": true})"), 1,
       {"'zero_optimization.stage3_gather_16bit_weights_on_model_save'",
        "'zero_optimization.stage3_gather_fp16_weights_on_model_save'"}},
      {"16-bit alias and deprecated fp16 gather",
       with(R"("zero_optimization": {"gather_16bit_weights_on_model_save": false, "stage3_gather_fp16_weights_on_model_save": false})"), 1,
       {"'zero_optimization.gather_16bit_weights_on_model_save'",
        "'zero_optimization.stage3_gather_fp16_weights_on_model_save'"}},
      // Unimplemented stage-3 keys stay default-only.
      {"module granularity", with(R"("zero_optimization": {"stage": 3, "stage3_module_granularity_threshold": 100})"), 1,
       {"zero_optimization.stage3_module_granularity_threshold = 100 is not supported yet",
        "stage-3 internal that zero does not implement"}},
      {"memory_efficient_linear", with(R"("zero_optimization": {"stage": 3, "memory_efficient_linear": false})"), 1,
       {"zero_optimization.memory_efficient_linear = false is not supported yet"}},
      {"typo of a stage3 key", with(R"("zero_optimization": {"stage3_prefetch_bucket_sise": 1})"), 1,
       {"unknown key 'zero_optimization.stage3_prefetch_bucket_sise'",
        "did you mean 'zero_optimization.stage3_prefetch_bucket_size'?"}},
  };
  for (const InvalidCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    const std::string message = error_of(tc.text, tc.world_size);
    EXPECT_EQ(message.rfind(std::string(kSource) + ": ", 0), 0u) << message;
    for (const std::string& part : tc.expected) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message: " << message << "\nexpected to contain: " << part;
    }
  }
  // The "planned" wording is gone from the unimplemented stage-3 keys.
  EXPECT_EQ(error_of(with(R"("zero_optimization": {"stage3_module_granularity_threshold": 1})"))
                .find("planned"),
            std::string::npos);
  // sub_group_size is implemented (the optimizer's tile), at every stage.
  EXPECT_EQ(parse_config(with(R"("zero_optimization": {"stage": 1, "sub_group_size": 1e3})"), 1)
                .zero_optimization.sub_group_size,
            1000);
}

class ConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_test_config_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigFiles, MissingFile) {
  const std::string path = (dir_ / "missing.json").string();
  try {
    load_config(path, 1);
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  }
}

TEST_F(ConfigFiles, SyntaxError) {
  const std::string path = write("bad.json", "{\n  \"train_batch_size\": 8\n  \"optimizer\": {}\n}\n");
  try {
    load_config(path, 1);
    FAIL() << "no error for a syntax error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(path + ": invalid JSON at line 3", 0), 0u) << message;
    EXPECT_NE(message.find("byte"), std::string::npos) << message;
  }
}

TEST_F(ConfigFiles, ValidFile) {
  const std::string path = write("ds_config.json", with(R"("zero_optimization": {"stage": 2})"));
  const Config c = load_config(path, 2);
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.zero_optimization.stage, 2);
  // Errors in a file name the file.
  const std::string bad = write("bad_stage.json", with(R"("zero_optimization": {"stage": 5})"));
  try {
    load_config(bad, 1);
    FAIL() << "no error for stage 5";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(bad + ": zero_optimization.stage = 5", 0), 0u) << e.what();
  }
}

TEST_F(ConfigFiles, Directory) {
  try {
    load_config(dir_.string(), 1);
    FAIL() << "no error for a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
}


// A Config built in code is checked by validate_config (and so by zero::initialize) with the
// parser's rules and messages: the same key path, value and allowed values.
std::string validation_error_of(const Config& config) {
  try {
    validate_config(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ValidateConfig, DefaultAndParsedConfigsAreValid) {
  EXPECT_EQ(validation_error_of(Config{}), "<no error>");
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE(stage);
    const Config parsed = parse_config(
        with(R"("bf16": {"enabled": true}, "zero_optimization": {"stage": )" +
             std::to_string(stage) + "}"), 2, kSource);
    EXPECT_EQ(validation_error_of(parsed), "<no error>");
  }
}

TEST(ValidateConfig, HandBuiltInvalidConfigsGetTheParsersMessage) {
  Config c;
  c.source = kSource;
  c.gradient_accumulation_steps = 0;  // the engine would divide by it
  std::string message = validation_error_of(c);
  EXPECT_NE(message.find("gradient_accumulation_steps"), std::string::npos) << message;
  EXPECT_NE(message.find(kSource), std::string::npos) << message;

  c = Config{};
  c.world_size = 2;  // the triple 1 = 1 x 1 x 2 does not hold
  message = validation_error_of(c);
  EXPECT_NE(message.find("train_batch_size"), std::string::npos) << message;

  c = Config{};
  c.optimizer.lr = -1.0;
  message = validation_error_of(c);
  EXPECT_NE(message.find("optimizer.params.lr"), std::string::npos) << message;
  EXPECT_NE(message.find("a number >= 0"), std::string::npos) << message;

  c = Config{};
  c.zero_optimization.stage = 4;
  message = validation_error_of(c);
  EXPECT_NE(message.find("zero_optimization.stage"), std::string::npos) << message;

  c = Config{};
  EXPECT_NE(validation_error_of([&] { Config d; d.optimizer.eps = 0; return d; }())
                .find("<config built in code>: "), std::string::npos);
  c.source = kSource;
  c.zero_optimization.reduce_bucket_size = 0;
  EXPECT_EQ(validation_error_of(c),
            error_of(with(R"("zero_optimization": {"reduce_bucket_size": 0})")));

  c = Config{};
  c.compute_dtype = c10::ScalarType::BFloat16;  // bf16 compute from fp32 parameters
  message = validation_error_of(c);
  EXPECT_NE(message.find("compute_data_type"), std::string::npos) << message;

  c = Config{};
  c.param_dtype = c10::ScalarType::BFloat16;
  c.compute_dtype = c10::ScalarType::Float;  // fp32 compute from bf16 needs stage 3
  c.zero_optimization.stage = 2;
  message = validation_error_of(c);
  EXPECT_NE(message.find("stage 3"), std::string::npos) << message;
  c.zero_optimization.stage = 3;
  EXPECT_EQ(validation_error_of(c), "<no error>");

  c = Config{};
  c.param_dtype = c10::ScalarType::Double;  // the JSON form has no key for it
  message = validation_error_of(c);
  EXPECT_NE(message.find("param_dtype"), std::string::npos) << message;
  c = Config{};
  c.communication_dtype = c10::ScalarType::Double;
  message = validation_error_of(c);
  EXPECT_NE(message.find("communication_data_type"), std::string::npos) << message;
}


// DeepSpeed's ZeRO-Offload keys with device "cpu": accepted at the stages that can use them
// (the optimizer state from stage 1, the parameters at stage 3), recorded, and written back by
// effective JSON; the nvme-only keys must be known and have no effect.
TEST(Config, OffloadToCpu) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    const Config c = parse_config(
        with(R"("zero_optimization": {"stage": )" + std::to_string(stage) +
             R"(, "offload_optimizer": {"device": "CPU", "pin_memory": true, "buffer_count": 4,
                 "pipeline_read": false, "fast_init": false, "ratio": 1.0}})"), 1, kSource);
    EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::kCpu);
    EXPECT_TRUE(c.zero_optimization.offload_optimizer.pin_memory);
    EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::kNone);
    EXPECT_EQ(validation_error_of(c), "<no error>");
    EXPECT_NE(c.effective_json.find(R"("offload_optimizer":{"device":"cpu","pin_memory":true})"),
              std::string::npos) << c.effective_json;
  }
  const Config c = parse_config(
      with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
               "buffer_size": 1e8, "max_in_cpu": 1e9}, "offload_optimizer": {"device": "none"}})"),
      1, kSource);
  EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::kCpu);
  EXPECT_FALSE(c.zero_optimization.offload_param.pin_memory);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(validation_error_of(c), "<no error>");
  // A hand-built config gets the parser's stage rule.
  Config built;
  built.zero_optimization.offload_param.device = OffloadDevice::kCpu;
  EXPECT_NE(validation_error_of(built).find("offload_param.device = \"cpu\" needs"),
            std::string::npos) << validation_error_of(built);
}

// ZeRO-Infinity's keys: offload_optimizer device "nvme" at stages 1-3 with its path, buffers and
// pipelining (DeepSpeed's "pipeline" sets both directions, the specific keys win), and the aio
// section; effective JSON writes them back and parses to the same config.
TEST(Config, OffloadToNvme) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    const Config c = parse_config(
        with(R"("zero_optimization": {"stage": )" + std::to_string(stage) +
             R"(, "sub_group_size": 1e6, "offload_optimizer": {"device": "nvme",
                 "nvme_path": "/local_nvme", "buffer_count": 3, "pipeline": false,
                 "pipeline_write": true, "fast_init": false}},
             "aio": {"block_size": 262144, "queue_depth": 32, "intra_op_parallelism": 2,
                     "single_submit": true, "overlap_events": false, "thread_count": 1})"),
        1, kSource);
    const OffloadConfig& o = c.zero_optimization.offload_optimizer;
    EXPECT_EQ(o.device, OffloadDevice::kNvme);
    EXPECT_EQ(o.nvme_path, "/local_nvme");
    EXPECT_EQ(o.buffer_count, 3);
    EXPECT_FALSE(o.pipeline_read);
    EXPECT_TRUE(o.pipeline_write);
    EXPECT_EQ(c.aio.block_size, 262144);
    EXPECT_EQ(c.aio.queue_depth, 32);
    EXPECT_EQ(c.aio.intra_op_parallelism, 2);
    EXPECT_TRUE(c.aio.single_submit);
    EXPECT_FALSE(c.aio.overlap_events);
    EXPECT_EQ(validation_error_of(c), "<no error>");
    const Config again = parse_config(c.effective_json, 1, kSource);
    EXPECT_EQ(again.effective_json, c.effective_json);
    EXPECT_EQ(again.zero_optimization.offload_optimizer.buffer_count, 3);
  }
  // Defaults: DeepSpeed's 4 buffers, and both directions pipelined (DeepSpeed: neither).
  const Config d = parse_config(
      with(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}})"),
      1, kSource);
  EXPECT_EQ(d.zero_optimization.offload_optimizer.buffer_count, 4);
  EXPECT_TRUE(d.zero_optimization.offload_optimizer.pipeline_read);
  EXPECT_TRUE(d.zero_optimization.offload_optimizer.pipeline_write);
  EXPECT_EQ(d.zero_optimization.offload_param.buffer_count, 5);
  // offload_param "nvme" at stage 3 (Note [Parameter offload]): DeepSpeed's buffer defaults,
  // and max_in_cpu 0 (docs/config.md: zero keeps no second copy for DeepSpeed's 1e9 to cap).
  const Config p = parse_config(
      with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/p"}})"),
      1, kSource);
  const OffloadConfig& param = p.zero_optimization.offload_param;
  EXPECT_EQ(param.device, OffloadDevice::kNvme);
  EXPECT_EQ(param.nvme_path, "/p");
  EXPECT_EQ(param.buffer_count, 5);
  EXPECT_EQ(param.buffer_size, 100000000);
  EXPECT_EQ(param.max_in_cpu, 0);
  EXPECT_EQ(p.zero_optimization.offload_optimizer.device, OffloadDevice::kNone);
  const Config q = parse_config(
      with(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/p",
               "buffer_count": 3, "buffer_size": 2e7, "max_in_cpu": 1e6, "pin_memory": true}})"),
      1, kSource);
  EXPECT_EQ(q.zero_optimization.offload_param.buffer_count, 3);
  EXPECT_EQ(q.zero_optimization.offload_param.buffer_size, 20000000);
  EXPECT_EQ(q.zero_optimization.offload_param.max_in_cpu, 1000000);
  const Config again = parse_config(q.effective_json, 1, kSource);
  EXPECT_EQ(again.effective_json, q.effective_json);
}

// Every config the repository ships (configs/, used by the README, demo.sh and the docs) is
// accepted at the world sizes those commands use: as zero-train reads them (a trainer filling
// what they leave open), and, but for the Hugging Face templates (hf-*.json, whose batch
// sizes only a trainer fills), without a trainer too.
TEST(Config, ShippedConfigsLoad) {
  const std::filesystem::path dir = std::filesystem::path(ZERO_SOURCE_DIR) / "configs";
  TrainerValues trainer;
  trainer.bf16_fast = trainer.fp16_fast = false;
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const bool hf_template = entry.path().filename().string().rfind("hf-", 0) == 0;
    for (const int world_size : {1, 2}) {
      SCOPED_TRACE(entry.path().string() + " at world size " + std::to_string(world_size));
      EXPECT_NO_THROW(load_config(entry.path().string(), world_size, trainer));
      if (!hf_template) EXPECT_NO_THROW(load_config(entry.path().string(), world_size));
    }
    ++loaded;
  }
  EXPECT_GE(loaded, 5);
  const Config finetune = load_config((dir / "finetune.json").string(), 2);
  EXPECT_TRUE(finetune.tensorboard.enabled);
  EXPECT_EQ(finetune.zero_optimization.stage, 2);
}

}  // namespace
}  // namespace zero
