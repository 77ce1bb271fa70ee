#include "data/utf8.h"

#include "zero/error.h"

namespace zero::utf8 {
namespace {

// The allowed range of the second byte after lead `b` (Table 3-7); the third and fourth bytes
// are always 80..BF.
struct Lead {
  size_t length;        // 0: not a lead byte
  unsigned char low;    // second byte's range
  unsigned char high;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // up to U+10FFFF
  return {0, 0, 0};                       // 80..C1, F5..FF
}

}  // namespace

size_t sequence_length(std::string_view text, size_t at, size_t* maximal_subpart) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const Lead lead = lead_of(byte(at));
  size_t valid = 0;  // bytes of a well-formed prefix so far
  if (lead.length > 0) {
    valid = 1;
    for (size_t k = 1; k < lead.length; ++k) {
      if (at + k >= text.size()) break;
      const unsigned char b = byte(at + k);
      const bool ok = k == 1 ? (b >= lead.low && b <= lead.high) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++valid;
    }
    if (valid == lead.length) return valid;
  }
  if (maximal_subpart != nullptr) *maximal_subpart = valid > 0 ? valid : 1;
  return 0;
}

int64_t first_invalid(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    // ASCII runs first, eight bytes at a time: most text is ASCII.
    while (at + 8 <= text.size()) {
      uint64_t word;
      __builtin_memcpy(&word, text.data() + at, 8);
      if ((word & 0x8080808080808080ULL) != 0) break;
      at += 8;
    }
    if (at >= text.size()) break;
    const size_t length = sequence_length(text, at);
    if (length == 0) return static_cast<int64_t>(at);
    at += length;
  }
  return -1;
}

void check_valid(std::string_view text, const std::string& what) {
  const int64_t bad = first_invalid(text);
  ZERO_CHECK(bad < 0, what, " is not valid UTF-8 at byte offset ", bad);
}

std::string replace_invalid(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  while (at < text.size()) {
    size_t subpart = 0;
    const size_t length = sequence_length(text, at, &subpart);
    if (length > 0) {
      out.append(text.substr(at, length));
      at += length;
    } else {
      out.append("\xEF\xBF\xBD");
      at += subpart;
    }
  }
  return out;
}

}  // namespace zero::utf8
