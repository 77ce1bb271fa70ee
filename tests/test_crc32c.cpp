// CRC-32C (src/common/crc32c.h): the checksum of swap records (Note [Swap record checksums])
// and TensorBoard records. The published check values (RFC 3720 B.4, the "123456789" check),
// and the fast path (Note [Three-way CRC]) against the byte-by-byte table on random buffers of
// every length class around its blocks, at unaligned starts, continued in random pieces; and
// pieces summed apart and combined (crc32c_combine).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"

namespace zero::test {
namespace {

TEST(Crc32c, PublishedCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF);
  std::vector<unsigned char> ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<unsigned char>(i);
    descending[i] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c_reference(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, FastPathMatchesTheTableEverywhere) {
  std::mt19937_64 rng(32);
  std::vector<unsigned char> data((1 << 20) + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const size_t lane = 8192;  // Note [Three-way CRC]
  std::vector<size_t> lengths = {0, 1, 7, 8, 9, 63, 4096, 3 * lane - 1, 3 * lane, 3 * lane + 1,
                                 6 * lane + 13, 1 << 20};
  for (int i = 0; i < 40; ++i) lengths.push_back(static_cast<size_t>(rng() % (1 << 20)));
  for (size_t length : lengths) {
    const size_t start = static_cast<size_t>(rng() % 64);
    const unsigned char* p = data.data() + start;
    const uint32_t expected = crc32c_reference(p, length);
    EXPECT_EQ(crc32c(p, length), expected) << length << " bytes at +" << start;
    // Continued over random pieces: the same value.
    uint32_t crc = 0;
    for (size_t done = 0; done < length;) {
      const size_t piece = std::min(length - done, static_cast<size_t>(rng() % (4 * lane)) + 1);
      crc = crc32c(p + done, piece, crc);
      done += piece;
    }
    EXPECT_EQ(crc, expected) << length << " bytes in pieces";
  }
}

TEST(Crc32c, PiecesSummedApartCombineToTheWhole) {
  std::mt19937_64 rng(5);
  std::vector<unsigned char> data(300000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (int trial = 0; trial < 50; ++trial) {
    const size_t length = static_cast<size_t>(rng() % data.size());
    const size_t cut = length == 0 ? 0 : static_cast<size_t>(rng() % (length + 1));
    const uint32_t a = crc32c(data.data(), cut);
    const uint32_t b = crc32c(data.data() + cut, length - cut);
    EXPECT_EQ(crc32c_combine(a, b, length - cut), crc32c_reference(data.data(), length))
        << cut << " + " << length - cut;
  }
  // Many pieces of one size, as AsyncIo sums a transfer's requests.
  const size_t piece = 4096;
  uint32_t joined = crc32c(data.data(), piece);
  for (size_t at = piece; at + piece <= 73 * piece; at += piece) {
    joined = crc32c_combine(joined, crc32c(data.data() + at, piece), piece);
  }
  EXPECT_EQ(joined, crc32c_reference(data.data(), 73 * piece));
}

}  // namespace
}  // namespace zero::test
