// Muon (Keller Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024)
// as DeepSpeed's MuonWithAuxAdam defines it, over the flat shard space. Internal: not part of
// the installed API.
//
// Note [Muon under partitioning]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Per hidden matrix W (rows x cols) with gradient g (times the step's multiplier), momentum
// beta, rate lr, decay wd:
//   m = lerp(m, g, 1 - beta);  u = lerp(g, m, beta)            (Nesterov, element-wise)
//   O = NS5(u)  (the whole matrix: the quintic Newton-Schulz iteration of optim/muon.cpp)
//   W = W (1 - lr wd) - lr sqrt(max(1, rows / cols)) O
// and every other parameter (embeddings, the head, norms, biases: muon_matrix_of's rule) takes
// AdamW's update from the auxiliary rate, betas and eps.
//
// The flat partition cuts a matrix wherever a shard boundary falls inside it: at stages 1-2
// at most N - 1 matrices in all, at stage 3 up to N - 1 per unit (every matrix of a unit once
// N exceeds its matrices). The momentum and u are element-wise, so each rank keeps them for
// the elements it holds, but NS5 needs the whole u. For a matrix of n elements held in pieces
// by H ranks, two ways to bring u together:
//   - every holder gathers the whole u and orthogonalises it itself ("every-holder": one
//     exchange moving (H - 1) n elements in all; NS5 H times over);
//   - one owner receives the pieces, orthogonalises once and sends each holder its piece of O
//     back ("owner": two exchanges moving 2 (H - 1) / H n; NS5 once).
// At H = 2 both move n; the owner runs half the NS5 work. At larger H the owner moves about 2n
// against (H - 1) n. zero uses the owner, and lets it place whole matrices too: at stages 1-2
// one rank's shard often holds every matrix (GPT-2 at 2 ranks: the embedding fills the other
// shard), and NS5 on one core per rank is the step's largest cost on CPUs. So every matrix
// held by one rank, whole or in pieces, goes to the rank that would finish it first (the
// largest first: its NS5 work so far plus the matrix's, plus 64 multiply-adds per element it
// would have to receive and send back), by plan_muon_exchange, a pure function of every
// rank's holdings (gathered once). Matrices held whole by several ranks (stage 0, where every
// rank steps everything) are orthogonalised by each. The exchanges run in batches of at most
// 2^22 moved elements (a larger matrix alone), in the placement order so that each batch
// gives every rank a share of the work, through two buffers reused by every batch and both
// directions (the communicator may hold a collective's tensors until its next one).
// Measured on gpt2-mini (bench/muon_exchange.sh, docs/benchmarks.md "Muon's exchange"), owner
// against every-holder: stage 2 on 2 ranks 486 against 707 ms per optimizer step (+63 MiB for
// the buffers), stage 3 on 2 ranks 387 against 445 ms (the same 37 MiB), stage 3 on 4 ranks
// 455 against 701 ms and 37 against 51 MiB, the parameters bitwise equal.
//
// The result is the same bits at every stage and world size for the same u: NS5 runs on the
// whole matrix by one function whose GEMMs are cut into fixed blocks computed one after
// another on one thread (fixed_order_addmm), and whose norm is exact (common/exact_squares.h);
// MKL's own threading splits a GEMM's inner dimension by the thread count (measured: X X^T of
// a 16 x 65536 matrix differs between 1 and 2 threads), which would make the update depend on
// how many ranks share the machine. The price: NS5 uses one core per rank (owners spread the
// matrices over the ranks; docs/benchmarks.md "Muon's exchange" measures it).
//
// The step runs once per optimizer step, after accumulation, however many micro-batches there
// were (DeepSpeed's ZeRO-3 ran it per micro-batch: microsoft/DeepSpeed#8443).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zero/config.h"

namespace zero {

/// A parameter's part in Muon: a hidden matrix of rows x cols (its shape[0] by the product of
/// the rest, as DeepSpeed views a convolution's filters) that Muon updates, or, rows == 0, a
/// parameter the auxiliary AdamW updates.
struct MuonMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  bool muon() const { return rows > 0; }
};

/// The rule (DeepSpeed's set_optimizer_flags, widened to GPT-2's names): Muon for a parameter
/// of two or more non-empty dimensions whose name contains none of "embed", "lm_head", "wte",
/// "wpe" (case-insensitive); AdamW for the rest.
MuonMatrix muon_matrix_of(const std::string& name, const std::vector<int64_t>& shape);

/// What zero::initialize prints: which parameters each half updates, with layer numbers
/// folded ("h.*.attn.c_attn.weight (x4)").
std::string muon_assignment_notice(const std::vector<std::string>& names,
                                   const std::vector<MuonMatrix>& matrices);

/// NS5 of a rows x cols fp32 matrix (contiguous), in `dtype` (fp32 or bf16), by `method`;
/// returns a fresh fp32 rows x cols matrix (not yet scaled). The same bits for any thread
/// count and memory placement.
at::Tensor muon_orthogonalize(const at::Tensor& update, MuonNsMethod method, at::ScalarType dtype,
                              int steps = 5);

/// out = beta c + alpha a b (c undefined: alpha a b), in row and column blocks of fixed size,
/// each one single-threaded GEMM, one after another on the calling thread: the same bits for
/// any thread count.
at::Tensor fixed_order_addmm(const at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                             double beta, double alpha);

/// sqrt(max(1, rows / cols)): the update's scale.
double muon_scale(int64_t rows, int64_t cols);

/// The element-wise first pass on contiguous tensors of one length: `momentum` (fp32) updated
/// from `grad` (fp32/bf16/fp16) times grad_multiplier, and the Nesterov update written to
/// `update` (fp32; it may be `grad` itself).
void muon_momentum(const at::Tensor& grad, const at::Tensor& momentum, const at::Tensor& update,
                   double grad_multiplier, double beta);

/// master = master decay - step orthogonal (decay = 1 - lr wd, step = lr scale); `param_out`
/// (undefined, or bf16/fp16) the rounded master.
void muon_apply(const at::Tensor& master, const at::Tensor& orthogonal,
                const at::Tensor& param_out, double decay, double step);

// ---- the exchange (Note [Muon under partitioning]) -----------------------------------------

/// Elements [begin, end) of parameter `param` held by `rank` at `offset` of its shard space.
struct MuonHolding {
  int rank = 0;
  int param = 0;
  int64_t begin = 0, end = 0, offset = 0;
};

/// One piece moved between two ranks: elements [begin, end) of `param`, at `offset` of the
/// holder's shard space (the sender's for pieces of u, the receiver's for pieces of O).
struct MuonTransfer {
  int param = 0;
  int64_t begin = 0, end = 0, offset = 0;
};

enum class MuonExchangeMode { kOwner, kEveryHolder };

/// One all_to_all round trip of the step's exchange: the pieces of u its matrices' holders
/// send to the ranks that orthogonalise them, and the pieces of O sent back. Chunks of an
/// all_to_all hold the transfers to or from one peer in list order, packed from the chunk's
/// start.
struct MuonExchangeBatch {
  std::vector<int> computed;  // the batch's matrices this rank orthogonalises (some may be
                              // held whole here and move nothing), ascending
  std::vector<std::vector<MuonTransfer>> send_pieces, receive_pieces;    // per peer
  std::vector<std::vector<MuonTransfer>> send_results, receive_results;  // per peer
  int64_t piece_chunk = 0, result_chunk = 0;  // elements per peer (0: no all_to_all)
};

/// One rank's part in the step's exchange (the same batches, in the same order, on every rank).
struct MuonExchangePlan {
  std::vector<int> local;      // matrices several ranks hold whole (stage 0): each computes them
  std::vector<MuonExchangeBatch> batches;
  std::vector<int> computed;   // every matrix this rank orthogonalises, ascending
  std::vector<double> work;    // per rank: the NS5 multiply-adds it runs
  int split_matrices = 0;      // matrices no rank holds whole
  int64_t moved_elements = 0;  // over every exchange, sent by this rank
};

/// What the exchange has done on one rank, for benchmarks and the plan's tests.
struct MuonExchangeStats {
  int64_t steps = 0;
  int64_t matrices_orthogonalized = 0;  // NS5 runs on this rank
  int64_t elements_sent = 0;            // over both all_to_alls, padding excluded
  int64_t exchange_elements = 0;        // all_to_all buffers' elements (padding included)
  int split_matrices = 0;
  double ns_seconds = 0, exchange_seconds = 0;
};

/// The plan of rank `rank` among `world`, from every rank's holdings of the Muon matrices
/// (any order; the same list on every rank gives every rank a consistent plan).
/// The most matrix elements one exchange batch moves (unless one matrix has more): 16 MiB of
/// fp32, so each of the exchange's buffers holds at most N x that.
constexpr int64_t kMuonExchangeBatchElements = int64_t{1} << 22;

MuonExchangePlan plan_muon_exchange(std::vector<MuonHolding> holdings,
                                    const std::vector<MuonMatrix>& matrices, int world, int rank,
                                    MuonExchangeMode mode,
                                    int64_t batch_elements_cap = kMuonExchangeBatchElements);

}  // namespace zero
