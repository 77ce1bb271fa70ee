#include "data/token_table.h"

#include "zero/error.h"

namespace zero {

TokenTable::TokenTable(size_t capacity) { rebuild(capacity); }

bool TokenTable::tail_equal(size_t slot, std::string_view bytes) const {
  return std::memcmp(tails_.data() + tail_at_[slot], bytes.data() + 8, bytes.size() - 8) == 0;
}

void TokenTable::place(const Slot& slot, uint32_t tail, std::string_view bytes) {
  for (size_t i = slot_of(bytes, slot.head);; i = (i + 1) & mask_) {
    if (slots_[i].length == 0) {
      slots_[i] = slot;
      tail_at_[i] = tail;
      return;
    }
  }
}

void TokenTable::rebuild(size_t capacity) {
  // At most half full: linear probing's expected probes stay below 2.5 for a miss.
  int bits = 4;
  while ((size_t{1} << bits) < 2 * capacity) ++bits;
  std::vector<Slot> old = std::move(slots_);
  std::vector<uint32_t> old_tail_at = std::move(tail_at_);
  slots_.assign(size_t{1} << bits, Slot{});
  tail_at_.assign(slots_.size(), 0);
  mask_ = slots_.size() - 1;
  shift_ = 64 - bits;
  for (size_t k = 0; k < old.size(); ++k) {
    const Slot& slot = old[k];
    if (slot.length == 0) continue;
    std::string key(reinterpret_cast<const char*>(&slot.head), slot.length < 8 ? slot.length : 8);
    if (slot.length > 8) key.append(tails_, old_tail_at[k], slot.length - 8);
    place(slot, old_tail_at[k], key);
  }
}

bool TokenTable::insert(std::string_view bytes, uint32_t id) {
  ZERO_INTERNAL_ASSERT(!bytes.empty() && id != kAbsent && bytes.size() < (1ull << 32),
                       "TokenTable: a key of ", bytes.size(), " bytes with id ", id);
  if (find(bytes) != kAbsent) return false;
  if (2 * (size_ + 1) > slots_.size()) rebuild(2 * (size_ + 1));
  Slot slot;
  slot.head = load_head(bytes);
  slot.length = static_cast<uint32_t>(bytes.size());
  slot.id = id;
  uint32_t tail = 0;
  if (bytes.size() > 8) {
    ZERO_INTERNAL_ASSERT(tails_.size() + bytes.size() < (1ull << 32),
                         "TokenTable: more than 4 GiB of key bytes");
    tail = static_cast<uint32_t>(tails_.size());
    tails_.append(bytes.substr(8));
  }
  place(slot, tail, bytes);
  ++size_;
  return true;
}

}  // namespace zero
