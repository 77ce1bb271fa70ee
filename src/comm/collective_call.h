// What one collective was asked to do, and the checks every backend makes of it before
// anything is communicated: one implementation, so the MPI, NCCL and host-staged backends
// reject the same arguments with the same message, which names the op, the backend, the rank
// and world size, the buffers' element counts and dtypes, the counts and the root.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zero/export.h"

namespace zero::comm {

// Its buffers (handles, which keep them alive until it has run) and, for messages, its
// arguments.
struct Call {
  const char* op = "";
  at::Tensor input = {};  // reduce_scatter/all_gather input; all_reduce/broadcast buffer
  at::Tensor output = {};
  std::vector<int64_t> counts = {};
  bool has_counts = false;
  bool has_root = false;
  int root = 0;
};

// How a chunked buffer is split among the ranks: chunk c is counts[c] elements at offsets[c].
struct ZERO_INTERNAL_API Chunks {
  std::vector<int64_t> counts;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  bool equal() const;  // every chunk the same size
};

// Dtypes that reductions accept (fp32, fp64, bf16, fp16) and that copies accept (those and
// the integer types, bool).
ZERO_INTERNAL_API bool is_reducible_dtype(c10::ScalarType dtype);
ZERO_INTERNAL_API bool is_copyable_dtype(c10::ScalarType dtype);

// Exported for zero_cuda's NCCL backend (ZERO_INTERNAL_API).
class ZERO_INTERNAL_API CallChecker {
 public:
  /// `device`: where buffers must be (a CPU device for host backends; a device with an index
  /// for a device backend, which then must match), `device_rule` says so in messages.
  CallChecker(std::string backend, int rank, int size, c10::Device device,
              std::string device_rule);

  /// "OP (BACKEND, rank R of world size N; input: ...; output: ...; counts {...}; root R)".
  std::string describe(const Call& call) const;
  /// Defined, on the device, dense, contiguous, of a dtype the collective accepts.
  void check_tensor(const Call& call, const at::Tensor& t, const char* name,
                    bool reduction) const;
  void check_same_dtype(const Call& call, const at::Tensor& a, const at::Tensor& b) const;
  /// Validates a chunked collective and returns its chunks: `whole` holds sum(counts) elements
  /// laid out chunk by chunk (N chunks of part.numel() when counts is empty), `part` holds this
  /// rank's chunk and is exactly whole's own chunk (in place) or does not overlap `whole`.
  Chunks check_chunked(const Call& call, const at::Tensor& whole, const char* whole_name,
                       const at::Tensor& part, const char* part_name, bool reduction) const;
  /// The chunks `counts` describes (offsets and total filled in).
  static Chunks chunks_of(std::vector<int64_t> counts);
  /// all_reduce's balanced split of `numel`: the first numel % N chunks one element longer.
  Chunks balanced(int64_t numel) const;
  /// Bytes this rank moves under a ring schedule for the chunks owned by other ranks (Note
  /// [Counting communicated bytes]); 0 at world size 1.
  int64_t others_bytes(const Chunks& chunks, int64_t element_size) const;

 private:
  std::string backend_;
  int rank_;
  int size_;
  c10::Device device_;
  std::string device_rule_;
};

}  // namespace zero::comm
