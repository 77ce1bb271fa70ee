// The parameter-dtype copy of a shard space (Note [Shard state]): what the optimizer's updates
// write and, at stage 3, what every gather reads. In memory, or with offload_param "nvme" each
// unit's shard as one record of a swap file. See Note [Parameter offload].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/async_io.h"
#include "offload/transfer_queue.h"
#include "zero/config.h"

namespace zero {

class SwapDirectory;
class SwapFile;
class AlignedBuffer;

// Note [Parameter offload]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// With offload_param "nvme" (stage 3) a rank's shard space of 16-bit (or fp32) parameters is
// cut into segments, one per stage-3 group (Note [Stage 3 units]). The persistent group's and,
// in order, each unit group's that still fits in offload_param.max_in_cpu elements stay in memory;
// every other segment is one record of a swap file (Note [NVMe offload]). Records are read into
// offload_param.buffer_count slots, each the size of the largest swapped segment (which must be
// at most buffer_size elements):
//   - a gather leases its group's segment: the read is issued on the main thread and waited for
//     by the communicator's thread just before the all-gather, so it overlaps the compute of
//     the unit before; the slot is pinned until the gather has finished;
//   - after each training fetch the engine passes the next groups of the recorded trace (Note
//     [Stage 3 trace and prefetch]) to read_ahead, which reads them into slots nothing earlier
//     in that list needs, so a gather usually finds its shard already in memory;
//   - a slot keeps its record after use (a later lease of the same segment reads nothing) until
//     it is needed for another, least recently used first.
// The optimizer step, the master weights' initialisation and a checkpoint's commit go through
// the space once, in order, in tiles (Pass): a tile is a view where it lies in memory and
// otherwise the store's bounce tile (kept from pass to pass, at the largest tile so far: the
// plan counts it as held), copied from the slots (reading ahead) and back into them; a
// segment whose values have all been written goes to the file at once, while the next tiles
// are computed. Parameters are never written outside a pass except by write() (partitioning,
// GatheredParameters' modifier), which writes the touched records at once; the file is sealed
// after every write and checked before reads outside a pass, as the optimizer's are.
// No lease is held during a pass, read() or write(): they may need every slot, and a pass
// overwrites what gathers read. The engine gives back the leases of gathers issued ahead
// first (Stage3Engine::quiesce, before a step, save or load, and before a modifier's write).
// A read that failed is forgotten once its lease is released (the next lease reads again),
// as is a failed read ahead nobody used; a failed write fails the pass.

class ParamStore {
 public:
  /// One stage-3 group's shard: elements [offset, offset + numel) of the space.
  struct Segment {
    int64_t offset = 0;
    int64_t numel = 0;
    bool swapped = false;
  };

  /// In memory: `params` (flat, contiguous), the engine's storage, written through.
  /// `segments` (in order, covering the space) name what lease() hands out; empty: one.
  explicit ParamStore(at::Tensor params, std::vector<Segment> segments = {});
  /// A model on a device with its optimizer offloaded (Note [Offload of a device model] in
  /// src/engine/host_offload.h): `host` (flat, contiguous; pinned for asynchronous copies) is
  /// the store, what passes, read() and write() see; `device` (same numel and dtype) is the
  /// engine's storage the model computes with, kept equal to it through `queue`: what a pass
  /// writes goes up tile by tile as the pass goes on, what write() writes at once. Leases hand
  /// out `device`'s segments. No segment is swapped.
  ParamStore(at::Tensor host, std::vector<Segment> segments, at::Tensor device,
             std::shared_ptr<TransferQueue> queue);
  /// offload_param "nvme": the swapped `segments` are records of the swap file `name` in
  /// `directory`, read through offload.buffer_count slots; the others live in memory. Each
  /// swapped segment must be written whole (write()) before anything reads it.
  ParamStore(at::ScalarType dtype, std::vector<Segment> segments, const OffloadConfig& offload,
             AsyncIo& io, const SwapDirectory& directory, const std::string& name);
  /// Waits for every transfer in flight. Never throws.
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  at::ScalarType dtype() const { return dtype_; }
  /// Where the segments in memory are (the CPU when offloaded).
  at::Device device() const { return resident_.device(); }
  int64_t numel() const { return numel_; }
  int segments() const { return static_cast<int>(segments_.size()); }

  /// Copies elements [offset, offset + out.numel()) into `out` (of this dtype).
  void read(int64_t offset, const at::Tensor& out);
  /// Sets elements [offset, offset + values.numel()); the touched records are written now.
  void write(int64_t offset, const at::Tensor& values);

  /// One pass over the whole space, in order.
  class Pass {
   public:
    Pass(Pass&&) noexcept;
    /// Elements [begin, begin + n), contiguous, where `begin` is where the last tile ended
    /// (0 first). Holds the current values when the pass reads; with `write`, what the caller
    /// leaves in it is kept.
    at::Tensor tile(int64_t begin, int64_t n);
    /// Keeps the last tile and waits for the writes. A pass abandoned without finish() (an
    /// exception) waits for its transfers and forgets what the slots held.
    void finish();
    ~Pass();

   private:
    friend class ParamStore;
    Pass(ParamStore& store, bool read, bool write);
    void put_back();

    ParamStore* store_;
    bool read_;
    bool write_;
    bool finished_ = false;
    int64_t cursor_ = 0;                  // where the next tile begins
    int64_t published_ = 0;              // with a device copy: [0, published_) sent up
    int64_t pending_begin_ = 0;           // the bounce tile to write back
    int64_t pending_numel_ = 0;
  };
  Pass pass(bool read, bool write);

  /// Segment s for a stage-3 gather: `shard` may be used once `ready` has finished (wait on it
  /// with AsyncIo::wait from any thread; null: now), until release().
  struct Lease {
    at::Tensor shard;
    AsyncIo::Ticket ready;
    int slot = -1;  // -1: in memory
  };
  /// Whether lease(s) finds a slot without waiting for other leases to be released.
  bool can_lease(int s);
  Lease lease(int s);
  void release(const Lease& lease);
  /// Reads the swapped segments of `upcoming` (in the order they will be leased) into slots
  /// that nothing earlier in the list needs, while there are such slots.
  void read_ahead(const std::vector<int>& upcoming);

  bool offloaded() const { return file_ != nullptr; }
  /// Whether the store is a host copy of the device's parameters (the constructor above).
  bool has_device_copy() const { return device_copy_.defined(); }
  /// Elements [begin, begin + n) of a store with nothing swapped, outside any pass, to write
  /// in place: the overlapped step of Note [Offload of a device model]. publish() then sends
  /// them to the device copy (if any) after the writes.
  at::Tensor resident_range(int64_t begin, int64_t n);
  void publish(int64_t begin, int64_t n);
  /// Work enqueued on the device's current stream from now on sees everything published.
  void order_device_after_publish();
  /// Host memory: the segments in memory, and the slots and passes' bounce tile (staging) of
  /// an offloaded store.
  int64_t resident_bytes() const;
  int64_t staging_bytes() const;
  int64_t file_bytes() const;
  /// The parameters' bytes that live on NVMe (the swapped segments, without record padding).
  int64_t swapped_bytes() const;

 private:
  enum class SlotState {
    kEmpty,    // holds nothing usable
    kReading,  // a read of `segment` in flight
    kClean,    // holds `segment` as the file does
    kFilling,  // a pass is writing `segment` into it ([0, filled) new)
    kWriting,  // holds `segment`, being written to the file
  };
  struct Slot {
    std::unique_ptr<AlignedBuffer> buffer;
    SlotState state = SlotState::kEmpty;
    int segment = -1;
    AsyncIo::Ticket ticket;
    int pins = 0;
    int64_t filled = 0;
    uint64_t last_use = 0;
  };

  int64_t element_size() const;
  at::Tensor slot_view(int slot, int s) const;
  at::Tensor resident_view(int s) const;
  // The segment holding element `offset`.
  int segment_at(int64_t offset) const;
  // fn(s, from, at, length) for each segment s that elements [offset, offset + n) touch, in
  // order: its elements [from, from + length) are elements [at, at + length) of the range.
  template <typename Fn>
  void for_each_piece(int64_t offset, int64_t n, Fn&& fn) const;
  // Waits for the slot's transfer; a failed one leaves it empty (and throws).
  void settle(int slot);
  // A slot that holds nothing needed (protected: segments not to evict): empty, else least
  // recently used clean, else one being written (waited for). -1 when every slot is pinned,
  // protected or filling.
  int take_slot(const std::vector<int>& protect);
  // Issues the read of swapped segment s into `slot`.
  void start_read(int slot, int s);
  // Slot index holding segment s with its values (settled), reading it now if none does.
  int load(int s, const std::vector<int>& protect);
  void start_write(int slot);
  void drain() noexcept;
  int64_t record_bytes(int s) const;

  at::ScalarType dtype_;
  int64_t numel_ = 0;
  std::vector<Segment> segments_;
  std::vector<int64_t> resident_offset_;  // per segment, into resident_ (-1: swapped)
  std::vector<int64_t> file_offset_;      // per segment, into the file (-1: in memory)
  std::vector<int> slot_of_;              // per segment, the slot holding it or -1
  at::Tensor resident_;
  // With a device copy: the engine's device storage, the queue that keeps it equal to
  // resident_, and the last copy sent up (a pass or write waits for it before overwriting
  // host memory a copy may still be reading).
  at::Tensor device_copy_;
  std::shared_ptr<TransferQueue> queue_;
  TransferQueue::Ticket last_publish_ = 0;
  std::unique_ptr<SwapFile> file_;
  std::vector<Slot> slots_;
  // A pass's tiles that touch a swapped segment are copied here; kept between passes (every
  // step makes one) at the largest tile so far: largest_bounced_tile's elements.
  at::Tensor bounce_;
  uint64_t clock_ = 0;
  bool in_pass_ = false;
};

/// The segments of a stage-3 shard space with offload_param "nvme": group shards of `numel`
/// elements, in order; `resident[g]` ones stay in memory (the persistent group), and so does
/// each unit group, in order, that still fits in `max_in_cpu` elements with those before it.
std::vector<ParamStore::Segment> param_segments(const std::vector<int64_t>& numel,
                                                const std::vector<bool>& resident,
                                                int64_t max_in_cpu);

/// Elements of the largest tile that a pass over `segments` (covering `numel` elements) in tiles
/// of `tile_numel` copies into its bounce buffer rather than viewing in place: the tiles that
/// touch a swapped segment (0 when none is swapped). The memory plan's "NVMe staging" counts
/// this buffer; with sub_group_size's default of 1e9 it is most of a billion-parameter shard.
int64_t largest_bounced_tile(const std::vector<ParamStore::Segment>& segments, int64_t numel,
                             int64_t tile_numel);

}  // namespace zero
