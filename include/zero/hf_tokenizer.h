// Hugging Face byte-level BPE tokenizers (tokenizer.json): what GPT-2, Llama 3, Qwen2 and SmolLM2
// ship, encoded and decoded exactly as the `tokenizers` library does.
//
// Encoding follows tokenizers' Tokenizer.encode(text, add_special_tokens=False) step for step:
//   1. added tokens are found in the raw text, leftmost and longest first (those with
//      "normalized": false over the whole text, then those with "normalized": true in the text
//      between), each becoming its id;
//   2. the text between them is normalized (null, or NFC: see below) and pre-tokenized: each
//      Split regex (behaviour "Isolated": matches and the runs between them become pieces) and
//      Digits in turn, then ByteLevel (GPT-2's regex when use_regex is true);
//   3. each piece is BPE-encoded from its bytes: with ignore_merges, a piece that is a token is
//      that token; otherwise adjacent symbols are merged by the lowest-ranked pair of `merges`
//      (leftmost on a tie) until no adjacent pair is a merge. Unlike tiktoken's rule (GPT2Encoder:
//      "the piece's bytes are a token"), a pair merges only when `merges` lists it.
// Regexes run in PCRE2 with \p{L}, \p{N} and \s spelled as tokenizers' Oniguruma has them
// (Unicode 16), so every code point is classified as the library classifies it.
//
// What tokenizer.json may hold (anything else is refused on load, naming the key, the value and
// what is supported):
//   model: BPE with vocab and merges ("a b" strings or ["a", "b"] pairs), ignore_merges,
//     unk_token and fuse_unk; dropout null (or 0), byte_fallback false,
//     continuing_subword_prefix and end_of_word_suffix null (or "");
//   normalizer: null, NFC, or a Sequence of NFC. NFC is applied only to text whose code points
//     are all below U+0300, which NFC leaves as it is; other text is refused when encoded;
//   pre_tokenizer: ByteLevel (add_prefix_space false), or a Sequence of Split ({"Regex": ...},
//     behaviour Isolated, invert false; a regex that can match the empty string is refused) and
//     Digits steps ending with ByteLevel;
//   added_tokens with single_word, lstrip and rstrip false;
//   decoder: ByteLevel or null; post_processor: anything (add_special_tokens=False ignores it);
//   truncation and padding null.
#pragma once

#include "zero/export.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

class ZERO_API HfTokenizer {
 public:
  /// DIR/tokenizer.json (and DIR/tokenizer_config.json beside it when present, for bos/eos), or
  /// a tokenizer.json path (its directory's tokenizer_config.json likewise). Throws zero::Error
  /// naming the file for a missing or unreadable file, malformed JSON, or what is not
  /// supported (the key, the value received and what is allowed).
  static HfTokenizer load(const std::string& path);
  /// Whether DIR holds a tokenizer.json.
  static bool present(const std::string& dir);

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  /// The ids tokenizers' Tokenizer.encode(text, add_special_tokens=False).ids gives. `text` must
  /// be valid UTF-8: else zero::Error naming `what` and the byte offset of the first ill-formed
  /// sequence (as for text NFC would have to change). Thread-safe: encode from any threads.
  std::vector<int32_t> encode(std::string_view text, const std::string& what = "text") const;
  /// encode() over `threads` threads with exactly encode()'s ids: the text is cut only at the
  /// added tokens and, when the pre-tokenization is GPT-2's, Llama 3's or Qwen2's pattern, at a
  /// space between two non-space ASCII characters, where the pieces cannot change (see
  /// GPT2Encoder::encode_parallel). `progress` (if given) is called from the calling thread with
  /// the bytes done so far.
  std::vector<int32_t> encode_parallel(std::string_view text, int threads,
                                       const std::string& what = "text",
                                       const std::function<void(int64_t)>& progress = {}) const;

  /// The bytes of `ids` as tokenizers' ByteLevel decoder makes them: a token (added tokens as
  /// their content) whose characters are all in the byte-level alphabet stands for their bytes,
  /// any other for its own UTF-8. Equal to decode(ids, skip_special_tokens=False) wherever that
  /// is valid UTF-8 (tokenizers replaces ill-formed sequences by U+FFFD; these bytes keep them).
  /// Throws zero::Error for an id that names no token.
  std::string decode(const std::vector<int64_t>& ids) const;

  /// The largest id + 1 (model vocab and added tokens).
  int64_t vocab_size() const;
  /// tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}) as an id;
  /// nullopt when the file, the key or its value is absent or null.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  /// The tokenizer.json loaded.
  const std::string& path() const;

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero
