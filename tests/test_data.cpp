// Token files, DistributedSampler, EvalBatcher and GPT2Decoder (src/data/): the shipped data,
// every malformed-file message, and the sampler's distinctness, determinism and resumability.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "zero/data.h"
#include "zero/error.h"
#include "zero/tokenizer.h"

namespace zero {
namespace {

const std::string kDataDir = ZERO_DATA_DIR;
const std::string kMobyVal = kDataDir + "/tokens/moby_dick_val.bin";
const std::string kMobyTrain = kDataDir + "/tokens/moby_dick_train.bin";
const std::string kEncoder = kDataDir + "/gpt2/encoder.json";
constexpr int64_t kVocab = 50257;

// A per-test temporary directory, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_test_data_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

void put_le32(std::string& out, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));
}

// Bytes of an llm.c token file; header fields and the number of ids written may disagree. Written
// here byte by byte, not by the library's writer, so that a reader and writer sharing a mistake
// still fail.
std::string token_bytes(const std::vector<uint32_t>& ids,
                        const TokenFileFormat& format = kTokenFileUint16,
                        std::optional<int32_t> magic = {}, std::optional<int32_t> version = {},
                        int64_t header_count = -1) {
  std::string out;
  put_le32(out, magic.value_or(format.magic));
  put_le32(out, version.value_or(format.version));
  put_le32(out, static_cast<int32_t>(header_count >= 0 ? header_count
                                                       : static_cast<int64_t>(ids.size())));
  for (int k = 3; k < 256; ++k) put_le32(out, 0);
  for (const uint32_t id : ids) {
    for (int k = 0; k < format.bytes_per_token; ++k) {
      out.push_back(static_cast<char>((id >> (8 * k)) & 0xFF));
    }
  }
  return out;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<uint32_t> iota_ids(int64_t n) {
  std::vector<uint32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 50000);
  return ids;
}

// A temp token file with ids 0, 1, 2, ... (so a window's start is its first input token).
TokenFile iota_file(const TempDir& dir, int64_t n) {
  const std::string path = dir.file("iota.bin");
  write_file(path, token_bytes(iota_ids(n)));
  return TokenFile::load(path, kVocab);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// --------------------------------------------------------------------------------------------
// TokenFile

TEST(TokenFile, LoadsShippedMobyDick) {
  const TokenFile val = TokenFile::load(kMobyVal, kVocab);
  EXPECT_EQ(val.size(), 15887);
  EXPECT_EQ(val.path(), kMobyVal);
  EXPECT_EQ(val.token(0), 13865);  // "azed" (val starts mid-word: the last 5 % of the corpus)
  const TokenFile train = TokenFile::load(kMobyTrain, kVocab);
  EXPECT_EQ(train.size(), 301870);
  EXPECT_EQ(train.token(0), 50256);  // <|endoftext|> precedes the document
}

TEST(TokenFile, LoadsShippedAusten) {
  EXPECT_EQ(TokenFile::load(kDataDir + "/tokens/austen_train.bin", kVocab).size(), 943663);
  EXPECT_EQ(TokenFile::load(kDataDir + "/tokens/austen_val.bin", kVocab).size(), 49666);
}

TEST(TokenFile, CopiesShareTokens) {
  const TokenFile a = TokenFile::load(kMobyVal, kVocab);
  const TokenFile b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(a.storage(), b.storage());
}

TEST(TokenFile, RoundTripsSmallFile) {
  TempDir dir;
  const std::string path = dir.file("ok.bin");
  write_file(path, token_bytes({0, 1, 258, 50256, 65535}));
  const TokenFile f = TokenFile::load(path, 65536);
  ASSERT_EQ(f.size(), 5);
  EXPECT_EQ(f.token(2), 258);  // little-endian: low byte first
  EXPECT_EQ(f.token(4), 65535);
  // An empty file body is valid.
  write_file(path, token_bytes({}));
  EXPECT_EQ(TokenFile::load(path, kVocab).size(), 0);
}

TEST(TokenFile, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("does_not_exist.bin");
  const std::string msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(TokenFile, ShorterThanHeader) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  write_file(path, token_bytes({}).substr(0, 100));
  const std::string msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("100 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shorter than the 1024-byte header"), std::string::npos) << msg;
}

TEST(TokenFile, WrongMagic) {
  TempDir dir;
  const std::string path = dir.file("magic.bin");
  write_file(path, token_bytes({1, 2, 3}, kTokenFileUint16, 12345));
  const std::string msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic number: expected 20240520 (uint16 ids) or 20240801 (uint32 ids), "
                     "found 12345"),
            std::string::npos)
      << msg;
}

TEST(TokenFile, UnsupportedVersion) {
  TempDir dir;
  const std::string path = dir.file("version.bin");
  write_file(path, token_bytes({1, 2, 3}, kTokenFileUint16, {}, 2));
  const std::string msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("unsupported version 2 (magic 20240520 has version 1, uint16 ids)"),
            std::string::npos)
      << msg;
  // Each magic has its own version: GPT-2's version with the uint32 magic is refused.
  write_file(path, token_bytes({1, 2, 3}, kTokenFileUint32, {}, 1));
  EXPECT_NE(error_of([&] { TokenFile::load(path, kVocab); })
                .find("unsupported version 1 (magic 20240801 has version 7, uint32 ids)"),
            std::string::npos);
}

TEST(TokenFile, CountDisagreesWithSize) {
  TempDir dir;
  const std::string path = dir.file("size.bin");
  // The header claims 10 tokens but only 3 follow: 1024 + 20 expected, 1024 + 6 found.
  write_file(path, token_bytes({1, 2, 3}, kTokenFileUint16, {}, {}, 10));
  std::string msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("header says 10 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("should be 1044 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("it is 1030 bytes"), std::string::npos) << msg;
  // A trailing odd byte is a mismatch too.
  write_file(path, token_bytes({1, 2, 3}) + "x");
  msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find("should be 1030 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("it is 1031 bytes"), std::string::npos) << msg;
}

TEST(TokenFile, IdOutOfVocab) {
  TempDir dir;
  const std::string path = dir.file("vocab.bin");
  write_file(path, token_bytes({5, 50256, 50257, 60000}));
  const std::string msg = error_of([&] { TokenFile::load(path, kVocab); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 50257 at position 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab size 50257"), std::string::npos) << msg;
  EXPECT_NO_THROW(TokenFile::load(path, 65536));
  EXPECT_NE(error_of([&] { TokenFile::load(path, 0); }).find("vocab_size must be >= 1"),
            std::string::npos);
}

// llm.c's Llama 3 format: uint32 ids, for vocabularies of more than 65536 (Llama 3's 128256,
// Qwen2's 151936).
TEST(TokenFile, ReadsUint32Files) {
  TempDir dir;
  const std::string path = dir.file("wide.bin");
  const std::vector<uint32_t> ids = {0, 65535, 65536, 128000, 151935, 258};
  write_file(path, token_bytes(ids, kTokenFileUint32));
  const TokenFile f = TokenFile::load(path, 151936);
  ASSERT_EQ(f.size(), 6);
  EXPECT_EQ(f.bytes_per_token(), 4);
  EXPECT_EQ(f.format().magic, 20240801);
  EXPECT_EQ(f.tokens(0, 6), std::vector<int64_t>(ids.begin(), ids.end()));
  EXPECT_EQ(f.token(3), 128000);  // little-endian: low byte first
  // The vocabulary bounds the ids as in the uint16 format.
  const std::string msg = error_of([&] { TokenFile::load(path, 128256); });
  EXPECT_NE(msg.find("token id 151935 at position 4 is out of range for vocab size 128256"),
            std::string::npos)
      << msg;
  // 4 bytes per token: a count the size does not hold is named with that width.
  write_file(path, token_bytes({1, 2, 3}, kTokenFileUint32, {}, {}, 4));
  EXPECT_NE(error_of([&] { TokenFile::load(path, kVocab); })
                .find("should be 1040 bytes (1024 header + 4 per token), but it is 1036 bytes"),
            std::string::npos);
}

TEST(TokenFile, WriterPicksTheNarrowestFormat) {
  EXPECT_EQ(token_file_format_for(50257).magic, kTokenFileUint16.magic);
  EXPECT_EQ(token_file_format_for(65536).bytes_per_token, 2);  // ids 0..65535
  EXPECT_EQ(token_file_format_for(65537).bytes_per_token, 4);
  EXPECT_EQ(token_file_format_for(128256).magic, kTokenFileUint32.magic);
  EXPECT_NE(error_of([&] { token_file_format_for(0); }).find("vocab_size must be >= 1"),
            std::string::npos);
  // The library's writer gives the bytes written by hand above, in both formats.
  const std::vector<uint32_t> narrow = {0, 1, 258, 50256, 65535};
  const std::vector<uint32_t> wide = {0, 65536, 128255, 7};
  EXPECT_EQ(token_file_bytes(narrow.data(), 5, kTokenFileUint16), token_bytes(narrow));
  EXPECT_EQ(token_file_bytes(wide.data(), 4, kTokenFileUint32),
            token_bytes(wide, kTokenFileUint32));
  // An id that the uint16 format cannot hold is refused, not truncated.
  const std::string msg = error_of([&] { token_file_bytes(wide.data(), 4, kTokenFileUint16); });
  EXPECT_NE(msg.find("token id 65536 at position 1 does not fit a uint16 token file"),
            std::string::npos)
      << msg;
}

// A sampler reads the same windows from either width.
TEST(TokenFile, SamplersReadBothWidthsAlike) {
  TempDir dir;
  const std::vector<uint32_t> ids = iota_ids(2000);
  write_file(dir.file("narrow.bin"), token_bytes(ids));
  write_file(dir.file("wide.bin"), token_bytes(ids, kTokenFileUint32));
  const TokenFile narrow = TokenFile::load(dir.file("narrow.bin"), kVocab);
  const TokenFile wide = TokenFile::load(dir.file("wide.bin"), kVocab);
  const DistributedSampler a(narrow, 4, 32, 1, 2, 2, 7);
  const DistributedSampler b(wide, 4, 32, 1, 2, 2, 7);
  for (int64_t step = 0; step < 3; ++step) {
    const auto [xa, ya] = a.batch(step, 1);
    const auto [xb, yb] = b.batch(step, 1);
    EXPECT_TRUE(at::equal(xa, xb) && at::equal(ya, yb)) << "step " << step;
  }
  const EvalBatcher ea(narrow, 2, 16, 0, 1);
  const EvalBatcher eb(wide, 2, 16, 0, 1);
  EXPECT_TRUE(at::equal(ea.batch(3).first, eb.batch(3).first));
}

// --------------------------------------------------------------------------------------------
// DistributedSampler

TEST(DistributedSampler, ShapesAndShiftByOne) {
  const TokenFile val = TokenFile::load(kMobyVal, kVocab);
  const DistributedSampler s(val, 3, 16, 0, 1, 1, 42);
  const auto [x, y] = s.batch(0, 0);
  EXPECT_EQ(x.sizes(), (at::IntArrayRef{3, 16}));
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{3, 16}));
  EXPECT_EQ(x.scalar_type(), at::kLong);
  EXPECT_EQ(y.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(x.slice(1, 1), y.slice(1, 0, 15)));
  const auto starts = s.window_starts(0, 0);
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t s0 = starts[static_cast<size_t>(b)];
    EXPECT_EQ(s0 % 16, 0);
    for (int64_t t = 0; t < 16; ++t) {
      EXPECT_EQ(x[b][t].item<int64_t>(), val.token(s0 + t));
      EXPECT_EQ(y[b][t].item<int64_t>(), val.token(s0 + t + 1));
    }
  }
  EXPECT_EQ(s.samples_per_epoch(), (15887 - 1) / 16);
}

TEST(DistributedSampler, DistinctAcrossRanksAndMicroSteps) {
  TempDir dir;
  const int64_t T = 8, B = 3;
  const int world = 4, gas = 2;
  // 5 steps x 2 micro x 4 ranks x 3 rows = 120 samples, all inside one 125-window epoch.
  const TokenFile file = iota_file(dir, 125 * T + 1);
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(file, B, T, r, world, gas, 7);
  ASSERT_EQ(ranks[0].samples_per_epoch(), 125);
  std::set<int64_t> seen_all;
  for (int64_t step = 0; step < 5; ++step) {
    std::set<int64_t> seen_step;
    for (int m = 0; m < gas; ++m) {
      for (int r = 0; r < world; ++r) {
        const auto [x, y] = ranks[static_cast<size_t>(r)].batch(step, m);
        for (int64_t b = 0; b < B; ++b) {
          const int64_t start = x[b][0].item<int64_t>();  // iota file: token == position
          EXPECT_EQ(start % T, 0);
          EXPECT_TRUE(seen_step.insert(start).second) << "step " << step << " window " << start;
          EXPECT_TRUE(seen_all.insert(start).second) << "window " << start << " repeated";
        }
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen_step.size()), ranks[0].samples_per_step());
  }
  // The order is shuffled, not file order.
  EXPECT_NE(ranks[0].window_starts(0, 0), (std::vector<int64_t>{0, T, 2 * T}));
}

TEST(DistributedSampler, Deterministic) {
  const TokenFile val = TokenFile::load(kMobyVal, kVocab);
  const DistributedSampler a(val, 4, 32, 1, 2, 2, 1234);
  const DistributedSampler b(TokenFile::load(kMobyVal, kVocab), 4, 32, 1, 2, 2, 1234);
  for (int64_t step = 0; step < 3; ++step) {
    for (int m = 0; m < 2; ++m) {
      const auto [xa, ya] = a.batch(step, m);
      const auto [xb, yb] = b.batch(step, m);
      EXPECT_TRUE(at::equal(xa, xb));
      EXPECT_TRUE(at::equal(ya, yb));
    }
  }
  // Another seed gives another order.
  const DistributedSampler c(val, 4, 32, 1, 2, 2, 1235);
  EXPECT_NE(a.window_starts(0, 0), c.window_starts(0, 0));
}

TEST(DistributedSampler, ResumableInAnyOrder) {
  const TokenFile train = TokenFile::load(kMobyTrain, kVocab);
  const DistributedSampler forward(train, 2, 64, 0, 2, 2, 99);
  std::vector<std::vector<int64_t>> in_order;
  for (int64_t step = 0; step < 2000; step += 97) in_order.push_back(forward.window_starts(step, 1));
  // A fresh sampler asked in reverse order (as after a resume) gives the same windows.
  const DistributedSampler resumed(train, 2, 64, 0, 2, 2, 99);
  size_t i = in_order.size();
  for (int64_t step = 97 * static_cast<int64_t>(in_order.size() - 1); step >= 0; step -= 97) {
    EXPECT_EQ(resumed.window_starts(step, 1), in_order[--i]) << "step " << step;
  }
  const auto [x1, y1] = forward.batch(1500, 0);
  const auto [x2, y2] = resumed.batch(1500, 0);
  EXPECT_TRUE(at::equal(x1, x2));
  EXPECT_TRUE(at::equal(y1, y2));
}

TEST(DistributedSampler, WrapsAroundEpochs) {
  TempDir dir;
  const int64_t T = 4;
  const TokenFile file = iota_file(dir, 10 * T + 3);  // 10 windows, 2 tail tokens unused
  const DistributedSampler s(file, 2, T, 0, 1, 1, 5);
  ASSERT_EQ(s.samples_per_epoch(), 10);
  // Steps 0..4 are epoch 0, 5..9 epoch 1: each epoch visits every window exactly once.
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t step = 0; step < 10; ++step) {
    for (const int64_t start : s.window_starts(step, 0)) {
      (step < 5 ? epoch0 : epoch1).push_back(start);
    }
  }
  std::vector<int64_t> all;
  for (int64_t w = 0; w < 10; ++w) all.push_back(w * T);
  auto sorted = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(epoch0), all);
  EXPECT_EQ(sorted(epoch1), all);
  EXPECT_NE(epoch0, epoch1);  // a new permutation per epoch
  EXPECT_DOUBLE_EQ(s.epoch_after(5), 1.0);
  // A step straddling an epoch boundary (3 rows, 10 windows) still yields valid windows.
  const DistributedSampler odd(file, 3, T, 0, 1, 1, 5);
  for (int64_t step = 0; step < 7; ++step) {
    const auto [x, y] = odd.batch(step, 0);
    EXPECT_EQ(x[0][0].item<int64_t>() % T, 0);
    EXPECT_TRUE(at::equal(x.slice(1, 1), y.slice(1, 0, T - 1)));
  }
}

TEST(DistributedSampler, ExactlyOneWindow) {
  TempDir dir;
  const TokenFile file = iota_file(dir, 9);
  const DistributedSampler s(file, 2, 8, 0, 1, 1, 0);
  const auto [x, y] = s.batch(3, 0);
  EXPECT_TRUE(at::equal(x, at::arange(8, at::kLong).repeat({2, 1})));
  EXPECT_TRUE(at::equal(y, at::arange(1, 9, at::kLong).repeat({2, 1})));
}

TEST(DistributedSampler, Errors) {
  TempDir dir;
  const TokenFile file = iota_file(dir, 8);
  std::string msg = error_of([&] { DistributedSampler(file, 1, 8, 0, 1, 1, 0); });
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("has 8 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("T = 8"), std::string::npos) << msg;
  const TokenFile ok = iota_file(dir, 100);
  EXPECT_NE(error_of([&] { DistributedSampler(ok, 0, 8, 0, 1, 1, 0); }).find("batch size"),
            std::string::npos);
  EXPECT_NE(error_of([&] { DistributedSampler(ok, 1, 8, 2, 2, 1, 0); }).find("rank must be in"),
            std::string::npos);
  EXPECT_NE(error_of([&] { DistributedSampler(ok, 1, 8, 0, 1, 0, 0); })
                .find("gradient_accumulation_steps must be >= 1, got 0"),
            std::string::npos);
  const DistributedSampler s(ok, 1, 8, 0, 1, 2, 0);
  EXPECT_NE(error_of([&] { s.batch(0, 2); }).find("micro_step must be in [0, 2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.batch(-1, 0); }).find("step must be >= 0"), std::string::npos);
}

// --------------------------------------------------------------------------------------------
// EvalBatcher

TEST(EvalBatcher, SplitsSequentialWindowsAcrossRanks) {
  TempDir dir;
  const int64_t T = 4, B = 2;
  const int world = 3;
  const TokenFile file = iota_file(dir, 20 * T + 1);  // 20 windows -> 3 batches per rank
  std::set<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    const EvalBatcher e(file, B, T, r, world);
    ASSERT_EQ(e.num_batches(), 3);
    for (int64_t k = 0; k < e.num_batches(); ++k) {
      const auto [x, y] = e.batch(k);
      EXPECT_EQ(x.sizes(), (at::IntArrayRef{B, T}));
      EXPECT_TRUE(at::equal(x.slice(1, 1), y.slice(1, 0, T - 1)));
      for (int64_t b = 0; b < B; ++b) {
        const int64_t start = x[b][0].item<int64_t>();
        EXPECT_EQ(start, ((k * world + r) * B + b) * T);
        EXPECT_TRUE(seen.insert(start).second);
      }
    }
  }
  EXPECT_EQ(seen.size(), 18u);  // 2 tail windows skipped
  EXPECT_EQ(EvalBatcher(file, B, T, 0, world, 2).num_batches(), 2);
}

TEST(EvalBatcher, TooFewWindows) {
  const TokenFile val = TokenFile::load(kMobyVal, kVocab);  // 15 windows of 1024
  const std::string msg = error_of([&] { EvalBatcher(val, 4, 1024, 0, 4); });
  EXPECT_NE(msg.find(kMobyVal), std::string::npos) << msg;
  EXPECT_NE(msg.find("15 windows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16 windows"), std::string::npos) << msg;
  EXPECT_EQ(EvalBatcher(val, 5, 1024, 2, 3).num_batches(), 1);
  const EvalBatcher e(val, 1, 1024, 0, 1);
  EXPECT_NE(error_of([&] { e.batch(15); }).find("batch index must be in [0, 15)"),
            std::string::npos);
}

// --------------------------------------------------------------------------------------------
// GPT2Decoder

TEST(GPT2Decoder, KnownTokens) {
  const GPT2Decoder d = GPT2Decoder::load(kEncoder);
  EXPECT_EQ(d.vocab_size(), 50257);
  EXPECT_EQ(d.token_bytes(50256), "<|endoftext|>");
  EXPECT_EQ(d.token_bytes(464), "The");
  EXPECT_EQ(d.token_bytes(13), ".");
  EXPECT_EQ(d.token_bytes(220), " ");    // "Ġ"
  EXPECT_EQ(d.token_bytes(198), "\n");   // "Ċ"
  EXPECT_EQ(d.token_bytes(262), " the");  // "Ġthe"
  EXPECT_EQ(d.decode({464, 22206, 13}), "The whale.");
  // "’" (U+2019, E2 80 99) is split over two byte-level tokens: 447 = E2 80, 247 = 99.
  EXPECT_EQ(d.token_bytes(447), "\xE2\x80");
  EXPECT_EQ(d.decode({447, 247}), "\xE2\x80\x99");
  EXPECT_EQ(d.decode({960}), "\xE2\x80\x94");  // "—"
  // The byte table: printable bytes map to themselves, the rest to U+0100...
  const auto& table = gpt2_byte_to_unicode();
  EXPECT_EQ(table['A'], static_cast<uint32_t>('A'));
  EXPECT_EQ(table[' '], 0x120u);
  EXPECT_EQ(table['\n'], 0x10Au);
  EXPECT_EQ(table[0], 0x100u);
}

TEST(GPT2Decoder, DecodesShippedTokens) {
  const GPT2Decoder d = GPT2Decoder::load(kEncoder);
  const TokenFile train = TokenFile::load(kMobyTrain, kVocab);
  EXPECT_EQ(d.decode(train.tokens(0, 30)),
            "<|endoftext|>CHAPTER 1. Loomings.\n\nCall me Ishmael. Some years ago\xE2\x80\x94"
            "never mind how long precisely\xE2\x80\x94having\nlittle or");
  const TokenFile val = TokenFile::load(kMobyVal, kVocab);
  const std::string text = d.decode(val.tokens(0, 30));
  EXPECT_EQ(text,
            "azed beyond the whale\xE2\x80\x99s place, towards the dim blue spaces and wide\n"
            "wooing vacancies to leeward. It was only an");
  EXPECT_NE(text.find("whale"), std::string::npos);
}

TEST(GPT2Decoder, Errors) {
  TempDir dir;
  const std::string missing = dir.file("missing.json");
  std::string msg = error_of([&] { GPT2Decoder::load(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;

  const std::string bad = dir.file("bad.json");
  write_file(bad, "{\"a\": 0, \"b\": ");
  msg = error_of([&] { GPT2Decoder::load(bad); });
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;

  write_file(bad, "[1, 2]");
  msg = error_of([&] { GPT2Decoder::load(bad); });
  EXPECT_NE(msg.find("expected a JSON object"), std::string::npos) << msg;

  write_file(bad, R"({"a": 0, "b": "x"})");
  msg = error_of([&] { GPT2Decoder::load(bad); });
  EXPECT_NE(msg.find("must be an integer, found \"x\""), std::string::npos) << msg;

  write_file(bad, R"({"a": 0, "b": 5})");
  msg = error_of([&] { GPT2Decoder::load(bad); });
  EXPECT_NE(msg.find("id 5 of token \"b\" is outside [0, 2)"), std::string::npos) << msg;

  write_file(bad, R"({"a": 1, "b": 1})");
  msg = error_of([&] { GPT2Decoder::load(bad); });
  EXPECT_NE(msg.find("id 1 is used twice"), std::string::npos) << msg;

  write_file(bad, "{\"a\": 0, \"\xE4\xB8\xAD\": 1}");  // U+4E2D is not in the byte table
  msg = error_of([&] { GPT2Decoder::load(bad); });
  EXPECT_NE(msg.find("U+4E2D"), std::string::npos) << msg;

  write_file(bad, R"({"a": 0, "\u0120b": 1})");
  const GPT2Decoder tiny = GPT2Decoder::load(bad);
  EXPECT_EQ(tiny.decode({1, 0}), " ba");
  msg = error_of([&] { tiny.decode({0, 2}); });
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 2 is out of range for vocab size 2"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { tiny.token_bytes(-1); }).find("token id -1"), std::string::npos);
}

}  // namespace
}  // namespace zero
