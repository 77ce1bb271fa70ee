#include "engine_harness.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_set>

#include "zero/gathered_parameters.h"
#include "zero/gpt2.h"
#include "zero/unit.h"

namespace zero::test {

ModelSpec mlp_spec() {
  ModelSpec spec;
  spec.name = "mlp";
  spec.build = [] {
    torch::manual_seed(1234);
    auto model = std::make_shared<torch::nn::SequentialImpl>(
        torch::nn::Linear(6, 11), torch::nn::Tanh(), torch::nn::Linear(11, 9), torch::nn::Tanh(),
        torch::nn::Linear(9, 5));
    // Each Linear is a stage-3 unit (a pass-through at stages 0-2).
    for (const auto& child : model->children()) {
      if (!child->parameters().empty()) declare_unit(*child);
    }
    return std::static_pointer_cast<torch::nn::Module>(model);
  };
  spec.batch = [](int64_t step, int64_t rows) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
    at::Tensor x = at::randn({rows, 6}, generator);
    at::Tensor y = at::randn({rows, 5}, generator);
    return std::make_pair(x, y);
  };
  spec.loss = [](torch::nn::Module& model, const at::Tensor& x, const at::Tensor& y) {
    auto& sequential = dynamic_cast<torch::nn::SequentialImpl&>(model);
    at::Tensor out = x.to(sequential.parameters()[0].scalar_type());
    for (auto& layer : sequential) {
      out = run_with(*layer.ptr(), [&] { return layer.forward(out); });
    }
    return at::mse_loss(out.to(at::kFloat), y);
  };
  return spec;
}

ModelSpec tiny_gpt2_spec() {
  ModelSpec spec;
  spec.name = "gpt2";
  spec.build = [] {
    torch::manual_seed(4321);
    gpt2::GPT2Config config;
    config.vocab_size = 97;
    config.n_positions = 16;
    config.n_embd = 32;
    config.n_layer = 2;
    config.n_head = 4;
    return std::static_pointer_cast<torch::nn::Module>(std::make_shared<gpt2::GPT2Impl>(config));
  };
  spec.batch = [](int64_t step, int64_t rows) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(2000 + step);
    at::Tensor tokens = at::randint(0, 97, {rows, 17}, generator);
    return std::make_pair(tokens.narrow(1, 0, 16).contiguous(), tokens.narrow(1, 1, 16).contiguous());
  };
  spec.loss = [](torch::nn::Module& model, const at::Tensor& x, const at::Tensor& y) {
    auto& gpt = dynamic_cast<gpt2::GPT2Impl&>(model);
    return gpt.loss(gpt.forward(x), y);
  };
  return spec;
}

std::string make_config_json(const RunOptions& o) {
  std::ostringstream json;
  json << "{\"train_micro_batch_size_per_gpu\": " << o.micro_batch
       << ", \"gradient_accumulation_steps\": " << o.gradient_accumulation_steps
       << ", \"gradient_clipping\": " << o.gradient_clipping
       << ", \"optimizer\": {\"type\": \"" << o.optimizer << "\", \"params\": {\"lr\": " << o.lr
       << ", \"weight_decay\": " << o.weight_decay;
  if (o.optimizer == "Adam") json << ", \"adam_w_mode\": false";
  if (o.optimizer == "SGD") {
    json << ", \"momentum\": " << o.momentum << ", \"nesterov\": " << (o.nesterov ? "true" : "false");
  }
  if (o.optimizer == "Adagrad") {
    json << ", \"lr_decay\": " << o.lr_decay
         << ", \"initial_accumulator_value\": " << o.initial_accumulator_value;
  }
  if (o.optimizer == "Lion") json << ", \"betas\": [0.9, 0.99]";
  if (o.optimizer == "Muon") {
    // eps 1e-8, not Muon's 1e-10: GPT-2's attention key bias has an identically zero true
    // gradient, and Adam with eps 1e-10 moves it by +-lr as the reduction order's rounding
    // noise says (as Lion does, test_engine_equivalence's AdagradAndLionAtEveryStage).
    json << ", \"muon_lr\": " << o.muon_lr << ", \"ns_method\": \"" << o.ns_method
         << "\", \"eps\": 1e-8";
  }
  json << "}}";
  if (o.dtype == "bf16") json << ", \"bf16\": {\"enabled\": true}";
  if (o.dtype == "fp16") {
    json << ", \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8";
    if (o.fp16_hysteresis > 0) json << ", \"hysteresis\": " << o.fp16_hysteresis;
    json << "}";
  }
  if (!o.extra_top_json.empty()) json << ", " << o.extra_top_json;
  json << ", \"zero_optimization\": {\"stage\": " << o.stage
       << ", \"reduce_bucket_size\": " << o.reduce_bucket_size
       << ", \"allgather_bucket_size\": " << o.allgather_bucket_size;
  if (!o.extra_zero_json.empty()) json << ", " << o.extra_zero_json;
  json << "}}";
  return json.str();
}

std::vector<at::Tensor> unique_parameters(torch::nn::Module& model) {
  std::vector<at::Tensor> parameters;
  std::unordered_set<const void*> seen;
  for (const auto& p : model.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) parameters.push_back(p);
  }
  return parameters;
}

at::Tensor flatten_parameters(torch::nn::Module& model) {
  std::vector<at::Tensor> pieces;
  std::unordered_set<const void*> seen;
  for (const auto& p : model.parameters()) {
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    pieces.push_back(p.detach().reshape({-1}).to(at::kCPU).to(at::kFloat));
  }
  return at::cat(pieces);
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double denominator = b.to(at::kDouble).norm().item<double>();
  const double numerator = (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>();
  return denominator == 0 ? numerator : numerator / denominator;
}

RunResult run_engine(const ModelSpec& spec, const RunOptions& options,
                     const std::shared_ptr<Communicator>& comm) {
  RunResult result;
  result.model = spec.build();
  const at::Device device(options.device);
  result.model->to(device);
  const Config config = parse_config(make_config_json(options), comm->size(), "test config");
  result.engine = initialize(result.model, config, comm);
  if (options.on_engine) options.on_engine(*result.engine);
  Engine& engine = *result.engine;
  const int world = comm->size();
  const int64_t mbs = options.micro_batch;
  const int gas = options.gradient_accumulation_steps;
  for (int step = 0; step < options.steps; ++step) {
    auto [batch_x, batch_y] = spec.batch(options.fixed_batch ? 0 : step, world * mbs * gas);
    const at::Tensor x = batch_x.to(device), y = batch_y.to(device);
    double loss_sum = 0.0;
    for (int micro = 0; micro < gas; ++micro) {
      const int64_t row = (static_cast<int64_t>(micro) * world + comm->rank()) * mbs;
      at::Tensor loss = spec.loss(*result.model, x.narrow(0, row, mbs), y.narrow(0, row, mbs));
      loss_sum += loss.item<double>();
      engine.backward(loss);
      engine.step();
    }
    at::Tensor total = at::full({1}, loss_sum, at::kDouble);
    comm->all_reduce(total, ReduceOp::kSum)->wait();
    result.losses.push_back(total.item<double>() / (world * gas));
    result.norms.push_back(engine.global_grad_norm());
  }
  {
    // Whole parameters at every stage (at stage 3 they are released outside forward).
    result.state_bytes = engine.model_state_bytes();  // before this gather adds to its peak
    GatheredParameters whole(engine, result.model->parameters());
    result.parameters = flatten_parameters(*result.model);
  }
  return result;
}

RunResult run_reference(const ModelSpec& spec, const RunOptions& options, int world_size) {
  RunResult result;
  result.model = spec.build();
  const at::Device device(options.device);
  result.model->to(device);
  std::vector<at::Tensor> parameters = unique_parameters(*result.model);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // Lion has no torch optimizer: its paper's update (Chen et al. 2023, Algorithm 2), here.
  std::vector<at::Tensor> lion_momenta;
  auto lion_step = [&] {
    at::NoGradGuard no_grad;
    const double beta1 = 0.9, beta2 = 0.99;
    for (size_t i = 0; i < parameters.size(); ++i) {
      at::Tensor& p = parameters[i];
      const at::Tensor g = p.grad();
      if (lion_momenta.size() <= i) lion_momenta.push_back(at::zeros_like(p));
      at::Tensor& m = lion_momenta[i];
      p.mul_(1.0 - options.lr * options.weight_decay);
      p.add_(m.mul(beta1).add_(g, 1.0 - beta1).sign_(), -options.lr);
      m.mul_(beta2).add_(g, 1.0 - beta2);
    }
  };
  // LAMB as DeepSpeed's FusedLamb (optim/lamb.h), defaults but the weight decay.
  std::vector<at::Tensor> lamb_m, lamb_v;
  int lamb_steps = 0;
  auto lamb_step = [&] {
    at::NoGradGuard no_grad;
    ++lamb_steps;
    const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    const double bc1 = 1.0 - std::pow(beta1, lamb_steps), bc2 = 1.0 - std::pow(beta2, lamb_steps);
    for (size_t i = 0; i < parameters.size(); ++i) {
      at::Tensor& p = parameters[i];
      const at::Tensor g = p.grad();
      if (lamb_m.size() <= i) {
        lamb_m.push_back(at::zeros_like(p));
        lamb_v.push_back(at::zeros_like(p));
      }
      lamb_m[i].mul_(beta1).add_(g, 1.0 - beta1);
      lamb_v[i].mul_(beta2).addcmul_(g, g, 1.0 - beta2);
      const at::Tensor u = (lamb_m[i] / bc1) / ((lamb_v[i] / bc2).sqrt() + eps) +
                           options.weight_decay * p;
      const double w_norm = p.norm().item<double>(), u_norm = u.norm().item<double>();
      const double trust =
          w_norm > 0 && u_norm > 0 ? std::min(std::max(w_norm / u_norm, 0.01), 10.0) : 1.0;
      p.add_(u, -options.lr * trust);
    }
  };
  // Muon as its authors and DeepSpeed's MuonWithAuxAdam define it (Note [Muon under
  // partitioning]), on whole parameters with plain products: NS5 of the Nesterov momentum for
  // the hidden matrices (two or more dimensions, no embedding or head in the name), AdamW
  // (betas 0.9, 0.95, eps 1e-8: make_config_json says why) for the rest.
  std::vector<at::Tensor> muon_params, muon_momenta, aux_params;
  if (options.optimizer == "Muon") {
    std::unordered_set<const void*> seen;
    for (const auto& item : result.model->named_parameters()) {
      const at::Tensor& p = item.value();
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      bool hidden = p.dim() >= 2;
      for (const char* keyword : {"embed", "lm_head", "wte", "wpe"}) {
        if (item.key().find(keyword) != std::string::npos) hidden = false;
      }
      (hidden ? muon_params : aux_params).push_back(p);
      if (hidden) muon_momenta.push_back(at::zeros_like(p));
    }
    optimizer = std::make_unique<torch::optim::AdamW>(
        aux_params, torch::optim::AdamWOptions(options.lr)
                        .betas({0.9, 0.95})
                        .eps(1e-8)
                        .weight_decay(options.weight_decay));
  }
  auto muon_step = [&] {
    at::NoGradGuard no_grad;
    const double beta = 0.95, a = 3.4445, b = -4.7750, c = 2.0315;
    for (size_t i = 0; i < muon_params.size(); ++i) {
      at::Tensor& p = muon_params[i];
      const at::Tensor g = p.grad().reshape({p.size(0), -1});
      at::Tensor& m = muon_momenta[i];
      m.lerp_(g.view(m.sizes()), 1.0 - beta);
      at::Tensor x = g.lerp(m.view(g.sizes()), beta);
      const bool tall = x.size(0) > x.size(1);
      if (tall) x = x.t();
      x = x / (x.norm() + 1e-7);
      for (int k = 0; k < 5; ++k) {
        const at::Tensor A = at::mm(x, x.t());
        x = a * x + at::mm(b * A + c * at::mm(A, A), x);
      }
      if (tall) x = x.t();
      const double scale = std::sqrt(std::max(1.0, static_cast<double>(g.size(0)) / g.size(1)));
      p.mul_(1.0 - options.muon_lr * options.weight_decay);
      p.add_(x.reshape(p.sizes()), -options.muon_lr * scale);
    }
  };
  if (options.optimizer == "Lion" || options.optimizer == "Lamb" ||
      options.optimizer == "Muon") {
    // stepped by lion_step / lamb_step / muon_step (and the auxiliary AdamW)
  } else if (options.optimizer == "Adagrad") {
    optimizer = std::make_unique<torch::optim::Adagrad>(
        parameters, torch::optim::AdagradOptions(options.lr)
                        .weight_decay(options.weight_decay)
                        .lr_decay(options.lr_decay)
                        .initial_accumulator_value(options.initial_accumulator_value)
                        .eps(1e-10));
  } else if (options.optimizer == "AdamW") {
    optimizer = std::make_unique<torch::optim::AdamW>(
        parameters,
        torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
  } else if (options.optimizer == "Adam") {
    optimizer = std::make_unique<torch::optim::Adam>(
        parameters,
        torch::optim::AdamOptions(options.lr).weight_decay(options.weight_decay));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        parameters, torch::optim::SGDOptions(options.lr)
                                        .weight_decay(options.weight_decay)
                                        .momentum(options.momentum)
                                        .nesterov(options.nesterov));
  }
  const int64_t rows = world_size * options.micro_batch * options.gradient_accumulation_steps;
  for (int step = 0; step < options.steps; ++step) {
    auto [batch_x, batch_y] = spec.batch(options.fixed_batch ? 0 : step, rows);
    const at::Tensor x = batch_x.to(device), y = batch_y.to(device);
    for (auto& p : parameters) p.mutable_grad() = at::Tensor();
    at::Tensor loss = spec.loss(*result.model, x, y);
    loss.backward();
    // A parameter unused in this step trains on a zero gradient, as in the engine (and
    // DeepSpeed): Adam's moments decay and weight decay applies.
    for (auto& p : parameters) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    }
    double norm = 0;
    if (options.gradient_clipping > 0) {
      norm = torch::nn::utils::clip_grad_norm_(parameters,
                                               options.gradient_clipping);
    }
    if (options.optimizer == "Muon") {
      muon_step();
      optimizer->step();
    } else if (optimizer) {
      optimizer->step();
    } else if (options.optimizer == "Lamb") {
      lamb_step();
    } else {
      lion_step();
    }
    result.losses.push_back(loss.item<double>());
    result.norms.push_back(norm);
  }
  result.parameters = flatten_parameters(*result.model);
  return result;
}

}  // namespace zero::test
