// UTF-8 well-formedness (Unicode 15, Table 3-7), for the BPE encoder's input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "zero/export.h"

namespace zero::utf8 {

/// The length of the well-formed sequence at text[at], or 0 when the bytes there do not start
/// one (a stray continuation byte, an overlong or surrogate form, a code point above U+10FFFF,
/// or a sequence cut short); then `*maximal_subpart` (if given) is how many bytes form the
/// longest prefix of a well-formed sequence (at least 1), the unit Unicode's "substitution of
/// maximal subparts" replaces, as Python's bytes.decode("utf-8", "replace") does.
ZERO_INTERNAL_API size_t sequence_length(std::string_view text, size_t at,
                                         size_t* maximal_subpart = nullptr);

/// The byte offset of the first ill-formed sequence in `text`, or -1 when it is all valid.
ZERO_INTERNAL_API int64_t first_invalid(std::string_view text);

/// Throws zero::Error "`what` is not valid UTF-8 at byte offset N" naming the first ill-formed
/// sequence, if any.
ZERO_INTERNAL_API void check_valid(std::string_view text, const std::string& what);

/// The code point of the well-formed sequence of `length` bytes (sequence_length's answer) at
/// text[at].
inline uint32_t code_point(std::string_view text, size_t at, size_t length) {
  const auto byte = [&](size_t i) { return uint32_t{static_cast<unsigned char>(text[i])}; };
  if (length == 1) return byte(at);
  // The lead byte keeps 7 - length payload bits; each continuation byte 6.
  uint32_t cp = byte(at) & (0x7Fu >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (byte(at + k) & 0x3F);
  return cp;
}

/// `text` with every maximal subpart of an ill-formed sequence replaced by U+FFFD (EF BF BD).
ZERO_INTERNAL_API std::string replace_invalid(std::string_view text);

}  // namespace zero::utf8
