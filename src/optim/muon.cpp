#include "optim/muon.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <tuple>
#include <type_traits>

#include "common/exact_squares.h"
#include "common/parallel.h"
#include "common/text.h"
#include "optim/element_types.h"
#include "zero/error.h"

// MKL's thread-local thread count, its C interface (libtorch's wheels link MKL and export it;
// there the lower-case name is the Fortran one, which takes a pointer): weak, so a libtorch
// built on another BLAS still links, and there the GEMMs run as that BLAS threads them
// (test_muon's SameBitsForAnyThreadCount tells whether that is deterministic).
extern "C" int MKL_Set_Num_Threads_Local(int threads) __attribute__((weak));

namespace zero {

using optim_detail::check_operands;
using optim_detail::dispatch_types;
using optim_detail::kGrainSize;

namespace {

// Keller Jordan's quintic: the coefficients chosen to maximise the slope at zero.
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;
// DeepSpeed's X / (||X|| + 1e-7).
constexpr double kNormEps = 1e-7;
// fixed_order_addmm's blocks: large enough for an efficient single-threaded GEMM each.
constexpr int64_t kRowBlock = 64;
constexpr int64_t kColBlock = 512;
// What moving one element to an owner (and its result back) is worth in NS5 multiply-adds,
// for placing matrices: about what one core multiply-adds in the time shared memory moves 4
// bytes (tens of GMAC/s against a few GB/s), rounded up so that a matrix moves only for a
// clear gain.
constexpr double kMovedElementWork = 64.0;
// The Gram iteration's restart (DeepSpeed's restart_at): X = Q X and R = X X^T afresh, which
// keeps a 16-bit iteration stable.
constexpr int kGramRestart = 2;

// "h.3.attn.c_attn.weight" -> "h.*.attn.c_attn.weight": a layer number folded.
std::string fold_layer_numbers(const std::string& name) {
  std::string out;
  size_t i = 0;
  while (i < name.size()) {
    const bool starts_part = i == 0 || name[i - 1] == '.';
    size_t j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (starts_part && j > i && (j == name.size() || name[j] == '.')) {
      out += '*';
      i = j;
    } else {
      out += name[i++];
    }
  }
  return out;
}

std::string folded_list(const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, int>> folded;  // in first-seen order
  for (const std::string& name : names) {
    const std::string f = fold_layer_numbers(name);
    auto it = std::find_if(folded.begin(), folded.end(),
                           [&](const auto& e) { return e.first == f; });
    if (it == folded.end()) {
      folded.emplace_back(f, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [name, count] : folded) {
    out += (out.empty() ? "" : ", ") + name;
    if (count > 1) out += " (x" + std::to_string(count) + ")";
  }
  return out.empty() ? "none" : out;
}

// ||x|| (Frobenius) of a contiguous fp32 tensor, exactly summed: the same for any split.
double exact_norm(const at::Tensor& x) {
  const float* data = x.data_ptr<float>();
  const int64_t n = x.numel();
  const int64_t blocks = (n + kGrainSize - 1) / kGrainSize;
  std::vector<ExactSquares> partial(static_cast<size_t>(blocks));
  parallel_ranges(at::empty({blocks}, at::kByte), 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      ExactSquares& sums = partial[static_cast<size_t>(b)];
      for (int64_t i = b * kGrainSize, end = std::min(n, (b + 1) * kGrainSize); i < end; ++i) {
        sums.add(data[i]);
      }
    }
  });
  ExactSquares total;
  for (const ExactSquares& p : partial) total.merge(p);
  return std::sqrt(total.value());
}

// X <- (a I + b A + c A^2) X with A = X X^T, `steps` times.
at::Tensor standard_iteration(at::Tensor x, int steps) {
  for (int i = 0; i < steps; ++i) {
    const at::Tensor a = fixed_order_addmm(at::Tensor(), x, x.t(), 0.0, 1.0);
    const at::Tensor b = fixed_order_addmm(a, a, a, kB, kC);
    x = fixed_order_addmm(x, b, x, kA, 1.0);
  }
  return x;
}

// The same polynomial on the n x n Gram matrix R = X X^T of a wide X (n < m): with Z = b R +
// c R^2, one step is X <- (a I + Z) X and R <- (a I + Z) R (a I + Z), so the product Q of the
// (a I + Z)s is accumulated and applied to X once (and at the restart).
at::Tensor gram_iteration(at::Tensor x, int steps) {
  at::Tensor r = fixed_order_addmm(at::Tensor(), x, x.t(), 0.0, 1.0);
  at::Tensor q;
  for (int i = 0; i < steps; ++i) {
    if (i == kGramRestart) {
      x = fixed_order_addmm(at::Tensor(), q, x, 0.0, 1.0);
      r = fixed_order_addmm(at::Tensor(), x, x.t(), 0.0, 1.0);
      q = at::Tensor();
    }
    const at::Tensor z = fixed_order_addmm(r, r, r, kB, kC);
    if (!q.defined()) {
      q = z.clone();
      q.diagonal().add_(kA);
    } else {
      q = fixed_order_addmm(q, z, q, kA, 1.0);
    }
    if (i < steps - 1 && i + 1 != kGramRestart) {
      const at::Tensor rz = fixed_order_addmm(r, z, r, kA, 1.0);
      r = fixed_order_addmm(rz, z, rz, kA, 1.0);
    }
  }
  return fixed_order_addmm(at::Tensor(), q, x, 0.0, 1.0);
}

// NS5 multiply-adds of a rows x cols matrix (n = the short side): X X^T, A A, B X per step.
double ns_work(const MuonMatrix& m) {
  const double n = static_cast<double>(std::min(m.rows, m.cols));
  const double w = static_cast<double>(std::max(m.rows, m.cols));
  return 5.0 * (2.0 * n * n * w + n * n * n);
}

}  // namespace

MuonMatrix muon_matrix_of(const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() < 2) return {};
  int64_t cols = 1;
  for (size_t d = 1; d < shape.size(); ++d) cols *= shape[d];
  if (shape[0] == 0 || cols == 0) return {};
  const std::string folded = lower_ascii(name);
  for (const char* keyword : {"embed", "lm_head", "wte", "wpe"}) {
    if (folded.find(keyword) != std::string::npos) return {};
  }
  return {shape[0], cols};
}

std::string muon_assignment_notice(const std::vector<std::string>& names,
                                   const std::vector<MuonMatrix>& matrices) {
  ZERO_INTERNAL_ASSERT(names.size() == matrices.size(), names.size(), " names for ",
                       matrices.size(), " parameters");
  std::vector<std::string> muon, adam;
  for (size_t i = 0; i < names.size(); ++i) (matrices[i].muon() ? muon : adam).push_back(names[i]);
  return "optimizer Muon: Newton-Schulz updates " + std::to_string(muon.size()) +
         " hidden matrices: " + folded_list(muon) + "; the auxiliary AdamW updates " +
         std::to_string(adam.size()) + " other parameters: " + folded_list(adam);
}

at::Tensor fixed_order_addmm(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                             double beta, double alpha) {
  ZERO_INTERNAL_ASSERT(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
                       "fixed_order_addmm of ", a.sizes(), " and ", b.sizes());
  const int64_t rows = a.size(0), cols = b.size(1);
  ZERO_INTERNAL_ASSERT(!c.defined() || (c.size(0) == rows && c.size(1) == cols),
                       "fixed_order_addmm's addend ", c.sizes());
  at::Tensor out = at::empty({rows, cols}, a.options());
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t col_blocks = (cols + kColBlock - 1) / kColBlock;
  // Every block is one GEMM over the whole inner dimension, on this thread, so its sums run
  // in an order that depends on the block alone. MKL splits a GEMM's inner dimension among
  // its threads, so it is told to use one; and the blocks run one after another, because
  // MKL's results also changed when blocks ran concurrently (measured: in libtorch's parallel
  // region and on threads of zero's own, by up to 2e-8 in 10 % of the elements of a
  // 200 x 3000 iteration, depending on the thread count), whatever its thread setting.
  const int previous = MKL_Set_Num_Threads_Local ? MKL_Set_Num_Threads_Local(1) : 0;
  const auto blocks = [&](int64_t first, int64_t last) {
                    for (int64_t block = first; block < last; ++block) {
                      const int64_t r = (block / col_blocks) * kRowBlock;
                      const int64_t k = (block % col_blocks) * kColBlock;
                      const int64_t nr = std::min(kRowBlock, rows - r);
                      const int64_t nk = std::min(kColBlock, cols - k);
                      const at::Tensor lhs = a.narrow(0, r, nr);
                      const at::Tensor rhs = b.narrow(1, k, nk);
                      at::Tensor result =
                          c.defined() ? at::addmm(c.narrow(0, r, nr).narrow(1, k, nk), lhs, rhs,
                                                  beta, alpha)
                                      : at::mm(lhs, rhs);
                      if (!c.defined() && alpha != 1.0) result.mul_(alpha);
                      out.narrow(0, r, nr).narrow(1, k, nk).copy_(result);
                    }
  };
  blocks(0, row_blocks * col_blocks);
  // 0 returns the thread to MKL's global count.
  if (MKL_Set_Num_Threads_Local) MKL_Set_Num_Threads_Local(previous);
  return out;
}

at::Tensor muon_orthogonalize(const at::Tensor& update, MuonNsMethod method, at::ScalarType dtype,
                              int steps) {
  ZERO_INTERNAL_ASSERT(update.dim() == 2 && update.scalar_type() == at::kFloat &&
                           update.is_contiguous(),
                       "Newton-Schulz of a ", update.sizes(), " ", update.scalar_type(), " tensor");
  ZERO_INTERNAL_ASSERT(dtype == at::kFloat || dtype == at::kBFloat16, "Newton-Schulz in ", dtype);
  const bool tall = update.size(0) > update.size(1);
  const double norm = exact_norm(update);
  at::Tensor x = (tall ? update.t() : update).div(norm + kNormEps).to(dtype).contiguous();
  const bool wide = x.size(1) > x.size(0);
  x = method == MuonNsMethod::kGram && wide ? gram_iteration(x, steps)
                                            : standard_iteration(x, steps);
  x = x.to(at::kFloat);
  return (tall ? x.t() : x).contiguous();
}

double muon_scale(int64_t rows, int64_t cols) {
  return rows > cols ? std::sqrt(static_cast<double>(rows) / static_cast<double>(cols)) : 1.0;
}

void muon_momentum(const at::Tensor& grad, const at::Tensor& momentum, const at::Tensor& update,
                   double grad_multiplier, double beta) {
  check_operands({&grad, &momentum, &update}, momentum.numel(), "Muon's momentum");
  ZERO_INTERNAL_ASSERT(momentum.scalar_type() == at::kFloat && update.scalar_type() == at::kFloat,
                       "Muon's momentum and update must be fp32");
  const float multiplier = static_cast<float>(grad_multiplier);
  const float b = static_cast<float>(beta);
  const float one_minus_b = static_cast<float>(1.0 - beta);
  float* m = momentum.data_ptr<float>();
  float* u = update.data_ptr<float>();
  dispatch_types(grad, at::Tensor(), [&](auto* g, void*) {
    parallel_ranges(momentum, kGrainSize, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float gi = static_cast<float>(g[i]) * multiplier;
        // torch.lerp's two forms (weight < 0.5 from the start, else from the end), so that
        // the reference's lerp_ gives the same bits.
        const float mi = one_minus_b < 0.5f ? m[i] + one_minus_b * (gi - m[i])
                                            : gi - (gi - m[i]) * (1.0f - one_minus_b);
        m[i] = mi;
        u[i] = b < 0.5f ? gi + b * (mi - gi) : mi - (mi - gi) * (1.0f - b);
      }
    });
  });
}

void muon_apply(const at::Tensor& master, const at::Tensor& orthogonal,
                const at::Tensor& param_out, double decay, double step) {
  check_operands({&master, &orthogonal, &param_out}, master.numel(), "Muon's update");
  const float d = static_cast<float>(decay);
  const float s = static_cast<float>(step);
  float* w = master.data_ptr<float>();
  const float* o = orthogonal.data_ptr<float>();
  dispatch_types(orthogonal, param_out, [&](auto*, auto* out) {
    parallel_ranges(master, kGrainSize, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        w[i] = w[i] * d - s * o[i];
        if constexpr (!std::is_same_v<std::remove_pointer_t<decltype(out)>, void>) {
          out[i] = static_cast<std::remove_pointer_t<decltype(out)>>(w[i]);
        }
      }
    });
  });
}

MuonExchangePlan plan_muon_exchange(std::vector<MuonHolding> holdings,
                                    const std::vector<MuonMatrix>& matrices, int world, int rank,
                                    MuonExchangeMode mode, int64_t batch_elements_cap) {
  ZERO_INTERNAL_ASSERT(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " of ", world);
  std::sort(holdings.begin(), holdings.end(), [](const MuonHolding& x, const MuonHolding& y) {
    return std::tie(x.param, x.rank, x.begin) < std::tie(y.param, y.rank, y.begin);
  });
  std::map<int, std::vector<MuonHolding>> by_param;
  for (const MuonHolding& h : holdings) {
    ZERO_INTERNAL_ASSERT(h.param >= 0 && static_cast<size_t>(h.param) < matrices.size() &&
                             matrices[static_cast<size_t>(h.param)].muon() && h.rank >= 0 &&
                             h.rank < world && 0 <= h.begin && h.begin < h.end,
                         "Muon holding of parameter ", h.param, " [", h.begin, ", ", h.end,
                         ") by rank ", h.rank);
    by_param[h.param].push_back(h);
  }
  MuonExchangePlan plan;
  plan.work.assign(static_cast<size_t>(world), 0.0);
  std::map<int, std::vector<int>> computers;  // per parameter, ascending ranks
  // Matrices held whole by several ranks (every rank at stage 0) are orthogonalised by each:
  // stage 0 steps every element on every rank. The rest are placed below.
  std::vector<int> placed;
  for (const auto& [param, held] : by_param) {
    const MuonMatrix& m = matrices[static_cast<size_t>(param)];
    const int64_t numel = m.rows * m.cols;
    std::vector<int> whole;
    int64_t total = 0;
    for (const MuonHolding& h : held) {
      if (h.begin == 0 && h.end == numel) whole.push_back(h.rank);
      total += h.end - h.begin;
    }
    ZERO_INTERNAL_ASSERT(whole.empty() || whole.size() == held.size(), "parameter ", param,
                         " is held whole by some ranks and in parts by others");
    ZERO_INTERNAL_ASSERT(!whole.empty() || total == numel, "parameter ", param, " is held as ",
                         total, " of its ", numel, " elements");
    if (whole.empty()) ++plan.split_matrices;
    if (whole.size() > 1) {
      for (int r : whole) plan.work[static_cast<size_t>(r)] += ns_work(m);
      computers[param] = whole;
      if (std::find(whole.begin(), whole.end(), rank) != whole.end()) plan.local.push_back(param);
    } else {
      placed.push_back(param);
    }
  }
  // The largest first (longest-processing-time order), each to the rank that would finish it
  // first: its NS5 work so far, plus the matrix's, plus what moving the pieces it lacks there
  // and its results back costs (kMovedElementWork per element). Every-holder mode instead
  // leaves a matrix held whole where it is and has each holder of a split one compute it.
  std::stable_sort(placed.begin(), placed.end(), [&](int x, int y) {
    return ns_work(matrices[static_cast<size_t>(x)]) > ns_work(matrices[static_cast<size_t>(y)]);
  });
  for (int param : placed) {
    const MuonMatrix& m = matrices[static_cast<size_t>(param)];
    const int64_t numel = m.rows * m.cols;
    std::vector<int64_t> held(static_cast<size_t>(world), 0);
    for (const MuonHolding& h : by_param[param]) {
      held[static_cast<size_t>(h.rank)] += h.end - h.begin;
    }
    std::vector<int> chosen;
    if (mode == MuonExchangeMode::kEveryHolder) {
      for (int r = 0; r < world; ++r) {
        if (held[static_cast<size_t>(r)] > 0) chosen.push_back(r);
      }
    } else {
      int best = -1;
      double best_finish = 0;
      for (int r = 0; r < world; ++r) {
        const int64_t lacking = numel - held[static_cast<size_t>(r)];
        const double finish = plan.work[static_cast<size_t>(r)] + ns_work(m) +
                              kMovedElementWork * 2.0 * static_cast<double>(lacking);
        const bool holds_more =
            best >= 0 && held[static_cast<size_t>(r)] > held[static_cast<size_t>(best)];
        if (best < 0 || finish < best_finish || (finish == best_finish && holds_more)) {
          best = r;
          best_finish = finish;
        }
      }
      chosen.push_back(best);
    }
    for (int r : chosen) plan.work[static_cast<size_t>(r)] += ns_work(m);
    computers[param] = chosen;
  }
  // Batches in the placement order (largest first, spread over the ranks, so that each batch
  // gives every rank a share of the work between its two exchanges), a new one when the
  // matrices moved would pass batch_elements_cap (a larger matrix alone), so that the
  // exchange's buffers stay bounded whatever the model. Within a batch the transfers are in
  // the canonical order (parameter, holder rank, begin), on both sides.
  const auto peers = static_cast<size_t>(world);
  const auto moves = [&](int param) {
    const std::vector<int>& by = computers[param];
    const std::vector<MuonHolding>& held = by_param[param];
    return !(by.size() == held.size() &&
             std::all_of(held.begin(), held.end(), [&](const MuonHolding& h) {
               return h.begin == 0 && std::find(by.begin(), by.end(), h.rank) != by.end();
             }));
  };
  std::vector<std::vector<int>> batch_params;
  int64_t moved_in_batch = 0;
  for (int param : placed) {
    const MuonMatrix& m = matrices[static_cast<size_t>(param)];
    const int64_t numel = moves(param) ? m.rows * m.cols : 0;
    if (batch_params.empty() || (numel > 0 && moved_in_batch > 0 &&
                                 moved_in_batch + numel > batch_elements_cap)) {
      batch_params.emplace_back();
      moved_in_batch = 0;
    }
    batch_params.back().push_back(param);
    moved_in_batch += numel;
  }
  for (std::vector<int>& params : batch_params) {
    std::sort(params.begin(), params.end());
    MuonExchangeBatch batch;
    batch.send_pieces.assign(peers, {});
    batch.receive_pieces.assign(peers, {});
    batch.send_results.assign(peers, {});
    batch.receive_results.assign(peers, {});
    std::vector<int64_t> piece_counts(peers * peers, 0), result_counts(peers * peers, 0);
    for (int param : params) {
      const std::vector<int>& by = computers[param];
      if (std::find(by.begin(), by.end(), rank) != by.end()) batch.computed.push_back(param);
      if (!moves(param)) continue;
      for (const MuonHolding& h : by_param[param]) {
        const MuonTransfer t{param, h.begin, h.end, h.offset};
        const int64_t n = h.end - h.begin;
        const auto holder = static_cast<size_t>(h.rank);
        for (int c : by) {
          if (c == h.rank) continue;
          piece_counts[holder * peers + static_cast<size_t>(c)] += n;
          if (h.rank == rank) batch.send_pieces[static_cast<size_t>(c)].push_back(t);
          if (c == rank) batch.receive_pieces[holder].push_back(t);
        }
        if (std::find(by.begin(), by.end(), h.rank) != by.end()) continue;
        const int owner = by.front();
        result_counts[static_cast<size_t>(owner) * peers + holder] += n;
        if (owner == rank) batch.send_results[holder].push_back(t);
        if (h.rank == rank) batch.receive_results[static_cast<size_t>(owner)].push_back(t);
      }
    }
    batch.piece_chunk = *std::max_element(piece_counts.begin(), piece_counts.end());
    batch.result_chunk = *std::max_element(result_counts.begin(), result_counts.end());
    for (size_t peer = 0; peer < peers; ++peer) {
      plan.moved_elements += piece_counts[static_cast<size_t>(rank) * peers + peer] +
                             result_counts[static_cast<size_t>(rank) * peers + peer];
    }
    plan.batches.push_back(std::move(batch));
  }
  for (const auto& [param, by] : computers) {
    if (std::find(by.begin(), by.end(), rank) != by.end()) plan.computed.push_back(param);
  }
  return plan;
}

}  // namespace zero
