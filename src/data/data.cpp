// TokenFile, DistributedSampler and EvalBatcher (include/zero/data.h).
#include "zero/data.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "zero/error.h"

namespace zero {
namespace {

// Reads the whole file; throws zero::Error with strerror on failure.
std::vector<unsigned char> read_all(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ZERO_CHECK(f != nullptr, "token file '", path, "': cannot open: ", std::strerror(errno));
  std::vector<unsigned char> bytes;
  unsigned char chunk[1 << 16];
  while (true) {
    const size_t n = std::fread(chunk, 1, sizeof(chunk), f);
    bytes.insert(bytes.end(), chunk, chunk + n);
    if (n < sizeof(chunk)) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  ZERO_CHECK(!failed, "token file '", path, "': read error: ", std::strerror(err));
  return bytes;
}

int32_t le_int32(const unsigned char* p) {
  const uint32_t u = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                     (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  int32_t v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// SplitMix64 finalizer: decorrelates (seed, epoch) before seeding the Mersenne Twister.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound] from raw mt19937_64 output by rejection (unbiased and, unlike
// std::uniform_int_distribution, the same with every standard library).
uint64_t draw_upto(std::mt19937_64& gen, uint64_t bound) {
  if (bound == std::numeric_limits<uint64_t>::max()) return gen();
  const uint64_t range = bound + 1;
  const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                         (std::numeric_limits<uint64_t>::max() % range + 1) % range;
  uint64_t x;
  do {
    x = gen();
  } while (x > limit);
  return x % range;
}

// The window order of epoch `epoch`: a Fisher-Yates permutation of [0, windows).
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t windows) {
  std::vector<int64_t> perm(static_cast<size_t>(windows));
  for (int64_t i = 0; i < windows; ++i) perm[static_cast<size_t>(i)] = i;
  std::mt19937_64 gen(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = windows - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(draw_upto(gen, static_cast<uint64_t>(i)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

// (input, target) int64 [rows, T] from windows starting at `starts`.
std::pair<at::Tensor, at::Tensor> make_batch(const TokenFile& file,
                                             const std::vector<int64_t>& starts, int64_t T) {
  const auto rows = static_cast<int64_t>(starts.size());
  at::Tensor input = at::empty({rows, T}, at::kLong);
  at::Tensor target = at::empty({rows, T}, at::kLong);
  int64_t* in = input.data_ptr<int64_t>();
  int64_t* tg = target.data_ptr<int64_t>();
  const uint16_t* tokens = file.data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = starts[static_cast<size_t>(r)];
    ZERO_INTERNAL_ASSERT(s >= 0 && s + T + 1 <= file.size(), "window start ", s, " T ", T,
                         " tokens ", file.size());
    for (int64_t t = 0; t < T; ++t) {
      in[r * T + t] = tokens[s + t];
      tg[r * T + t] = tokens[s + t + 1];
    }
  }
  return {input, target};
}

void check_shape(const char* who, int64_t batch, int64_t seq_len, int rank, int world) {
  ZERO_CHECK(batch >= 1, who, ": batch size must be >= 1, got ", batch);
  ZERO_CHECK(seq_len >= 1, who, ": sequence length must be >= 1, got ", seq_len);
  ZERO_CHECK(world >= 1, who, ": world size must be >= 1, got ", world);
  ZERO_CHECK(rank >= 0 && rank < world, who, ": rank must be in [0, ", world, "), got ", rank);
}

void check_one_window(const char* who, const TokenFile& file, int64_t seq_len) {
  ZERO_CHECK(file.size() >= seq_len + 1, who, ": token file '", file.path(), "' has ",
             file.size(), " tokens, too few for one window of seq_len + 1 = ", seq_len + 1,
             " tokens (seq_len T = ", seq_len, "); use a longer file or a shorter seq_len");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TokenFile

TokenFile TokenFile::load(const std::string& path, int64_t vocab_size) {
  ZERO_CHECK(vocab_size >= 1, "token file '", path, "': vocab_size must be >= 1, got ",
             vocab_size);
  const std::vector<unsigned char> bytes = read_all(path);
  const auto actual = static_cast<int64_t>(bytes.size());
  ZERO_CHECK(actual >= kTokenFileHeaderBytes, "token file '", path, "': file is ", actual,
             " bytes, shorter than the ", kTokenFileHeaderBytes,
             "-byte header (256 int32); not an llm.c token file");
  const int32_t magic = le_int32(bytes.data());
  const int32_t version = le_int32(bytes.data() + 4);
  const int32_t count = le_int32(bytes.data() + 8);
  ZERO_CHECK(magic == kTokenFileMagic, "token file '", path, "': bad magic number: expected ",
             kTokenFileMagic, ", found ", magic, "; not an llm.c token file");
  ZERO_CHECK(version == kTokenFileVersion, "token file '", path, "': unsupported version ",
             version, " (supported: ", kTokenFileVersion, ", uint16 tokens)");
  ZERO_CHECK(count >= 0, "token file '", path, "': negative token count ", count,
             " in the header");
  const int64_t expected = kTokenFileHeaderBytes + 2 * static_cast<int64_t>(count);
  ZERO_CHECK(actual == expected, "token file '", path, "': size mismatch: the header says ",
             count, " tokens, so the file should be ", expected, " bytes (", kTokenFileHeaderBytes,
             " header + 2 per token), but it is ", actual, " bytes");

  auto tokens = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(count));
  const unsigned char* p = bytes.data() + kTokenFileHeaderBytes;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t id = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
    ZERO_CHECK(static_cast<int64_t>(id) < vocab_size, "token file '", path, "': token id ", id,
               " at position ", i, " is out of range for vocab size ", vocab_size,
               " (ids must be < ", vocab_size, ")");
    (*tokens)[static_cast<size_t>(i)] = id;
  }
  return TokenFile(path, std::move(tokens));
}

int64_t num_windows(int64_t tokens, int64_t seq_len) {
  ZERO_CHECK(seq_len >= 1, "num_windows: sequence length must be >= 1, got ", seq_len);
  return tokens <= seq_len ? 0 : (tokens - 1) / seq_len;
}

// ---------------------------------------------------------------------------------------------
// DistributedSampler

struct DistributedSampler::PermutationCache {
  std::mutex mutex;
  int64_t epoch = -1;
  std::vector<int64_t> perm;
};

DistributedSampler::DistributedSampler(TokenFile file, int64_t batch, int64_t seq_len, int rank,
                                       int world, int gradient_accumulation_steps,
                                       uint64_t seed)
    : file_(std::move(file)),
      batch_(batch),
      seq_len_(seq_len),
      rank_(rank),
      world_(world),
      gas_(gradient_accumulation_steps),
      seed_(seed),
      windows_(0),
      cache_(std::make_shared<PermutationCache>()) {
  check_shape("DistributedSampler", batch, seq_len, rank, world);
  ZERO_CHECK(gradient_accumulation_steps >= 1,
             "DistributedSampler: gradient_accumulation_steps must be >= 1, got ",
             gradient_accumulation_steps);
  check_one_window("DistributedSampler", file_, seq_len);
  windows_ = num_windows(file_.size(), seq_len);
  ZERO_INTERNAL_ASSERT(windows_ >= 1, "windows ", windows_);
}

int64_t DistributedSampler::samples_per_step() const {
  return batch_ * world_ * static_cast<int64_t>(gas_);
}

double DistributedSampler::epoch_after(int64_t steps) const {
  return static_cast<double>(steps) * static_cast<double>(samples_per_step()) /
         static_cast<double>(windows_);
}

int64_t DistributedSampler::window_of(int64_t g) const {
  const int64_t epoch = g / windows_;
  const int64_t pos = g % windows_;
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->epoch != epoch) {
    cache_->perm = epoch_permutation(seed_, epoch, windows_);
    cache_->epoch = epoch;
  }
  return cache_->perm[static_cast<size_t>(pos)];
}

std::vector<int64_t> DistributedSampler::window_starts(int64_t step, int micro_step) const {
  ZERO_CHECK(step >= 0, "DistributedSampler: step must be >= 0, got ", step);
  ZERO_CHECK(micro_step >= 0 && micro_step < gas_, "DistributedSampler: micro_step must be in [0, ",
             gas_, ") (gradient_accumulation_steps), got ", micro_step);
  ZERO_CHECK(step <= (std::numeric_limits<int64_t>::max() / samples_per_step()) - 1,
             "DistributedSampler: step ", step, " is too large (sample index overflows int64)");
  std::vector<int64_t> starts(static_cast<size_t>(batch_));
  const int64_t first = ((step * gas_ + micro_step) * world_ + rank_) * batch_;
  for (int64_t b = 0; b < batch_; ++b) {
    starts[static_cast<size_t>(b)] = window_of(first + b) * seq_len_;
  }
  return starts;
}

std::pair<at::Tensor, at::Tensor> DistributedSampler::batch(int64_t step, int micro_step) const {
  return make_batch(file_, window_starts(step, micro_step), seq_len_);
}

// ---------------------------------------------------------------------------------------------
// EvalBatcher

EvalBatcher::EvalBatcher(TokenFile file, int64_t batch, int64_t seq_len, int rank, int world,
                         int64_t max_batches)
    : file_(std::move(file)),
      batch_(batch),
      seq_len_(seq_len),
      rank_(rank),
      world_(world),
      num_batches_(0) {
  check_shape("EvalBatcher", batch, seq_len, rank, world);
  check_one_window("EvalBatcher", file_, seq_len);
  const int64_t windows = num_windows(file_.size(), seq_len);
  const int64_t per_round = batch * world;
  ZERO_CHECK(windows >= per_round, "EvalBatcher: token file '", file_.path(), "' has ",
             file_.size(), " tokens = ", windows, " windows of seq_len ", seq_len,
             ", fewer than one batch on every rank needs (batch ", batch, " x world ", world,
             " = ", per_round, " windows); use a smaller eval batch or seq_len");
  num_batches_ = windows / per_round;
  if (max_batches > 0 && max_batches < num_batches_) num_batches_ = max_batches;
}

std::pair<at::Tensor, at::Tensor> EvalBatcher::batch(int64_t k) const {
  ZERO_CHECK(k >= 0 && k < num_batches_, "EvalBatcher: batch index must be in [0, ",
             num_batches_, ") for token file '", file_.path(), "', got ", k);
  std::vector<int64_t> starts(static_cast<size_t>(batch_));
  const int64_t first = (k * world_ + rank_) * batch_;
  for (int64_t b = 0; b < batch_; ++b) {
    starts[static_cast<size_t>(b)] = (first + b) * seq_len_;
  }
  return make_batch(file_, starts, seq_len_);
}

}  // namespace zero
