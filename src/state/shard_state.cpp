#include "state/shard_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "optim/lamb.h"
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
  ZERO_CHECK(optimizer.type != OptimizerType::kLamb || params_->device().is_cpu(),
             "optimizer.type = \"Lamb\" with parameters on ", params_->device(),
             " is not supported yet (LAMB's exact per-parameter norms run on the CPU); allowed "
             "there: Adam, AdamW, SGD, Adagrad, Lion");
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

void ShardState::step(double grad_multiplier, double lr, const at::Tensor& lent,
                      const ParameterSumExchange* exchange) {
  const at::Tensor& grad = lent.defined() ? lent : gradient_;
  ZERO_INTERNAL_ASSERT(grad.defined() && grad.numel() == numel(),
                       "optimizer step without a gradient over the shard space");
  if (optimizer_.config().type == OptimizerType::kLamb) {
    ZERO_INTERNAL_ASSERT(exchange != nullptr, "a LAMB step without its exchange");
    step_lamb(grad_multiplier, lr, grad, *exchange);
    return;
  }
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

namespace {

// Calls fn(piece begin, piece end, param) for each piece of [begin, end) (offsets into the
// space) that a segment covers, and fn(.., -1) for the pieces none covers (padding), in order.
template <typename Fn>
void for_each_piece(const std::vector<StateSegment>& segments, int64_t begin, int64_t end,
                    Fn&& fn) {
  int64_t at = begin;
  for (const StateSegment& segment : segments) {  // in offset order
    const int64_t from = std::max(begin, segment.offset);
    const int64_t to = std::min(end, segment.offset + (segment.end - segment.begin));
    if (from >= to) continue;
    if (from > at) fn(at, from, -1);
    fn(from, to, segment.param);
    at = to;
  }
  if (at < end) fn(at, end, -1);
}

}  // namespace

void ShardState::step_lamb(double grad_multiplier, double lr, const at::Tensor& grad,
                           const ParameterSumExchange& exchange) {
  optimizer_.begin_step();
  const OptimizerConfig& config = optimizer_.config();
  const LambScalars s = lamb_scalars(config, optimizer_.step_count(), grad_multiplier);
  const bool fp32 = !master_in_store();
  const int first_moment = fp32 ? 0 : 1;
  const auto parameters = static_cast<size_t>(exchange.parameters);
  // Pass 1: the moments, and the squares of the elements this rank saves (each element of the
  // model once over the ranks), per parameter.
  std::vector<ExactSquares> weights(parameters), updates(parameters);
  auto by_offset = [](std::vector<StateSegment> segments) {
    std::sort(segments.begin(), segments.end(),
              [](const StateSegment& a, const StateSegment& b) { return a.offset < b.offset; });
    return segments;
  };
  const std::vector<StateSegment> saved = by_offset(saved_), loaded = by_offset(loaded_);
  {
    // fp32 parameters are the master weights: read, not written, in this pass.
    std::optional<ParamStore::Pass> pass;
    if (fp32) pass.emplace(params_->pass(/*read=*/true, /*write=*/false));
    store_->for_each_tile(
        [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
          const int64_t n = end - begin;
          const at::Tensor master = fp32 ? pass->tile(begin, n) : parts[0];
          const at::Tensor& m = parts[first_moment];
          const at::Tensor& v = parts[first_moment + 1];
          lamb_moments(grad.narrow(0, begin, n), m, v, s);
          for_each_piece(saved, begin, end, [&](int64_t from, int64_t to, int param) {
            if (param < 0) return;
            ZERO_INTERNAL_ASSERT(static_cast<size_t>(param) < parameters, "parameter ", param,
                                 " of ", parameters);
            lamb_norms(master.narrow(0, from - begin, to - from),
                       m.narrow(0, from - begin, to - from), v.narrow(0, from - begin, to - from),
                       s, weights[param], updates[param]);
          });
        },
        /*write_back=*/true);
    if (pass) pass->finish();
  }
  // The exchange: integer sums, added in rank order (exact: any order gives the same).
  constexpr int64_t kWords = ExactSquares::kWords;
  at::Tensor local = at::empty({static_cast<int64_t>(parameters), 2, kWords}, at::kLong);
  int64_t* words = local.data_ptr<int64_t>();
  for (size_t p = 0; p < parameters; ++p) {
    std::copy(weights[p].words.begin(), weights[p].words.end(), words + (2 * p) * kWords);
    std::copy(updates[p].words.begin(), updates[p].words.end(), words + (2 * p + 1) * kWords);
  }
  const at::Tensor total = exchange.gather(local.view({-1})).view({-1, local.numel()}).sum(0);
  const int64_t* sums = total.data_ptr<int64_t>();
  std::vector<double> step_sizes(parameters);
  for (size_t p = 0; p < parameters; ++p) {
    ExactSquares w, u;
    std::copy(sums + (2 * p) * kWords, sums + (2 * p + 1) * kWords, w.words.begin());
    std::copy(sums + (2 * p + 1) * kWords, sums + (2 * p + 2) * kWords, u.words.begin());
    step_sizes[p] = lr * lamb_trust_ratio(w.value(), u.value(), config);
  }
  // Pass 2: each element's update with its parameter's step (padding: lr, whose u is 0).
  ParamStore::Pass pass = params_->pass(/*read=*/fp32, /*write=*/true);
  store_->for_each_tile(
      [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
        const int64_t n = end - begin;
        const at::Tensor param_tile = pass.tile(begin, n);
        const at::Tensor master = fp32 ? param_tile : parts[0];
        for_each_piece(loaded, begin, end, [&](int64_t from, int64_t to, int param) {
          const int64_t at = from - begin, count = to - from;
          lamb_apply(master.narrow(0, at, count), parts[first_moment].narrow(0, at, count),
                     parts[first_moment + 1].narrow(0, at, count),
                     fp32 ? at::Tensor() : param_tile.narrow(0, at, count), s,
                     param < 0 ? lr : step_sizes[static_cast<size_t>(param)]);
        });
      },
      /*write_back=*/true);
  pass.finish();
}

bool ShardState::supports_ranges() const {
  // LAMB's update needs every rank's sums first: it cannot step parts as gradients arrive.
  return store_->visits_ranges() && !params_->offloaded() &&
         optimizer_.config().type != OptimizerType::kLamb;
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
