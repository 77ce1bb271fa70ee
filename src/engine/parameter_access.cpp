#include "engine/parameter_access.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <exception>

#include "zero/error.h"
#include "zero/gathered_parameters.h"
#include "zero/state_dict.h"

namespace zero {
namespace {

ParameterAccess& access(Engine& engine) {
  auto* result = dynamic_cast<ParameterAccess*>(&engine);
  ZERO_INTERNAL_ASSERT(result != nullptr, "engine does not implement ParameterAccess");
  return *result;
}

}  // namespace

GatheredParameters::GatheredParameters(Engine& engine, std::vector<at::Tensor> params,
                                       int modifier_rank)
    : engine_(engine),
      params_(std::move(params)),
      modifier_rank_(modifier_rank),
      uncaught_at_start_(std::uncaught_exceptions()) {
  ZERO_CHECK(modifier_rank >= -1 && modifier_rank < engine.world_size(),
             "zero::GatheredParameters: modifier_rank = ", modifier_rank,
             " is out of range; allowed: -1 (no write-back) or 0..", engine.world_size() - 1);
  access(engine_).pin(params_);
}

void GatheredParameters::release() {
  if (released_) return;
  released_ = true;
  access(engine_).unpin(params_, modifier_rank_);
}

GatheredParameters::~GatheredParameters() noexcept(false) {
  if (released_) return;
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    // Unwinding: other ranks may not be here, so no collective; drop the pins locally.
    released_ = true;
    try {
      access(engine_).unpin(params_, -1);
    } catch (...) {
      // Already unwinding with the original error.
    }
    return;
  }
  release();
}

void visit_full_parameters(Engine& engine,
                           const std::function<void(const std::string&, const at::Tensor&)>& visit,
                           int root) {
  ZERO_CHECK(root >= 0 && root < engine.world_size(), "visit_full_parameters: root = ", root,
             " is out of range; allowed: 0..", engine.world_size() - 1);
  const bool mine = engine.rank() == root;
  access(engine).visit_full_parameters([&](const std::string& name, const at::Tensor& value) {
    if (!mine) return;
    at::NoGradGuard no_grad;
    visit(name, value.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
  });
}

std::vector<std::pair<std::string, at::Tensor>> full_state_dict(Engine& engine, int root) {
  std::vector<std::pair<std::string, at::Tensor>> result;
  visit_full_parameters(
      engine, [&](const std::string& name, const at::Tensor& value) { result.emplace_back(name, value); },
      root);
  return result;
}

}  // namespace zero
