#include "state/shard_state.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "optim/optimizer_state.h"
#include "zero/error.h"

namespace zero {

ShardState::ShardState(const OptimizerConfig& optimizer, std::shared_ptr<ParamStore> params,
                       at::Tensor gradient, int64_t tile_numel,
                       Placement placement, const StateStoreMaker& make_store,
                       std::vector<StateSegment> saved, std::vector<StateSegment> loaded)
    : params_(std::move(params)),
      gradient_(std::move(gradient)),
      optimizer_(optimizer),
      tile_numel_(std::max<int64_t>(1, tile_numel)),
      placement_(placement),
      make_store_(make_store),
      saved_(std::move(saved)),
      loaded_(std::move(loaded)) {
  ZERO_INTERNAL_ASSERT(params_ != nullptr, "shard state without a parameter copy");
  ZERO_CHECK(placement_ == Placement::kDevice || params_->device().is_cpu(),
             "zero_optimization.offload_optimizer.device = \"",
             placement_ == Placement::kNvme ? "nvme" : "cpu", "\" with parameters on ",
             params_->device(), " is not supported yet (moving the optimizer state off the ",
             "device); allowed here: \"none\"");
  part_names_.push_back("master");
  for (const std::string& name : optimizer_.moment_names()) part_names_.push_back(name);
  const int store_parts = static_cast<int>(part_names_.size()) - (master_in_store() ? 0 : 1);
  store_ = make_store_(store_parts, numel(), tile_numel_, "optimizer");
  if (master_in_store()) {
    // The master weights start as the parameters, a tile at a time (an offloaded store never
    // has the whole fp32 copy in memory).
    ParamStore::Pass pass = params_->pass(/*read=*/true, /*write=*/false);
    store_->for_each_tile(
        [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
          parts[0].copy_(pass.tile(begin, end - begin));
        },
        /*write_back=*/true);
    pass.finish();
  }
  // State that does not start at 0 (Adagrad's initial_accumulator_value), a tile at a time;
  // a checkpoint's state, when one is loaded, replaces it (commit).
  const std::vector<double> initial = optimizer_state_initial_values(optimizer);
  if (std::any_of(initial.begin(), initial.end(), [](double v) { return v != 0.0; })) {
    const size_t first = master_in_store() ? 1 : 0;
    store_->for_each_tile(
        [&](int64_t, int64_t, const std::vector<at::Tensor>& parts) {
          for (size_t k = 0; k < initial.size(); ++k) parts[first + k].fill_(initial[k]);
        },
        /*write_back=*/true);
  }
  ZERO_INTERNAL_ASSERT(!gradient_.defined() || gradient_.numel() == numel(), "gradient shard of ",
                       gradient_.defined() ? gradient_.numel() : 0, " elements for a space of ",
                       numel());
}

void ShardState::read_part(int part, int64_t offset, const at::Tensor& out) const {
  ZERO_INTERNAL_ASSERT(part >= 0 && part < static_cast<int>(part_names_.size()), "state part ",
                       part, " of ", part_names_.size());
  if (part == 0 && !master_in_store()) {
    params_->read(offset, out);
    return;
  }
  store_->read(master_in_store() ? part : part - 1, offset, out);
}

void ShardState::write_master(int64_t offset, const at::Tensor& values) {
  if (!master_in_store()) return;
  store_->write(0, offset, values.to(at::kFloat));
  store_->flush();
}

std::unique_ptr<StateStore> ShardState::make_staging() const {
  return make_store_(static_cast<int>(part_names_.size()), numel(), tile_numel_,
                     "optimizer.load");
}

void ShardState::commit(StateStore& staging) {
  ZERO_INTERNAL_ASSERT(staging.parts() == static_cast<int>(part_names_.size()) &&
                           staging.numel() == numel(),
                       "staging state of another shape");
  const int first = master_in_store() ? 0 : 1;
  if (!master_in_store()) {
    ParamStore::Pass pass = params_->pass(/*read=*/false, /*write=*/true);
    for (int64_t begin = 0; begin < numel(); begin += staging.tile_numel()) {
      const int64_t n = std::min(numel() - begin, staging.tile_numel());
      staging.read(0, begin, pass.tile(begin, n));
    }
    pass.finish();
  }
  store_->for_each_tile(
      [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
        for (size_t p = 0; p < parts.size(); ++p) {
          staging.read(static_cast<int>(p) + first, begin, parts[p]);
        }
        (void)end;
      },
      /*write_back=*/true);
  round_params_from_master();
}

int64_t ShardState::master_bytes() const {
  return master_in_store() ? numel() * 4 : 0;
}

int64_t ShardState::moment_bytes() const {
  return static_cast<int64_t>(optimizer_.moment_names().size()) * numel() * 4;
}

void ShardState::step(double grad_multiplier, double lr, const at::Tensor& lent) {
  const at::Tensor& grad = lent.defined() ? lent : gradient_;
  ZERO_INTERNAL_ASSERT(grad.defined() && grad.numel() == numel(),
                       "optimizer step without a gradient over the shard space");
  const bool fp32 = !master_in_store();
  optimizer_.begin_step();
  std::vector<at::Tensor> moments;
  // fp32 parameters are their own master weights: the pass reads them too.
  ParamStore::Pass pass = params_->pass(/*read=*/fp32, /*write=*/true);
  store_->for_each_tile(
      [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
        const int64_t n = end - begin;
        const at::Tensor param_tile = pass.tile(begin, n);
        moments.assign(parts.begin() + (fp32 ? 0 : 1), parts.end());
        optimizer_.update(fp32 ? param_tile : parts[0], grad.narrow(0, begin, n),
                          fp32 ? at::Tensor() : param_tile, moments, grad_multiplier, lr);
      },
      /*write_back=*/true);
  pass.finish();
}

bool ShardState::supports_ranges() const {
  return store_->visits_ranges() && !params_->offloaded();
}

void ShardState::step_range(int64_t begin, int64_t end, double grad_multiplier, double lr) {
  ZERO_INTERNAL_ASSERT(supports_ranges() && gradient_.defined() && begin >= 0 && begin <= end &&
                           end <= numel(),
                       "optimizer step of [", begin, ", ", end, ") of ", numel());
  const bool fp32 = !master_in_store();
  std::vector<at::Tensor> moments;
  store_->for_each_tile_in(begin, end, [&](int64_t tile_begin, int64_t tile_end,
                                           const std::vector<at::Tensor>& parts) {
    const int64_t n = tile_end - tile_begin;
    const at::Tensor param_tile = params_->resident_range(tile_begin, n);
    moments.assign(parts.begin() + (fp32 ? 0 : 1), parts.end());
    optimizer_.update(fp32 ? param_tile : parts[0], gradient_.narrow(0, tile_begin, n),
                      fp32 ? at::Tensor() : param_tile, moments, grad_multiplier, lr);
    params_->publish(tile_begin, n);
  });
}

void ShardState::round_params_from_master() {
  if (!master_in_store()) return;
  ParamStore::Pass pass = params_->pass(/*read=*/false, /*write=*/true);
  store_->for_each_tile(
      [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
        pass.tile(begin, end - begin).copy_(parts[0]);
      },
      /*write_back=*/false);
  pass.finish();
}

}  // namespace zero
