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

/// The magic number and version of an llm.c token file (header int32 [0] and [1]).
inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
/// Header size: 256 little-endian int32.
inline constexpr int64_t kTokenFileHeaderBytes = 256 * 4;

/// An llm.c token file held in memory: a header of 256 little-endian int32 ([0] = 20240520
/// magic, [1] = 1 version, [2] = number of tokens) followed by that many little-endian uint16
/// token ids. Copies share the (immutable) tokens.
class ZERO_API TokenFile {
 public:
  /// Reads and validates `path`. Throws zero::Error naming the file if it is missing or
  /// unreadable, shorter than the header, has the wrong magic or version, a token count that
  /// disagrees with its size, or a token id >= vocab_size (vocab_size >= 1; values above
  /// 65536 check nothing more than 65536).
  static TokenFile load(const std::string& path, int64_t vocab_size);

  int64_t size() const { return static_cast<int64_t>(tokens_->size()); }
  const uint16_t* data() const { return tokens_->data(); }
  const std::string& path() const { return path_; }

 private:
  TokenFile(std::string path, std::shared_ptr<const std::vector<uint16_t>> tokens)
      : path_(std::move(path)), tokens_(std::move(tokens)) {}

  std::string path_;
  std::shared_ptr<const std::vector<uint16_t>> tokens_;
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
