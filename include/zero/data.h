// Language-modelling data: llm.c token files and deterministic per-rank batching.
//
// Note [Token windows and sample order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A token file of N tokens is cut into W = (N - 1) / T non-overlapping windows of T + 1
// tokens; window w starts at token w * T (consecutive windows share one token: the last
// target of one is the first input of the next). A sample is one window: input = its first T
// tokens, target = its last T (input shifted by one).
//
// Training (DistributedSampler): samples are numbered globally,
//     g = ((step * gas + micro_step) * world + rank) * batch + b,
// so within one optimizer step every (rank, micro-step, row) has its own g. Epoch e = g / W
// visits every window exactly once, in the order of a permutation of [0, W) that depends only
// on (seed, e) — a Fisher-Yates shuffle driven by std::mt19937_64 with our own unbiased
// bounded draw, so the order is the same with every standard library. Windows are distinct
// within a step unless the step straddles an epoch boundary. batch(step, micro) is a pure
// function of its arguments and the constructor's: a run resumes at any step without
// replaying, and each rank reads only its own samples.
//
// Evaluation (EvalBatcher): no shuffling. Windows are taken in file order and split across
// ranks: rank r's k-th batch is global batch k * world + r, i.e. windows
// [(k * world + r) * batch, ... + batch). Every rank gets the same number of full batches,
// num_batches() = W / (batch * world) (the tail windows that do not fill a batch on every rank
// are skipped), so the mean of the per-rank mean losses is the mean over all evaluated windows.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero {

/// An llm.c token file's format, from its header: int32 [0] is the magic number, [1] the version.
/// llm.c defines two: GPT-2's uint16 ids, and the uint32 ids of its Llama 3 data
/// (dev/data/data_common.py's "llama-3"), which vocabularies of more than 65536 ids need.
struct TokenFileFormat {
  int32_t magic;
  int32_t version;
  int32_t bytes_per_token;  // 2 or 4: each id a little-endian uint16 or uint32
};
inline constexpr TokenFileFormat kTokenFileUint16{20240520, 1, 2};
inline constexpr TokenFileFormat kTokenFileUint32{20240801, 7, 4};
/// Header size: 256 little-endian int32 ([2] is the number of tokens, the rest 0).
inline constexpr int64_t kTokenFileHeaderBytes = 256 * 4;

/// The format that holds every id below `vocab_size` (>= 1) in the fewest bytes: uint16 up to
/// 65536 ids (the files GPT-2's data and llm.c's GPT-2 trainer use), uint32 above.
ZERO_API TokenFileFormat token_file_format_for(int64_t vocab_size);

/// A token file's bytes: the header of `format`, then `count` ids, each < 2^(8 *
/// bytes_per_token). Throws zero::Error when an id does not fit the format or the count does not
/// fit the header's int32.
ZERO_API std::string token_file_bytes(const uint32_t* ids, int64_t count,
                                      const TokenFileFormat& format);

/// An llm.c token file held in memory, in either format (TokenFileFormat): a header of 256
/// little-endian int32 ([0] magic, [1] version, [2] number of tokens) followed by that many
/// little-endian ids of the format's width, held at that width. Copies share the (immutable)
/// tokens.
class ZERO_API TokenFile {
 public:
  /// Reads and validates `path`. Throws zero::Error naming the file if it is missing or
  /// unreadable, shorter than the header, has an unknown magic number or a version its magic
  /// does not have, a token count that disagrees with its size, or a token id >= vocab_size
  /// (vocab_size >= 1).
  static TokenFile load(const std::string& path, int64_t vocab_size);

  int64_t size() const { return size_; }
  /// Bytes per id in the file and in memory: 2 or 4.
  int32_t bytes_per_token() const { return format_.bytes_per_token; }
  const TokenFileFormat& format() const { return format_; }
  /// Token `i`, in [0, size()) (checked by an internal assertion).
  int64_t token(int64_t i) const;
  /// Tokens [start, start + count) as int64, the range inside [0, size()) (asserted).
  std::vector<int64_t> tokens(int64_t start, int64_t count) const;
  /// Writes tokens [start, start + count) to `out` as int64 (the range asserted as above).
  void copy_tokens(int64_t start, int64_t count, int64_t* out) const;
  const std::string& path() const { return path_; }
  /// Where the ids lie (for tests that two copies share them).
  const void* storage() const;

 private:
  TokenFile(std::string path, TokenFileFormat format) : path_(std::move(path)), format_(format) {}
  template <typename F>
  decltype(auto) visit_ids(F&& f) const;
  // The position of the first id >= limit, or -1.
  int64_t first_at_or_above(int64_t limit) const;

  std::string path_;
  TokenFileFormat format_;
  int64_t size_ = 0;
  // The ids at the file's width: one of the two is set.
  std::shared_ptr<const std::vector<uint16_t>> ids16_;
  std::shared_ptr<const std::vector<uint32_t>> ids32_;
};

/// Number of non-overlapping (T + 1)-token windows in `tokens` tokens: (tokens - 1) / T.
ZERO_API int64_t num_windows(int64_t tokens, int64_t seq_len);

/// Training batches for one rank. See Note [Token windows and sample order].
class ZERO_API DistributedSampler {
 public:
  /// batch: micro-batch rows per rank; seq_len: T. Throws zero::Error for batch < 1,
  /// seq_len < 1, world < 1, rank outside [0, world), gradient_accumulation_steps < 1, or a
  /// file with fewer than seq_len + 1 tokens (naming the file, its token count and T).
  DistributedSampler(TokenFile file, int64_t batch, int64_t seq_len, int rank, int world,
                     int gradient_accumulation_steps, uint64_t seed);

  /// (input, target), both int64 [batch, seq_len] on the CPU, for optimizer step `step` >= 0
  /// and micro-step in [0, gradient_accumulation_steps). Thread-safe.
  std::pair<at::Tensor, at::Tensor> batch(int64_t step, int micro_step) const;

  /// Window start offsets (token positions) of the rows of batch(step, micro_step).
  std::vector<int64_t> window_starts(int64_t step, int micro_step) const;

  /// W: windows per epoch.
  int64_t samples_per_epoch() const { return windows_; }
  /// batch * world * gradient_accumulation_steps: samples consumed by one optimizer step.
  int64_t samples_per_step() const;
  /// Fractional epoch reached after `steps` optimizer steps (for logging).
  double epoch_after(int64_t steps) const;

  const TokenFile& file() const { return file_; }
  int64_t batch_size() const { return batch_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  // The window of global sample g.
  int64_t window_of(int64_t g) const;

  TokenFile file_;
  int64_t batch_;
  int64_t seq_len_;
  int rank_;
  int world_;
  int gas_;
  uint64_t seed_;
  int64_t windows_;
  // The permutation of the most recently used epoch: a pure function of (seed, epoch, W),
  // cached only for speed; copies of the sampler share it.
  struct PermutationCache;
  std::shared_ptr<PermutationCache> cache_;
};

/// Sequential evaluation batches, split across ranks. See Note [Token windows and sample order].
class ZERO_API EvalBatcher {
 public:
  /// max_batches > 0 caps num_batches() (per rank); <= 0 means no cap. Throws zero::Error for
  /// bad batch/seq_len/rank/world, or when the file has too few windows to give every rank one
  /// full batch (naming the file, its token count, the windows it holds and the batch * world
  /// windows needed).
  EvalBatcher(TokenFile file, int64_t batch, int64_t seq_len, int rank, int world,
              int64_t max_batches = 0);

  /// Batches per rank; the same on every rank.
  int64_t num_batches() const { return num_batches_; }
  /// This rank's k-th batch, k in [0, num_batches()): (input, target) int64 [batch, seq_len].
  std::pair<at::Tensor, at::Tensor> batch(int64_t k) const;

  const TokenFile& file() const { return file_; }

 private:
  TokenFile file_;
  int64_t batch_;
  int64_t seq_len_;
  int rank_;
  int world_;
  int64_t num_batches_;
};

}  // namespace zero
