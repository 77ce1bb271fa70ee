#include "state/param_store.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>
#include <limits>

#include "offload/swap_directory.h"
#include "offload/swap_file.h"
#include "zero/error.h"

namespace zero {
namespace {

void check_covering(const std::vector<ParamStore::Segment>& segments, int64_t numel) {
  int64_t next = 0;
  for (const ParamStore::Segment& s : segments) {
    ZERO_INTERNAL_ASSERT(s.offset == next && s.numel >= 0, "parameter segment at ", s.offset,
                         " of ", s.numel, " elements, expected one at ", next);
    next += s.numel;
  }
  ZERO_INTERNAL_ASSERT(numel < 0 || next == numel, "parameter segments cover ", next,
                       " elements of ", numel);
}

}  // namespace

ParamStore::ParamStore(at::Tensor params, std::vector<Segment> segments)
    : dtype_(params.scalar_type()),
      numel_(params.numel()),
      segments_(std::move(segments)),
      resident_(std::move(params)) {
  ZERO_INTERNAL_ASSERT(resident_.dim() == 1 && resident_.is_contiguous(),
                       "parameter store over a tensor that is not flat and contiguous");
  if (segments_.empty()) segments_.push_back({0, numel_, false});
  check_covering(segments_, numel_);
  for (const Segment& s : segments_) {
    ZERO_INTERNAL_ASSERT(!s.swapped, "an in-memory parameter store with a swapped segment");
    resident_offset_.push_back(s.offset);
    file_offset_.push_back(-1);
    slot_of_.push_back(-1);
  }
}

ParamStore::ParamStore(at::Tensor host, std::vector<Segment> segments, at::Tensor device,
                       std::shared_ptr<TransferQueue> queue)
    : ParamStore(std::move(host), std::move(segments)) {
  ZERO_INTERNAL_ASSERT(device.dim() == 1 && device.is_contiguous() && device.numel() == numel_ &&
                           device.scalar_type() == dtype_ && queue != nullptr,
                       "device copy of ", device.numel(), " ", device.scalar_type(),
                       " for a parameter store of ", numel_, " ", dtype_);
  device_copy_ = std::move(device);
  queue_ = std::move(queue);
}

ParamStore::ParamStore(at::ScalarType dtype, std::vector<Segment> segments,
                       const OffloadConfig& offload, AsyncIo& io, const SwapDirectory& directory,
                       const std::string& name)
    : dtype_(dtype), segments_(std::move(segments)) {
  check_covering(segments_, -1);
  int64_t resident = 0, file = 0, largest = 0, swapped = 0;
  for (const Segment& s : segments_) {
    numel_ += s.numel;
    resident_offset_.push_back(s.swapped ? -1 : resident);
    file_offset_.push_back(s.swapped ? file : -1);
    slot_of_.push_back(-1);
    if (s.swapped) {
      file += align_up(s.numel * element_size());
      largest = std::max(largest, s.numel);
      ++swapped;
    } else {
      resident += s.numel;
    }
  }
  resident_ = at::zeros({resident}, at::TensorOptions().dtype(dtype_));
  if (swapped == 0) return;
  file_ = std::make_unique<SwapFile>(directory.file(name + ".swp"), file, io);
  // Two at least: a pass reads one segment while it writes the one before (the parser asks
  // for buffer_count >= 2).
  const int64_t count = std::max<int64_t>(2, std::min(offload.buffer_count, swapped));
  const int64_t slot_bytes = align_up(largest * element_size());
  for (int64_t i = 0; i < count; ++i) {
    slots_.emplace_back();
    slots_.back().buffer = std::make_unique<AlignedBuffer>(slot_bytes);
  }
}

ParamStore::~ParamStore() { drain(); }

int64_t ParamStore::element_size() const {
  return static_cast<int64_t>(c10::elementSize(dtype_));
}

int64_t ParamStore::record_bytes(int s) const {
  return align_up(segments_[s].numel * element_size());
}

at::Tensor ParamStore::slot_view(int slot, int s) const {
  return at::from_blob(slots_[slot].buffer->data(), {segments_[s].numel},
                       at::TensorOptions().dtype(dtype_));
}

at::Tensor ParamStore::resident_view(int s) const {
  return resident_.narrow(0, resident_offset_[s], segments_[s].numel);
}

int ParamStore::segment_at(int64_t offset) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), offset,
                             [](int64_t o, const Segment& s) { return o < s.offset; });
  ZERO_INTERNAL_ASSERT(it != segments_.begin(), "parameter offset ", offset, " before the space");
  int s = static_cast<int>(it - segments_.begin()) - 1;
  // Empty segments share their offset with the next one: skip to the one holding `offset`.
  while (s + 1 < static_cast<int>(segments_.size()) && segments_[s].numel == 0) ++s;
  return s;
}

template <typename Fn>
void ParamStore::for_each_piece(int64_t offset, int64_t n, Fn&& fn) const {
  for (int64_t at = 0; at < n;) {
    const int s = segment_at(offset + at);
    const int64_t from = offset + at - segments_[s].offset;
    const int64_t length = std::min(n - at, segments_[s].numel - from);
    fn(s, from, at, length);
    at += length;
  }
}

void ParamStore::settle(int slot) {
  Slot& sl = slots_[slot];
  if (sl.state != SlotState::kReading && sl.state != SlotState::kWriting) return;
  try {
    AsyncIo::wait(sl.ticket);
  } catch (...) {
    sl.ticket.reset();
    if (sl.segment >= 0) slot_of_[sl.segment] = -1;
    sl.segment = -1;
    sl.state = SlotState::kEmpty;
    throw;
  }
  sl.ticket.reset();
  sl.state = SlotState::kClean;
}

int ParamStore::take_slot(const std::vector<int>& protect) {
  auto is_protected = [&](int segment) {
    return std::find(protect.begin(), protect.end(), segment) != protect.end();
  };
  int best = -1;
  int best_rank = std::numeric_limits<int>::max();  // 0 empty, 1 clean, 2 in flight
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& sl = slots_[i];
    if (sl.pins > 0 || sl.state == SlotState::kFilling) continue;
    if (sl.state != SlotState::kEmpty && is_protected(sl.segment)) continue;
    const int rank = sl.state == SlotState::kEmpty ? 0 : sl.state == SlotState::kClean ? 1 : 2;
    if (rank < best_rank || (rank == best_rank && sl.last_use < slots_[best].last_use)) {
      best = i;
      best_rank = rank;
    }
  }
  if (best < 0) return -1;
  if (slots_[best].state == SlotState::kReading) {
    try {
      settle(best);
    } catch (const Error&) {
      // A read nobody waits for any more: its failure was reported to a lease, or never
      // mattered.
    }
  } else {
    settle(best);
  }
  Slot& sl = slots_[best];
  if (sl.segment >= 0) slot_of_[sl.segment] = -1;
  sl.segment = -1;
  sl.state = SlotState::kEmpty;
  return best;
}

void ParamStore::start_read(int slot, int s) {
  Slot& sl = slots_[slot];
  // A file changed under the run fails the read's waiter, like a failed read: a gather's
  // waiter is the communicator's thread, where every rank agrees on it (stage3_engine.cpp).
  std::string changed;
  if (!in_pass_) {
    try {
      file_->check_unchanged();
    } catch (const Error& error) {
      changed = error.what();
    }
  }
  sl.ticket = changed.empty()
                  ? file_->read(sl.buffer->data(), record_bytes(s), file_offset_[s],
                                "the record of parameter segment " + std::to_string(s) +
                                    " (elements [" + std::to_string(segments_[s].offset) + ", " +
                                    std::to_string(segments_[s].offset + segments_[s].numel) +
                                    ") of this rank's parameter shard)")
                  : AsyncIo::failed(changed);
  sl.state = SlotState::kReading;
  sl.segment = s;
  sl.last_use = ++clock_;
  slot_of_[s] = slot;
}

void ParamStore::start_write(int slot) {
  Slot& sl = slots_[slot];
  sl.ticket = file_->write(sl.buffer->data(), record_bytes(sl.segment), file_offset_[sl.segment]);
  sl.state = SlotState::kWriting;
}

int ParamStore::load(int s, const std::vector<int>& protect) {
  int slot = slot_of_[s];
  if (slot < 0) {
    slot = take_slot(protect);
    ZERO_INTERNAL_ASSERT(slot >= 0, "no parameter slot free for segment ", s, " of ",
                         segments_.size(), " (", slots_.size(), " slots)");
    start_read(slot, s);
  }
  if (slots_[slot].state == SlotState::kReading) settle(slot);
  slots_[slot].last_use = ++clock_;
  return slot;
}

void ParamStore::read(int64_t offset, const at::Tensor& out) {
  ZERO_INTERNAL_ASSERT(!in_pass_, "parameter read during a pass");
  const int64_t n = out.numel();
  ZERO_INTERNAL_ASSERT(offset >= 0 && offset + n <= numel_, "parameter range [", offset, ", ",
                       offset + n, ") outside ", numel_, " elements");
  for_each_piece(offset, n, [&](int s, int64_t from, int64_t at, int64_t length) {
    const at::Tensor source = segments_[s].swapped ? slot_view(load(s, {s}), s) : resident_view(s);
    out.narrow(0, at, length).copy_(source.narrow(0, from, length));
  });
}

void ParamStore::write(int64_t offset, const at::Tensor& values) {
  ZERO_INTERNAL_ASSERT(!in_pass_, "parameter write during a pass");
  const int64_t n = values.numel();
  ZERO_INTERNAL_ASSERT(offset >= 0 && offset + n <= numel_, "parameter range [", offset, ", ",
                       offset + n, ") outside ", numel_, " elements");
  for_each_piece(offset, n, [&](int s, int64_t from, int64_t at, int64_t length) {
    const Segment& segment = segments_[s];
    if (!segment.swapped) {
      if (has_device_copy()) queue_->wait(last_publish_);  // a copy may still read it
      resident_view(s).narrow(0, from, length).copy_(values.narrow(0, at, length));
      if (has_device_copy()) {
        publish(segment.offset + from, length);
        queue_->wait(last_publish_);  // written rarely: the caller may change `values` next
      }
    } else {
      const bool whole = length == segment.numel;
      int slot = slot_of_[s];
      if (slot >= 0) {
        try {
          settle(slot);
        } catch (const Error&) {
          // A read that failed (settle forgot it) is needed only for a part of the segment.
          if (!whole) throw;
          slot = -1;
        }
      }
      if (slot >= 0) {
        // Holds the segment's values.
      } else if (whole) {  // nothing to read first
        slot = take_slot({s});
        ZERO_INTERNAL_ASSERT(slot >= 0, "no parameter slot free for a write");
        slots_[slot].segment = s;
        slots_[slot].state = SlotState::kClean;
        slot_of_[s] = slot;
      } else {
        slot = load(s, {s});
      }
      ZERO_INTERNAL_ASSERT(slots_[slot].pins == 0, "write of parameter segment ", s,
                           " while a gather reads it");
      slot_view(slot, s).narrow(0, from, length).copy_(values.narrow(0, at, length));
      slots_[slot].last_use = ++clock_;
      start_write(slot);
      settle(slot);
      file_->seal();  // the next segment may need a read, which checks the file first
    }
  });
}

// ---- passes ------------------------------------------------------------------------------

ParamStore::Pass ParamStore::pass(bool read, bool write) { return Pass(*this, read, write); }

ParamStore::Pass::Pass(ParamStore& store, bool read, bool write)
    : store_(&store), read_(read), write_(write) {
  ZERO_INTERNAL_ASSERT(!store.in_pass_, "two parameter passes at once");
  if (read && store.file_) store.file_->check_unchanged();
  // The host tiles it writes may still be being copied up by the last pass.
  if (write && store.has_device_copy()) store.queue_->wait(store.last_publish_);
  store.in_pass_ = true;
}

ParamStore::Pass::Pass(Pass&& other) noexcept
    : store_(other.store_),
      read_(other.read_),
      write_(other.write_),
      finished_(other.finished_),
      cursor_(other.cursor_),
      published_(other.published_),
      pending_begin_(other.pending_begin_),
      pending_numel_(other.pending_numel_) {
  other.store_ = nullptr;
}

ParamStore::Pass::~Pass() {
  if (store_ == nullptr || finished_) return;
  store_->drain();  // the slots may hold half-written segments: forget them
  store_->in_pass_ = false;
}

at::Tensor ParamStore::Pass::tile(int64_t begin, int64_t n) {
  ParamStore& st = *store_;
  ZERO_INTERNAL_ASSERT(begin == cursor_ && n > 0 && begin + n <= st.numel_, "parameter tile [",
                       begin, ", ", begin + n, ") after ", cursor_, " of ", st.numel_);
  put_back();
  // With a device copy, what the pass has written so far goes up while this tile is computed.
  if (write_ && st.has_device_copy() && published_ < begin) {
    st.publish(published_, begin - published_);
    published_ = begin;
  }
  cursor_ = begin + n;
  const int first = st.segment_at(begin);
  const int last = st.segment_at(begin + n - 1);
  // In memory and contiguous there (always, unless offloaded): a view.
  bool view = true;
  for (int s = first; s <= last && view; ++s) {
    if (st.segments_[s].numel == 0) continue;  // nothing of it in the tile (largest_bounced_tile)
    view = !st.segments_[s].swapped &&
           st.resident_offset_[s] - st.segments_[s].offset ==
               st.resident_offset_[first] - st.segments_[first].offset;
  }
  if (view) {
    return st.resident_.narrow(
        0, st.resident_offset_[first] + begin - st.segments_[first].offset, n);
  }
  if (!st.bounce_.defined() || st.bounce_.numel() < n) {
    st.bounce_ = at::empty({n}, at::TensorOptions().dtype(st.dtype_));
  }
  at::Tensor out = st.bounce_.narrow(0, 0, n);
  if (read_) {
    st.for_each_piece(begin, n, [&](int s, int64_t from, int64_t at, int64_t length) {
      // Once copied, a segment's slot may go to the next one: a tile may span more segments
      // than there are slots.
      const at::Tensor source =
          st.segments_[s].swapped ? st.slot_view(st.load(s, {s}), s) : st.resident_view(s);
      out.narrow(0, at, length).copy_(source.narrow(0, from, length));
    });
    // Read the next segments while this tile is computed: as many as leave a slot for the
    // segment being written and one for the one being filled. The tile's last segment comes
    // first in the list, so its slot (the next tile reads on in it) is kept.
    std::vector<int> upcoming = {last};
    const int ahead = std::max(0, static_cast<int>(st.slots_.size()) - 2);
    for (int s = last + 1; s < st.segments() && static_cast<int>(upcoming.size()) <= ahead; ++s) {
      if (st.segments_[s].swapped) upcoming.push_back(s);
    }
    if (upcoming.size() > 1) st.read_ahead(upcoming);
  }
  if (write_) {
    pending_begin_ = begin;
    pending_numel_ = n;
  }
  return out;
}

void ParamStore::Pass::put_back() {
  if (pending_numel_ == 0) return;
  ParamStore& st = *store_;
  const int64_t begin = pending_begin_, n = pending_numel_;
  pending_numel_ = 0;
  const at::Tensor values = st.bounce_.narrow(0, 0, n);
  st.for_each_piece(begin, n, [&](int s, int64_t from, int64_t at, int64_t length) {
    const Segment& segment = st.segments_[s];
    const int64_t to = from + length;
    const at::Tensor part = values.narrow(0, at, length);
    if (!segment.swapped) {
      st.resident_view(s).narrow(0, from, length).copy_(part);
      return;
    }
    int slot = st.slot_of_[s];
    if (slot < 0 || st.slots_[slot].state != SlotState::kFilling) {
      // A pass writes a segment from its start, over values it has read already; a pass that
      // reads needs the rest of the old values in the slot for its next tiles.
      ZERO_INTERNAL_ASSERT(from == 0, "parameter pass writes segment ", s, " from ", from);
      if (read_ && to < segment.numel) {
        slot = st.load(s, {s});
      } else if (slot >= 0) {
        // A transfer may not be using the buffer being overwritten. A read that failed does
        // not matter: the pass writes the whole segment (from here on, or every tile when it
        // only writes), so the slot is taken for it again.
        try {
          st.settle(slot);
        } catch (const Error&) {
          st.slots_[slot].segment = s;
          st.slot_of_[s] = slot;
        }
      } else {
        slot = st.take_slot({s});
        ZERO_INTERNAL_ASSERT(slot >= 0, "no parameter slot free for a pass's write");
        st.slots_[slot].segment = s;
        st.slot_of_[s] = slot;
      }
      ZERO_INTERNAL_ASSERT(st.slots_[slot].pins == 0, "parameter pass writes segment ", s,
                           " while a gather reads it");
      st.slots_[slot].state = SlotState::kFilling;
      st.slots_[slot].filled = 0;
    }
    Slot& sl = st.slots_[slot];
    ZERO_INTERNAL_ASSERT(from == sl.filled, "parameter pass writes segment ", s, " at ", from,
                         " after ", sl.filled);
    st.slot_view(slot, s).narrow(0, from, length).copy_(part);
    sl.filled = to;
    sl.last_use = ++st.clock_;
    if (to == segment.numel) st.start_write(slot);
  });
}

void ParamStore::Pass::finish() {
  ParamStore& st = *store_;
  put_back();
  ZERO_INTERNAL_ASSERT(cursor_ == st.numel_, "parameter pass ended at ", cursor_, " of ",
                       st.numel_);
  bool wrote = false;
  std::exception_ptr write_failure;
  for (int i = 0; i < static_cast<int>(st.slots_.size()); ++i) {
    const SlotState state = st.slots_[i].state;
    ZERO_INTERNAL_ASSERT(state != SlotState::kFilling,
                         "parameter pass ended with a segment half written");
    wrote = wrote || state == SlotState::kWriting;
    try {
      st.settle(i);
    } catch (const Error&) {
      // A read ahead that failed is forgotten (settle emptied its slot): nothing used it, and
      // the next use reads again. A failed write is the pass's failure, after every transfer
      // has settled.
      if (state == SlotState::kWriting && !write_failure) write_failure = std::current_exception();
    }
  }
  if (write_failure) std::rethrow_exception(write_failure);  // ~Pass forgets the slots
  if (write_ && st.file_ && wrote) st.file_->seal();
  if (write_ && st.has_device_copy()) {
    if (published_ < st.numel_) st.publish(published_, st.numel_ - published_);
    published_ = st.numel_;
    // The parameters' next use on the device (an all-gather, a gather, a forward) runs after.
    st.order_device_after_publish();
  }
  st.in_pass_ = false;
  finished_ = true;
}

// ---- leases -------------------------------------------------------------------------------

bool ParamStore::can_lease(int s) {
  if (!segments_[s].swapped || slot_of_[s] >= 0) return true;
  for (const Slot& sl : slots_) {
    if (sl.pins == 0 && sl.state != SlotState::kFilling) return true;
  }
  return false;
}

ParamStore::Lease ParamStore::lease(int s) {
  ZERO_INTERNAL_ASSERT(!in_pass_, "parameter lease during a pass");
  if (has_device_copy()) return {device_copy_.narrow(0, segments_[s].offset, segments_[s].numel), nullptr, -1};
  if (!segments_[s].swapped) return {resident_view(s), nullptr, -1};
  int slot = slot_of_[s];
  if (slot < 0) {
    slot = take_slot({s});
    ZERO_INTERNAL_ASSERT(slot >= 0, "parameter lease without a free slot (can_lease first)");
    start_read(slot, s);
  }
  Slot& sl = slots_[slot];
  ++sl.pins;
  sl.last_use = ++clock_;
  return {slot_view(slot, s), sl.state == SlotState::kReading ? sl.ticket : nullptr, slot};
}

void ParamStore::release(const Lease& lease) {
  if (lease.slot < 0) return;
  Slot& sl = slots_[lease.slot];
  ZERO_INTERNAL_ASSERT(sl.pins > 0, "parameter lease released twice");
  if (--sl.pins > 0 || sl.state != SlotState::kReading) return;
  // Its read was waited for by the gather (or never will be): a failed one is forgotten here,
  // so the next lease of the segment reads it again instead of finding the failure cached.
  try {
    settle(lease.slot);
  } catch (const Error&) {
    // Reported to the gather that leased it.
  }
}

void ParamStore::read_ahead(const std::vector<int>& upcoming) {
  if (!file_) return;
  std::vector<int> needed;
  for (int s : upcoming) {
    needed.push_back(s);
    if (!segments_[s].swapped || slot_of_[s] >= 0) continue;
    // A slot that is idle now (reading ahead never waits) and holds nothing needed before s:
    // an empty one, else the least recently used.
    int slot = -1;
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      const Slot& sl = slots_[i];
      if (sl.pins > 0) continue;
      if (sl.state == SlotState::kClean &&
          std::find(needed.begin(), needed.end(), sl.segment) == needed.end()) {
        if (slot < 0 || (slots_[slot].state != SlotState::kEmpty &&
                         sl.last_use < slots_[slot].last_use)) {
          slot = i;
        }
      } else if (sl.state == SlotState::kEmpty) {
        slot = i;
        break;
      }
    }
    if (slot < 0) return;
    Slot& sl = slots_[slot];
    if (sl.segment >= 0) slot_of_[sl.segment] = -1;
    sl.segment = -1;
    sl.state = SlotState::kEmpty;
    start_read(slot, s);
  }
}

void ParamStore::drain() noexcept {
  for (Slot& sl : slots_) {
    bool failed = false;
    try {
      AsyncIo::wait(sl.ticket);
    } catch (...) {
      failed = true;  // the error that ended the pass is the one being reported
    }
    sl.ticket.reset();
    // A leased slot stays its lease's (a gather reads it until release()); every other slot
    // may hold a half-written segment and forgets what it held.
    if (sl.pins > 0 && !failed && sl.state != SlotState::kFilling) {
      sl.state = SlotState::kClean;
      continue;
    }
    if (sl.segment >= 0) slot_of_[sl.segment] = -1;
    sl.state = SlotState::kEmpty;
    sl.segment = -1;
  }
}

at::Tensor ParamStore::resident_range(int64_t begin, int64_t n) {
  ZERO_INTERNAL_ASSERT(!in_pass_ && file_ == nullptr && begin >= 0 && begin + n <= numel_,
                       "resident range [", begin, ", ", begin + n, ") of a parameter store of ",
                       numel_, (file_ ? " with swapped segments" : ""));
  return resident_.narrow(0, begin, n);  // in memory, resident_offset_ is the segment offset
}

void ParamStore::publish(int64_t begin, int64_t n) {
  if (!has_device_copy() || n == 0) return;
  last_publish_ = queue_->copy(device_copy_.narrow(0, begin, n), resident_.narrow(0, begin, n),
                               TransferQueue::Direction::kUp);
}

void ParamStore::order_device_after_publish() {
  if (has_device_copy()) queue_->order_current_stream_after(last_publish_);
}

int64_t ParamStore::resident_bytes() const { return resident_.nbytes(); }

int64_t ParamStore::staging_bytes() const {
  const int64_t slots =
      slots_.empty() ? 0 : static_cast<int64_t>(slots_.size()) * slots_.front().buffer->bytes();
  return slots + (bounce_.defined() ? static_cast<int64_t>(bounce_.nbytes()) : 0);
}

int64_t ParamStore::file_bytes() const { return file_ ? file_->bytes() : 0; }

int64_t ParamStore::swapped_bytes() const {
  int64_t bytes = 0;
  for (const Segment& s : segments_) {
    if (s.swapped) bytes += s.numel * element_size();
  }
  return bytes;
}

std::vector<ParamStore::Segment> param_segments(const std::vector<int64_t>& numel,
                                                const std::vector<bool>& resident,
                                                int64_t max_in_cpu) {
  std::vector<ParamStore::Segment> segments;
  int64_t offset = 0, in_memory = 0;
  for (size_t g = 0; g < numel.size(); ++g) {
    bool swapped = !resident[g];
    if (swapped && in_memory + numel[g] <= max_in_cpu) {
      in_memory += numel[g];
      swapped = false;
    }
    segments.push_back({offset, numel[g], swapped});
    offset += numel[g];
  }
  return segments;
}

int64_t largest_bounced_tile(const std::vector<ParamStore::Segment>& segments, int64_t numel,
                             int64_t tile_numel) {
  if (numel <= 0) return 0;
  const int64_t tile = std::max<int64_t>(1, std::min(tile_numel, numel));
  // Tiles are [k * tile, (k + 1) * tile) but for the last, which ends at numel: a swapped
  // segment that begins before the last tile touches a whole one.
  const int64_t last_tile_begin = (numel - 1) / tile * tile;
  int64_t largest = 0;
  for (const ParamStore::Segment& segment : segments) {
    if (!segment.swapped || segment.numel == 0) continue;
    largest = std::max(largest, segment.offset < last_tile_begin ? tile : numel - last_tile_begin);
  }
  return largest;
}

}  // namespace zero
