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
  const at::Tensor rows = as_rows(rows_in);
  const at::Tensor records = as_rows(records_in);
  const int64_t r = rows.size(0), n = rows.size(1);
  const int64_t nb = format.blocks(n), padded = nb * format.block;
  const int64_t data_bytes = format.data_bytes(n);
  ZERO_INTERNAL_ASSERT(records.scalar_type() == at::kByte && records.is_contiguous() &&
                           records.size(0) == r && records.size(1) == format.record_bytes(n),
                       "quantize_rows: ", r, " rows of ", n, " into records ", records.sizes());
  // fp32 blocks, the tail of the last one zero.
  at::Tensor x = at::empty({r, padded}, rows.options().dtype(at::kFloat));
  x.narrow(1, 0, n).copy_(rows);
  if (padded > n) x.narrow(1, n, padded - n).zero_();
  const at::Tensor blocks = x.view({r * nb, format.block});
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
    packed = q.to(at::kChar).view({r, padded}).view(at::kByte);
  } else {
    const at::Tensor nibbles = q.add_(8).to(at::kByte).view({r, padded / 2, 2});
    const at::Tensor low = nibbles.select(2, 0), high = nibbles.select(2, 1);
    packed = at::bitwise_or(low, at::bitwise_left_shift(high, 4));
  }
  const int64_t used = (n * format.bits + 7) / 8;  // bytes holding the n values
  records.narrow(1, 0, used).copy_(packed.narrow(1, 0, used));
  if (data_bytes > used) records.narrow(1, used, data_bytes - used).zero_();
  records.narrow(1, data_bytes, 4 * nb).view(at::kFloat).copy_(scale.view({r, nb}));
}

void dequantize_rows(const at::Tensor& records_in, const at::Tensor& rows_in,
                     const BlockQuantization& format) {
  const at::Tensor records = as_rows(records_in);
  const at::Tensor rows = as_rows(rows_in);
  const int64_t r = rows.size(0), n = rows.size(1);
  const int64_t nb = format.blocks(n), padded = nb * format.block;
  const int64_t data_bytes = format.data_bytes(n);
  ZERO_INTERNAL_ASSERT(records.scalar_type() == at::kByte && records.is_contiguous() &&
                           records.size(0) == r && records.size(1) == format.record_bytes(n),
                       "dequantize_rows: records ", records.sizes(), " into ", r, " rows of ", n);
  // The values, padded to whole blocks (what the padding decodes to is cut off below).
  const int64_t used = (n * format.bits + 7) / 8;
  at::Tensor data = at::zeros({r, padded * format.bits / 8}, records.options());
  data.narrow(1, 0, used).copy_(records.narrow(1, 0, used));
  at::Tensor values;  // [r, padded] fp32
  if (format.bits == 8) {
    values = data.view(at::kChar).to(at::kFloat);
  } else {
    const at::Tensor low = at::bitwise_and(data, 15);
    const at::Tensor high = at::bitwise_right_shift(data, 4);
    values = at::stack({low, high}, 2).view({r, padded}).to(at::kFloat).sub_(8);
  }
  const at::Tensor scales = records.narrow(1, data_bytes, 4 * nb).view(at::kFloat);
  values = values.view({r, nb, format.block}).mul_(scales.unsqueeze(2)).view({r, padded});
  rows.copy_(values.narrow(1, 0, n));
}

}  // namespace zero
