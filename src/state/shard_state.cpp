#include "state/shard_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "common/simd_level.h"
#include "optim/adam_kernels.h"
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
  ZERO_CHECK(optimizer.type != OptimizerType::kMuon || params_->device().is_cpu(),
             "optimizer.type = \"Muon\" with parameters on ", params_->device(),
             " is not supported yet (its Newton-Schulz step runs on the CPU); allowed there: "
             "Adam, AdamW, SGD, Adagrad, Lion");
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

void ShardState::step(const GradMultiplier& grad_multiplier, double lr, const at::Tensor& lent,
                      const StepCollectives* exchange) {
  const at::Tensor& grad = lent.defined() ? lent : gradient_;
  ZERO_INTERNAL_ASSERT(grad.defined() && grad.numel() == numel(),
                       "optimizer step without a gradient over the shard space");
  if (optimizer_.config().type == OptimizerType::kLamb) {
    ZERO_INTERNAL_ASSERT(exchange != nullptr, "a LAMB step without its exchange");
    step_lamb(grad_multiplier.value(), lr, grad, *exchange);
    return;
  }
  if (optimizer_.config().type == OptimizerType::kMuon) {
    ZERO_INTERNAL_ASSERT(exchange != nullptr, "a Muon step without its exchange");
    step_muon(grad_multiplier.value(), lr, grad, *exchange);
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

// `segments` in offset order (what for_each_piece walks).
std::vector<StateSegment> by_offset(std::vector<StateSegment> segments) {
  std::sort(segments.begin(), segments.end(),
            [](const StateSegment& a, const StateSegment& b) { return a.offset < b.offset; });
  return segments;
}

// The update pass LAMB's and Muon's steps end with: over every tile, the master weights, the
// state parts and the 16-bit parameter copy (undefined with fp32 parameters, which are the
// master), each cut into the pieces of `loaded` (padding as param -1), for
// fn(param, offset of the piece in the space, master, copy, part), part(k) giving state part
// k's piece. Every element of each tile is written.
template <typename Fn>
void update_by_piece(ParamStore& params, StateStore& store, bool fp32,
                     const std::vector<StateSegment>& loaded, Fn&& fn) {
  ParamStore::Pass pass = params.pass(/*read=*/fp32, /*write=*/true);
  store.for_each_tile(
      [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
        const at::Tensor param_tile = pass.tile(begin, end - begin);
        const at::Tensor master = fp32 ? param_tile : parts[0];
        for_each_piece(loaded, begin, end, [&](int64_t from, int64_t to, int param) {
          const int64_t at = from - begin, count = to - from;
          const auto part = [&](size_t k) { return parts[k].narrow(0, at, count); };
          fn(param, from, master.narrow(0, at, count),
             fp32 ? at::Tensor() : param_tile.narrow(0, at, count), part);
        });
      },
      /*write_back=*/true);
  pass.finish();
}

}  // namespace

void ShardState::step_lamb(double grad_multiplier, double lr, const at::Tensor& grad,
                           const StepCollectives& exchange) {
  optimizer_.begin_step();
  const OptimizerConfig& config = optimizer_.config();
  const LambScalars s = lamb_scalars(config, optimizer_.step_count(), grad_multiplier);
  const bool fp32 = !master_in_store();
  const int first_moment = fp32 ? 0 : 1;
  const auto parameters = static_cast<size_t>(exchange.parameters);
  // Pass 1: the moments, and the squares of the elements this rank saves (each element of the
  // model once over the ranks), per parameter.
  std::vector<ExactSquares> weights(parameters), updates(parameters);
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
  const auto first = static_cast<size_t>(first_moment);
  update_by_piece(*params_, *store_, fp32, loaded,
                  [&](int param, int64_t, const at::Tensor& master, const at::Tensor& out,
                      const auto& part) {
                    lamb_apply(master, part(first), part(first + 1), out, s,
                               param < 0 ? lr : step_sizes[static_cast<size_t>(param)]);
                  });
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The exchange's all_to_all buffers: chunk c of `buffer` (chunk elements each) packed with
// one slice per transfer, in list order. Calls fn(transfer, slice).
template <typename Fn>
void for_each_slot(const std::vector<std::vector<MuonTransfer>>& per_peer, const at::Tensor& buffer,
                   int64_t chunk, Fn&& fn) {
  for (size_t peer = 0; peer < per_peer.size(); ++peer) {
    int64_t at = static_cast<int64_t>(peer) * chunk;
    for (const MuonTransfer& t : per_peer[peer]) {
      fn(t, buffer.narrow(0, at, t.end - t.begin));
      at += t.end - t.begin;
    }
  }
}

}  // namespace

// Note [Muon under partitioning] (optim/muon.h).
void ShardState::step_muon(double grad_multiplier, double lr, const at::Tensor& grad,
                           const StepCollectives& exchange) {
  optimizer_.begin_step();
  const OptimizerConfig& config = optimizer_.config();
  const bool fp32 = !master_in_store();
  const int first_moment = fp32 ? 0 : 1;
  const std::vector<StateSegment> loaded = by_offset(loaded_);
  const auto is_muon = [&](int param) {
    return param >= 0 && exchange.matrices.at(static_cast<size_t>(param)).muon();
  };
  if (!muon_plan_) {
    // Every rank's holdings, once: the layout does not change while the engine lives.
    std::vector<int64_t> mine;
    for (const StateSegment& s : loaded) {
      if (is_muon(s.param)) mine.insert(mine.end(), {s.param, s.begin, s.end, s.offset});
    }
    const at::Tensor local =
        at::tensor(c10::ArrayRef<int64_t>(mine), at::TensorOptions().dtype(at::kLong));
    const std::vector<at::Tensor> all = exchange.gather_varying(local);
    std::vector<MuonHolding> holdings;
    for (size_t r = 0; r < all.size(); ++r) {
      const int64_t* v = all[r].data_ptr<int64_t>();
      for (int64_t i = 0; i + 3 < all[r].numel(); i += 4) {
        holdings.push_back({static_cast<int>(r), static_cast<int>(v[i]), v[i + 1], v[i + 2],
                            v[i + 3]});
      }
    }
    muon_plan_ = plan_muon_exchange(std::move(holdings), exchange.matrices, exchange.world,
                                    exchange.rank, exchange.mode);
    muon_stats_.split_matrices = muon_plan_->split_matrices;
  }
  const MuonExchangePlan& plan = *muon_plan_;
  const at::TensorOptions fp32_options = at::TensorOptions().dtype(at::kFloat);
  // u, then O, at the matrices' offsets: in the gradient itself when it is fp32 (the step
  // consumes it and the engine zeroes it after), else in a buffer of the space's size.
  const at::Tensor u = grad.scalar_type() == at::kFloat ? grad : at::empty({numel()}, fp32_options);

  // Pass 1: the matrices' momentum and u.
  store_->for_each_tile(
      [&](int64_t begin, int64_t end, const std::vector<at::Tensor>& parts) {
        for_each_piece(loaded, begin, end, [&](int64_t from, int64_t to, int param) {
          if (!is_muon(param)) return;
          muon_momentum(grad.narrow(0, from, to - from),
                        parts[first_moment].narrow(0, from - begin, to - from),
                        u.narrow(0, from, to - from), grad_multiplier, config.momentum);
        });
      },
      /*write_back=*/true);

  // NS5 of each matrix this rank computes, from its own pieces and those received; its
  // pieces of O go where u came from.
  std::map<int, std::vector<const StateSegment*>> own;
  for (const StateSegment& s : loaded) {
    if (is_muon(s.param)) own[s.param].push_back(&s);
  }
  struct Slice {
    int64_t begin, end;
    at::Tensor data;
  };
  std::map<int, std::vector<Slice>> incoming, outgoing;
  const auto orthogonalize = [&](int param) {
    const auto started = std::chrono::steady_clock::now();
    const MuonMatrix& matrix = exchange.matrices[static_cast<size_t>(param)];
    const int64_t n = matrix.rows * matrix.cols;
    const std::vector<const StateSegment*>& mine = own[param];
    const bool whole = mine.size() == 1 && mine[0]->begin == 0 && mine[0]->end == n;
    at::Tensor gathered = whole ? u.narrow(0, mine[0]->offset, n) : at::empty({n}, fp32_options);
    if (!whole) {
      for (const StateSegment* s : mine) {
        gathered.narrow(0, s->begin, s->end - s->begin)
            .copy_(u.narrow(0, s->offset, s->end - s->begin));
      }
      for (const Slice& piece : incoming[param]) {
        gathered.narrow(0, piece.begin, piece.end - piece.begin).copy_(piece.data);
      }
    }
    const at::Tensor orthogonal =
        muon_orthogonalize(gathered.view({matrix.rows, matrix.cols}), config.ns_method,
                           config.ns_dtype)
            .view({-1});
    ++muon_stats_.matrices_orthogonalized;
    for (const StateSegment* s : mine) {
      u.narrow(0, s->offset, s->end - s->begin)
          .copy_(orthogonal.narrow(0, s->begin, s->end - s->begin));
    }
    for (const Slice& piece : outgoing[param]) {
      piece.data.copy_(orthogonal.narrow(0, piece.begin, piece.end - piece.begin));
    }
    muon_stats_.ns_seconds += seconds_since(started);
  };
  for (const int param : plan.local) orthogonalize(param);
  // Two buffers serve every batch and both directions (the pieces of u go out of `send` into
  // `receive`; the results are packed into `send`, free by then, and come back into
  // `receive`, whose pieces are spent): the communicator may hold on to a collective's tensors
  // until its next one, so fresh buffers per exchange would add up (measured: three live at
  // once).
  const int64_t world = exchange.world;
  int64_t chunk = 0;
  for (const MuonExchangeBatch& batch : plan.batches) {
    chunk = std::max({chunk, batch.piece_chunk, batch.result_chunk});
  }
  const at::Tensor send = chunk > 0 ? at::empty({world * chunk}, fp32_options) : at::Tensor();
  const at::Tensor receive = chunk > 0 ? at::empty({world * chunk}, fp32_options) : at::Tensor();
  for (const MuonExchangeBatch& batch : plan.batches) {
    // The pieces of u to the batch's owners.
    auto started = std::chrono::steady_clock::now();
    if (batch.piece_chunk > 0) {
      const int64_t n = world * batch.piece_chunk;
      for_each_slot(batch.send_pieces, send, batch.piece_chunk,
                    [&](const MuonTransfer& t, const at::Tensor& slot) {
                      slot.copy_(u.narrow(0, t.offset, t.end - t.begin));
                      muon_stats_.elements_sent += t.end - t.begin;
                    });
      exchange.all_to_all(send.narrow(0, 0, n), receive.narrow(0, 0, n));
      muon_stats_.exchange_elements += n;
      for_each_slot(batch.receive_pieces, receive, batch.piece_chunk,
                    [&](const MuonTransfer& t, const at::Tensor& slot) {
                      incoming[t.param].push_back({t.begin, t.end, slot});
                    });
    }
    if (batch.result_chunk > 0) {
      for_each_slot(batch.send_results, send, batch.result_chunk,
                    [&](const MuonTransfer& t, const at::Tensor& slot) {
                      outgoing[t.param].push_back({t.begin, t.end, slot});
                      muon_stats_.elements_sent += t.end - t.begin;
                    });
    }
    muon_stats_.exchange_seconds += seconds_since(started);
    for (const int param : batch.computed) orthogonalize(param);
    incoming.clear();
    outgoing.clear();
    // The pieces of O back to their holders.
    started = std::chrono::steady_clock::now();
    if (batch.result_chunk > 0) {
      const int64_t n = world * batch.result_chunk;
      exchange.all_to_all(send.narrow(0, 0, n), receive.narrow(0, 0, n));
      muon_stats_.exchange_elements += n;
      for_each_slot(batch.receive_results, receive, batch.result_chunk,
                    [&](const MuonTransfer& t, const at::Tensor& slot) {
                      u.narrow(0, t.offset, t.end - t.begin).copy_(slot);
                    });
    }
    muon_stats_.exchange_seconds += seconds_since(started);
  }
  ++muon_stats_.steps;

  // Pass 2: the matrices' update from O; AdamW for every other element (padding too: its
  // zeros stay zeros, and the 16-bit copy of each tile is written whole).
  const double muon_rate = lr * config.muon_lr / config.lr;
  OptimizerConfig aux = config;
  aux.type = config.aux_adam_w_mode ? OptimizerType::kAdamW : OptimizerType::kAdam;
  aux.bias_correction = true;
  const AdamScalars adam =
      adam_scalars(aux, optimizer_.step_count(), grad_multiplier, lr);
  const auto first = static_cast<size_t>(first_moment);
  update_by_piece(*params_, *store_, fp32, loaded,
                  [&](int param, int64_t from, const at::Tensor& master, const at::Tensor& out,
                      const auto& part) {
                    const int64_t count = master.numel();
                    if (is_muon(param)) {
                      const MuonMatrix& m = exchange.matrices[static_cast<size_t>(param)];
                      muon_apply(master, u.narrow(0, from, count), out,
                                 1.0 - muon_rate * config.weight_decay,
                                 muon_rate * muon_scale(m.rows, m.cols));
                    } else {
                      adam_update(simd_level(), master, grad.narrow(0, from, count), out,
                                  part(first), part(first + 1), adam);
                    }
                  });
}

bool ShardState::supports_ranges() const {
  // LAMB's update needs every rank's sums first: it cannot step parts as gradients arrive.
  // Muon's needs whole matrices, after an exchange.
  return store_->visits_ranges() && !params_->offloaded() &&
         optimizer_.config().type != OptimizerType::kLamb &&
         optimizer_.config().type != OptimizerType::kMuon;
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
