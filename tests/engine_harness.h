// Shared pieces of the engine tests: small models, deterministic data, a config builder, the
// single-process libtorch reference, and a distributed run of the engine on the same data.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/config.h"
#include "zero/engine.h"

namespace zero::test {

/// A model plus how to compute its loss on rows [begin, end) of a global batch.
struct ModelSpec {
  std::string name;
  std::function<std::shared_ptr<torch::nn::Module>()> build;  // same params for the same seed
  // Deterministic global batch for a step: returns inputs and targets of `rows` samples.
  std::function<std::pair<at::Tensor, at::Tensor>(int64_t step, int64_t rows)> batch;
  std::function<at::Tensor(torch::nn::Module&, const at::Tensor&, const at::Tensor&)> loss;
};

/// MLP 6 -> 11 -> 9 -> 5 with tanh: 235 parameters, divisible by none of 2, 3, 4.
ModelSpec mlp_spec();
/// A GPT-2 (HF layout, tied lm_head) with vocab 97, context 16, 2 layers, 32 wide, 4 heads.
ModelSpec tiny_gpt2_spec();

struct RunOptions {
  int stage = 0;
  int gradient_accumulation_steps = 1;
  int micro_batch = 2;
  double gradient_clipping = 0.0;
  std::string dtype = "fp32";       // fp32 | bf16 | fp16
  std::string extra_zero_json;      // appended inside zero_optimization, e.g. "\"overlap_comm\": true"
  std::string extra_top_json;       // appended at top level, e.g. "\"fp16\": {...}" overrides
  int steps = 4;
  double lr = 1e-3;
  double weight_decay = 0.01;
  // "AdamW" | "Adam" (L2 decay, adam_w_mode false) | "SGD" (with `momentum`, `nesterov`) |
  // "Adagrad" (with `lr_decay`, `initial_accumulator_value`) | "Lion" (betas 0.9, 0.99) |
  // "Lamb" (DeepSpeed's FusedLamb defaults) | "Muon" (`lr` the AdamW half's, `muon_lr` the
  // matrices', `ns_method`; momentum 0.95, betas 0.9, 0.95, eps 1e-8).
  std::string optimizer = "AdamW";
  double muon_lr = 0.02;
  std::string ns_method = "standard";
  double momentum = 0.0;
  bool nesterov = false;
  double lr_decay = 0.0;
  double initial_accumulator_value = 0.0;
  int64_t reduce_bucket_size = 100;
  int64_t allgather_bucket_size = 77;
  bool fixed_batch = false;         // every step trains on step 0's batch (to see learning)
  int fp16_hysteresis = 0;          // fp16.hysteresis when > 0 (else DeepSpeed's default, 2)
  std::string device = "cpu";       // where the model and its batches are, e.g. "cuda:0"
  // Called with the engine as soon as it is made (white-box tests reach internals through it).
  std::function<void(Engine&)> on_engine;
};

std::string make_config_json(const RunOptions& options);

struct RunResult {
  std::vector<double> losses;   // per optimizer step: mean loss over the global batch
  std::vector<double> norms;    // engine's global grad norm per step
  at::Tensor parameters;        // final parameters, flattened in named_parameters() order, fp32
  ModelStateBytes state_bytes;  // after training (run_engine), before gathering `parameters`
  std::unique_ptr<Engine> engine;
  std::shared_ptr<torch::nn::Module> model;
};

/// Trains with the engine on every rank of `comm` (collective).
RunResult run_engine(const ModelSpec& spec, const RunOptions& options,
                     const std::shared_ptr<Communicator>& comm);

/// Plain libtorch: one process, the whole global batch per step, torch::optim::AdamW,
/// torch::nn::utils::clip_grad_norm_.
RunResult run_reference(const ModelSpec& spec, const RunOptions& options, int world_size);

/// The model's parameters in parameters() order, each shared one once (a reference must update
/// it, and count it in the norm, once).
std::vector<at::Tensor> unique_parameters(torch::nn::Module& model);

/// Parameters flattened in named_parameters() order (shared ones once), as fp32 on the CPU.
at::Tensor flatten_parameters(torch::nn::Module& model);

/// ||a - b|| / ||b||.
double relative_error(const at::Tensor& a, const at::Tensor& b);

}  // namespace zero::test
