// CRC-32C (src/common/crc32c.h). Written here because Debian 12 has no CRC-32C library (zlib's
// crc32 is the other polynomial; google/crc32c is not packaged), and the algorithm is a table
// or one instruction per 8 bytes, three chains of it at once (Note [Three-way CRC]).
#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace zero {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    table[b] = crc;
  }
  return table;
}

uint32_t crc32c_table(const unsigned char* p, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) crc = (crc >> 8) ^ table[(crc ^ p[i]) & 0xFF];
  return crc;
}

// shift(r, n) = r x^(8n) mod P on the raw register: a linear map of r's 32 bits, as the images
// of the 32 unit vectors. One zero bit maps r to (r >> 1) ^ (r & 1 ? P : 0); n bytes are that
// map to the power 8n, by repeated squaring (zlib's crc32_combine does the same for its CRC).
struct ShiftMatrix {
  uint32_t column[32];
  uint32_t times(uint32_t v) const {
    uint32_t sum = 0;
    for (int i = 0; v != 0; v >>= 1, ++i) {
      if (v & 1) sum ^= column[i];
    }
    return sum;
  }
  ShiftMatrix then(const ShiftMatrix& next) const {  // next after this
    ShiftMatrix out{};
    for (int i = 0; i < 32; ++i) out.column[i] = next.times(column[i]);
    return out;
  }
};

ShiftMatrix shift_matrix(uint64_t bytes) {
  ShiftMatrix power{};  // one zero bit
  power.column[0] = kPolynomial;
  for (int i = 1; i < 32; ++i) power.column[i] = 1u << (i - 1);
  for (int k = 0; k < 3; ++k) power = power.then(power);  // one zero byte
  ShiftMatrix result{};
  for (int i = 0; i < 32; ++i) result.column[i] = 1u << i;
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = result.then(power);
    power = power.then(power);
  }
  return result;
}

#if defined(__x86_64__)
// Note [Three-way CRC]: the crc32 instruction has a latency of 3 cycles and a throughput of
// one per cycle, so one chain of it uses a third of the unit. A long buffer is cut into blocks
// of three lanes of kLane bytes, each lane's CRC computed as its own chain (the three
// interleaved in one loop), then joined. On the raw CRC register (no pre/post inversion) the
// CRC is linear: crc(r, A || B) = shift(crc(r, A), |B|) ^ crc(0, B), where shift(r, n) =
// crc(r, n zero bytes) multiplies by x^(8n) mod P. So a block gives
//   r' = shift(c0, 2 kLane) ^ shift(c1, kLane) ^ c2
// with c0 continuing r over lane 0 and c1, c2 starting at 0. shift by a fixed length is
// linear in r's 32 bits: four table lookups (one per byte of r) of a table made once.
constexpr size_t kLane = 8192;

// shift(r, bytes) as four 256-entry tables, one per byte of r.
struct ShiftTable {
  uint32_t t[4][256];
};

ShiftTable make_shift_table(size_t bytes) {
  const ShiftMatrix m = shift_matrix(bytes);
  ShiftTable shift{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) shift.t[k][b] = m.times(b << (8 * k));
  }
  return shift;
}

inline uint32_t shifted(const ShiftTable& shift, uint32_t crc) {
  return shift.t[0][crc & 0xFF] ^ shift.t[1][(crc >> 8) & 0xFF] ^ shift.t[2][(crc >> 16) & 0xFF] ^
         shift.t[3][crc >> 24];
}

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n,
                                                        uint32_t crc) {
  uint64_t c = crc;
  if (n >= 3 * kLane) {
    static const ShiftTable by_lane = make_shift_table(kLane);
    static const ShiftTable by_two_lanes = make_shift_table(2 * kLane);
    for (; n >= 3 * kLane; n -= 3 * kLane, p += 3 * kLane) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t w0, w1, w2;
        std::memcpy(&w0, p + i, 8);
        std::memcpy(&w1, p + kLane + i, 8);
        std::memcpy(&w2, p + 2 * kLane + i, 8);
        c = _mm_crc32_u64(c, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
      }
      c = shifted(by_two_lanes, static_cast<uint32_t>(c)) ^
          shifted(by_lane, static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
    }
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}
#endif

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  // With the pre/post inversions the CRC is affine: crc(A || B) = shift(crc(A), |B|) ^ crc(B)
  // still holds, the inversions cancelling (shift of the all-ones register by |B| is what
  // crc(B) adds for its own initial inversion, and crc(A)'s final one is undone by the same).
  // The operator for the last length asked is kept: callers combine many pieces of one size.
  thread_local uint64_t cached_length = ~uint64_t{0};
  thread_local ShiftMatrix cached{};
  if (length_b != cached_length) {
    cached = shift_matrix(length_b);
    cached_length = length_b;
  }
  return cached.times(crc_a) ^ crc_b;
}

uint32_t crc32c_reference(const void* bytes, size_t size, uint32_t crc) {
  return ~crc32c_table(static_cast<const unsigned char*>(bytes), size, ~crc);
}

uint32_t crc32c(const void* bytes, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  crc = hardware ? crc32c_sse42(p, size, crc) : crc32c_table(p, size, crc);
#else
  crc = crc32c_table(p, size, crc);
#endif
  return ~crc;
}

}  // namespace zero
