// Block-wise symmetric integer quantization of rows of floats: the wire format of ZeRO++'s
// quantized weight all-gather (qwZ) and quantized gradient exchange (qgZ).
//
// Note [Block quantization]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A row of n values is cut into blocks of `block` consecutive values (the last one padded
// with zeros to a whole block). Each block b gets one fp32 scale s_b = m_b / q_max, where
// m_b = max|x| over the block (q_max = 127 for 8 bits, 7 for 4 bits), and each value x (in
// fp32) becomes the integer q = round_half_even(x * i_b), with i_b = q_max / m_b (0 when
// m_b is 0 or NaN), clamped to [-q_max, q_max]; it is read back as q * s_b, rounded to the
// row's dtype. So
//   |dequantized - x| <= s_b / 2 = m_b / (2 q_max)
// (plus fp32 rounding), a block of zeros comes back as zeros, and a value of largest
// magnitude comes back exactly up to that rounding. Non-finite values are not representable:
// a block holding one has a non-finite scale (its integers are 0) and dequantizes to NaN,
// which the engine's overflow check then sees, as it would the original.
//
// One row's record, a byte string of record_bytes(n):
//   data    the n values: int8 two's complement (8 bits), or two values per byte, the first
//           in the low nibble, stored as q + 8 (4 bits); zero bytes up to a multiple of 4;
//   scales  ceil(n / block) fp32 values, native byte order.
// So a row shorter than a block costs no padding beyond 3 bytes, both parts are 4-byte
// aligned within a record, and a record's length is a multiple of 4. block is a multiple of 8.
//
// Two implementations of that arithmetic, which give the same bytes and the same values
// (tests/test_block_quantization.cpp compares them on random and special values):
//   loops  CPU tensors: one pass over each block in cache for its maximum and one for its
//          integers, written once as plain loops and compiled per instruction set (SSE2, AVX2,
//          AVX-512), the widest this CPU runs chosen once at run time (simd_level()). The
//          ATen operations take ~8 passes over memory with temporaries; the loops quantize
//          13-26x and dequantize 6-14x faster (one thread; docs/benchmarks.md,
//          "Block quantization kernels").
//   ATen   every other device (CUDA kernels on GPUs): the same steps as tensor operations.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "common/simd_level.h"

namespace zero {

struct BlockQuantization {
  int bits = 8;         // 8 or 4
  int64_t block = 256;  // values per scale, a multiple of 8

  int q_max() const { return bits == 8 ? 127 : 7; }
  int64_t blocks(int64_t n) const { return (n + block - 1) / block; }
  /// Bytes of the data part of a row of n values (Note [Block quantization]).
  int64_t data_bytes(int64_t n) const { return (n * bits / 8 + (n * bits % 8 != 0) + 3) / 4 * 4; }
  /// Bytes of one row's record (Note [Block quantization]).
  int64_t record_bytes(int64_t n) const { return data_bytes(n) + 4 * blocks(n); }
  /// "int8, blocks of 256".
  std::string describe() const;
  /// Throws zero::Error unless bits is 8 or 4 and block a positive multiple of 8.
  void validate() const;
};

/// Quantizes each row of `rows` ([R, n] or [n] for one row; fp32, bf16 or fp16) into the
/// records of `records` (uint8, [R, record_bytes(n)] or [record_bytes(n)], contiguous, on the
/// same device).
void quantize_rows(const at::Tensor& rows, const at::Tensor& records,
                   const BlockQuantization& format);

/// The inverse: each record of `records` into the row of `rows` ([R, n] or [n], any floating
/// dtype, may be a strided view), rounded to its dtype.
void dequantize_rows(const at::Tensor& records, const at::Tensor& rows,
                     const BlockQuantization& format);

/// Which implementation of Note [Block quantization] runs: the loops at a SIMD level (CPU
/// tensors; at most simd_level()) or the ATen operations. quantize_rows/dequantize_rows pick
/// the loops at simd_level() on CPU and ATen elsewhere; tests and benchmarks name one.
struct QuantizationKernel {
  bool aten = false;
  SimdLevel level = SimdLevel::kScalar;
  /// "ATen", "loops (AVX-512)", ...
  std::string describe() const;
};
void quantize_rows(const at::Tensor& rows, const at::Tensor& records,
                   const BlockQuantization& format, QuantizationKernel kernel);
void dequantize_rows(const at::Tensor& records, const at::Tensor& rows,
                     const BlockQuantization& format, QuantizationKernel kernel);

}  // namespace zero
