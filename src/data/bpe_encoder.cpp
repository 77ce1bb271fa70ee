// GPT2Encoder (include/zero/tokenizer.h): GPT-2's byte-level BPE, exactly as tiktoken computes
// it. The pre-tokenization regex runs in PCRE2 (src/data/pretokenizer.h): a real regex engine
// with Unicode properties, not hand-written matching, so \p{L}, \p{N} and \s mean what they
// mean to tiktoken's regex crate.
#include <algorithm>
#include <unordered_map>

#include "common/bounded_input.h"
#include "data/byte_level.h"
#include "data/pretokenizer.h"
#include "data/token_table.h"
#include "data/utf8.h"
#include "zero/error.h"
#include "zero/tokenizer.h"

namespace zero {
namespace {

// tiktoken's r50k_base / gpt2 pattern (GPT-2's own, its contractions folded into one group).
constexpr const char* kPattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr uint32_t kNoRank = TokenTable::kAbsent;

// A piece's ids are cached per encode call for pieces that are not one token (they need the
// merge loop); natural text repeats its rare words. Bounded: cleared when full.
constexpr size_t kCacheEntries = 1 << 16;

}  // namespace

struct GPT2Encoder::Impl {
  GPT2Decoder decoder;
  // Token bytes -> id (= merge rank).
  TokenTable ids;
  PreTokenizationRegex pattern{kPattern, "GPT-2's pre-tokenization pattern"};

  uint32_t rank(std::string_view bytes) const {
    return ids.find(bytes);
  }

  // tiktoken's _byte_pair_merge, step for step: the boundaries of `piece` and the rank of the
  // pair starting at each; the lowest-ranked pair (leftmost on a tie) is merged until none is
  // a token.
  void merge(std::string_view piece, std::vector<int32_t>& out) const {
    struct Part {
      size_t start;
      uint32_t rank;
    };
    std::vector<Part> parts;
    parts.reserve(piece.size() + 1);
    uint32_t min_rank = kNoRank;
    size_t min_at = 0;
    for (size_t i = 0; i + 1 < piece.size(); ++i) {
      const uint32_t r = rank(piece.substr(i, 2));
      if (r < min_rank) {
        min_rank = r;
        min_at = i;
      }
      parts.push_back({i, r});
    }
    parts.push_back({piece.size() - 1, kNoRank});
    parts.push_back({piece.size(), kNoRank});
    const auto rank_at = [&](size_t i) {
      if (i + 3 < parts.size()) {
        return rank(piece.substr(parts[i].start, parts[i + 3].start - parts[i].start));
      }
      return kNoRank;
    };
    while (min_rank != kNoRank) {
      const size_t i = min_at;
      if (i > 0) parts[i - 1].rank = rank_at(i - 1);
      parts[i].rank = rank_at(i);
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      min_rank = kNoRank;
      for (size_t k = 0; k + 1 < parts.size(); ++k) {
        if (parts[k].rank < min_rank) {
          min_rank = parts[k].rank;
          min_at = k;
        }
      }
    }
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      const uint32_t id = rank(piece.substr(parts[k].start, parts[k + 1].start - parts[k].start));
      ZERO_INTERNAL_ASSERT(id != kNoRank, "BPE left a part that is no token");
      out.push_back(static_cast<int32_t>(id));
    }
  }

  // The ids of valid UTF-8 `text`, appended to `out`.
  void encode_valid(std::string_view text, std::vector<int32_t>& out) const {
    PreTokenizationRegex::Scratch scratch(pattern);
    std::unordered_map<std::string_view, std::vector<int32_t>> cache;
    // GPT-2's pattern matches every character, so the pieces are its matches.
    split_isolated(pattern, scratch, text, [&](size_t begin, size_t end) {
      const std::string_view piece = text.substr(begin, end - begin);
      const uint32_t whole = rank(piece);
      if (whole != kNoRank) {
        out.push_back(static_cast<int32_t>(whole));
        return;
      }
      auto it = cache.find(piece);
      if (it == cache.end()) {
        if (cache.size() >= kCacheEntries) cache.clear();
        std::vector<int32_t> merged;
        merge(piece, merged);
        it = cache.emplace(piece, std::move(merged)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    });
  }
};

GPT2Encoder::GPT2Encoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GPT2Encoder::GPT2Encoder(GPT2Encoder&&) noexcept = default;
GPT2Encoder& GPT2Encoder::operator=(GPT2Encoder&&) noexcept = default;
GPT2Encoder::~GPT2Encoder() = default;

int64_t GPT2Encoder::vocab_size() const { return impl_->decoder.vocab_size(); }
const GPT2Decoder& GPT2Encoder::decoder() const { return impl_->decoder; }

GPT2Encoder GPT2Encoder::load(const std::string& encoder_json_path,
                              const std::string& vocab_bpe_path) {
  auto impl = std::make_unique<Impl>();
  impl->decoder = GPT2Decoder::load(encoder_json_path);
  const GPT2Decoder& decoder = impl->decoder;
  const int64_t n = decoder.vocab_size();
  // GPT-2's layout: ids 0..255 are the single bytes (in bytes_to_unicode order), then one id
  // per merge, in vocab.bpe's order; the last id may be a special token (<|endoftext|>).
  ZERO_CHECK(n >= 256, "GPT-2 encoder '", encoder_json_path, "': ", n,
             " tokens, fewer than the 256 single bytes");
  const auto& byte_to_unicode = gpt2_byte_to_unicode();
  std::vector<uint32_t> order(256);
  for (int b = 0; b < 256; ++b) order[b] = static_cast<uint32_t>(b);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return byte_to_unicode[a] < byte_to_unicode[b]; });
  for (int64_t id = 0; id < 256; ++id) {
    const std::string& bytes = decoder.token_bytes(id);
    ZERO_CHECK(bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) == order[id],
               "GPT-2 encoder '", encoder_json_path, "': id ", id,
               " should be the single byte ", order[id], " (GPT-2's byte order)");
  }
  impl->ids = TokenTable(static_cast<size_t>(n));
  for (int64_t id = 0; id < n; ++id) {
    const std::string& bytes = decoder.token_bytes(id);
    ZERO_CHECK(!bytes.empty(), "GPT-2 encoder '", encoder_json_path, "': id ", id, " is empty");
    ZERO_CHECK(impl->ids.insert(bytes, static_cast<uint32_t>(id)),
               "GPT-2 encoder '", encoder_json_path, "': id ", id,
               " has the same bytes as an earlier token");
  }
  // vocab.bpe: "#version" then "A B" per line; merge i must make token 256 + i.
  const std::string text = read_regular_file(vocab_bpe_path, "GPT-2 vocab.bpe", kMaxEncoderBytes);
  const auto to_bytes = [&](std::string_view symbols, int64_t line) {
    std::string bytes;
    uint32_t outside = 0;
    if (!byte_level::to_bytes(symbols, &bytes, &outside)) {
      ZERO_CHECK(outside != byte_level::kNotUtf8, "GPT-2 vocab.bpe '", vocab_bpe_path,
                 "' line ", line, ": not valid UTF-8");
      ZERO_CHECK(false, "GPT-2 vocab.bpe '", vocab_bpe_path, "' line ", line,
                 ": a symbol outside GPT-2's byte-to-unicode table");
    }
    return bytes;
  };
  int64_t line = 0, merges = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view row(text.data() + begin, end - begin);
    begin = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    if (row.empty() || (line == 1 && row.rfind("#version", 0) == 0)) continue;
    const size_t space = row.find(' ');
    ZERO_CHECK(space != std::string_view::npos && space > 0 && space + 1 < row.size() &&
                   row.find(' ', space + 1) == std::string_view::npos,
               "GPT-2 vocab.bpe '", vocab_bpe_path, "' line ", line,
               ": expected two symbols separated by one space");
    const std::string merged =
        to_bytes(row.substr(0, space), line) + to_bytes(row.substr(space + 1), line);
    const uint32_t id = impl->rank(merged);
    ZERO_CHECK(id == static_cast<uint32_t>(256 + merges), "GPT-2 vocab.bpe '", vocab_bpe_path,
               "' line ", line, ": merge ", merges, " should make token ", 256 + merges,
               " of '", encoder_json_path, "', but ",
               id == kNoRank ? std::string("its result is no token")
                             : "it makes token " + std::to_string(id));
    ++merges;
  }
  ZERO_CHECK(256 + merges == n || 256 + merges + 1 == n, "GPT-2 vocab.bpe '", vocab_bpe_path,
             "' has ", merges, " merges for the ", n, " tokens of '", encoder_json_path,
             "' (expected ", n - 256, ", or one fewer with a special token last)");

  return GPT2Encoder(std::move(impl));
}

std::vector<int32_t> GPT2Encoder::encode(std::string_view text, const std::string& what) const {
  utf8::check_valid(text, what);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 16);
  impl_->encode_valid(text, out);
  return out;
}

std::vector<int32_t> GPT2Encoder::encode_lossy(std::string_view bytes) const {
  if (utf8::first_invalid(bytes) < 0) return encode(bytes);
  const std::string replaced = utf8::replace_invalid(bytes);
  std::vector<int32_t> out;
  impl_->encode_valid(replaced, out);
  return out;
}

std::vector<int32_t> GPT2Encoder::encode_parallel(
    std::string_view text, int threads, const std::string& what,
    const std::function<void(int64_t)>& progress) const {
  utf8::check_valid(text, what);
  // Cut at a space between two non-space ASCII characters: there the pattern starts a new
  // piece whatever came before (no piece spans a space but as its first character, and the
  // space begins " ?X" for the character after), so the ids are encode()'s.
  const auto next_cut = [&](size_t at) {
    while (at < text.size() && !is_space_between_ascii(text, at)) ++at;
    return at;
  };
  return encode_in_parallel(
      text, threads, next_cut,
      [&](size_t begin, size_t end, std::vector<int32_t>& out) {
        impl_->encode_valid(text.substr(begin, end - begin), out);
      },
      progress);
}

}  // namespace zero
