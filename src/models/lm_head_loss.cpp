// Note [Fused LM-head cross-entropy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// GPT-2's logits [N, V] (V = 50257) are by far its largest activation: 103 MB for 512 tokens
// in fp32. Computed whole, the head's GEMM streams them to memory, log_softmax reads and
// writes them again, and the backward reads and writes them twice more; on a CPU with 2 MB
// of cache per core that traffic, not arithmetic, sets the speed of a small model's step.
// Here the rows are taken a block at a time, sized so a block's logits stay in cache:
//   logits = h_b W^T;  loss += sum(lse - logits[target]);  P = softmax(logits) - onehot;
//   dh_b = P W / N;  dW += P^T h_b / N
// so the gradients are computed in the forward (when grad mode is on and an input requires
// grad) and the backward only scales them by the incoming gradient; the weight is not read
// again. Same arithmetic as logits -> cross_entropy -> backward, summed in another order:
// equal to about 1e-6 relative (tests/test_gpt2.cpp). Measured on a 2-core AMD EPYC (AVX2),
// one core: gpt2-tiny's head and loss 735 -> 476 ms per 512 tokens, gpt2-mini's 1302 ->
// 1145 ms (Python prototype; docs/benchmarks.md has the C++ numbers).
#include "models/lm_head_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "hardware/half_gemm.h"
#include "zero/error.h"

namespace zero::gpt2 {
namespace {

// Logits per block on a CPU: 8M elements (32 MB in fp32): 166 rows at V = 50257. The
// prototype's best row counts were 128 (C = 128) and 256 (C = 384).
constexpr int64_t kBlockElements = int64_t{1} << 24;
// On a GPU the cache argument does not hold and every block is a few kernel launches and a
// GEMM too thin for the tensor cores: blocks of 128M elements (2670 rows at V = 50257; 256 MB
// of bf16 logits and 512 MB for their fp32 log-softmax), a few per GPT-2 micro-batch.
constexpr int64_t kDeviceBlockElements = int64_t{1} << 27;
// The weight gradient's 16-bit products are added to its fp32 sum in slices of this many
// elements (1 MiB of fp32 temporary).
constexpr int64_t kAddElements = int64_t{1} << 18;

struct LmHeadCrossEntropy : torch::autograd::Function<LmHeadCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& targets,
                            int64_t block_rows) {
    const int64_t n = hidden.size(0);
    const int64_t vocab = weight.size(0);
    const bool need_hidden = ctx != nullptr && hidden.requires_grad();
    const bool need_weight = ctx != nullptr && weight.requires_grad();
    const bool gradients = need_hidden || need_weight;
    const int64_t block_elements = hidden.is_cpu() ? kBlockElements : kDeviceBlockElements;
    const int64_t rows =
        std::max<int64_t>(1, std::min(n, block_rows > 0 ? block_rows : block_elements / vocab));
    // Note [fp16 GEMMs on CPUs without fp16 arithmetic]: 16-bit inputs that compute in fp32 on
    // this CPU (fp16 always, bf16 on its fp32 path) run the whole loop in fp32 on fp32 copies,
    // its results rounded once: rounding every block's logits and probabilities to 16 bits only
    // to widen them again took a fifth of gpt2-tiny's fp16 step in conversions. Every other
    // case is one whose GEMMs half_gemm would leave to ATen, so the loop calls ATen itself.
    const bool widened = half_gemm::computes_in_fp32(hidden);
    ZERO_INTERNAL_ASSERT(widened || !half_gemm::via_fp32(hidden),
                         "lm_head_cross_entropy: GEMMs via fp32 without the fp32 loop");
    const at::Tensor inputs = widened ? hidden.to(at::kFloat) : hidden;
    const auto compute = inputs.options();
    const auto fp32 = compute.dtype(at::kFloat);
    at::Tensor block = at::empty({rows, vocab}, compute);
    // Converted once for every block (the same note).
    const at::Tensor weight_operand = widened ? weight.to(at::kFloat) : weight;
    at::Tensor grad_hidden = need_hidden ? at::empty_like(inputs) : at::Tensor();
    // Accumulated over blocks in fp32 whatever the compute dtype; in 16 bits each block's
    // product is computed into `product` and added a slice at a time (see there).
    at::Tensor grad_weight = need_weight ? at::zeros({vocab, weight.size(1)}, fp32) : at::Tensor();
    at::Tensor product = need_weight && compute.dtype() != fp32.dtype()
                             ? at::empty({vocab, weight.size(1)}, compute)
                             : at::Tensor();
    const double scale = 1.0 / static_cast<double>(n);
    // Summed in fp64 on the hidden states' device, block by block in order: no host read per
    // block on a GPU, the same bits as a host double on the CPU.
    at::Tensor loss_sum = at::zeros({}, compute.dtype(at::kDouble));
    for (int64_t begin = 0; begin < n; begin += rows) {
      const int64_t r = std::min(rows, n - begin);
      const at::Tensor h = inputs.narrow(0, begin, r);
      const at::Tensor t = targets.narrow(0, begin, r);
      at::Tensor logits = block.narrow(0, 0, r);
      at::mm_out(logits, h, weight_operand.t());
      // log-softmax in fp32, in place when the compute dtype is fp32.
      at::Tensor log_p = logits.scalar_type() == at::kFloat ? logits : logits.to(at::kFloat);
      at::_log_softmax_out(log_p, log_p, 1, false);
      const at::Tensor picked = log_p.gather(1, t.unsqueeze(1));
      loss_sum.sub_(picked.sum(at::kDouble));
      if (!gradients) continue;
      at::Tensor p = log_p.exp_();  // softmax
      const at::Tensor row_index = at::arange(r, t.options());
      p.index_put_({row_index, t}, picked.squeeze(1).exp() - 1.0);
      const at::Tensor p_compute = p.scalar_type() == compute.dtype().toScalarType()
                                       ? p
                                       : p.to(compute.dtype().toScalarType());
      if (need_hidden) {
        at::Tensor out = grad_hidden.narrow(0, begin, r);
        at::addmm_out(out, out, p_compute, weight_operand, /*beta=*/0, /*alpha=*/scale);
      }
      if (need_weight) {
        if (grad_weight.scalar_type() == p_compute.scalar_type()) {
          grad_weight.addmm_(p_compute.t(), h, /*beta=*/1, /*alpha=*/scale);
        } else {
          // A mixed-dtype add_ first widens its whole 16-bit operand to fp32: a V x C fp32
          // temporary (63 MB at Llama 3's vocabulary and C = 128, 2 GB at C = 4096) that the
          // memory plan does not hold. Slices of kAddElements keep it small; the sums are the
          // same (each element widened exactly, then added once).
          at::mm_out(product, p_compute.t(), h);
          const int64_t slice = std::max<int64_t>(1, kAddElements / product.size(1));
          for (int64_t row = 0; row < vocab; row += slice) {
            const int64_t count = std::min(slice, vocab - row);
            grad_weight.narrow(0, row, count).add_(product.narrow(0, row, count), scale);
          }
        }
      }
    }
    if (widened && need_hidden) grad_hidden = grad_hidden.to(hidden.scalar_type());
    if (ctx != nullptr) {
      ctx->saved_data["grad_hidden"] = grad_hidden;
      ctx->saved_data["grad_weight"] = need_weight ? grad_weight.to(weight.scalar_type())
                                                   : at::Tensor();
    }
    return loss_sum.mul_(scale).to(at::kFloat);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const double g = grads[0].item<double>();
    auto scaled = [g](const at::Tensor& t) {
      if (!t.defined()) return at::Tensor();
      return g == 1.0 ? t : t * g;
    };
    // Taken out of the context: saved_data lives as long as the graph, which is until the
    // whole backward has finished, and grad_weight is vocab x C (206 MB at gpt2-medium in
    // fp32). Freed here, it is gone before the embedding's backward allocates as much again.
    auto take = [ctx](const char* name) {
      at::Tensor t = ctx->saved_data.at(name).toTensor();
      ctx->saved_data.erase(name);
      return t;
    };
    return {scaled(take("grad_hidden")), scaled(take("grad_weight")), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor lm_head_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t block_rows) {
  ZERO_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
             "lm_head_cross_entropy: hidden ", hidden.sizes(), " and weight ", weight.sizes(),
             " must be [N, C] and [V, C]");
  ZERO_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0) &&
                 targets.scalar_type() == at::kLong,
             "lm_head_cross_entropy: targets must be int64 [", hidden.size(0), "], got ",
             targets.scalar_type(), " ", targets.sizes());
  ZERO_CHECK(hidden.size(0) > 0, "lm_head_cross_entropy: no rows");
  ZERO_CHECK(hidden.scalar_type() == weight.scalar_type(), "lm_head_cross_entropy: hidden is ",
             hidden.scalar_type(), " but weight is ", weight.scalar_type());
  if (!at::GradMode::is_enabled() || (!hidden.requires_grad() && !weight.requires_grad())) {
    at::NoGradGuard no_grad;
    return LmHeadCrossEntropy::forward(nullptr, hidden.contiguous(), weight, targets, block_rows);
  }
  return LmHeadCrossEntropy::apply(hidden.contiguous(), weight, targets.contiguous(), block_rows);
}

LmHeadBytes lm_head_cross_entropy_bytes(int64_t rows, int64_t width, int64_t vocab,
                                        int64_t element_bytes, bool widened) {
  const int64_t N = rows, C = width, V = vocab, e = element_bytes;
  const int64_t CNe = C * N * e;
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(N, kBlockElements / V));
  // The loop: the fp32 accumulator and a block of logits; in 16 bits also the block's fp32
  // log-softmax, its compute-dtype copy and the weight gradient GEMM's V x C product (added to
  // the fp32 sum in slices), and one more block in 16 bits for the scratch of ATen's 16-bit
  // GEMMs (oneDNN's), which the host allocator does not see: measured 10-28 MiB of resident
  // set beyond the tracked peak at a 32 MiB block, for gpt2-tiny and a Llama with Llama 3's
  // vocabulary. Widened, the loop is fp32's on fp32 copies of the hidden states and the
  // weight, and its fp32 gradients are rounded to 16 bits at the end. Kept: the gradients of
  // the hidden states and the weight.
  LmHeadBytes bytes;
  bytes.forward_peak =
      widened ? 9 * C * N + V * C * (8 + e) + block * V * 4
              : CNe + V * C * 4 + (e == 4 ? block * V * 4 : block * V * (3 * e + 4) + V * C * e);
  bytes.saved = V * C * e + CNe;
  return bytes;
}

}  // namespace zero::gpt2
