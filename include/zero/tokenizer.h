// GPT-2's byte-level BPE: text -> token ids (GPT2Encoder) and token ids -> text (GPT2Decoder).
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
#include <functional>
#include <memory>
#include <string>
#include <string_view>
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

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> bytes_;  // id -> bytes
};

/// GPT-2's bytes_to_unicode(): the code point standing for byte b in encoder.json strings.
/// Index 0..255.
ZERO_API const std::vector<uint32_t>& gpt2_byte_to_unicode();

/// GPT-2's byte-level BPE encoder, exact: the ids tiktoken's r50k_base ("gpt2") gives, from the
/// same encoder.json and vocab.bpe. Text is split by GPT-2's pre-tokenization pattern
///   '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// evaluated by PCRE2 (JIT-compiled, Unicode properties), and each piece is the token whose
/// bytes it is, or else merged pairwise from its bytes, lowest rank first and leftmost on a tie,
/// as tiktoken's byte_pair_merge (a token's rank is its id). Special tokens are ordinary text
/// here ("<|endoftext|>" is encoded as its characters, as tiktoken's encode_ordinary does);
/// callers insert kEndOfText where a document ends. Thread-safe: encode from any threads.
class ZERO_API GPT2Encoder {
 public:
  static constexpr int32_t kEndOfText = 50256;

  /// Loads and checks both files: every merge of vocab.bpe must be a token of encoder.json
  /// whose id is 256 + its line's index, the 256 single bytes ids 0..255 (GPT-2's layout,
  /// which makes a token's id its merge rank). Throws zero::Error naming the file and the line
  /// or token that is wrong.
  static GPT2Encoder load(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  GPT2Encoder(GPT2Encoder&&) noexcept;
  GPT2Encoder& operator=(GPT2Encoder&&) noexcept;
  ~GPT2Encoder();

  int64_t vocab_size() const;
  const GPT2Decoder& decoder() const;

  /// The ids of `text`, which must be valid UTF-8: else zero::Error naming the byte offset of the
  /// first ill-formed sequence (prefixed with `what`, e.g. a file name).
  std::vector<int32_t> encode(std::string_view text, const std::string& what = "text") const;
  /// The same for any bytes: each maximal subpart of an ill-formed sequence is replaced by
  /// U+FFFD first, as Python's bytes.decode("utf-8", "replace") does (so the ids are those of
  /// tiktoken on the decoded str).
  std::vector<int32_t> encode_lossy(std::string_view bytes) const;
  /// encode() over `threads` threads: the text is cut where the pre-tokenization cannot change
  /// (a space between two non-space ASCII characters), so the ids are exactly encode()'s.
  /// `progress` (if given) is called from the calling thread with the bytes done so far.
  std::vector<int32_t> encode_parallel(std::string_view text, int threads,
                                       const std::string& what = "text",
                                       const std::function<void(int64_t)>& progress = {}) const;

  struct Impl;

 private:
  explicit GPT2Encoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero
