// Inputs that are not what they claim to be: FIFOs, devices and directories where a file is
// expected, files over their size cap, JSON nested 100,000 deep, numbers beyond double's range.
// Each must end in one zero::Error naming the file and what is wrong: no hang, no unbounded
// memory, no crash (Note [Bounded input] in src/common/bounded_input.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "zero/checkpoint.h"
#include "zero/config.h"
#include "zero/error.h"
#include "zero/safetensors.h"
#include "zero/tokenizer.h"

namespace fs = std::filesystem;

namespace zero {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "zero-inputs-XXXXXX").string();
    ZERO_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string fifo(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

std::string deep_json(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The message of the zero::Error `body` throws; a failure if it throws nothing or another type.
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected zero::Error, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected zero::Error, nothing thrown";
  return "";
}

void expect_error(const std::function<void()>& body, const std::vector<std::string>& parts) {
  const std::string message = error_of(body);
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

TEST(BoundedInput, ConfigMustBeARegularFile) {
  TempDir dir;
  const std::string pipe = fifo(dir, "config.json");
  expect_error([&] { load_config(pipe, 1); }, {"config file", pipe, "FIFO", "regular file"});
  expect_error([&] { load_config("/dev/zero", 1); }, {"/dev/zero", "character device"});
  expect_error([&] { load_config(dir.path().string(), 1); }, {dir.path().string(), "directory"});
  expect_error([&] { load_config(dir.file("missing.json"), 1); },
               {"cannot open config file", "No such file or directory"});
}

TEST(BoundedInput, ConfigSizeIsCapped) {
  TempDir dir;
  const std::string big = dir.file("big.json");
  write_file(big, "{\"train_batch_size\": 1" + std::string(17 << 20, ' ') + "}");
  expect_error([&] { load_config(big, 1); }, {big, "bytes; at most 16777216 are accepted"});
}

TEST(BoundedInput, ConfigNestingIsBounded) {
  TempDir dir;
  const std::string deep = dir.file("deep.json");
  write_file(deep, "{\"zero_optimization\": {\"stage\": " + deep_json(100000) + "}}");
  expect_error([&] { load_config(deep, 1); }, {deep, "nested deeper than 64 levels"});
  // 64 levels in all are accepted as JSON (and then refused as a config value, by key); 65 not.
  const std::string prefix =
      "{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": ";
  write_file(deep, prefix + deep_json(62) + "}}");
  expect_error([&] { load_config(deep, 1); }, {deep, "zero_optimization.stage"});
  write_file(deep, prefix + deep_json(63) + "}}");
  expect_error([&] { load_config(deep, 1); }, {deep, "nested deeper than 64 levels"});
}

TEST(BoundedInput, ConfigNumberOutOfRangeNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("huge.json");
  write_file(path, "{\"train_batch_size\": 1e400}");
  expect_error([&] { load_config(path, 1); }, {path, "invalid JSON", "1e400"});
}

// A checkpoint directory whose `latest` and metadata are not what they should be.
TEST(BoundedInput, CheckpointIndexAndMetadata) {
  TempDir dir;
  const std::string latest = fifo(dir, "latest");
  expect_error([&] { inspect_checkpoint(dir.path().string()); }, {"checkpoint index", latest, "FIFO"});
  fs::remove(latest);
  // A link is refused without being read: its target (a device here, another file's content
  // elsewhere) is neither read nor echoed.
  fs::create_symlink("/dev/zero", latest);
  expect_error([&] { inspect_checkpoint(dir.path().string()); }, {latest, "symbolic link"});
  fs::remove(latest);
  write_file(latest, "tag" + std::string(5000, ' '));
  expect_error([&] { inspect_checkpoint(dir.path().string()); }, {latest, "at most 4096"});

  write_file(latest, "tag\n");
  fs::create_directories(dir.path() / "tag");
  const std::string metadata = (dir.path() / "tag" / "metadata.json").string();
  write_file(metadata, "{\"format\": \"zero-checkpoint\", \"client_state\": " + deep_json(100000) + "}");
  expect_error([&] { inspect_checkpoint(dir.path().string()); },
               {"checkpoint metadata", metadata, "nested deeper than 64 levels"});
  write_file(metadata, "{\"format\": 1e999}");
  expect_error([&] { inspect_checkpoint(dir.path().string()); }, {metadata, "invalid JSON"});
  fs::remove(metadata);
  ASSERT_EQ(::mkfifo(metadata.c_str(), 0600), 0);
  expect_error([&] { inspect_checkpoint(dir.path().string()); }, {metadata, "FIFO"});
}

TEST(BoundedInput, SafetensorsHeader) {
  TempDir dir;
  const std::string pipe = fifo(dir, "w.safetensors");
  expect_error([&] { read_safetensors(pipe); }, {pipe, "not a regular file"});

  const std::string path = dir.file("deep.safetensors");
  const std::string header = "{\"__metadata__\": " + deep_json(100000) + "}";
  std::string bytes(8, '\0');
  uint64_t size = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  write_file(path, bytes + header);
  expect_error([&] { read_safetensors(path); }, {path, "nested deeper than 64 levels"});
}

TEST(BoundedInput, Encoder) {
  TempDir dir;
  const std::string pipe = fifo(dir, "encoder.json");
  expect_error([&] { GPT2Decoder::load(pipe); }, {"GPT-2 encoder", pipe, "FIFO"});
  const std::string deep = dir.file("deep.json");
  write_file(deep, deep_json(100000));
  expect_error([&] { GPT2Decoder::load(deep); }, {deep, "nested deeper than 64 levels"});
}

}  // namespace
}  // namespace zero
