// Note [Block quantization] in block_quantization.h.
#include "quant/block_quantization.h"

#include <ATen/ATen.h>

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/parallel.h"
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


// ---- ATen ----------------------------------------------------------------------------------

void quantize_aten(const RowsAndRecords& c, const BlockQuantization& format) {
  // fp32 blocks, the tail of the last one zero.
  at::Tensor x = at::empty({c.r, c.padded}, c.rows.options().dtype(at::kFloat));
  x.narrow(1, 0, c.n).copy_(c.rows);
  if (c.padded > c.n) x.narrow(1, c.n, c.padded - c.n).zero_();
  const at::Tensor blocks = x.view({c.r * c.nb, format.block});
  // max |x| per block, fused (the infinity norm reads each value once).
  const at::Tensor amax = at::linalg_vector_norm(blocks, std::numeric_limits<double>::infinity(),
                                                 at::IntArrayRef{1}, /*keepdim=*/true);
  // Every NaN maximum as the same NaN (the loops' max may pick another NaN's bits).
  const at::Tensor scale = at::where(amax.isnan(), std::numeric_limits<float>::quiet_NaN(),
                                     amax / static_cast<double>(format.q_max()));
  // i_b = q_max / m_b, or 0 for a block of zeros or with a NaN.
  const at::Tensor inverse =
      at::where(amax > 0, at::full_like(amax, format.q_max()).div_(amax), at::zeros_like(amax));
  // A NaN (x * 0 of an infinity) becomes 0 before the integer conversion, which is undefined
  // for it; the block's non-finite scale keeps it visible on the way back.
  at::Tensor q =
      blocks.mul(inverse).round_().clamp_(-format.q_max(), format.q_max()).nan_to_num_(0);
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

void dequantize_aten(const RowsAndRecords& c, const BlockQuantization& format) {
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


// ---- The loops ------------------------------------------------------------------------------
// Written once over the element type and force-inlined into one function per instruction set
// (the *_isa_* wrappers below), so that the compiler vectorizes each for its target. Only
// exact operations (integer max, fp32 mul/div, round-to-nearest-even, conversions), no FMA
// (this file is compiled with -ffp-contract=off), so every level gives the same bits.

template <typename T>
[[gnu::always_inline]] inline float to_float(T v) { return static_cast<float>(v); }
// bf16 values travel as their bits (uint16_t): fp32 is exactly those bits as the high half.
// Through c10::BFloat16 (a struct) the compilers kept these loops scalar, 4x slower.
template <>
[[gnu::always_inline]] inline float to_float(uint16_t bf16_bits) {
  const uint32_t bits = static_cast<uint32_t>(bf16_bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// fp32 -> the row's type, rounded as c10 rounds: to nearest even, and for bf16 every NaN as
// 0x7FC0.
template <typename T>
[[gnu::always_inline]] inline T from_float(float f) { return static_cast<T>(f); }
template <>
[[gnu::always_inline]] inline uint16_t from_float(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return f != f ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
}

// |v| as the bits of an fp32: for non-negative floats the integer order of the bits is the
// float order, and a NaN's bits exceed an infinity's, so an integer max finds max|x| and
// keeps a NaN (a float max would need care with NaN and not vectorize as readily).
[[gnu::always_inline]] inline uint32_t abs_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7FFFFFFFu;
}
[[gnu::always_inline]] inline uint32_t abs_bits(uint16_t bf16_bits) {
  return static_cast<uint32_t>(bf16_bits & 0x7FFFu) << 16;
}
[[gnu::always_inline]] inline uint32_t abs_bits(c10::Half v) { return abs_bits(static_cast<float>(v)); }

// round_half_even(x * inverse) clamped to [-q_max, q_max]; a NaN becomes 0.
[[gnu::always_inline]] inline int32_t quantize_one(float x, float inverse, float q_max) {
  float y = std::nearbyint(x * inverse);
  y = y > q_max ? q_max : y;
  y = y < -q_max ? -q_max : y;
  y = y == y ? y : 0.0f;
  return static_cast<int32_t>(y);
}

// One block of `count` values (count <= block; the rest is the zero padding) into its data
// bytes (count bytes for 8 bits, ceil(count / 2) for 4) and its scale.
template <typename T>
[[gnu::always_inline]] inline void quantize_block(const T* x, int64_t count, int bits,
                                                  uint8_t* data, uint8_t* scale) {
  const float q_max = bits == 8 ? 127.0f : 7.0f;
  uint32_t max_bits = 0;
  for (int64_t i = 0; i < count; ++i) max_bits = std::max(max_bits, abs_bits(x[i]));
  float amax;
  std::memcpy(&amax, &max_bits, sizeof amax);
  if (amax != amax) amax = std::numeric_limits<float>::quiet_NaN();  // one NaN for every block
  const float inverse = amax > 0 ? q_max / amax : 0.0f;
  const float s = amax / q_max;
  std::memcpy(scale, &s, sizeof s);
  if (bits == 8) {
    for (int64_t i = 0; i < count; ++i) {
      data[i] = static_cast<uint8_t>(static_cast<int8_t>(quantize_one(to_float(x[i]), inverse, q_max)));
    }
    return;
  }
  const int64_t pairs = count / 2;
  for (int64_t j = 0; j < pairs; ++j) {
    const int32_t low = quantize_one(to_float(x[2 * j]), inverse, q_max) + 8;
    const int32_t high = quantize_one(to_float(x[2 * j + 1]), inverse, q_max) + 8;
    data[j] = static_cast<uint8_t>(low | (high << 4));
  }
  if (count % 2 != 0) {  // the last value beside a padding zero (8 + 0)
    const int32_t low = quantize_one(to_float(x[count - 1]), inverse, q_max) + 8;
    data[pairs] = static_cast<uint8_t>(low | (8 << 4));
  }
}

// The inverse of quantize_block: `count` values from a block's data bytes and scale.
template <typename T>
[[gnu::always_inline]] inline void dequantize_block(const uint8_t* data, const uint8_t* scale_bytes,
                                                    int64_t count, int bits, T* out) {
  float s;
  std::memcpy(&s, scale_bytes, sizeof s);
  if (bits == 8) {
    for (int64_t i = 0; i < count; ++i) {
      out[i] = from_float<T>(static_cast<float>(static_cast<int8_t>(data[i])) * s);
    }
    return;
  }
  const int64_t pairs = count / 2;
  for (int64_t j = 0; j < pairs; ++j) {
    out[2 * j] = from_float<T>(static_cast<float>((data[j] & 15) - 8) * s);
    out[2 * j + 1] = from_float<T>(static_cast<float>((data[j] >> 4) - 8) * s);
  }
  if (count % 2 != 0) out[count - 1] = from_float<T>(static_cast<float>((data[pairs] & 15) - 8) * s);
}

// Blocks [first, last) of the call, numbered row by row, between rows of `n` values (row r at
// rows + r * row_stride) and records of `record` bytes.
struct BlockRange {
  int64_t first, last;
  int64_t n, row_stride, record, data_bytes, nb, block;
  int bits;
};

// (No lambdas below: a lambda's body is a function of its own, compiled without the target
// attribute of the *_isa_* wrapper it is called from unless the compiler inlines it.)
template <typename T>
[[gnu::always_inline]] inline void quantize_range(const T* rows, uint8_t* records, const BlockRange& c) {
  for (int64_t g = c.first; g < c.last; ++g) {
    const int64_t r = g / c.nb, b = g % c.nb;
    uint8_t* record = records + r * c.record;
    quantize_block(rows + r * c.row_stride + b * c.block, std::min(c.block, c.n - b * c.block),
                   c.bits, record + b * c.block * c.bits / 8, record + c.data_bytes + 4 * b);
  }
}

template <typename T>
[[gnu::always_inline]] inline void dequantize_range(const uint8_t* records, T* rows, const BlockRange& c) {
  for (int64_t g = c.first; g < c.last; ++g) {
    const int64_t r = g / c.nb, b = g % c.nb;
    const uint8_t* record = records + r * c.record;
    dequantize_block(record + b * c.block * c.bits / 8, record + c.data_bytes + 4 * b,
                     std::min(c.block, c.n - b * c.block), c.bits, rows + r * c.row_stride + b * c.block);
  }
}

#define ZERO_QUANTIZATION_LOOPS(SUFFIX, ATTRIBUTE)                                             \
  template <typename T>                                                                        \
  ATTRIBUTE void quantize_isa_##SUFFIX(const T* rows, uint8_t* records, const BlockRange& c) { \
    quantize_range(rows, records, c);                                                          \
  }                                                                                            \
  template <typename T>                                                                        \
  ATTRIBUTE void dequantize_isa_##SUFFIX(const uint8_t* records, T* rows, const BlockRange& c) { \
    dequantize_range(records, rows, c);                                                        \
  }
ZERO_QUANTIZATION_LOOPS(baseline, )
#if defined(__x86_64__)
ZERO_QUANTIZATION_LOOPS(avx2, __attribute__((target("avx2,f16c"))))
ZERO_QUANTIZATION_LOOPS(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"))))
#endif
#undef ZERO_QUANTIZATION_LOOPS

template <typename T>
void quantize_loops(SimdLevel level, const T* rows, uint8_t* records, const BlockRange& c) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512: return quantize_isa_avx512(rows, records, c);
    case SimdLevel::kAvx2: return quantize_isa_avx2(rows, records, c);
#else
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx2:
#endif
    case SimdLevel::kScalar: return quantize_isa_baseline(rows, records, c);
  }
}

template <typename T>
void dequantize_loops(SimdLevel level, const uint8_t* records, T* rows, const BlockRange& c) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512: return dequantize_isa_avx512(records, rows, c);
    case SimdLevel::kAvx2: return dequantize_isa_avx2(records, rows, c);
#else
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx2:
#endif
    case SimdLevel::kScalar: return dequantize_isa_baseline(records, rows, c);
  }
}

// Blocks per parallel task: 64 blocks of 256 values are 16 K values.
constexpr int64_t kGrainBlocks = 64;

// Calls fn(range) over all of the call's blocks, split over libtorch's intra-op threads.
template <typename Fn>
void over_blocks(const RowsAndRecords& c, const BlockQuantization& format, Fn&& fn) {
  BlockRange all{0, c.r * c.nb, c.n, c.rows.stride(0), c.records.size(1), c.data_bytes, c.nb,
                 format.block, format.bits};
  if (all.last == 0) return;
  // parallel_ranges splits a tensor's length; this one's only role is the block count.
  const at::Tensor blocks = at::empty({all.last}, at::TensorOptions().dtype(at::kByte));
  parallel_ranges(blocks, kGrainBlocks, [&](int64_t first, int64_t last) {
    BlockRange part = all;
    part.first = first;
    part.last = last;
    fn(part);
  });
}

// Rows the loops can write directly: fp32/bf16/fp16 with contiguous values in each row.
bool loops_take(const at::Tensor& rows) {
  const auto t = rows.scalar_type();
  return (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) &&
         (rows.size(1) <= 1 || rows.stride(1) == 1);
}

template <typename Fn>
void with_element_type(const at::Tensor& rows, Fn&& fn) {
  switch (rows.scalar_type()) {
    case at::kFloat: return fn(static_cast<float*>(nullptr));
    case at::kBFloat16: return fn(static_cast<uint16_t*>(nullptr));  // bf16 bits (to_float)
    case at::kHalf: return fn(static_cast<c10::Half*>(nullptr));
    default: ZERO_INTERNAL_ASSERT(false, "block quantization of ", rows.scalar_type());
  }
}

void quantize_loops(const RowsAndRecords& c, const BlockQuantization& format, SimdLevel level) {
  // Rows of other layouts (a strided view) go through a contiguous fp32 copy.
  const at::Tensor rows = loops_take(c.rows) ? c.rows : c.rows.to(at::kFloat).contiguous();
  const RowsAndRecords call(rows, c.records, format, "quantize_rows");
  uint8_t* records = c.records.data_ptr<uint8_t>();
  with_element_type(rows, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* values = static_cast<const T*>(rows.data_ptr());
    over_blocks(call, format, [&](const BlockRange& part) { quantize_loops(level, values, records, part); });
  });
  // The zero bytes between the values and the scales.
  const int64_t used = (c.n * format.bits + 7) / 8;
  if (c.data_bytes > used) c.records.narrow(1, used, c.data_bytes - used).zero_();
}

void dequantize_loops(const RowsAndRecords& c, const BlockQuantization& format, SimdLevel level) {
  const bool direct = loops_take(c.rows);
  const at::Tensor rows =
      direct ? c.rows : at::empty({c.r, c.n}, c.rows.options().dtype(at::kFloat));
  const RowsAndRecords call(rows, c.records, format, "dequantize_rows");
  const uint8_t* records = c.records.data_ptr<uint8_t>();
  with_element_type(rows, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    T* values = static_cast<T*>(rows.data_ptr());
    over_blocks(call, format, [&](const BlockRange& part) { dequantize_loops(level, records, values, part); });
  });
  if (!direct) c.rows.copy_(rows);
}


void check_kernel(const RowsAndRecords& c, QuantizationKernel kernel) {
  ZERO_INTERNAL_ASSERT(kernel.aten || (c.rows.is_cpu() && c.records.is_cpu() &&
                                       static_cast<int>(kernel.level) <= static_cast<int>(simd_level())),
                       "block quantization: ", kernel.describe(), " on ", c.rows.device(),
                       " with this CPU's level ", static_cast<int>(simd_level()));
}

QuantizationKernel default_kernel(const at::Tensor& rows) {
  QuantizationKernel kernel;
  kernel.aten = !rows.is_cpu();
  kernel.level = simd_level();
  return kernel;
}

}  // namespace

std::string BlockQuantization::describe() const {
  return "int" + std::to_string(bits) + ", blocks of " + std::to_string(block);
}

void BlockQuantization::validate() const {
  ZERO_CHECK(bits == 8 || bits == 4, "block quantization: bits must be 8 or 4, got ", bits);
  ZERO_CHECK(block > 0 && block % 8 == 0,
             "block quantization: the block must be a positive multiple of 8 values, got ", block);
}


std::string QuantizationKernel::describe() const {
  if (aten) return "ATen";
  switch (level) {
    case SimdLevel::kAvx512: return "loops (AVX-512)";
    case SimdLevel::kAvx2: return "loops (AVX2)";
    case SimdLevel::kScalar: break;
  }
  return "loops (baseline)";
}

void quantize_rows(const at::Tensor& rows, const at::Tensor& records,
                   const BlockQuantization& format, QuantizationKernel kernel) {
  const RowsAndRecords c(rows, records, format, "quantize_rows");
  check_kernel(c, kernel);
  if (kernel.aten) {
    quantize_aten(c, format);
  } else {
    quantize_loops(c, format, kernel.level);
  }
}

void dequantize_rows(const at::Tensor& records, const at::Tensor& rows,
                     const BlockQuantization& format, QuantizationKernel kernel) {
  const RowsAndRecords c(rows, records, format, "dequantize_rows");
  check_kernel(c, kernel);
  if (kernel.aten) {
    dequantize_aten(c, format);
  } else {
    dequantize_loops(c, format, kernel.level);
  }
}

void quantize_rows(const at::Tensor& rows, const at::Tensor& records,
                   const BlockQuantization& format) {
  quantize_rows(rows, records, format, default_kernel(rows));
}

void dequantize_rows(const at::Tensor& records, const at::Tensor& rows,
                     const BlockQuantization& format) {
  dequantize_rows(records, rows, format, default_kernel(rows));
}

}  // namespace zero
