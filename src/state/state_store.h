// Where the fp32 parts of a shard state live (the master weights for 16-bit parameters, the
// optimizer's moments): in memory, or in a swap file streamed in tiles. See Note [Shard state]
// (src/state/shard_state.h) and Note [NVMe offload] (src/offload/swap_file.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zero/config.h"

namespace zero {

class AsyncIo;
class SwapDirectory;

/// `parts` fp32 vectors of `numel` elements each, visited in tiles of `tile_numel`.
class StateStore {
 public:
  /// fp32 contiguous views of every part over one tile [begin, end).
  using TileVisitor = std::function<void(int64_t begin, int64_t end,
                                         const std::vector<at::Tensor>& parts)>;

  virtual ~StateStore() = default;

  int parts() const { return parts_; }
  int64_t numel() const { return numel_; }
  int64_t tile_numel() const { return tile_numel_; }

  /// Visits every tile in order. With `write_back`, what the visitor writes into the views is
  /// kept; without, the visitor only reads them (and a swap store writes nothing back).
  virtual void for_each_tile(const TileVisitor& visit, bool write_back) = 0;
  /// Visits the tiles of elements [begin, end) only, in order, writing back what the visitor
  /// writes: for stores in memory (the overlapped step of Note [Offload of a device model]);
  /// a swap store's records are whole tiles and it does not offer this.
  virtual bool visits_ranges() const { return false; }
  virtual void for_each_tile_in(int64_t begin, int64_t end, const TileVisitor& visit);
  /// Copies elements [offset, offset + out.numel()) of `part` into `out` (fp32, contiguous).
  virtual void read(int part, int64_t offset, const at::Tensor& out) = 0;
  /// Writes `values` (fp32) into elements [offset, offset + values.numel()) of `part`.
  virtual void write(int part, int64_t offset, const at::Tensor& values) = 0;
  /// Makes every write() so far durable in the store (a cached tile goes to the file).
  virtual void flush() = 0;

  /// Bytes held in memory for the parts (tensors, or staging buffers of a swap store).
  virtual int64_t memory_bytes() const = 0;
  /// Bytes held in swap files (0 in memory).
  virtual int64_t file_bytes() const = 0;

 protected:
  StateStore(int parts, int64_t numel, int64_t tile_numel);

  int parts_;
  int64_t numel_;
  int64_t tile_numel_;
};

/// Zero-filled parts in the memory of `device`.
std::unique_ptr<StateStore> make_memory_store(int parts, int64_t numel, int64_t tile_numel,
                                              at::Device device);

/// Zero-filled parts in the swap file `name` of `directory`, streamed through
/// `offload.buffer_count` staging buffers with `offload.pipeline_read` / `pipeline_write`.
std::unique_ptr<StateStore> make_swap_store(int parts, int64_t numel, int64_t tile_numel,
                                            const OffloadConfig& offload, AsyncIo& io,
                                            const SwapDirectory& directory,
                                            const std::string& name);

/// Bytes a swap store of these dimensions keeps in memory and in its file (the estimate at
/// start-up uses the same arithmetic).
struct SwapStoreBytes {
  int64_t memory = 0;
  int64_t file = 0;
};
SwapStoreBytes swap_store_bytes(int parts, int64_t numel, int64_t tile_numel,
                                int64_t buffer_count);

/// Makes the store of a shard state: parts, numel, tile, and a name for its file.
using StateStoreMaker = std::function<std::unique_ptr<StateStore>(
    int parts, int64_t numel, int64_t tile_numel, const std::string& name)>;

}  // namespace zero
