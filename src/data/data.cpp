// TokenFile, DistributedSampler and EvalBatcher (include/zero/data.h).
#include "zero/data.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "zero/error.h"

// Token ids are kept as the file holds them (little-endian) and read in place.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are read on little-endian "
              "hosts only");

namespace zero {
namespace {

// Reads `size` bytes of `path` or throws zero::Error (a short file, a read error).
void read_exactly(std::FILE* file, void* out, size_t size, const std::string& path) {
  const size_t got = std::fread(out, 1, size, file);
  ZERO_CHECK(got == size, "token file '", path, "': ",
             std::ferror(file) ? std::string("read error: ") + std::strerror(errno)
                               : "the file ended early (it changed while being read?)",
             " after ", got, " of ", size, " bytes");
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
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = starts[static_cast<size_t>(r)];
    ZERO_INTERNAL_ASSERT(s >= 0 && s + T + 1 <= file.size(), "window start ", s, " T ", T,
                         " tokens ", file.size());
    file.copy_tokens(s, T, in + r * T);
    file.copy_tokens(s + 1, T, tg + r * T);
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

// f(ids) with the ids as an array of the file's width (const uint16_t* or const uint32_t*).
template <typename F>
decltype(auto) TokenFile::visit_ids(F&& f) const {
  if (ids32_) return f(ids32_->data());
  return f(ids16_->data());
}

namespace {
// Reads `count` ids into a vector the TokenFile keeps: one copy of them in memory.
template <typename Id>
std::shared_ptr<const std::vector<Id>> read_ids(std::FILE* file, int64_t count,
                                                const std::string& path) {
  auto ids = std::make_shared<std::vector<Id>>(static_cast<size_t>(count));
  read_exactly(file, ids->data(), sizeof(Id) * ids->size(), path);
  return ids;
}
}  // namespace

TokenFileFormat token_file_format_for(int64_t vocab_size) {
  ZERO_CHECK(vocab_size >= 1, "token file format: vocab_size must be >= 1, got ", vocab_size);
  return vocab_size <= 65536 ? kTokenFileUint16 : kTokenFileUint32;
}

std::string token_file_bytes(const uint32_t* ids, int64_t count, const TokenFileFormat& format) {
  ZERO_INTERNAL_ASSERT(format.bytes_per_token == 2 || format.bytes_per_token == 4,
                       "bytes per token ", format.bytes_per_token);
  ZERO_CHECK(count >= 0 && count <= std::numeric_limits<int32_t>::max(), "a token file's ",
             "header counts tokens in an int32: ", count, " tokens do not fit (split the input)");
  const int width = format.bytes_per_token;
  std::string bytes(static_cast<size_t>(kTokenFileHeaderBytes + width * count), '\0');
  const int32_t header[3] = {format.magic, format.version, static_cast<int32_t>(count)};
  std::memcpy(bytes.data(), header, sizeof(header));  // little-endian hosts only (static_assert)
  char* out = bytes.data() + kTokenFileHeaderBytes;
  if (width == 4) {
    std::memcpy(out, ids, static_cast<size_t>(4 * count));
    return bytes;
  }
  for (int64_t i = 0; i < count; ++i) {
    ZERO_CHECK(ids[i] <= 0xFFFF, "token id ", ids[i], " at position ", i, " does not fit a ",
               "uint16 token file (ids < 65536); write the uint32 format (magic ",
               kTokenFileUint32.magic, ")");
    const auto id = static_cast<uint16_t>(ids[i]);
    std::memcpy(out + 2 * i, &id, 2);
  }
  return bytes;
}

TokenFile TokenFile::load(const std::string& path, int64_t vocab_size) {
  ZERO_CHECK(vocab_size >= 1, "token file '", path, "': vocab_size must be >= 1, got ",
             vocab_size);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  ZERO_CHECK(file != nullptr, "token file '", path, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  ZERO_CHECK(::fstat(::fileno(file.get()), &st) == 0, "token file '", path, "': cannot stat: ",
             std::strerror(errno));
  const auto actual = static_cast<int64_t>(st.st_size);
  ZERO_CHECK(actual >= kTokenFileHeaderBytes, "token file '", path, "': file is ", actual,
             " bytes, shorter than the ", kTokenFileHeaderBytes,
             "-byte header (256 int32); not an llm.c token file");
  unsigned char header[12];
  read_exactly(file.get(), header, sizeof(header), path);
  ZERO_CHECK(std::fseek(file.get(), kTokenFileHeaderBytes, SEEK_SET) == 0, "token file '", path,
             "': cannot seek past the header: ", std::strerror(errno));
  const int32_t magic = le_int32(header);
  const int32_t version = le_int32(header + 4);
  const int32_t count = le_int32(header + 8);
  const TokenFileFormat* format = nullptr;
  for (const TokenFileFormat* known : {&kTokenFileUint16, &kTokenFileUint32}) {
    if (magic == known->magic) format = known;
  }
  ZERO_CHECK(format != nullptr, "token file '", path, "': bad magic number: expected ",
             kTokenFileUint16.magic, " (uint16 ids) or ", kTokenFileUint32.magic,
             " (uint32 ids), found ", magic, "; not an llm.c token file");
  ZERO_CHECK(version == format->version, "token file '", path, "': unsupported version ",
             version, " (magic ", magic, " has version ", format->version, ", uint",
             8 * format->bytes_per_token, " ids)");
  ZERO_CHECK(count >= 0, "token file '", path, "': negative token count ", count,
             " in the header");
  const int width = format->bytes_per_token;
  const int64_t expected = kTokenFileHeaderBytes + width * static_cast<int64_t>(count);
  ZERO_CHECK(actual == expected, "token file '", path, "': size mismatch: the header says ",
             count, " tokens, so the file should be ", expected, " bytes (", kTokenFileHeaderBytes,
             " header + ", width, " per token), but it is ", actual, " bytes");

  TokenFile tokens(path, *format);
  tokens.size_ = count;
  if (width == 4) {
    tokens.ids32_ = read_ids<uint32_t>(file.get(), count, path);
  } else {
    tokens.ids16_ = read_ids<uint16_t>(file.get(), count, path);
  }
  const int64_t bad = tokens.first_at_or_above(vocab_size);
  ZERO_CHECK(bad < 0, "token file '", path, "': token id ", bad < 0 ? 0 : tokens.token(bad),
             " at position ", bad, " is out of range for vocab size ", vocab_size,
             " (ids must be < ", vocab_size, ")");
  return tokens;
}

int64_t TokenFile::first_at_or_above(int64_t limit) const {
  return visit_ids([&](const auto* ids) -> int64_t {
    // The maximum first (one vectorisable pass); the position only when there is one.
    uint32_t max = 0;
    for (int64_t i = 0; i < size_; ++i) max = std::max<uint32_t>(max, ids[i]);
    if (static_cast<int64_t>(max) < limit) return -1;
    for (int64_t i = 0;; ++i) {
      if (static_cast<int64_t>(ids[i]) >= limit) return i;
    }
  });
}

const void* TokenFile::storage() const {
  return visit_ids([](const auto* ids) { return static_cast<const void*>(ids); });
}

int64_t TokenFile::token(int64_t i) const {
  ZERO_INTERNAL_ASSERT(i >= 0 && i < size_, "token ", i, " of ", size_);
  return visit_ids([&](const auto* ids) { return static_cast<int64_t>(ids[i]); });
}

void TokenFile::copy_tokens(int64_t start, int64_t count, int64_t* out) const {
  ZERO_INTERNAL_ASSERT(start >= 0 && count >= 0 && start + count <= size_, "tokens [", start,
                       ", ", start + count, ") of ", size_);
  visit_ids([&](const auto* ids) {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(ids[start + i]);
  });
}

std::vector<int64_t> TokenFile::tokens(int64_t start, int64_t count) const {
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
  copy_tokens(start, count, out.data());
  return out;
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
