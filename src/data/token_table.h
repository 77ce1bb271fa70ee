// TokenTable: a fixed vocabulary's bytes -> id, the GPT-2 encoder's inner-loop lookup (every
// pre-tokenized piece and every candidate pair of the merge loop is one find()).
//
// Hand-written rather than std::unordered_map or a library's flat map, because the profile of
// the encoder was 40 % std::unordered_map<std::string_view> (a node per key, a cache miss per
// chain step, a memcmp per candidate) and what makes it fast is specific to this use: the table
// is built once and only read, and almost every key (every GPT-2 token but 6 %) is at most 8
// bytes, so a slot holds those bytes as one integer and a probe compares integers, never bytes.
// Open addressing, linear probing, load factor at most 1/2.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

class TokenTable {
 public:
  static constexpr uint32_t kAbsent = std::numeric_limits<uint32_t>::max();

  /// Room for `capacity` keys without rehashing (the table never grows past it).
  explicit TokenTable(size_t capacity = 0);

  /// Adds `bytes` -> `id`; false (and nothing changed) when `bytes` is already a key. Keys are
  /// non-empty; ids below kAbsent. Inserting beyond the capacity grows the table.
  bool insert(std::string_view bytes, uint32_t id);

  /// The id of `bytes`, or kAbsent.
  uint32_t find(std::string_view bytes) const {
    const uint64_t head = load_head(bytes);
    for (size_t i = slot_of(bytes, head);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.length == 0) return kAbsent;
      if (slot.head == head && slot.length == bytes.size() &&
          (bytes.size() <= 8 || tail_equal(i, bytes))) {
        return slot.id;
      }
    }
  }

  size_t size() const { return size_; }

 private:
  // Invariant: length == 0 marks an empty slot; `head` is the key's first (up to) 8 bytes,
  // zero-padded; a key longer than 8 bytes in slot i keeps its remaining bytes at
  // tails_[tail_at_[i]] (a parallel array: 16-byte slots, 4 to a cache line).
  struct Slot {
    uint64_t head = 0;
    uint32_t length = 0;
    uint32_t id = 0;
  };

  // The first min(8, size) bytes as a little-endian integer, zero-padded, reading only the
  // key's bytes: two overlapping loads cover 2..8 bytes (their common bytes agree, so OR is
  // exact); no variable-length memcpy call in the inner loop.
  static uint64_t load_head(std::string_view bytes) {
    const char* p = bytes.data();
    const size_t n = bytes.size();
    if (n >= 8) return load<uint64_t>(p);
    if (n >= 4) {
      return load<uint32_t>(p) | (static_cast<uint64_t>(load<uint32_t>(p + n - 4)) << (8 * (n - 4)));
    }
    if (n >= 2) {
      return load<uint16_t>(p) | (static_cast<uint64_t>(load<uint16_t>(p + n - 2)) << (8 * (n - 2)));
    }
    return n == 1 ? static_cast<unsigned char>(p[0]) : 0;
  }

  template <typename T>
  static uint64_t load(const char* p) {
    T value;
    std::memcpy(&value, p, sizeof(T));
    return value;
  }

  // Fibonacci hashing of the head, the length and (for long keys) the last 8 bytes: keys that
  // share their first 8 bytes (" internal", " internat...") still spread.
  size_t slot_of(std::string_view bytes, uint64_t head) const {
    uint64_t mixed = head ^ (static_cast<uint64_t>(bytes.size()) << 59);
    if (bytes.size() > 8) {
      mixed ^= (load<uint64_t>(bytes.data() + bytes.size() - 8) + kTailSalt) * kMultiplier;
    }
    return static_cast<size_t>((mixed * kMultiplier) >> shift_);
  }

  static constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio
  static constexpr uint64_t kTailSalt = 0x632BE59BD9B4E019ull;
  bool tail_equal(size_t slot, std::string_view bytes) const;
  void place(const Slot& slot, uint32_t tail, std::string_view bytes);
  void rebuild(size_t capacity);

  std::vector<Slot> slots_;
  std::vector<uint32_t> tail_at_;
  std::string tails_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace zero
