// Note [Block quantization] (src/quant/block_quantization.h): the error bound, the record
// layout, zeros and padding, 16-bit inputs, and rows kept apart, over random shapes; and the
// two implementations (ATen, and the loops at every SIMD level this CPU runs) byte for byte.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/block_quantization.h"
#include "zero/error.h"

namespace zero::test {
namespace {

at::Tensor records_for(int64_t rows, int64_t n, const BlockQuantization& f) {
  return at::empty({rows, f.record_bytes(n)}, at::TensorOptions().dtype(at::kByte));
}

// max|x| of the block holding each value, [R, n].
at::Tensor block_max(const at::Tensor& x, const BlockQuantization& f) {
  const int64_t r = x.size(0), n = x.size(1), nb = f.blocks(n);
  at::Tensor padded = at::zeros({r, nb * f.block});
  padded.narrow(1, 0, n).copy_(x);
  at::Tensor m = padded.view({r, nb, f.block}).abs().amax(2, /*keepdim=*/true);
  return m.expand({r, nb, f.block}).reshape({r, nb * f.block}).narrow(1, 0, n);
}

TEST(BlockQuantization, ErrorWithinHalfAStepOverRandomShapes) {
  std::mt19937 rng(20261126);
  for (int bits : {8, 4}) {
    for (int64_t block : {8, 64, 256}) {
      const BlockQuantization f{bits, block};
      for (int trial = 0; trial < 20; ++trial) {
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 4);
        const int64_t n = 1 + static_cast<int64_t>(rng() % 1000);
        // Values over many magnitudes, so that blocks differ in scale.
        at::manual_seed(rng());
        at::Tensor x = at::randn({rows, n}) * at::exp(at::randn({rows, n}) * 3);
        at::Tensor records = records_for(rows, n, f);
        quantize_rows(x, records, f);
        at::Tensor back = at::empty({rows, n});
        dequantize_rows(records, back, f);
        const at::Tensor bound = block_max(x, f) / (2.0 * f.q_max()) * (1 + 1e-5) + 1e-30;
        const at::Tensor error = (back - x).abs();
        EXPECT_TRUE((error <= bound).all().item<bool>())
            << f.describe() << ", " << rows << " x " << n << ": worst error / bound "
            << (error / bound).max().item<float>();
      }
    }
  }
}

TEST(BlockQuantization, RecordLayoutByHand) {
  // One row of 10 values, 8-value blocks: two blocks, the second padded.
  const BlockQuantization f8{8, 8};
  at::Tensor x = at::tensor({1.f, -2.f, 0.5f, 0.f, 127.f, -127.f, 3.f, 0.25f, 4.f, -1.f});
  at::Tensor records = at::empty({f8.record_bytes(10)}, at::kByte);
  ASSERT_EQ(records.numel(), 12 + 8);  // 10 values, 2 bytes to a multiple of 4, 2 scales
  quantize_rows(x, records, f8);
  const auto* data = records.data_ptr<uint8_t>();
  EXPECT_EQ(static_cast<int8_t>(data[0]), 1);     // scale 1: the values themselves
  EXPECT_EQ(static_cast<int8_t>(data[1]), -2);
  EXPECT_EQ(static_cast<int8_t>(data[2]), 0);     // 0.5 rounds half to even
  EXPECT_EQ(static_cast<int8_t>(data[5]), -127);
  EXPECT_EQ(static_cast<int8_t>(data[8]), 127);   // second block: scale 4/127
  EXPECT_EQ(static_cast<int8_t>(data[9]), -32);   // -1 / (4/127) = -31.75
  for (int i = 10; i < 12; ++i) EXPECT_EQ(data[i], 0) << "padding at " << i;
  float scales[2];
  std::memcpy(scales, data + 12, sizeof(scales));
  EXPECT_FLOAT_EQ(scales[0], 1.f);
  EXPECT_FLOAT_EQ(scales[1], 4.f / 127);

  // 4 bits: two values per byte, the first in the low nibble, stored as q + 8.
  const BlockQuantization f4{4, 8};
  at::Tensor y = at::tensor({7.f, -7.f, 1.f, 0.f, 3.5f, -2.f, 0.f, 0.f});
  at::Tensor packed = at::empty({f4.record_bytes(8)}, at::kByte);
  ASSERT_EQ(packed.numel(), 4 + 4);
  quantize_rows(y, packed, f4);
  const auto* p = packed.data_ptr<uint8_t>();
  EXPECT_EQ(p[0], (1 << 4) | 15);     // 7 -> 15 (low), -7 -> 1 (high)
  EXPECT_EQ(p[1], (8 << 4) | 9);      // 1 -> 9, 0 -> 8
  EXPECT_EQ(p[2], (6 << 4) | 12);     // 3.5 -> 4 (half to even) -> 12, -2 -> 6
  EXPECT_EQ(p[3], (8 << 4) | 8);
}

TEST(BlockQuantization, ZerosAndBlockMaximaComeBackExactly) {
  for (int bits : {8, 4}) {
    const BlockQuantization f{bits, 64};
    at::Tensor x = at::zeros({3, 200});
    x[1].copy_(at::linspace(-5, 5, 200));
    at::Tensor records = records_for(3, 200, f);
    quantize_rows(x, records, f);
    at::Tensor back = at::full({3, 200}, 42.f);
    dequantize_rows(records, back, f);
    EXPECT_TRUE(back[0].eq(0).all().item<bool>()) << f.describe();
    EXPECT_TRUE(back[2].eq(0).all().item<bool>()) << f.describe();
    // Each block's largest magnitude is q_max steps: exact up to fp32 rounding.
    EXPECT_NEAR(back[1][0].item<float>(), -5.f, 5e-6) << f.describe();
    EXPECT_NEAR(back[1][199].item<float>(), 5.f, 5e-6) << f.describe();
  }
}

TEST(BlockQuantization, SixteenBitRowsAndViewsAsTargets) {
  const BlockQuantization f{8, 256};
  at::manual_seed(7);
  at::Tensor x = at::randn({2, 700}).to(at::kBFloat16);
  at::Tensor records = records_for(2, 700, f);
  quantize_rows(x, records, f);
  // Into a strided target: every other column of a wider tensor, bf16.
  at::Tensor wide = at::zeros({2, 1400}, at::kBFloat16);
  at::Tensor target = wide.view({2, 700, 2}).select(2, 0);
  dequantize_rows(records, target, f);
  const at::Tensor bound = block_max(x.to(at::kFloat), f) / (2.0 * f.q_max());
  // The bf16 target rounds once more: relative 2^-8.
  const at::Tensor error = (target.to(at::kFloat) - x.to(at::kFloat)).abs();
  EXPECT_TRUE((error <= bound + x.to(at::kFloat).abs() * (1.0 / 256) + 1e-6).all().item<bool>());
  EXPECT_TRUE(wide.view({2, 700, 2}).select(2, 1).eq(0).all().item<bool>()) << "wrote outside the view";
}

TEST(BlockQuantization, RowsAreIndependent) {
  // A row quantized alone gives the same record as within a batch: the all-to-all of qgZ
  // relies on it (each destination's record is self-contained).
  const BlockQuantization f{4, 64};
  at::manual_seed(3);
  at::Tensor x = at::randn({4, 320});
  at::Tensor batch = records_for(4, 320, f);
  quantize_rows(x, batch, f);
  for (int r = 0; r < 4; ++r) {
    at::Tensor alone = records_for(1, 320, f);
    quantize_rows(x.narrow(0, r, 1), alone, f);
    EXPECT_TRUE(alone[0].equal(batch[r])) << "row " << r;
  }
}

TEST(BlockQuantization, NonFiniteValuesStayVisible) {
  const BlockQuantization f{8, 8};
  at::Tensor x = at::ones({16});
  x[3] = std::numeric_limits<float>::infinity();
  at::Tensor records = at::empty({f.record_bytes(16)}, at::kByte);
  quantize_rows(x, records, f);
  at::Tensor back = at::empty({16});
  dequantize_rows(records, back, f);
  EXPECT_FALSE(back.narrow(0, 0, 8).isfinite().all().item<bool>());
  EXPECT_TRUE(back.narrow(0, 8, 8).eq(1).all().item<bool>());
}

bool same_bits_or_both_nan(const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType bits = a.element_size() == 8 ? at::kLong : a.element_size() == 4 ? at::kInt : at::kShort;
  const at::Tensor nan = a.isnan();
  return nan.equal(b.isnan()) && a.view(bits).masked_select(nan.logical_not())
                                     .equal(b.view(bits).masked_select(nan.logical_not()));
}

// Every kernel this machine can run: ATen and the loops up to simd_level().
std::vector<QuantizationKernel> kernels_here() {
  std::vector<QuantizationKernel> kernels{{true, SimdLevel::kScalar}};
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (static_cast<int>(level) <= static_cast<int>(simd_level())) kernels.push_back({false, level});
  }
  return kernels;
}

// Random rows over many magnitudes with the values that break careless kernels mixed in:
// NaN, infinities, signed zeros, subnormals, exact ties of x * (q_max / max) and the largest
// finite values.
at::Tensor awkward_rows(std::mt19937& rng, int64_t rows, int64_t n) {
  at::manual_seed(rng());
  at::Tensor x = at::randn({rows, n}) * at::exp(at::randn({rows, n}) * 4);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.0f,
                            0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            0.5f,
                            2.5f,
                            -3.5f};
  float* data = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (rng() % 97 == 0) data[i] = specials[rng() % std::size(specials)];
  }
  // A row of ties: the block maximum is 127 (or 7) so x * (q_max / max) = x, and halves tie.
  if (rows > 1) x[rows - 1].copy_(at::arange(n).remainder(17).sub(8).mul(0.5));
  return x;
}

TEST(BlockQuantization, EveryKernelGivesTheSameBytesAndValues) {
  const std::vector<QuantizationKernel> kernels = kernels_here();
  std::mt19937 rng(20261126);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int bits : {8, 4}) {
      for (int64_t block : {8, 64, 256}) {
        const BlockQuantization f{bits, block};
        for (int trial = 0; trial < 6; ++trial) {
          const int64_t rows = 1 + static_cast<int64_t>(rng() % 4);
          const int64_t n = 1 + static_cast<int64_t>(rng() % 1500);
          at::Tensor x = awkward_rows(rng, rows, n).to(dtype);
          const std::string what = std::string(c10::toString(dtype)) + ", " + f.describe() +
                                   ", " + std::to_string(rows) + " x " + std::to_string(n);
          at::Tensor expected_records, expected_back;
          for (const QuantizationKernel& kernel : kernels) {
            at::Tensor records = at::full({rows, f.record_bytes(n)}, 0xAB, at::kByte);
            quantize_rows(x, records, f, kernel);
            at::Tensor back = at::full({rows, n}, 42, x.options());
            dequantize_rows(records, back, f, kernel);
            if (!expected_records.defined()) {
              expected_records = records;
              expected_back = back;
              continue;
            }
            EXPECT_TRUE(records.equal(expected_records))
                << what << ": records of " << kernel.describe() << " differ from "
                << kernels[0].describe() << " at "
                << records.ne(expected_records).nonzero().slice(0, 0, 4);
            // The same bits, except that NaNs may differ in payload (ATen's fp32 -> bf16 copy
            // writes 0xFFFF, c10::BFloat16 0x7FC0).
            EXPECT_TRUE(same_bits_or_both_nan(back, expected_back))
                << what << ": values of " << kernel.describe() << " differ";
          }
        }
      }
    }
  }
}

TEST(BlockQuantization, KernelsOnStridedAndOddTargets) {
  // Rows that are views (every other column) and targets of another dtype go through a
  // contiguous copy in the loops; the result is still the ATen kernel's.
  const BlockQuantization f{4, 64};
  std::mt19937 rng(11);
  at::Tensor wide = awkward_rows(rng, 3, 2 * 333);
  at::Tensor x = wide.view({3, 333, 2}).select(2, 1);
  for (const QuantizationKernel& kernel : kernels_here()) {
    at::Tensor records = records_for(3, 333, f);
    at::Tensor reference = records_for(3, 333, f);
    quantize_rows(x, records, f, kernel);
    quantize_rows(x.contiguous(), reference, f, QuantizationKernel{true, SimdLevel::kScalar});
    EXPECT_TRUE(records.equal(reference)) << kernel.describe();
    at::Tensor target = at::zeros({3, 333}, at::kDouble);
    at::Tensor expected = at::zeros({3, 333}, at::kDouble);
    dequantize_rows(records, target, f, kernel);
    dequantize_rows(records, expected, f, QuantizationKernel{true, SimdLevel::kScalar});
    EXPECT_TRUE(same_bits_or_both_nan(target, expected)) << kernel.describe();
  }
}

TEST(BlockQuantization, FormatsOutsideTheNoteAreRefused) {
  EXPECT_THROW((BlockQuantization{6, 64}.validate()), Error);
  EXPECT_THROW((BlockQuantization{8, 12}.validate()), Error);
  EXPECT_NO_THROW((BlockQuantization{4, 128}.validate()));
}

}  // namespace
}  // namespace zero::test
