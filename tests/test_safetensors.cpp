// The safetensors writer and reader (src/checkpoint/safetensors.cpp): round trips of every
// kind of tensor, the byte layout, atomic writes, misuse of the writer, and each corruption of
// a file detected with a message naming the file and the tensor. Single process.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "zero/error.h"
#include "zero/safetensors.h"

namespace zero::test {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("zero_test_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Same dtype, shape and bytes.
::testing::AssertionResult bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << a.scalar_type() << " vs " << b.scalar_type();
  }
  if (a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure() << "shape " << a.sizes() << " vs " << b.sizes();
  }
  const at::Tensor x = a.contiguous();
  const at::Tensor y = b.contiguous();
  if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
    return ::testing::AssertionFailure() << "values differ";
  }
  return ::testing::AssertionSuccess();
}

// The call throws zero::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& call, std::initializer_list<std::string> parts) {
  try {
    call();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
    return;
  }
  ADD_FAILURE() << "no zero::Error thrown";
}

std::vector<std::pair<std::string, at::Tensor>> sample_tensors() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"f32", at::randn({2, 3}, generator)},
      {"bf16", at::randn({4, 5}, generator).to(at::kBFloat16)},
      {"f16", at::randn({3, 1, 2}, generator).to(at::kHalf)},
      {"f64.scalar", at::scalar_tensor(3.25, at::kDouble)},  // 0-d
      {"i64", at::tensor({int64_t{-1}, int64_t{0}, int64_t{1} << 40}, at::kLong)},
      {"i32", at::tensor({7, -7}, at::kInt)},
      {"i16", at::tensor({int16_t{-300}}, at::kShort)},
      {"i8", at::tensor({int8_t{-5}, int8_t{5}}, at::kChar)},
      {"u8.empty", at::empty({0}, at::kByte)},              // empty
      {"f32.empty", at::empty({2, 0, 3}, at::kFloat)},      // empty, rank 3
      {"bool", at::tensor({1, 0, 1}, at::kInt).to(at::kBool)},
      {"weird name/with.dots and ünïcode", at::arange(4, at::kFloat)},
  };
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  tensors.emplace_back("f8", at::randn({3}, generator).to(at::kFloat8_e4m3fn));  // libtorch >= 2.1
#endif
  return tensors;
}

TEST_F(Safetensors, RoundTripKeepsEveryDtypeShapeAndBit) {
  const auto tensors = sample_tensors();
  write_safetensors(file("a.safetensors"), tensors, {{"format", "pt"}, {"k", "v"}});
  const SafetensorsFile read = read_safetensors(file("a.safetensors"));
  ASSERT_EQ(read.tensors.size(), tensors.size());
  for (const auto& [name, value] : tensors) {
    ASSERT_TRUE(read.tensors.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(read.tensors.at(name), value)) << name;
  }
  EXPECT_EQ(read.tensors.at("f64.scalar").dim(), 0);
  EXPECT_EQ(read.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"k", "v"}}));
  EXPECT_FALSE(fs::exists(file("a.safetensors.tmp")));
}

TEST_F(Safetensors, EmptyFileAndNoMetadata) {
  write_safetensors(file("empty.safetensors"), {});
  const SafetensorsFile read = read_safetensors(file("empty.safetensors"));
  EXPECT_TRUE(read.tensors.empty());
  EXPECT_TRUE(read.metadata.empty());
}

TEST_F(Safetensors, LayoutIsTheReferenceOne) {
  const std::string path = file("layout.safetensors");
  SafetensorsWriter writer(path, {{"b", at::kFloat, {2}}, {"a", at::kBFloat16, {3}}});
  writer.write("a", at::tensor({1.0, 2.0, 3.0}).to(at::kBFloat16));
  writer.write("b", at::tensor({4.0f, 5.0f}));
  writer.finish();
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), writer.file_bytes());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // padded with spaces, as the reference implementation does
  ASSERT_EQ(bytes.size(), 8 + n + 2 * 4 + 3 * 2);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  // Declaration order decides the layout: b first, then a.
  EXPECT_NE(header.find("\"b\":{\"data_offsets\":[0,8],\"dtype\":\"F32\",\"shape\":[2]}"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"a\":{\"data_offsets\":[8,14],\"dtype\":\"BF16\",\"shape\":[3]}"),
            std::string::npos)
      << header;
  float b[2];
  std::memcpy(b, bytes.data() + 8 + n, 8);
  EXPECT_EQ(b[0], 4.0f);
  EXPECT_EQ(b[1], 5.0f);
}

TEST_F(Safetensors, StreamingWriterTakesValuesInAnyOrderAndAnyLayout) {
  const auto tensors = sample_tensors();
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, value] : tensors) entries.push_back({name, value.scalar_type(), value.sizes().vec()});
  SafetensorsWriter writer(file("s.safetensors"), entries);
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) writer.write(it->first, it->second);
  writer.finish();
  const SafetensorsFile read = read_safetensors(file("s.safetensors"));
  for (const auto& [name, value] : tensors) EXPECT_TRUE(bitwise_equal(read.tensors.at(name), value)) << name;

  // A non-contiguous value is written in logical (row-major) order.
  const at::Tensor base = at::arange(6, at::kFloat).reshape({2, 3});
  SafetensorsWriter transposed(file("t.safetensors"), {{"t", at::kFloat, {3, 2}}});
  transposed.write("t", base.t());
  transposed.finish();
  EXPECT_TRUE(bitwise_equal(read_safetensors(file("t.safetensors")).tensors.at("t"), base.t().contiguous()));
}

TEST_F(Safetensors, FileAppearsOnlyOnFinish) {
  const std::string path = file("atomic.safetensors");
  {
    SafetensorsWriter writer(path, {{"x", at::kFloat, {2}}});
    writer.write("x", at::ones({2}));
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }  // destroyed without finish()
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // An existing file stays intact until a new one is finished.
  write_safetensors(path, {{"old", at::zeros({1})}});
  {
    SafetensorsWriter writer(path, {{"new", at::kFloat, {1}}});
    writer.write("new", at::ones({1}));
    EXPECT_TRUE(read_safetensors(path).tensors.count("old"));
  }
  EXPECT_TRUE(read_safetensors(path).tensors.count("old"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  {
    SafetensorsWriter writer(path, {{"new", at::kFloat, {1}}});
    writer.write("new", at::ones({1}));
    writer.finish();
  }
  const SafetensorsFile read = read_safetensors(path);
  EXPECT_EQ(read.tensors.size(), 1u);
  EXPECT_TRUE(read.tensors.count("new"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(Safetensors, WriterMisuseIsNamed) {
  const std::string path = file("misuse.safetensors");
  expect_error([&] { SafetensorsWriter w(path, {{"a", at::kFloat, {1}}, {"a", at::kFloat, {2}}}); },
               {path, "'a'", "declared twice"});
  expect_error([&] { SafetensorsWriter w(path, {{"__metadata__", at::kFloat, {1}}}); },
               {path, "__metadata__", "reserves"});
  expect_error([&] { SafetensorsWriter w(path, {{"a", at::kFloat, {2, -1}}}); },
               {path, "'a'", "[2, -1]", ">= 0"});
  expect_error([&] { SafetensorsWriter w(path, {{"c", at::kComplexFloat, {1}}}); },
               {"cannot hold dtype", "ComplexFloat", "BF16"});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsWriter writer(path, {{"a", at::kFloat, {2}}, {"b", at::kBFloat16, {1}}});
  expect_error([&] { writer.write("zz", at::ones({2})); }, {path, "'zz'", "not declared"});
  expect_error([&] { writer.write("a", at::ones({2}, at::kDouble)); }, {path, "'a'", "Double", "Float"});
  expect_error([&] { writer.write("a", at::ones({3})); }, {path, "'a'", "[3]", "[2]"});
  writer.write("a", at::ones({2}));
  expect_error([&] { writer.write("a", at::ones({2})); }, {path, "'a'", "written twice"});
  expect_error([&] { writer.finish(); }, {path, "1 missing", "'b'"});
}

TEST_F(Safetensors, IoErrorsNameThePathAndReason) {
  expect_error([&] { read_safetensors(file("missing.safetensors")); },
               {"cannot open", file("missing.safetensors"), std::strerror(ENOENT)});
  const std::string nowhere = file("no/such/dir/x.safetensors");
  expect_error([&] { write_safetensors(nowhere, {{"a", at::ones({1})}}); },
               {"cannot create", nowhere + ".tmp", std::strerror(ENOENT)});
}

// ---- corrupt files -------------------------------------------------------------------------

// A file with `header` (padded to 8) and `data_bytes` bytes of data; `length` overrides the
// header length field.
std::string raw_file(const std::string& header, size_t data_bytes, int64_t length = -1) {
  std::string padded = header;
  padded.append((8 - padded.size() % 8) % 8, ' ');
  const uint64_t n = length >= 0 ? static_cast<uint64_t>(length) : padded.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + padded + std::string(data_bytes, '\x01');
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST_F(Safetensors, TruncatedFileIsDetected) {
  const std::string path = file("truncated.safetensors");
  write_safetensors(path, {{"first", at::ones({4})}, {"last", at::ones({4})}});
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 3);
  expect_error([&] { read_safetensors(path); },
               {path, "'last'", "past the end", "truncated"});
  fs::resize_file(path, 5);
  expect_error([&] { read_safetensors(path); }, {path, "5 bytes", "fewer than the 8-byte"});
  fs::resize_file(path, 20);  // the header itself cut short
  expect_error([&] { read_safetensors(path); }, {path, "header length", "exceeds the 12 bytes"});
}

TEST_F(Safetensors, BadHeaderLengthIsDetected) {
  const std::string path = file("length.safetensors");
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  put(path, raw_file(header, 4, int64_t{1} << 40));
  expect_error([&] { read_safetensors(path); }, {path, "header length 1099511627776", "limit"});
  put(path, raw_file(header, 4, 1000));
  expect_error([&] { read_safetensors(path); }, {path, "header length 1000", "exceeds"});
  put(path, raw_file(header, 4, 3));  // cuts the JSON short
  expect_error([&] { read_safetensors(path); }, {path, "not valid JSON"});
}

TEST_F(Safetensors, MalformedHeadersAreDetected) {
  const std::string path = file("header.safetensors");
  put(path, raw_file("[1, 2]", 0));
  expect_error([&] { read_safetensors(path); }, {path, "start with '{'"});
  put(path, raw_file(R"({"a": {"dtype": "F32", )", 0));
  expect_error([&] { read_safetensors(path); }, {path, "not valid JSON"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8));
  expect_error([&] { read_safetensors(path); }, {path, "'a'", "appears twice"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4));
  expect_error([&] { read_safetensors(path); }, {path, "'a'", "missing 'data_offsets'"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
  expect_error([&] { read_safetensors(path); }, {path, "'a'", "shape", "non-negative"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4));
  expect_error([&] { read_safetensors(path); }, {path, "'a'", "[4, 0]", "end before"});
  put(path, raw_file(R"({"__metadata__":{"n":1}})", 0));
  expect_error([&] { read_safetensors(path); }, {path, "__metadata__", "'n'", "string"});
}

TEST_F(Safetensors, UnknownDtypeIsDetected) {
  const std::string path = file("dtype.safetensors");
  put(path, raw_file(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4));
  expect_error([&] { read_safetensors(path); }, {path, "'w'", "unknown dtype \"F33\"", "BF16"});
}

TEST_F(Safetensors, ShapeBytesMismatchIsDetected) {
  const std::string path = file("shape.safetensors");
  put(path, raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  expect_error([&] { read_safetensors(path); },
               {path, "'w'", "shape [3] of F32 needs 12 bytes", "[0, 8] hold 8"});
  put(path, raw_file(R"({"w":{"dtype":"BF16","shape":[0],"data_offsets":[0,2]}})", 2));
  expect_error([&] { read_safetensors(path); }, {path, "'w'", "needs 0 bytes"});
}

TEST_F(Safetensors, OverlapsGapsAndTrailingBytesAreDetected) {
  const std::string path = file("offsets.safetensors");
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  expect_error([&] { read_safetensors(path); }, {path, "'b'", "[4, 12]", "overlap tensor 'a'"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  expect_error([&] { read_safetensors(path); }, {path, "overlap"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12));
  expect_error([&] { read_safetensors(path); }, {path, "'b'", "[4, 8)", "unused"});
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6));
  expect_error([&] { read_safetensors(path); }, {path, "cover 4 bytes", "holds 6", "trailing"});
  // Empty tensors may share an offset with anything.
  put(path, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                     R"("z":{"dtype":"I64","shape":[0,2],"data_offsets":[0,0]}})", 4));
  EXPECT_EQ(read_safetensors(path).tensors.size(), 3u);
}

}  // namespace
}  // namespace zero::test
