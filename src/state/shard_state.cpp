#include "state/shard_state.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "zero/error.h"

namespace zero {

ShardState::ShardState(const OptimizerConfig& optimizer, at::Tensor params,
                       std::optional<at::ScalarType> gradient_dtype, int64_t tile_numel,
                       Placement placement, std::vector<StateSegment> saved,
                       std::vector<StateSegment> loaded)
    : params_(std::move(params)),
      optimizer_(optimizer, params_.numel()),
      tile_numel_(std::max<int64_t>(1, tile_numel)),
      placement_(placement),
      saved_(std::move(saved)),
      loaded_(std::move(loaded)) {
  ZERO_INTERNAL_ASSERT(params_.defined() && params_.dim() == 1 && params_.is_contiguous(),
                       "shard state over a parameter copy that is not flat and contiguous");
  ZERO_CHECK(placement_ == Placement::kDevice || params_.device().is_cpu(),
             "zero_optimization.offload_optimizer.device = \"cpu\" with parameters on ",
             params_.device(), " is not supported yet (moving the optimizer state off the ",
             "device); allowed here: \"none\"");
  master_ = params_.scalar_type() == at::kFloat ? params_ : params_.to(at::kFloat);
  if (gradient_dtype) {
    gradient_ = at::zeros({params_.numel()}, params_.options().dtype(*gradient_dtype));
  }
}

std::vector<std::pair<std::string, at::Tensor>> ShardState::moments() const {
  std::vector<std::pair<std::string, at::Tensor>> moments;
  if (optimizer_.first_moment().defined()) moments.emplace_back("exp_avg", optimizer_.first_moment());
  if (optimizer_.second_moment().defined()) {
    moments.emplace_back("exp_avg_sq", optimizer_.second_moment());
  }
  return moments;
}

int64_t ShardState::master_bytes() const {
  return params_.scalar_type() == at::kFloat ? 0 : master_.nbytes();
}

void ShardState::step(double grad_multiplier, double lr, const at::Tensor& lent) {
  const at::Tensor& grad = lent.defined() ? lent : gradient_;
  ZERO_INTERNAL_ASSERT(grad.defined() && grad.numel() == numel(),
                       "optimizer step without a gradient over the shard space");
  const at::Tensor param_out = params_.scalar_type() == at::kFloat ? at::Tensor() : params_;
  optimizer_.begin_step();
  for (int64_t begin = 0; begin < numel(); begin += tile_numel_) {
    optimizer_.update(begin, std::min(numel(), begin + tile_numel_), master_, grad,
                      grad_multiplier, param_out, lr);
  }
}

void ShardState::round_params_from_master() {
  if (params_.scalar_type() != at::kFloat) params_.copy_(master_);
}

}  // namespace zero
