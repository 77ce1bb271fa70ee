// Muon's pieces (Note [Muon under partitioning], src/optim/muon.h): the Newton-Schulz step
// against its definition written with plain ATen products, its independence of the thread
// count, the parameter rule, and the exchange plan, run in one process over simulated ranks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <map>
#include <tuple>
#include <random>
#include <vector>

#include "optim/muon.h"

namespace zero {
namespace {

// Keller Jordan's NS5 as DeepSpeed's zeropower_via_newtonschulz5 writes it (fp32 here).
at::Tensor reference_ns5(const at::Tensor& g, int steps = 5) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  at::Tensor x = g.to(at::kDouble).to(at::kFloat);
  const bool tall = g.size(0) > g.size(1);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);
  for (int i = 0; i < steps; ++i) {
    const at::Tensor A = at::mm(x, x.t());
    const at::Tensor B = b * A + c * at::mm(A, A);
    x = a * x + at::mm(B, x);
  }
  return tall ? x.t().contiguous() : x;
}

double relative_error(const at::Tensor& x, const at::Tensor& y) {
  return (x.to(at::kDouble) - y.to(at::kDouble)).norm().item<double>() /
         y.to(at::kDouble).norm().item<double>();
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(MuonNewtonSchulz, MatchesItsDefinition) {
  at::manual_seed(1);
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{
           {64, 256}, {256, 64}, {96, 96}, {3, 700}, {130, 1100}}) {
    SCOPED_TRACE(std::to_string(shape.first) + "x" + std::to_string(shape.second));
    const at::Tensor g = at::randn({shape.first, shape.second});
    const at::Tensor reference = reference_ns5(g);
    const at::Tensor standard = muon_orthogonalize(g, MuonNsMethod::kStandard, at::kFloat);
    EXPECT_LT(relative_error(standard, reference), 1e-5);
    // The Gram iteration is the same polynomial, reassociated (and restarted at step 2).
    const at::Tensor gram = muon_orthogonalize(g, MuonNsMethod::kGram, at::kFloat);
    EXPECT_LT(relative_error(gram, reference), 1e-4);
    // bf16: the iteration's rounding, not a different map.
    const at::Tensor bf16 = muon_orthogonalize(g, MuonNsMethod::kStandard, at::kBFloat16);
    EXPECT_LT(relative_error(bf16, reference), 0.05);
    // What it is for: singular values pulled towards 1 (NS5 leaves them in about [0.7, 1.2];
    // a square Gaussian matrix has some too close to 0 for five steps to lift).
    const at::Tensor s = at::linalg_svdvals(standard.to(at::kDouble));
    if (shape.first != shape.second) EXPECT_GT(s.min().item<double>(), 0.5);
    EXPECT_LT(s.max().item<double>(), 1.3);
  }
}

TEST(MuonNewtonSchulz, SameBitsForAnyThreadCount) {
  at::manual_seed(2);
  // Skinny X X^T is where MKL splits the inner dimension by thread count.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{16, 65536}, {200, 3000}, {700, 90}};
  for (const auto& [rows, cols] : shapes) {
    const at::Tensor g = at::randn({rows, cols});
    for (const MuonNsMethod method : {MuonNsMethod::kStandard, MuonNsMethod::kGram}) {
      for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        std::vector<at::Tensor> results;
        for (const int threads : {1, 2, 3, 4}) {
          ThreadCount count(threads);
          results.push_back(muon_orthogonalize(g, method, dtype, 2));
        }
        for (size_t i = 1; i < results.size(); ++i) {
          EXPECT_TRUE(at::equal(results[0], results[i]))
              << rows << "x" << cols << " method " << static_cast<int>(method) << " dtype "
              << dtype << " threads " << i + 1;
        }
      }
    }
    // And for memory placed anywhere: the same values at another offset.
    const at::Tensor shifted = at::empty({rows * cols + 3}).narrow(0, 3, rows * cols);
    shifted.copy_(g.view({-1}));
    EXPECT_TRUE(at::equal(muon_orthogonalize(g, MuonNsMethod::kGram, at::kFloat, 2),
                          muon_orthogonalize(shifted.view({rows, cols}), MuonNsMethod::kGram,
                                             at::kFloat, 2)));
  }
}

TEST(MuonNewtonSchulz, FixedOrderProductIsAProduct) {
  at::manual_seed(3);
  const at::Tensor a = at::randn({150, 700});
  const at::Tensor b = at::randn({700, 1030});
  const at::Tensor c = at::randn({150, 1030});
  EXPECT_LT(relative_error(fixed_order_addmm(at::Tensor(), a, b, 0.0, 1.0), at::mm(a, b)), 1e-6);
  EXPECT_LT(relative_error(fixed_order_addmm(c, a, b, -4.775, 2.0315),
                           at::addmm(c, a, b, -4.775, 2.0315)),
            1e-6);
  EXPECT_LT(relative_error(fixed_order_addmm(at::Tensor(), a, a.t(), 0.0, 1.0),
                           at::mm(a, a.t())),
            1e-6);
}

TEST(MuonRule, HiddenMatricesOnly) {
  EXPECT_TRUE(muon_matrix_of("transformer.h.0.attn.c_attn.weight", {64, 192}).muon());
  EXPECT_EQ(muon_matrix_of("model.layers.3.mlp.down_proj.weight", {64, 256}).cols, 256);
  const MuonMatrix conv = muon_matrix_of("conv.weight", {8, 3, 5, 5});
  EXPECT_EQ(conv.rows, 8);
  EXPECT_EQ(conv.cols, 75);
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight",
                           "model.embed_tokens.weight", "lm_head.weight", "Embedding.W"}) {
    EXPECT_FALSE(muon_matrix_of(name, {100, 64}).muon()) << name;
  }
  EXPECT_FALSE(muon_matrix_of("h.0.ln_1.weight", {64}).muon());
  EXPECT_FALSE(muon_matrix_of("h.0.attn.c_attn.bias", {192}).muon());
  EXPECT_FALSE(muon_matrix_of("empty.weight", {0, 5}).muon());
  const std::string notice = muon_assignment_notice(
      {"h.0.attn.w", "h.1.attn.w", "wte.weight", "h.0.ln.bias", "h.1.ln.bias"},
      {{4, 4}, {4, 4}, {}, {}, {}});
  EXPECT_NE(notice.find("2 hidden matrices: h.*.attn.w (x2)"), std::string::npos) << notice;
  EXPECT_NE(notice.find("3 other parameters: wte.weight, h.*.ln.bias (x2)"), std::string::npos)
      << notice;
}

// Every rank's holdings when a flat space of the parameters (in order, no padding) is cut
// into `world` equal shards; with `whole` every rank holds everything (stage 0).
std::vector<MuonHolding> cut(const std::vector<MuonMatrix>& matrices, int world, bool whole,
                             std::vector<int64_t>* space_of_rank) {
  int64_t total = 0;
  for (const MuonMatrix& m : matrices) total += m.muon() ? m.rows * m.cols : 3;
  const int64_t shard = (total + world - 1) / world;
  std::vector<MuonHolding> holdings;
  space_of_rank->assign(static_cast<size_t>(world), whole ? total : 0);
  for (int r = 0; r < world; ++r) {
    const int64_t lo = whole ? 0 : r * shard, hi = whole ? total : std::min(total, lo + shard);
    if (!whole) (*space_of_rank)[static_cast<size_t>(r)] = std::max<int64_t>(0, hi - lo);
    int64_t at = 0;
    for (int p = 0; p < static_cast<int>(matrices.size()); ++p) {
      const MuonMatrix& m = matrices[static_cast<size_t>(p)];
      const int64_t n = m.muon() ? m.rows * m.cols : 3;
      const int64_t from = std::max(at, lo), to = std::min(at + n, hi);
      if (m.muon() && from < to) holdings.push_back({r, p, from - at, to - at, from - lo});
      at += n;
    }
  }
  return holdings;
}

// Runs the exchange of Note [Muon under partitioning] over simulated ranks: each rank's space
// holds u, the plans move pieces and results as the all_to_alls would, and every rank ends
// with NS5 of each whole matrix at its pieces.
void expect_exchange_orthogonalizes(const std::vector<MuonMatrix>& matrices, int world,
                                    bool whole, MuonExchangeMode mode,
                                    std::vector<MuonExchangePlan>* plans_out = nullptr,
                                    int64_t batch_cap = kMuonExchangeBatchElements) {
  std::vector<int64_t> space;
  const std::vector<MuonHolding> holdings = cut(matrices, world, whole, &space);
  std::vector<at::Tensor> full;  // each matrix's u
  for (const MuonMatrix& m : matrices) {
    full.push_back(m.muon() ? at::randn({m.rows, m.cols}) : at::Tensor());
  }
  std::vector<at::Tensor> u(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    u[static_cast<size_t>(r)] = at::zeros({space[static_cast<size_t>(r)]});
  }
  for (const MuonHolding& h : holdings) {
    u[static_cast<size_t>(h.rank)].narrow(0, h.offset, h.end - h.begin)
        .copy_(full[static_cast<size_t>(h.param)].view({-1}).narrow(0, h.begin, h.end - h.begin));
  }
  std::vector<MuonExchangePlan> plans;
  for (int r = 0; r < world; ++r) {
    std::vector<MuonHolding> shuffled = holdings;  // any order gives the same plan
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(static_cast<unsigned>(r)));
    plans.push_back(plan_muon_exchange(shuffled, matrices, world, r, mode, batch_cap));
    ASSERT_EQ(plans.back().batches.size(), plans.front().batches.size());
    for (size_t b = 0; b < plans.back().batches.size(); ++b) {
      ASSERT_EQ(plans.back().batches[b].piece_chunk, plans.front().batches[b].piece_chunk);
      ASSERT_EQ(plans.back().batches[b].result_chunk, plans.front().batches[b].result_chunk);
    }
  }
  // Each batch: rank r's chunk for peer p is what p receives from r, in the same order, and
  // both directions fit the batch's chunks.
  for (size_t b = 0; b < plans.front().batches.size(); ++b) {
    for (int r = 0; r < world; ++r) {
      for (int p = 0; p < world; ++p) {
        const MuonExchangeBatch& from = plans[static_cast<size_t>(r)].batches[b];
        const MuonExchangeBatch& to = plans[static_cast<size_t>(p)].batches[b];
        for (const auto& [sent, received, chunk] :
             {std::tuple{&from.send_pieces, &to.receive_pieces, from.piece_chunk},
              std::tuple{&from.send_results, &to.receive_results, from.result_chunk}}) {
          const auto& out = (*sent)[static_cast<size_t>(p)];
          const auto& in = (*received)[static_cast<size_t>(r)];
          ASSERT_EQ(out.size(), in.size());
          int64_t elements = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_EQ(out[i].param, in[i].param);
            ASSERT_EQ(out[i].begin, in[i].begin);
            ASSERT_EQ(out[i].end, in[i].end);
            elements += out[i].end - out[i].begin;
          }
          EXPECT_LE(elements, chunk);
        }
      }
    }
  }
  // Each matrix computed by its computers from their own and received pieces.
  std::map<int, int> computed_by;
  std::vector<at::Tensor> result(matrices.size());
  for (int r = 0; r < world; ++r) {
    const MuonExchangePlan& plan = plans[static_cast<size_t>(r)];
    for (int param : plan.computed) {
      const MuonMatrix& m = matrices[static_cast<size_t>(param)];
      at::Tensor gathered = at::full({m.rows * m.cols}, std::nan(""));
      for (const MuonHolding& h : holdings) {
        if (h.param != param || h.rank != r) continue;
        gathered.narrow(0, h.begin, h.end - h.begin)
            .copy_(u[static_cast<size_t>(r)].narrow(0, h.offset, h.end - h.begin));
      }
      for (const MuonExchangeBatch& batch : plan.batches) {
        for (int s = 0; s < world; ++s) {
          for (const MuonTransfer& t : batch.receive_pieces[static_cast<size_t>(s)]) {
            if (t.param != param) continue;
            gathered.narrow(0, t.begin, t.end - t.begin)
                .copy_(u[static_cast<size_t>(s)].narrow(0, t.offset, t.end - t.begin));
          }
        }
      }
      ASSERT_FALSE(at::isnan(gathered).any().item<bool>()) << "matrix " << param << " on " << r;
      ++computed_by[param];
      result[static_cast<size_t>(param)] =
          muon_orthogonalize(gathered.view({m.rows, m.cols}), MuonNsMethod::kGram, at::kFloat, 2)
              .view({-1});
    }
  }
  // Round 2 and the computers' own pieces: every holder ends with its pieces of O.
  for (const MuonHolding& h : holdings) {
    const MuonExchangePlan& plan = plans[static_cast<size_t>(h.rank)];
    const bool computes = std::find(plan.computed.begin(), plan.computed.end(), h.param) !=
                          plan.computed.end();
    int delivered = computes ? 1 : 0;
    for (size_t b = 0; b < plan.batches.size(); ++b) {
      for (int o = 0; o < world; ++o) {
        for (const MuonTransfer& t : plan.batches[b].receive_results[static_cast<size_t>(o)]) {
          if (t.param != h.param || t.begin != h.begin) continue;
          ++delivered;
          const MuonExchangePlan& owner = plans[static_cast<size_t>(o)];
          EXPECT_TRUE(std::find(owner.batches[b].computed.begin(), owner.batches[b].computed.end(),
                                h.param) != owner.batches[b].computed.end());
        }
      }
    }
    EXPECT_EQ(delivered, 1) << "piece of matrix " << h.param << " on rank " << h.rank;
  }
  const int expected_computers = whole ? world : 1;
  for (size_t p = 0; p < matrices.size(); ++p) {
    if (!matrices[p].muon()) continue;
    const bool split = !whole;
    if (mode == MuonExchangeMode::kOwner || !split) {
      // One computer per matrix when split (owner), or held whole: each holder computes.
      if (!whole) {
        EXPECT_EQ(computed_by[static_cast<int>(p)], expected_computers) << "matrix " << p;
      } else {
        EXPECT_EQ(computed_by[static_cast<int>(p)], world) << "matrix " << p;
      }
    }
    EXPECT_TRUE(at::equal(result[p], muon_orthogonalize(full[p], MuonNsMethod::kGram, at::kFloat, 2)
                                         .view({-1})));
  }
  if (plans_out) *plans_out = plans;
}

TEST(MuonExchangePlan, EveryPieceMeetsItsMatrixAndComesBack) {
  at::manual_seed(4);
  const std::vector<MuonMatrix> matrices = {{16, 48}, {}, {48, 16}, {16, 16}, {}, {32, 64},
                                            {8, 8},   {64, 16}, {}};
  for (int world : {1, 2, 3, 4, 7}) {
    for (const MuonExchangeMode mode : {MuonExchangeMode::kOwner, MuonExchangeMode::kEveryHolder}) {
      SCOPED_TRACE("world " + std::to_string(world) + " mode " +
                   std::to_string(static_cast<int>(mode)));
      expect_exchange_orthogonalizes(matrices, world, /*whole=*/false, mode);
      expect_exchange_orthogonalizes(matrices, world, /*whole=*/true, mode);
      // Batches of at most 2000 elements (a larger matrix alone): several round trips.
      std::vector<MuonExchangePlan> plans;
      expect_exchange_orthogonalizes(matrices, world, /*whole=*/false, mode, &plans, 2000);
      if (world > 2) EXPECT_GE(plans.front().batches.size(), 2u);
    }
  }
}

TEST(MuonExchangePlan, HeldWholeMovesNothingAndOwnersBalanceTheWork) {
  at::manual_seed(5);
  std::vector<MuonMatrix> matrices(24, MuonMatrix{32, 96});
  std::vector<MuonExchangePlan> plans;
  expect_exchange_orthogonalizes(matrices, 3, /*whole=*/true, MuonExchangeMode::kOwner, &plans);
  for (const MuonExchangePlan& plan : plans) {
    EXPECT_TRUE(plan.batches.empty());
    EXPECT_EQ(plan.local.size(), 24u);
    EXPECT_EQ(plan.split_matrices, 0);
  }
  // Stages 1-2's shape when one rank's shard holds every matrix whole (GPT-2 at 2 ranks: the
  // embedding fills the other shard): the owners move about half the matrices to the idle
  // rank, and every holder leaves them all where they are.
  {
    std::vector<MuonHolding> on_rank0;
    for (int p = 0; p < 24; ++p) on_rank0.push_back({0, p, 0, 32 * 96, p * 32 * 96});
    const MuonExchangePlan spread =
        plan_muon_exchange(on_rank0, matrices, 2, 1, MuonExchangeMode::kOwner);
    const MuonExchangePlan kept =
        plan_muon_exchange(on_rank0, matrices, 2, 1, MuonExchangeMode::kEveryHolder);
    EXPECT_EQ(spread.computed.size(), 12u);
    EXPECT_EQ(spread.work[0], spread.work[1]);
    EXPECT_EQ(spread.moved_elements, 12 * 32 * 96);  // rank 1 sends the results back
    int64_t received = 0;
    for (const MuonExchangeBatch& batch : spread.batches) {
      for (const MuonTransfer& t : batch.receive_pieces[0]) received += t.end - t.begin;
    }
    EXPECT_EQ(received, 12 * 32 * 96);
    EXPECT_TRUE(kept.computed.empty());
    for (const MuonExchangeBatch& batch : kept.batches) {
      EXPECT_EQ(batch.piece_chunk + batch.result_chunk, 0);
    }
  }
  // Stage 3's shape: every matrix cut among all the ranks.
  const int world = 4;
  std::vector<MuonHolding> holdings;
  for (int p = 0; p < 24; ++p) {
    for (int r = 0; r < world; ++r) {
      holdings.push_back({r, p, r * 768, (r + 1) * 768, p * 768});
    }
  }
  const MuonExchangePlan owner = plan_muon_exchange(holdings, matrices, world, 0,
                                                    MuonExchangeMode::kOwner);
  const MuonExchangePlan every = plan_muon_exchange(holdings, matrices, world, 0,
                                                    MuonExchangeMode::kEveryHolder);
  EXPECT_EQ(owner.split_matrices, 24);
  EXPECT_EQ(owner.computed.size(), 6u);  // 24 equal matrices over 4 ranks
  EXPECT_EQ(every.computed.size(), 24u);
  for (double w : owner.work) EXPECT_EQ(w, owner.work[0]);
  // Sent by rank 0: the owner plan moves 2 (N - 1) / N^2 of the matrices' elements, every
  // holder (N - 1) / N.
  const int64_t elements = 24 * 32 * 96;
  EXPECT_EQ(owner.moved_elements, 2 * (world - 1) * elements / (world * world));
  EXPECT_EQ(every.moved_elements, (world - 1) * elements / world);
}

}  // namespace
}  // namespace zero
