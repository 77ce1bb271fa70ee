#include "zero/safetensors.h"

#include <ATen/ATen.h>
#include <torch/version.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "common/bounded_input.h"
#include "zero/error.h"

// The format is little-endian and we copy tensor bytes as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace zero {
namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100000000;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeName {
  at::ScalarType dtype;
  const char* name;
};

// libtorch gained unsigned 16-64-bit types in 2.3 and float8 in 2.1; older builds (Debian's
// 1.13) read and write the rest.
#define ZERO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

constexpr DtypeName kDtypes[] = {
    {at::kBool, "BOOL"},   {at::kByte, "U8"},      {at::kChar, "I8"},
    {at::kShort, "I16"},   {at::kInt, "I32"},      {at::kLong, "I64"},
    {at::kHalf, "F16"},    {at::kBFloat16, "BF16"}, {at::kFloat, "F32"},
    {at::kDouble, "F64"},
#if ZERO_TORCH_AT_LEAST(2, 1)
    {at::kFloat8_e5m2, "F8_E5M2"}, {at::kFloat8_e4m3fn, "F8_E4M3"},
#endif
#if ZERO_TORCH_AT_LEAST(2, 3)
    {at::kUInt16, "U16"},  {at::kUInt32, "U32"},   {at::kUInt64, "U64"},
#endif
};

bool dtype_from_name(const std::string& name, at::ScalarType* dtype) {
  for (const auto& entry : kDtypes) {
    if (name == entry.name) {
      *dtype = entry.dtype;
      return true;
    }
  }
  return false;
}

std::string known_dtype_names() {
  std::string names;
  for (const auto& entry : kDtypes) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << c10::IntArrayRef(shape);  // "[97, 32]"
  return out.str();
}

// numel × item size, or false on overflow of a u64.
bool byte_size(const std::vector<int64_t>& shape, at::ScalarType dtype, uint64_t* bytes) {
  uint64_t total = c10::elementSize(dtype);
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(dim), &total)) return false;
  }
  *bytes = total;
  return true;
}

std::string io_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// pwrite/pread until done; EINTR retried.
void write_all(int fd, const void* data, uint64_t bytes, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 30));
    const ssize_t n = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    ZERO_CHECK(n > 0, io_error("cannot write", path));
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void read_all(int fd, void* data, uint64_t bytes, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 30));
    const ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    ZERO_CHECK(n >= 0, io_error("cannot read", path));
    ZERO_CHECK(n > 0, path, ": unexpected end of file at byte ", offset,
               " (the file shrank while being read?)");
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    close();
    fd_ = fd;
  }
  int close() {
    int result = 0;
    if (fd_ >= 0) result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& entry : kDtypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  ZERO_CHECK(false, "safetensors cannot hold dtype ", dtype, "; supported: ", known_dtype_names());
  return {};
}

// ---- writer ------------------------------------------------------------------------------

struct SafetensorsWriter::State {
  std::string path;
  std::string temp_path;
  std::vector<SafetensorsEntry> entries;
  std::vector<uint64_t> begin;  // per entry, relative to the buffer
  std::vector<uint64_t> bytes;
  std::vector<bool> written;
  std::unordered_map<std::string, size_t> index;
  uint64_t data_start = 0;  // 8 + header length
  uint64_t data_bytes = 0;
  Fd fd;
  bool finished = false;
};

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = std::move(path);
  s.temp_path = s.path + ".tmp";
  s.entries = std::move(entries);

  Json header = Json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < s.entries.size(); ++i) {
    const SafetensorsEntry& e = s.entries[i];
    ZERO_CHECK(!e.name.empty(), s.path, ": tensor #", i, " has an empty name");
    ZERO_CHECK(e.name != kMetadataKey, s.path, ": a tensor cannot be named '", kMetadataKey,
               "' (the format reserves it for the metadata)");
    ZERO_CHECK(s.index.emplace(e.name, i).second, s.path, ": tensor '", e.name,
               "' is declared twice");
    const std::string dtype = safetensors_dtype_name(e.dtype);
    for (int64_t dim : e.shape) {
      ZERO_CHECK(dim >= 0, s.path, ": tensor '", e.name, "' has shape ", shape_text(e.shape),
                 "; dimensions must be >= 0");
    }
    uint64_t bytes = 0;
    ZERO_CHECK(byte_size(e.shape, e.dtype, &bytes), s.path, ": tensor '", e.name, "' of shape ",
               shape_text(e.shape), " is too large");
    s.begin.push_back(offset);
    s.bytes.push_back(bytes);
    header[e.name] = {{"dtype", dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  s.data_bytes = offset;
  s.written.assign(s.entries.size(), false);
  if (!metadata.empty()) header[kMetadataKey] = metadata;

  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {  // e.g. a name that is not valid UTF-8
    ZERO_CHECK(false, s.path, ": cannot encode the header: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // as the reference implementation pads
  ZERO_CHECK(text.size() <= kMaxHeaderBytes, s.path, ": the header is ", text.size(),
             " bytes; readers refuse more than ", kMaxHeaderBytes);
  s.data_start = 8 + text.size();

  s.fd.reset(::open(s.temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ZERO_CHECK(s.fd.get() >= 0, io_error("cannot create", s.temp_path));
  try {
    const uint64_t length = text.size();  // little-endian, see the static_assert above
    write_all(s.fd.get(), &length, 8, 0, s.temp_path);
    write_all(s.fd.get(), text.data(), text.size(), 8, s.temp_path);
    // Size the file now: a reader of a half-written .tmp sees zeros, never a short file.
    ZERO_CHECK(::ftruncate(s.fd.get(), static_cast<off_t>(s.data_start + s.data_bytes)) == 0,
               io_error("cannot resize", s.temp_path));
  } catch (...) {
    s.fd.close();
    ::unlink(s.temp_path.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!state_ || state_->finished) return;
  state_->fd.close();
  ::unlink(state_->temp_path.c_str());
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& value) {
  State& s = *state_;
  ZERO_CHECK(!s.finished, s.path, ": write of '", name, "' after finish()");
  const auto found = s.index.find(name);
  ZERO_CHECK(found != s.index.end(), s.path, ": tensor '", name,
             "' was not declared when the writer was created");
  const size_t i = found->second;
  const SafetensorsEntry& e = s.entries[i];
  ZERO_CHECK(!s.written[i], s.path, ": tensor '", name, "' is written twice");
  ZERO_CHECK(value.defined(), s.path, ": tensor '", name, "' is undefined");
  ZERO_CHECK(value.scalar_type() == e.dtype, s.path, ": tensor '", name, "' has dtype ",
             value.scalar_type(), " but was declared ", e.dtype);
  ZERO_CHECK(value.sizes().vec() == e.shape, s.path, ": tensor '", name, "' has shape ",
             shape_text(value.sizes().vec()), " but was declared ", shape_text(e.shape));
  const at::Tensor bytes_source = value.detach().to(at::kCPU).contiguous();
  ZERO_INTERNAL_ASSERT(static_cast<uint64_t>(bytes_source.nbytes()) == s.bytes[i], "tensor '",
                       name, "' has ", bytes_source.nbytes(), " bytes, expected ", s.bytes[i]);
  if (s.bytes[i] > 0) {
    write_all(s.fd.get(), bytes_source.data_ptr(), s.bytes[i], s.data_start + s.begin[i],
              s.temp_path);
  }
  s.written[i] = true;
}

void SafetensorsWriter::finish() {
  State& s = *state_;
  ZERO_CHECK(!s.finished, s.path, ": finish() called twice");
  std::string missing;
  size_t count = 0;
  for (size_t i = 0; i < s.entries.size(); ++i) {
    if (s.written[i]) continue;
    if (++count <= 5) missing += (missing.empty() ? "'" : ", '") + s.entries[i].name + "'";
  }
  ZERO_CHECK(count == 0, s.path, ": finish() before every tensor was written; ", count,
             " missing: ", missing, count > 5 ? ", ..." : "");
  ZERO_CHECK(::fsync(s.fd.get()) == 0, io_error("cannot flush", s.temp_path));
  ZERO_CHECK(s.fd.close() == 0, io_error("cannot close", s.temp_path));
  ZERO_CHECK(::rename(s.temp_path.c_str(), s.path.c_str()) == 0,
             io_error("cannot rename '" + s.temp_path + "' to", s.path));
  s.finished = true;
}

const std::string& SafetensorsWriter::path() const { return state_->path; }

int64_t SafetensorsWriter::file_bytes() const {
  return static_cast<int64_t>(state_->data_start + state_->data_bytes);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, value] : tensors) {
    ZERO_CHECK(value.defined(), path, ": tensor '", name, "' is undefined");
    entries.push_back({name, value.scalar_type(), value.sizes().vec()});
  }
  SafetensorsWriter writer(path, std::move(entries), metadata);
  for (const auto& [name, value] : tensors) writer.write(name, value);
  writer.finish();
}

// ---- reader ------------------------------------------------------------------------------

namespace {

// A non-negative integer of a header field, or an error naming it.
uint64_t header_uint(const Json& value, const std::string& path, const std::string& name,
                     const char* field) {
  ZERO_CHECK(value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0),
             path, ": tensor '", name, "': ", field, " must hold non-negative integers, got ",
             value.dump());
  return value.get<uint64_t>();
}

struct Located {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

}  // namespace

struct SafetensorsReader::State {
  std::string path;
  Fd fd;
  uint64_t data_start = 0;
  std::vector<Located> located;  // in offset order
  std::map<std::string, std::string> metadata;
};

SafetensorsReader::SafetensorsReader(const std::string& path) : state_(std::make_unique<State>()) {
  state_->path = path;
  Fd& fd = state_->fd;
  fd.reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));  // a FIFO must not block
  ZERO_CHECK(fd.get() >= 0, io_error("cannot open", path));
  struct stat info {};
  ZERO_CHECK(::fstat(fd.get(), &info) == 0, io_error("cannot stat", path));
  ZERO_CHECK(S_ISREG(info.st_mode), path, ": not a regular file; a safetensors file must be one");
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  ZERO_CHECK(file_size >= 8, path, ": not a safetensors file: ", file_size,
             " bytes, fewer than the 8-byte header length");

  uint64_t header_size = 0;
  read_all(fd.get(), &header_size, 8, 0, path);
  ZERO_CHECK(header_size <= kMaxHeaderBytes, path, ": header length ", header_size,
             " is above the format's limit of ", kMaxHeaderBytes,
             " bytes (not a safetensors file?)");
  ZERO_CHECK(header_size <= file_size - 8, path, ": header length ", header_size,
             " exceeds the ", file_size - 8, " bytes after the length field (truncated file?)");
  ZERO_CHECK(header_size >= 2, path, ": header length ", header_size,
             " is too short for a JSON object");
  std::string text(header_size, '\0');
  read_all(fd.get(), text.data(), header_size, 8, path);
  ZERO_CHECK(text[0] == '{', path, ": the header does not start with '{' (not a safetensors file?)");

  // Duplicate top-level keys would silently keep one of the tensors: refuse them.
  std::string duplicate;
  std::unordered_map<std::string, bool> keys;
  const Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      check_json_depth(depth, path + ": the header");
    }
    if (event == Json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      if (!keys.emplace(parsed.get<std::string>(), true).second) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, callback);
  } catch (const Json::exception& e) {
    ZERO_CHECK(false, path, ": the header is not valid JSON: ", e.what());
  }
  ZERO_CHECK(header.is_object(), path, ": the header is ", header.type_name(),
             ", expected a JSON object");
  ZERO_CHECK(duplicate.empty(), path, ": tensor '", duplicate, "' appears twice in the header");

  std::map<std::string, std::string>& metadata = state_->metadata;
  const uint64_t buffer_size = file_size - 8 - header_size;
  const uint64_t data_start = 8 + header_size;
  std::vector<Located> located;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      ZERO_CHECK(value.is_object(), path, ": ", kMetadataKey, " must be an object, got ",
                 value.type_name());
      for (const auto& [key, item] : value.items()) {
        ZERO_CHECK(item.is_string(), path, ": ", kMetadataKey, " value of '", key,
                   "' must be a string, got ", item.dump());
        metadata[key] = item.get<std::string>();
      }
      continue;
    }
    ZERO_CHECK(value.is_object(), path, ": tensor '", name, "': expected an object with dtype, ",
               "shape and data_offsets, got ", value.dump());
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      ZERO_CHECK(value.contains(field), path, ": tensor '", name, "': missing '", field, "'");
    }
    Located t;
    t.name = name;
    const Json& dtype = value["dtype"];
    ZERO_CHECK(dtype.is_string(), path, ": tensor '", name, "': dtype must be a string, got ",
               dtype.dump());
    ZERO_CHECK(dtype_from_name(dtype.get<std::string>(), &t.dtype), path, ": tensor '", name,
               "': unknown dtype ", dtype.dump(), "; supported: ", known_dtype_names());
    const Json& shape = value["shape"];
    ZERO_CHECK(shape.is_array(), path, ": tensor '", name, "': shape must be an array, got ",
               shape.dump());
    for (const Json& dim : shape) {
      const uint64_t d = header_uint(dim, path, name, "shape");
      ZERO_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path,
                 ": tensor '", name, "': dimension ", d, " is too large");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    const Json& offsets = value["data_offsets"];
    ZERO_CHECK(offsets.is_array() && offsets.size() == 2, path, ": tensor '", name,
               "': data_offsets must be [begin, end], got ", offsets.dump());
    t.begin = header_uint(offsets[0], path, name, "data_offsets");
    t.end = header_uint(offsets[1], path, name, "data_offsets");
    ZERO_CHECK(t.begin <= t.end, path, ": tensor '", name, "': data_offsets [", t.begin, ", ",
               t.end, "] end before they begin");
    ZERO_CHECK(t.end <= buffer_size, path, ": tensor '", name, "': data_offsets [", t.begin, ", ",
               t.end, "] go past the end of the ", buffer_size,
               "-byte data buffer (truncated file?)");
    uint64_t bytes = 0;
    ZERO_CHECK(byte_size(t.shape, t.dtype, &bytes) && bytes == t.end - t.begin, path,
               ": tensor '", name, "': shape ", shape_text(t.shape), " of ",
               dtype.get<std::string>(), " needs ", bytes, " bytes, but data_offsets [", t.begin,
               ", ", t.end, "] hold ", t.end - t.begin);
    located.push_back(std::move(t));
  }

  // Contiguous coverage: sorted by offset, each tensor starts where the previous one ended.
  std::vector<const Located*> order;
  for (const auto& t : located) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const Located* a, const Located* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const Located* previous = nullptr;
  for (const Located* t : order) {
    ZERO_CHECK(t->begin >= expected, path, ": tensor '", t->name, "': data_offsets [", t->begin,
               ", ", t->end, "] overlap tensor '", previous ? previous->name : "", "' [",
               previous ? previous->begin : 0, ", ", expected, "]");
    ZERO_CHECK(t->begin == expected, path, ": tensor '", t->name, "': data_offsets [", t->begin,
               ", ", t->end, "] leave bytes [", expected, ", ", t->begin,
               ") of the buffer unused");
    expected = t->end;
    previous = t;
  }
  ZERO_CHECK(expected == buffer_size, path, ": the tensors cover ", expected, " bytes but the ",
             "data buffer holds ", buffer_size, " (trailing bytes after the last tensor)");
  state_->data_start = data_start;
  for (const Located* t : order) state_->located.push_back(*t);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader::~SafetensorsReader() = default;

const std::string& SafetensorsReader::path() const { return state_->path; }

const std::map<std::string, std::string>& SafetensorsReader::metadata() const {
  return state_->metadata;
}

std::vector<SafetensorsEntry> SafetensorsReader::entries() const {
  std::vector<SafetensorsEntry> entries;
  for (const Located& t : state_->located) entries.push_back({t.name, t.dtype, t.shape});
  return entries;
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  for (const Located& t : state_->located) {
    if (t.name != name) continue;
    at::Tensor value = at::empty(t.shape, at::TensorOptions().dtype(t.dtype));
    if (t.end > t.begin) {
      read_all(state_->fd.get(), value.data_ptr(), t.end - t.begin, state_->data_start + t.begin,
               state_->path);
    }
    return value;
  }
  ZERO_CHECK(false, state_->path, ": no tensor '", name, "'");
  return at::Tensor();
}

SafetensorsFile read_safetensors(const std::string& path) {
  const SafetensorsReader reader(path);
  SafetensorsFile result;
  result.metadata = reader.metadata();
  for (const SafetensorsEntry& entry : reader.entries()) {
    result.tensors.emplace(entry.name, reader.read(entry.name));
  }
  return result;
}

}  // namespace zero
