// GPT-2's byte-level alphabet (zero::gpt2_byte_to_unicode, include/zero/tokenizer.h) read
// backwards: the bytes that a vocabulary's token strings stand for (encoder.json and vocab.bpe,
// tokenizer.json's vocab and merges, tokenizers' ByteLevel decoder).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "zero/export.h"

namespace zero::byte_level {

/// What to_bytes reports for text that is not valid UTF-8.
inline constexpr uint32_t kNotUtf8 = 0xFFFFFFFF;

/// The byte that code point `cp` stands for, or -1 when `cp` is none of the alphabet's 256.
ZERO_INTERNAL_API int byte_of(uint32_t cp);

/// The bytes the characters of `symbols` stand for, in `*bytes`. False when `symbols` is not
/// valid UTF-8 (then `*outside` is kNotUtf8) or holds a character outside the alphabet (then
/// `*outside` is its code point); `*bytes` is then unspecified.
ZERO_INTERNAL_API bool to_bytes(std::string_view symbols, std::string* bytes,
                                uint32_t* outside = nullptr);

}  // namespace zero::byte_level
