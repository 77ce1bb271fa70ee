// What zero's byte-level BPE encoders share (GPT2Encoder, src/data/bpe_encoder.cpp; HfTokenizer,
// src/data/hf_tokenizer.cpp): the pre-tokenization regex evaluated by PCRE2, its split into
// pieces, and the encoding of one text over several threads.
//
// PCRE2 (Debian's libpcre2, JIT-compiled) is a real regex engine with Unicode properties, so
// \p{L}, \p{N}, \s and (?i) mean what they mean to tiktoken's regex crate and to tokenizers'
// Oniguruma (up to the Unicode version of each: PCRE2 10.42 has Unicode 14).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "zero/export.h"

// PCRE2's 8-bit types (pcre2.h's pcre2_code_8, pcre2_match_data_8, pcre2_match_context_8 and
// pcre2_jit_stack_8), declared here so that users of this header do not include pcre2.h.
struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace zero {

/// A pattern compiled for UTF-8 text with Unicode properties (PCRE2_UTF | PCRE2_UCP) and
/// JIT-compiled. Immutable once built: match from any threads, each with its own Scratch.
class ZERO_INTERNAL_API PreTokenizationRegex {
 public:
  /// Throws zero::Error "`what`: ..." with PCRE2's message and the offset in the pattern when
  /// it does not compile, or when this PCRE2 cannot JIT-compile it.
  PreTokenizationRegex(const std::string& pattern, const std::string& what);
  PreTokenizationRegex(PreTokenizationRegex&& other) noexcept;
  PreTokenizationRegex& operator=(PreTokenizationRegex&& other) noexcept;
  PreTokenizationRegex(const PreTokenizationRegex&) = delete;
  PreTokenizationRegex& operator=(const PreTokenizationRegex&) = delete;
  ~PreTokenizationRegex();

  /// What one thread matches with: PCRE2's match data (its ovector) and a JIT stack that grows
  /// up to kMaxJitStackBytes (PCRE2's default, 32 KiB on the machine stack, is too small for a
  /// regex that backtracks over a long piece). A Scratch serves one regex.
  class ZERO_INTERNAL_API Scratch {
   public:
    explicit Scratch(const PreTokenizationRegex& regex);
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch();

   private:
    friend class PreTokenizationRegex;
    pcre2_real_match_data_8* data_ = nullptr;
    pcre2_real_match_context_8* context_ = nullptr;
    pcre2_real_jit_stack_8* stack_ = nullptr;
  };
  static constexpr size_t kMaxJitStackBytes = size_t{64} << 20;

  /// The first match in `text` starting at or after `offset` as [*begin, *end); false when
  /// there is none. The text before `offset` is context (lookbehind), as in a search resumed
  /// after a previous match. `text` must be valid UTF-8 (not checked again: a check per call
  /// would make a split quadratic). Throws zero::Error (naming the regex as `what` did) when
  /// PCRE2 gives up: a regex that backtracks beyond PCRE2's limits on this text.
  bool find(std::string_view text, size_t offset, Scratch& scratch, size_t* begin,
            size_t* end) const;

  /// Whether the pattern can match the empty string (PCRE2's minimum match length is 0).
  bool may_match_empty() const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string what_;
  pcre2_real_code_8* code_ = nullptr;
};

/// `pattern` with \p{L}, \p{N} and \s (and \S outside a character class) spelled as the classes
/// they are in tokenizers' Oniguruma (Unicode 16 in tokenizers 0.23): PCRE2 10.42's \p{L} and
/// \p{N} lack the letters and digits of Unicode 15 and 16 (added here as ranges; a PCRE2 with
/// newer tables already has them, and adding them again changes nothing), and its \s also
/// matches U+180E, which is no longer White_Space (so \s becomes Oniguruma's White_Space list).
/// Other escapes, \Q...\E and POSIX classes are copied as they are.
ZERO_INTERNAL_API std::string with_oniguruma_classes(const std::string& pattern);

/// tokenizers' Split with the behaviour "Isolated" (and so the GPT-2 pre-tokenization): calls
/// `piece(begin, end)` for every match of `regex` in `text` and for every non-empty run of text
/// between two matches (and before the first, after the last), in order. The regex must not
/// match the empty string (may_match_empty() false): the pieces are non-empty and cover `text`.
template <typename Piece>
void split_isolated(const PreTokenizationRegex& regex, PreTokenizationRegex::Scratch& scratch,
                    std::string_view text, Piece&& piece) {
  size_t offset = 0, begin = 0, end = 0;
  while (offset < text.size() && regex.find(text, offset, scratch, &begin, &end)) {
    if (begin > offset) piece(offset, begin);
    piece(begin, end);
    offset = end;
  }
  if (offset < text.size()) piece(offset, text.size());
}

/// Whether the pre-tokenization always starts a piece at a space between two non-space ASCII
/// characters, whatever text surrounds them, and the pieces before it do not depend on the text
/// after it: true of GPT-2's pattern (in tiktoken's and in tokenizers' spelling) and of Llama 3's
/// and Qwen2's, which every match of is one of \p{L}, \p{N}, [^\s\p{L}\p{N}] or \s runs (a
/// letter run may take one non-letter, non-newline character before it, the space here) without
/// lookbehind. For such patterns text cut at that space encodes to the same ids as a whole.
ZERO_INTERNAL_API bool starts_piece_at_space_between_ascii(const std::string& pattern);

/// Whether text[at] is a space between two non-space ASCII characters (0 < at < size - 1).
inline bool is_space_between_ascii(std::string_view text, size_t at) {
  const auto plain = [&](size_t i) {
    const auto c = static_cast<unsigned char>(text[i]);
    return c > 0x20 && c < 0x7F;
  };
  return at > 0 && at + 1 < text.size() && text[at] == ' ' && plain(at - 1) && plain(at + 1);
}

/// The ids of `text` over `threads` threads: cut into chunks (several per thread, taken in turn)
/// at positions `next_cut(at)` proposes (the first allowed cut at or after `at`, or text.size()
/// when there is none), each chunk [begin, end) encoded by `encode_chunk(begin, end, out)`
/// (appending to `out`, from any thread), the results concatenated in order. Exact when a cut
/// never changes the ids, which is what `next_cut` must guarantee. `progress` (if given) is
/// called from the calling thread with the bytes done so far. The first exception a chunk
/// throws is rethrown once every thread has stopped.
ZERO_INTERNAL_API std::vector<int32_t> encode_in_parallel(
    std::string_view text, int threads, const std::function<size_t(size_t at)>& next_cut,
    const std::function<void(size_t begin, size_t end, std::vector<int32_t>& out)>& encode_chunk,
    const std::function<void(int64_t)>& progress);

}  // namespace zero
