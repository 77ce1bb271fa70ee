// HfTokenizer (include/zero/hf_tokenizer.h): encoding and decoding. Loading is in
// hf_tokenizer_load.cpp.
#include <algorithm>
#include <cstring>
#include <iomanip>
#include <limits>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "data/hf_tokenizer_impl.h"
#include "data/utf8.h"
#include "zero/error.h"

namespace zero {
namespace {

constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();

// Words of at most this many symbols are merged by scanning for the lowest-ranked pair, the
// fastest for the short pieces of text; longer ones with a heap, as tokenizers does, since a
// long piece (a text without pre-tokenization, a long run of one character) would make the
// scan quadratic. Both merge as tokenizers' Word::merge_all: its heap pops the lowest (rank,
// position) and skips an entry whose pair no longer makes the entry's token; since a merge
// only lengthens the symbols it touches (and a pair's token is their concatenation), a skipped
// entry could never match again, so each merge is of the lowest-ranked pair present, leftmost
// on a tie (equal ranks are the same pair) - what the scan picks.
constexpr size_t kScanLimit = 64;

// A piece's ids are cached per encode call for pieces that are not one token (they need the
// merge loop); natural text repeats its rare words. Bounded: cleared when full.
constexpr size_t kCacheEntries = 1 << 16;

// The lowest-ranked adjacent pair merged first (leftmost on a tie), until no pair merges.
void merge_by_scan(const MergeTable& merges, std::vector<int32_t>& symbols) {
  struct Part {
    int32_t id;
    uint32_t rank;   // of the pair (this part, the next), kNoMerge when it does not merge
    int32_t merged;  // the pair's merged id
  };
  std::vector<Part> parts(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) parts[i].id = symbols[i];
  const auto pair_at = [&](size_t i) {
    const MergeTable::Merge* merge =
        i + 1 < parts.size() ? merges.find(parts[i].id, parts[i + 1].id) : nullptr;
    parts[i].rank = merge != nullptr ? merge->rank : kNoMerge;
    parts[i].merged = merge != nullptr ? merge->merged : -1;
  };
  for (size_t i = 0; i < parts.size(); ++i) pair_at(i);
  for (;;) {
    size_t best = parts.size();
    uint32_t best_rank = kNoMerge;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].rank < best_rank) {
        best_rank = parts[i].rank;
        best = i;
      }
    }
    if (best == parts.size()) break;
    parts[best].id = parts[best].merged;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    pair_at(best);
    if (best > 0) pair_at(best - 1);
  }
  symbols.resize(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) symbols[i] = parts[i].id;
}

// The same merges in tokenizers' Word::merge_all: a heap of candidate pairs by (rank,
// position); an entry whose pair has changed since it was pushed is skipped.
void merge_by_heap(const MergeTable& merges, std::vector<int32_t>& symbols) {
  struct Symbol {
    int32_t id;
    int64_t prev;  // -1: none
    int64_t next;  // -1: none
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    size_t position;  // of the pair's left symbol
    int32_t merged;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
  };
  const auto n = static_cast<int64_t>(symbols.size());
  std::vector<Symbol> word(symbols.size());
  for (int64_t i = 0; i < n; ++i) {
    word[static_cast<size_t>(i)] = {symbols[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1,
                                    true};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto push_pair = [&](size_t left) {
    const Symbol& symbol = word[left];
    if (symbol.next < 0) return;
    const MergeTable::Merge* merge =
        merges.find(symbol.id, word[static_cast<size_t>(symbol.next)].id);
    if (merge != nullptr) queue.push({merge->rank, left, merge->merged});
  };
  for (size_t i = 0; i < word.size(); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = word[top.position];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = word[static_cast<size_t>(left.next)];
    const MergeTable::Merge* merge = merges.find(left.id, right.id);
    if (merge == nullptr || merge->merged != top.merged) continue;  // an expired entry
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) {
      word[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.position);
    }
    if (left.prev >= 0) push_pair(static_cast<size_t>(left.prev));
    push_pair(top.position);
  }
  symbols.clear();
  for (const Symbol& symbol : word) {
    if (symbol.alive) symbols.push_back(symbol.id);
  }
}

std::string code_point_name(uint32_t cp) {
  std::ostringstream name;
  name << "U+" << std::hex << std::uppercase << std::setw(4) << std::setfill('0') << cp;
  return name.str();
}

// The per-call state of encode_range: a PCRE2 scratch per regex and the cache of pieces.
class RangeEncoder {
 public:
  RangeEncoder(const HfTokenizer::Impl& impl, std::vector<int32_t>& out) : impl_(impl), out_(out) {
    for (const PreTokenizationRegex& regex : impl.pretokenizers) {
      scratch_.push_back(std::make_unique<PreTokenizationRegex::Scratch>(regex));
    }
  }

  // Pre-tokenizer `step` on `piece` (each regex splits every piece of the one before), then
  // BPE on each final piece.
  void encode(std::string_view piece, size_t step = 0) {
    if (step == impl_.pretokenizers.size()) {
      encode_word(piece);
      return;
    }
    const auto next_step = [&](size_t begin, size_t end) {
      encode(piece.substr(begin, end - begin), step + 1);
    };
    split_isolated(impl_.pretokenizers[step], *scratch_[step], piece, next_step);
  }

 private:
  void encode_word(std::string_view word) {
    const uint32_t whole = impl_.whole_words.find(word);
    if (whole != TokenTable::kAbsent) {
      out_.push_back(static_cast<int32_t>(whole));
      return;
    }
    auto it = cache_.find(word);
    if (it == cache_.end()) {
      if (cache_.size() >= kCacheEntries) {
        cache_.clear();
        cached_ids_.clear();
      }
      const size_t first = cached_ids_.size();
      impl_.merge_word(word, cached_ids_);
      it = cache_.emplace(word, std::make_pair(first, cached_ids_.size() - first)).first;
    }
    const auto first = cached_ids_.begin() + static_cast<std::ptrdiff_t>(it->second.first);
    out_.insert(out_.end(), first, first + static_cast<std::ptrdiff_t>(it->second.second));
  }

  const HfTokenizer::Impl& impl_;
  std::vector<int32_t>& out_;
  std::vector<std::unique_ptr<PreTokenizationRegex::Scratch>> scratch_;
  // Piece -> (first, count) of its ids in cached_ids_. Keys view the text being encoded.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache_;
  std::vector<int32_t> cached_ids_;
};

}  // namespace

MergeTable::MergeTable(size_t capacity) { rebuild(capacity); }

void MergeTable::rebuild(size_t capacity) {
  int bits = 4;
  while ((size_t{1} << bits) < 2 * capacity) ++bits;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(size_t{1} << bits, Slot{});
  mask_ = slots_.size() - 1;
  shift_ = 64 - bits;
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key == kEmpty) continue;
    for (size_t i = slot_of(slot.key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = slot;
        ++size_;
        break;
      }
    }
  }
}

void MergeTable::set(int32_t left, int32_t right, Merge merge) {
  ZERO_INTERNAL_ASSERT(left >= 0 && right >= 0, "merge of negative ids ", left, ", ", right);
  if (2 * (size_ + 1) > slots_.size()) rebuild(2 * (size_ + 1));
  const uint64_t key = key_of(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == key) {
      slot.merge = merge;
      return;
    }
    if (slot.key == kEmpty) {
      slot = {key, merge};
      ++size_;
      return;
    }
  }
}

void AddedTokenMatcher::add(std::string content, int32_t id) {
  ZERO_INTERNAL_ASSERT(!content.empty(), "an empty added token");
  tokens_.push_back({std::move(content), id});
}

void AddedTokenMatcher::finish() {
  for (auto& group : by_first_byte_) group.clear();
  for (uint32_t k = 0; k < tokens_.size(); ++k) {
    by_first_byte_[static_cast<unsigned char>(tokens_[k].content[0])].push_back(k);
  }
  int firsts = 0;
  for (int b = 0; b < 256; ++b) {
    auto& group = by_first_byte_[static_cast<size_t>(b)];
    if (group.empty()) continue;
    ++firsts;
    only_first_byte_ = b;
    std::stable_sort(group.begin(), group.end(), [&](uint32_t x, uint32_t y) {
      return tokens_[x].content.size() > tokens_[y].content.size();
    });
  }
  if (firsts != 1) only_first_byte_ = -1;
}

bool AddedTokenMatcher::find(std::string_view text, size_t begin, size_t end,
                             size_t* match_begin, size_t* length, int32_t* id) const {
  if (tokens_.empty()) return false;
  for (size_t at = begin; at < end; ++at) {
    if (only_first_byte_ >= 0) {
      const void* hit = std::memchr(text.data() + at, only_first_byte_, end - at);
      if (hit == nullptr) return false;
      at = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
    }
    for (const uint32_t k : by_first_byte_[static_cast<unsigned char>(text[at])]) {
      const std::string& content = tokens_[k].content;
      if (content.size() <= end - at && std::memcmp(text.data() + at, content.data(),
                                                    content.size()) == 0) {
        *match_begin = at;
        *length = content.size();
        *id = tokens_[k].id;
        return true;
      }
    }
  }
  return false;
}

void HfTokenizer::Impl::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // One symbol per byte (the byte-level alphabet's character). A byte that is no token becomes
  // unk_token (consecutive ones one unk_token with fuse_unk), or is dropped without one, as in
  // tokenizers' BPE::merge_word.
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  bool unknown = false;  // an unk_token is pending
  for (const char c : word) {
    const int32_t id = byte_ids[static_cast<unsigned char>(c)];
    if (id >= 0) {
      if (unknown) symbols.push_back(*unk_id);
      unknown = false;
      symbols.push_back(id);
      continue;
    }
    if (!unk_token) continue;
    ZERO_CHECK(unk_id.has_value(), "tokenizer '", path, "': byte ",
               static_cast<int>(static_cast<unsigned char>(c)), " is no token, and unk_token \"",
               *unk_token, "\" is not in model.vocab");
    if (unknown && !fuse_unk) symbols.push_back(*unk_id);
    unknown = true;
  }
  if (unknown) symbols.push_back(*unk_id);
  if (symbols.size() <= kScanLimit) {
    merge_by_scan(merges, symbols);
  } else {
    merge_by_heap(merges, symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::vector<TextSegment> HfTokenizer::Impl::segments(std::string_view text,
                                                     const std::string& what) const {
  std::vector<TextSegment> out;
  // The runs between `matcher`'s tokens in text[begin, end) as text segments.
  const auto split = [&](const AddedTokenMatcher& matcher, size_t begin, size_t end,
                         const auto& text_run) {
    size_t at = begin, match = 0, length = 0;
    int32_t id = -1;
    while (at < end && matcher.find(text, at, end, &match, &length, &id)) {
      if (match > at) text_run(at, match);
      out.push_back({match, match + length, id});
      at = match + length;
    }
    if (at < end) text_run(at, end);
  };
  const auto normalized_run = [&](size_t begin, size_t end) {
    if (nfc) {
      // Code points below U+0300 have lead bytes below 0xCC (continuation bytes are 80..BF):
      // text without a byte from 0xCC up is NFC already.
      for (size_t at = begin; at < end; ++at) {
        if (static_cast<unsigned char>(text[at]) < 0xCC) continue;
        const uint32_t cp = utf8::code_point(text, at, utf8::sequence_length(text, at));
        ZERO_CHECK(false, what, ": NFC normalization (the tokenizer's normalizer) is implemented ",
                   "only for text whose code points are all below U+0300, which it leaves as it is;"
                   " this text has ", code_point_name(cp), " at byte offset ", at);
      }
    }
    split(normalized_added, begin, end,
          [&](size_t run_begin, size_t run_end) { out.push_back({run_begin, run_end, -1}); });
  };
  split(raw_added, 0, text.size(), normalized_run);
  return out;
}

void HfTokenizer::Impl::encode_range(std::string_view text,
                                     const std::vector<TextSegment>& segments, size_t begin,
                                     size_t end, std::vector<int32_t>& out) const {
  RangeEncoder encoder(*this, out);
  auto segment = std::upper_bound(segments.begin(), segments.end(), begin,
                                  [](size_t at, const TextSegment& s) { return at < s.end; });
  for (; segment != segments.end() && segment->begin < end; ++segment) {
    if (segment->added_id >= 0) {
      out.push_back(segment->added_id);
      continue;
    }
    // A cut inside a text run splits it: its halves are pre-tokenized on their own, which the
    // cut rule makes equal to the whole's pieces.
    const size_t from = std::max(segment->begin, begin), to = std::min(segment->end, end);
    encoder.encode(text.substr(from, to - from));
  }
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

std::vector<int32_t> HfTokenizer::encode(std::string_view text, const std::string& what) const {
  utf8::check_valid(text, what);
  const std::vector<TextSegment> segments = impl_->segments(text, what);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 16);
  impl_->encode_range(text, segments, 0, text.size(), out);
  return out;
}

std::vector<int32_t> HfTokenizer::encode_parallel(
    std::string_view text, int threads, const std::string& what,
    const std::function<void(int64_t)>& progress) const {
  utf8::check_valid(text, what);
  // Found serially: the added tokens (a cut must not fall inside one, and a match depends on
  // where the previous one ended) and what NFC refuses (so the error is the first one).
  const std::vector<TextSegment> segments = impl_->segments(text, what);
  // The first allowed cut at or after `at`: a segment boundary (each text run is pre-tokenized
  // on its own), or, with space_cuts, a space between two non-space ASCII characters of a text
  // run (Note on starts_piece_at_space_between_ascii in pretokenizer.h).
  const auto next_cut = [&](size_t at) {
    while (at < text.size()) {
      const auto segment = std::upper_bound(
          segments.begin(), segments.end(), at,
          [](size_t position, const TextSegment& s) { return position < s.end; });
      if (segment->begin == at) return at;
      if (segment->added_id < 0 && impl_->space_cuts) {
        for (size_t space = at; space + 1 < segment->end; ++space) {
          if (space > segment->begin && is_space_between_ascii(text, space)) return space;
        }
      }
      at = segment->end;
    }
    return text.size();
  };
  return encode_in_parallel(
      text, threads, next_cut,
      [&](size_t begin, size_t end, std::vector<int32_t>& out) {
        impl_->encode_range(text, segments, begin, end, out);
      },
      progress);
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (const int64_t id : ids) {
    ZERO_CHECK(id >= 0 && id < vocab_size() && impl_->is_token[static_cast<size_t>(id)],
               "tokenizer '", impl_->path, "': id ", id, " is no token (the vocab size is ",
               vocab_size(), ")");
    out += impl_->token_bytes[static_cast<size_t>(id)];
  }
  return out;
}

int64_t HfTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->token_bytes.size());
}
std::optional<int32_t> HfTokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> HfTokenizer::eos_id() const { return impl_->eos_id; }
const std::string& HfTokenizer::path() const { return impl_->path; }

}  // namespace zero
