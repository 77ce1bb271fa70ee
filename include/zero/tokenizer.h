// GPT-2 token ids -> text (decoding only; BPE encoding is not implemented).
//
// encoder.json maps each token string to its id. GPT-2's byte-level BPE writes a token's bytes
// as printable Unicode characters: the table bytes_to_unicode() maps the 188 printable bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') to themselves and the other 68 bytes, in order, to U+0100,
// U+0101, ... (so a space is 'Ġ' U+0120 and a newline 'Ċ' U+010A). Decoding inverts that table
// per character and concatenates the bytes. A UTF-8 character split across tokens is whole
// once its tokens are concatenated; invalid UTF-8 in the result is passed through as bytes.
#pragma once

#include "zero/export.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zero {

class ZERO_API GPT2Decoder {
 public:
  /// Loads encoder.json. Throws zero::Error naming the file for a missing or unreadable file,
  /// malformed JSON, a top level that is not an object, an id that is not an integer, a
  /// negative or duplicate id, ids that are not exactly 0..n-1, or a token string with a
  /// character outside GPT-2's byte-to-unicode table.
  static GPT2Decoder load(const std::string& encoder_json_path);

  /// Number of tokens (50257 for GPT-2).
  int64_t vocab_size() const { return static_cast<int64_t>(bytes_.size()); }

  /// The raw bytes of token `id`. Throws zero::Error (naming the file, the id and the vocab
  /// size) for an id outside [0, vocab_size()).
  const std::string& token_bytes(int64_t id) const;

  /// The concatenated bytes of `ids` (UTF-8 text for GPT-2 output). Same errors as token_bytes.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(const uint16_t* ids, int64_t count) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> bytes_;  // id -> bytes
};

/// GPT-2's bytes_to_unicode(): the code point standing for byte b in encoder.json strings.
/// Index 0..255.
ZERO_API const std::vector<uint32_t>& gpt2_byte_to_unicode();

}  // namespace zero
