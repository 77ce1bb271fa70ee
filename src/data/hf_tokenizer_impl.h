// HfTokenizer's state (include/zero/hf_tokenizer.h): what hf_tokenizer_load.cpp builds from
// tokenizer.json and hf_tokenizer.cpp encodes and decodes with.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/pretokenizer.h"
#include "data/token_table.h"
#include "zero/hf_tokenizer.h"

namespace zero {

/// (left id, right id) -> (rank, merged id): a BPE model's merges, looked up for every adjacent
/// pair of symbols. Open addressing with linear probing, at most half full, built once.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };

  explicit MergeTable(size_t capacity = 0);
  /// Sets the merge of (left, right); a pair listed twice keeps its later rank, as tokenizers'
  /// map of merges does. Ids are non-negative.
  void set(int32_t left, int32_t right, Merge merge);

  /// The merge of (left, right), or nullptr.
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = key_of(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  // No pair of non-negative ids has this key.
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{0, 0};
  };
  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);  // Fibonacci hashing
  }
  void rebuild(size_t capacity);

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

/// The added tokens of one kind ("normalized" true or false) and their leftmost-longest matching,
/// as tokenizers' Aho-Corasick automaton with MatchKind::LeftmostLongest finds them: the match
/// starting first, the longest of those starting there, then on after its end.
class AddedTokenMatcher {
 public:
  void add(std::string content, int32_t id);
  /// Call after the last add().
  void finish();
  bool empty() const { return tokens_.empty(); }

  /// The first match in text[begin, end) as [*match_begin, *match_begin + length) with its id;
  /// false when there is none.
  bool find(std::string_view text, size_t begin, size_t end, size_t* match_begin,
            size_t* length, int32_t* id) const;

 private:
  struct Token {
    std::string content;
    int32_t id;
  };
  std::vector<Token> tokens_;
  // Per first byte, the tokens starting with it, longest first: the first that matches at a
  // position is the longest match there.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
  // The one first byte all tokens share (scanned for with memchr), or -1.
  int only_first_byte_ = -1;
};

/// A run of the text: an added token (its id) or text to pre-tokenize (added_id < 0).
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t added_id;
};

struct HfTokenizer::Impl {
  std::string path;            // tokenizer.json
  std::string config_path;     // tokenizer_config.json, or empty when absent

  // --- The BPE model.
  // The id of each byte's character of the byte-level alphabet, or -1 when it is no token.
  std::array<int32_t, 256> byte_ids{};
  MergeTable merges;
  bool ignore_merges = false;
  // unk_token (nullopt when null); its id, or nullopt when it is no token (then encoding a byte
  // that is no token fails, as in tokenizers).
  std::optional<std::string> unk_token;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  // Pieces whose BPE is one token, by their bytes: every byte-level token with ignore_merges,
  // else those the merges make whole. A piece found here needs no merging.
  TokenTable whole_words;

  // --- Added tokens, matched in the raw text (normalized false) and then in the text between
  // (normalized true).
  AddedTokenMatcher raw_added;
  AddedTokenMatcher normalized_added;

  // --- Normalizer: NFC, implemented for the text it leaves unchanged (code points < U+0300).
  bool nfc = false;

  // --- Pre-tokenizer: the Split/Digits/ByteLevel regexes, each splitting every piece of the
  // one before ("Isolated").
  std::vector<PreTokenizationRegex> pretokenizers;
  // Whether a space between two non-space ASCII characters always starts a piece (the first
  // regex but Digits is GPT-2's, Llama 3's or Qwen2's): encode_parallel cuts there too.
  bool space_cuts = false;

  // --- Decoding: id -> bytes (ByteLevel decoder), and whether the id names a token.
  std::vector<std::string> token_bytes;
  std::vector<bool> is_token;

  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;

  /// BPE of one piece's bytes (no cache), appended to `out`: tokenizers' BPE::merge_word and
  /// Word::merge_all without dropout.
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  /// The added tokens and text runs of valid UTF-8 `text`, in order, covering it. Throws
  /// zero::Error ("`what` ...") for text NFC would have to change.
  std::vector<TextSegment> segments(std::string_view text, const std::string& what) const;

  /// The ids of text[begin, end), whose ends are segment boundaries or cuts that cannot change
  /// the ids (see encode_parallel), appended to `out`.
  void encode_range(std::string_view text, const std::vector<TextSegment>& segments,
                    size_t begin, size_t end, std::vector<int32_t>& out) const;
};

}  // namespace zero
