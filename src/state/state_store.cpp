#include "state/state_store.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "offload/swap_directory.h"
#include "offload/swap_file.h"
#include "zero/error.h"

namespace zero {

StateStore::StateStore(int parts, int64_t numel, int64_t tile_numel)
    : parts_(parts), numel_(numel), tile_numel_(std::max<int64_t>(1, std::min(tile_numel, numel))) {
  ZERO_INTERNAL_ASSERT(parts >= 0 && numel >= 0, "state store of ", parts, " parts of ", numel);
}

void StateStore::for_each_tile_in(int64_t begin, int64_t end, const TileVisitor& /*visit*/) {
  ZERO_INTERNAL_ASSERT(false, "a state store that visits whole tiles only was asked for [",
                       begin, ", ", end, ")");
}

namespace {

class MemoryStore final : public StateStore {
 public:
  MemoryStore(int parts, int64_t numel, int64_t tile_numel, at::Device device)
      : StateStore(parts, numel, tile_numel) {
    for (int p = 0; p < parts; ++p) {
      tensors_.push_back(at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).device(device)));
    }
  }

  void for_each_tile(const TileVisitor& visit, bool /*write_back*/) override {
    for_each_tile_in(0, numel_, visit);
  }
  bool visits_ranges() const override { return true; }
  void for_each_tile_in(int64_t first, int64_t last, const TileVisitor& visit) override {
    ZERO_INTERNAL_ASSERT(first >= 0 && first <= last && last <= numel_, "state range [", first,
                         ", ", last, ") of ", numel_);
    std::vector<at::Tensor> views(tensors_.size());
    for (int64_t begin = first; begin < last; begin += tile_numel_) {
      const int64_t end = std::min(last, begin + tile_numel_);
      for (size_t p = 0; p < tensors_.size(); ++p) {
        views[p] = tensors_[p].narrow(0, begin, end - begin);
      }
      visit(begin, end, views);
    }
  }
  void read(int part, int64_t offset, const at::Tensor& out) override {
    out.copy_(tensors_.at(part).narrow(0, offset, out.numel()));
  }
  void write(int part, int64_t offset, const at::Tensor& values) override {
    tensors_.at(part).narrow(0, offset, values.numel()).copy_(values);
  }
  void flush() override {}
  int64_t memory_bytes() const override { return parts_ * numel_ * 4; }
  int64_t file_bytes() const override { return 0; }

 private:
  std::vector<at::Tensor> tensors_;
};

// One record per tile in the file: each part's tile_numel fp32 values, padded to
// kSwapAlignment (Note [NVMe offload]).
class SwapStore final : public StateStore {
 public:
  SwapStore(int parts, int64_t numel, int64_t tile_numel, const OffloadConfig& offload,
            AsyncIo& io, const SwapDirectory& directory, const std::string& name)
      : StateStore(parts, numel, tile_numel),
        part_stride_(align_up(tile_numel_ * 4)),
        record_bytes_(std::max<int64_t>(kSwapAlignment, parts * part_stride_)),
        tiles_((numel + tile_numel_ - 1) / tile_numel_),
        pipeline_read_(offload.pipeline_read),
        pipeline_write_(offload.pipeline_write),
        file_(directory.file(name + ".swp"), std::max<int64_t>(1, tiles_) * record_bytes_, io) {
    const int64_t buffers = std::max<int64_t>(1, std::min(offload.buffer_count, tiles_));
    for (int64_t b = 0; b < buffers; ++b) buffers_.push_back(std::make_unique<AlignedBuffer>(record_bytes_));
    writes_.resize(buffers_.size());
  }

  void for_each_tile(const TileVisitor& visit, bool write_back) override {
    flush();
    cached_tile_ = -1;
    file_.check_unchanged();
    const int64_t count = static_cast<int64_t>(buffers_.size());
    std::vector<AsyncIo::Ticket> reads(buffers_.size());
    int64_t issued = 0;
    // Reading tile j into its buffer needs the write of tile j - count from it finished.
    auto issue_read = [&](int64_t j) {
      const int64_t b = j % count;
      AsyncIo::wait(writes_[b]);
      writes_[b].reset();
      reads[b] = file_.read(buffers_[b]->data(), record_bytes_, j * record_bytes_, record_name(j));
    };
    try {
      std::vector<at::Tensor> views(parts_);
      for (int64_t i = 0; i < tiles_; ++i) {
        // With pipelined reads, up to count - 2 tiles ahead: the buffer of tile i + count - 1
        // is the one tile i - 1 is being written from.
        const int64_t ahead = pipeline_read_ ? std::max<int64_t>(0, count - 2) : 0;
        while (issued <= std::min(tiles_ - 1, i + ahead)) issue_read(issued++);
        const int64_t b = i % count;
        AsyncIo::wait(reads[b]);
        const int64_t begin = i * tile_numel_;
        const int64_t end = std::min(numel_, begin + tile_numel_);
        tile_views(b, end - begin, views);
        visit(begin, end, views);
        if (write_back) {
          writes_[b] = file_.write(buffers_[b]->data(), record_bytes_, i * record_bytes_);
          if (!pipeline_write_) AsyncIo::wait(writes_[b]);
        }
      }
      finish_writes();
    } catch (...) {
      drain(reads);  // no transfer may outlive the buffers it uses
      throw;
    }
  }

  void read(int part, int64_t offset, const at::Tensor& out) override {
    visit_range(offset, out.numel(), [&](int64_t, int64_t from, int64_t length, int64_t at) {
      out.narrow(0, at, length).copy_(view(part, length + from).narrow(0, from, length));
    });
  }

  void write(int part, int64_t offset, const at::Tensor& values) override {
    visit_range(offset, values.numel(), [&](int64_t, int64_t from, int64_t length, int64_t at) {
      view(part, from + length).narrow(0, from, length).copy_(values.narrow(0, at, length));
      dirty_ = true;
    });
  }

  void flush() override {
    if (dirty_) {
      AsyncIo::Ticket write = file_.write(buffers_[0]->data(), record_bytes_, cached_tile_ * record_bytes_);
      dirty_ = false;
      AsyncIo::wait(write);
      file_.seal();
    }
  }

  int64_t memory_bytes() const override {
    return static_cast<int64_t>(buffers_.size()) * record_bytes_;
  }
  int64_t file_bytes() const override { return file_.bytes(); }

 private:
  // The record of `tile` in errors (Note [Swap record checksums]).
  std::string record_name(int64_t tile) const {
    const int64_t begin = tile * tile_numel_;
    return "the record of optimizer tile " + std::to_string(tile) + " (elements [" +
           std::to_string(begin) + ", " + std::to_string(std::min(numel_, begin + tile_numel_)) +
           ") of this rank's optimizer state)";
  }

  // fp32 views of the parts of the record in buffer b, over its first n elements.
  void tile_views(int64_t b, int64_t n, std::vector<at::Tensor>& views) const {
    for (int p = 0; p < parts_; ++p) {
      views[p] = at::from_blob(buffers_[b]->data() + p * part_stride_, {n}, at::kFloat);
    }
  }
  at::Tensor view(int part, int64_t n) const {
    return at::from_blob(buffers_[0]->data() + part * part_stride_, {n}, at::kFloat);
  }

  // Calls fn(tile, offset in tile, length, offset in the caller's tensor) for each tile the
  // range [offset, offset + n) touches, with that tile in the cache buffer.
  template <typename Fn>
  void visit_range(int64_t offset, int64_t n, Fn&& fn) {
    ZERO_INTERNAL_ASSERT(offset >= 0 && n >= 0 && offset + n <= numel_, "state range [", offset,
                         ", ", offset + n, ") outside ", numel_, " elements");
    for (int64_t at = 0; at < n;) {
      const int64_t tile = (offset + at) / tile_numel_;
      const int64_t from = offset + at - tile * tile_numel_;
      const int64_t length = std::min(n - at, tile_numel_ - from);
      load(tile);
      fn(tile, from, length, at);
      at += length;
    }
  }

  // The cache holds `tile` (written back first if another tile was changed there).
  void load(int64_t tile) {
    if (cached_tile_ == tile) return;
    flush();
    file_.check_unchanged();
    AsyncIo::Ticket read =
        file_.read(buffers_[0]->data(), record_bytes_, tile * record_bytes_, record_name(tile));
    cached_tile_ = -1;
    AsyncIo::wait(read);
    cached_tile_ = tile;
  }

  void finish_writes() {
    for (AsyncIo::Ticket& w : writes_) {
      AsyncIo::wait(w);
      w.reset();
    }
    file_.seal();
  }

  // Waits for every read and write in flight, ignoring their errors (the first error is the
  // one being thrown).
  void drain(std::vector<AsyncIo::Ticket>& reads) {
    for (std::vector<AsyncIo::Ticket>* tickets : {&reads, &writes_}) {
      for (AsyncIo::Ticket& t : *tickets) {
        try {
          AsyncIo::wait(t);
        } catch (...) {
        }
        t.reset();
      }
    }
  }

  int64_t part_stride_;
  int64_t record_bytes_;
  int64_t tiles_;
  bool pipeline_read_;
  bool pipeline_write_;
  SwapFile file_;
  std::vector<std::unique_ptr<AlignedBuffer>> buffers_;
  std::vector<AsyncIo::Ticket> writes_;
  int64_t cached_tile_ = -1;  // the tile in buffer 0 for read()/write(), -1 none
  bool dirty_ = false;
};

}  // namespace

std::unique_ptr<StateStore> make_memory_store(int parts, int64_t numel, int64_t tile_numel,
                                              at::Device device) {
  return std::make_unique<MemoryStore>(parts, numel, tile_numel, device);
}

std::unique_ptr<StateStore> make_swap_store(int parts, int64_t numel, int64_t tile_numel,
                                            const OffloadConfig& offload, AsyncIo& io,
                                            const SwapDirectory& directory,
                                            const std::string& name) {
  return std::make_unique<SwapStore>(parts, numel, tile_numel, offload, io, directory, name);
}

SwapStoreBytes swap_store_bytes(int parts, int64_t numel, int64_t tile_numel,
                                int64_t buffer_count) {
  const int64_t tile = std::max<int64_t>(1, std::min(tile_numel, numel));
  const int64_t record = std::max<int64_t>(kSwapAlignment, parts * align_up(tile * 4));
  const int64_t tiles = (numel + tile - 1) / tile;
  SwapStoreBytes bytes;
  bytes.memory = std::max<int64_t>(1, std::min(buffer_count, tiles)) * record;
  bytes.file = std::max<int64_t>(1, tiles) * record;
  return bytes;
}

}  // namespace zero
