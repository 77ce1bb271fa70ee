// Note [Block quantization] in block_quantization.h.
#include "quant/block_quantization.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "zero/error.h"

namespace zero {
namespace {

// [R, n] whatever the caller passed ([n] is one row).
at::Tensor as_rows(const at::Tensor& t) { return t.dim() == 1 ? t.unsqueeze(0) : t; }

// A call's rows and records as [R, n] and [R, record_bytes(n)], and its block arithmetic.
struct RowsAndRecords {
  at::Tensor rows, records;
  int64_t r, n;
  int64_t nb;          // blocks per row
  int64_t padded;      // nb * block
  int64_t used;        // data bytes holding the n values
  int64_t data_bytes;  // used, and zeros up to a multiple of 4

  RowsAndRecords(const at::Tensor& rows_in, const at::Tensor& records_in,
                 const BlockQuantization& format, const char* what)
      : rows(as_rows(rows_in)), records(as_rows(records_in)), r(rows.size(0)), n(rows.size(1)),
        nb(format.blocks(n)), padded(nb * format.block), used((n * format.bits + 7) / 8),
        data_bytes(format.data_bytes(n)) {
    ZERO_INTERNAL_ASSERT(records.scalar_type() == at::kByte && records.is_contiguous() &&
                             records.size(0) == r && records.size(1) == format.record_bytes(n),
                         what, ": ", r, " rows of ", n, " and records ", records.sizes());
  }
  at::Tensor scales() const { return records.narrow(1, data_bytes, 4 * nb).view(at::kFloat); }
};

}  // namespace

std::string BlockQuantization::describe() const {
  return "int" + std::to_string(bits) + ", blocks of " + std::to_string(block);
}

void BlockQuantization::validate() const {
  ZERO_CHECK(bits == 8 || bits == 4, "block quantization: bits must be 8 or 4, got ", bits);
  ZERO_CHECK(block > 0 && block % 8 == 0,
             "block quantization: the block must be a positive multiple of 8 values, got ", block);
}

void quantize_rows(const at::Tensor& rows_in, const at::Tensor& records_in,
                   const BlockQuantization& format) {
  const RowsAndRecords c(rows_in, records_in, format, "quantize_rows");
  // fp32 blocks, the tail of the last one zero.
  at::Tensor x = at::empty({c.r, c.padded}, c.rows.options().dtype(at::kFloat));
  x.narrow(1, 0, c.n).copy_(c.rows);
  if (c.padded > c.n) x.narrow(1, c.n, c.padded - c.n).zero_();
  const at::Tensor blocks = x.view({c.r * c.nb, format.block});
  // max |x| per block, fused (the infinity norm reads each value once).
  const at::Tensor amax = at::linalg_vector_norm(blocks, std::numeric_limits<double>::infinity(),
                                                 at::IntArrayRef{1}, /*keepdim=*/true);
  const at::Tensor scale = amax / static_cast<double>(format.q_max());
  // A block of zeros has scale 0: its values divide by 1 instead (and stay 0).
  const at::Tensor divisor = at::where(scale > 0, scale, at::ones_like(scale));
  // A NaN (of a block with a NaN or an infinity) becomes 0 before the integer conversion,
  // which is undefined for it; the block's non-finite scale keeps it visible on the way back.
  at::Tensor q =
      blocks.div(divisor).round_().clamp_(-format.q_max(), format.q_max()).nan_to_num_(0);
  at::Tensor packed;  // [r, padded * bits / 8]
  if (format.bits == 8) {
    packed = q.to(at::kChar).view({c.r, c.padded}).view(at::kByte);
  } else {
    const at::Tensor nibbles = q.add_(8).to(at::kByte).view({c.r, c.padded / 2, 2});
    const at::Tensor low = nibbles.select(2, 0), high = nibbles.select(2, 1);
    packed = at::bitwise_or(low, at::bitwise_left_shift(high, 4));
  }
  c.records.narrow(1, 0, c.used).copy_(packed.narrow(1, 0, c.used));
  if (c.data_bytes > c.used) c.records.narrow(1, c.used, c.data_bytes - c.used).zero_();
  c.scales().copy_(scale.view({c.r, c.nb}));
}

void dequantize_rows(const at::Tensor& records_in, const at::Tensor& rows_in,
                     const BlockQuantization& format) {
  const RowsAndRecords c(rows_in, records_in, format, "dequantize_rows");
  // The n integers as fp32 in whole blocks (the padding is zero, and cut off below).
  at::Tensor values = at::empty({c.r, c.padded}, c.records.options().dtype(at::kFloat));
  const at::Tensor data = c.records.narrow(1, 0, c.used);
  if (format.bits == 8) {
    values.narrow(1, 0, c.n).copy_(data.view(at::kChar));
  } else {
    const at::Tensor low = at::bitwise_and(data, 15);
    const at::Tensor high = at::bitwise_right_shift(data, 4);
    values.narrow(1, 0, c.n).copy_(at::stack({low, high}, 2).view({c.r, 2 * c.used}).narrow(1, 0, c.n));
    values.narrow(1, 0, c.n).sub_(8);
  }
  if (c.padded > c.n) values.narrow(1, c.n, c.padded - c.n).zero_();
  values.view({c.r, c.nb, format.block}).mul_(c.scales().unsqueeze(2));
  c.rows.copy_(values.narrow(1, 0, c.n));
}

}  // namespace zero
