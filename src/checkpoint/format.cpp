#include "checkpoint/format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "common/bounded_input.h"
#include "zero/error.h"
#include "zero/safetensors.h"

namespace zero::checkpoint_format {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.safetensors", rank);
  return name;
}

std::string piece_key(const std::string& kind, const std::string& name, int64_t begin) {
  return kind + "/" + name + "/" + std::to_string(begin);
}

void check_tag(const std::string& tag) {
  ZERO_CHECK(!tag.empty() && tag.find('/') == std::string::npos && tag[0] != '.' &&
                 tag != kLatestFile,
             "checkpoint tag '", tag, "' is not allowed: it must be non-empty, contain no '/', ",
             "not start with '.', and not be '", kLatestFile, "'");
}

std::string read_text_file(const fs::path& path, const std::string& what, int64_t max_bytes) {
  return read_regular_file(path.string(), what, max_bytes, SymbolicLinks::kRefuse);
}

fs::path checkpoint_directory(const fs::path& root, const std::string& tag) {
  const fs::path dir = root / tag;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  ZERO_CHECK(!fs::is_symlink(status), "checkpoint '", dir.string(),
             "' is a symbolic link; a checkpoint must be a directory inside '", root.string(),
             "' (a link could lead out of it)");
  ZERO_CHECK(fs::is_directory(status), "checkpoint '", dir.string(), "' ",
             fs::exists(status) ? "is not a directory" : "does not exist");
  return dir;
}

uint32_t metadata_checksum(const Json& metadata) {
  Json copy = metadata;
  copy.erase("crc32");
  const std::string text = copy.dump(-1, ' ', false, Json::error_handler_t::replace);
  return static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()),
            static_cast<uInt>(text.size())));
}

std::string resolve_tag(const fs::path& root, const std::string& tag_in) {
  std::string tag = tag_in;
  if (tag.empty()) {
    const fs::path latest = root / kLatestFile;
    ZERO_CHECK(fs::exists(latest), "no checkpoint to load in '", root.string(), "': '",
               latest.string(), "' does not exist (no save completed there)");
    tag = read_text_file(latest, "checkpoint index", kMaxIndexBytes);
    while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  }
  check_tag(tag);
  return tag;
}

uint32_t file_crc32(const fs::path& path, int64_t* bytes) {
  // Opened non-blocking and checked on the descriptor: Note [Bounded input]. Rank files are
  // inside a checkpoint, so a symbolic link is refused by the open itself (ELOOP).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  ZERO_CHECK(fd >= 0, "cannot open checkpoint file '", path.string(), "': ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    ZERO_CHECK(false, "checkpoint file '", path.string(), "' is not a regular file");
  }
  std::FILE* file = ::fdopen(fd, "rb");
  if (file == nullptr) ::close(fd);
  ZERO_CHECK(file != nullptr, "cannot open checkpoint file '", path.string(), "': ",
             std::strerror(errno));
  std::vector<unsigned char> buffer(4 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  int64_t total = 0;
  size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), file)) > 0) {
    crc = crc32(crc, buffer.data(), static_cast<uInt>(got));
    total += static_cast<int64_t>(got);
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  ZERO_CHECK(!failed, "cannot read checkpoint file '", path.string(), "': ", std::strerror(errno));
  if (bytes != nullptr) *bytes = total;
  return static_cast<uint32_t>(crc);
}

namespace {

// The file of `entry` in the checkpoint: a regular file, not a symbolic link (which could lead
// out of it), of the recorded size and CRC-32.
fs::path verified_rank_file(const fs::path& checkpoint_dir, const SavedFile& entry) {
  const fs::path path = checkpoint_dir / entry.name;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  ZERO_CHECK(!error && fs::exists(status), "checkpoint file '", path.string(), "' is missing");
  ZERO_CHECK(!fs::is_symlink(status), "checkpoint file '", path.string(),
             "' is a symbolic link; rank files must be regular files inside the checkpoint");
  int64_t bytes = 0;
  const uint32_t crc = file_crc32(path, &bytes);
  ZERO_CHECK(bytes == entry.bytes, "checkpoint file '", path.string(), "' has ", bytes,
             " bytes but the metadata records ", entry.bytes, " (truncated or replaced)");
  ZERO_CHECK(crc == entry.crc32, "checkpoint file '", path.string(), "' is corrupted: CRC-32 ",
             crc, " does not match the recorded ", entry.crc32);
  return path;
}

// "rng/cpu" must be a state this libtorch's CPU generator accepts: checked by setting it on a
// scratch generator, so that a load fails before the ranks agree to commit and not after.
void check_generator_state(const SafetensorsFile& file, const fs::path& path) {
  const auto it = file.tensors.find(kGeneratorKey);
  ZERO_CHECK(it != file.tensors.end(), "checkpoint file '", path.string(), "' lacks '",
             kGeneratorKey, "', the rank's generator state");
  const at::Tensor& state = it->second;
  at::Tensor current;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    current = generator.get_state();
  }
  ZERO_CHECK(state.scalar_type() == at::kByte && state.dim() == 1 &&
                 state.numel() == current.numel(),
             "checkpoint file '", path.string(), "': '", kGeneratorKey, "' is ", state.scalar_type(),
             state.sizes(), "; a CPU generator state is uint8 [", current.numel(), "]");
  try {
    at::CPUGeneratorImpl scratch;
    scratch.set_state(*state.unsafeGetTensorImpl());
  } catch (const c10::Error& e) {
    ZERO_CHECK(false, "checkpoint file '", path.string(), "': '", kGeneratorKey,
               "' is not a valid CPU generator state: ", e.what_without_backtrace());
  }
}

}  // namespace

SafetensorsFile read_rank_file(const Layout& layout, int index) {
  const Metadata& m = layout.metadata;
  ZERO_INTERNAL_ASSERT(index >= 0 && index < static_cast<int>(m.files.size()), "rank file ", index,
                       " of ", m.files.size());
  const fs::path path = verified_rank_file(layout.dir, m.files[static_cast<size_t>(index)]);
  SafetensorsFile file = read_safetensors(path.string());
  check_generator_state(file, path);
  // Every tensor the metadata places here, of the dtype and length it says; nothing else.
  const std::vector<std::string> kinds = m.piece_kinds();
  size_t listed = 1;  // rng/cpu
  for (const auto& [name, pieces] : m.pieces) {
    for (const SavedPiece& piece : pieces) {
      if (piece.file != index) continue;
      for (const std::string& kind : kinds) {
        piece_tensor(file, path, kind, name, piece, kind == "param16" ? m.param_dtype : at::kFloat);
        ++listed;
      }
    }
  }
  if (file.tensors.size() != listed) {
    for (const auto& [key, tensor] : file.tensors) {
      const size_t slash = key.find('/');
      const std::string kind = key.substr(0, slash);
      const bool known = key == kGeneratorKey || std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
      ZERO_CHECK(known, "checkpoint file '", path.string(), "' holds '", key,
                 "', a kind of tensor the metadata does not list (stage ", m.stage, ", param_dtype ",
                 dtype_name(m.param_dtype), ", optimizer ", m.optimizer, " save ",
                 c10::Join(", ", kinds), ")");
    }
    ZERO_CHECK(false, "checkpoint file '", path.string(), "' holds ", file.tensors.size(),
               " tensors, but the metadata lists ", listed,
               " (its pieces of each kind, and the generator state)");
  }
  return file;
}

std::string coverage_problem(const std::string& name, int64_t numel,
                             std::vector<SavedPiece> pieces) {
  std::sort(pieces.begin(), pieces.end(),
            [](const SavedPiece& a, const SavedPiece& b) { return a.begin < b.begin; });
  int64_t next = 0;  // every element before `next` is covered once
  for (const SavedPiece& p : pieces) {
    if (p.begin < 0 || p.end > numel || p.begin >= p.end) {
      return "parameter '" + name + "' has a piece [" + std::to_string(p.begin) + ", " +
             std::to_string(p.end) + ") outside its " + std::to_string(numel) + " elements";
    }
    if (p.begin > next) {
      return "no piece of parameter '" + name + "' holds elements [" + std::to_string(next) +
             ", " + std::to_string(p.begin) + ")";
    }
    if (p.begin < next) {
      return "pieces of parameter '" + name + "' overlap at elements [" +
             std::to_string(p.begin) + ", " + std::to_string(std::min(next, p.end)) + ")";
    }
    next = p.end;
  }
  if (next < numel) {
    return "no piece of parameter '" + name + "' holds elements [" + std::to_string(next) + ", " +
           std::to_string(numel) + ")";
  }
  return {};
}

Layout read_layout(const fs::path& root, const std::string& tag_in) {
  Layout layout;
  layout.tag = resolve_tag(root, tag_in);
  layout.dir = checkpoint_directory(root, layout.tag);
  const fs::path path = layout.dir / kMetadataFile;
  ZERO_CHECK(fs::exists(fs::symlink_status(path)), "checkpoint '", layout.dir.string(),
             "' is incomplete or missing: '", path.string(), "' does not exist");
  const nlohmann::json json =
      parse_bounded_json(read_text_file(path, "checkpoint metadata", kMaxMetadataBytes),
                         "checkpoint metadata '" + path.string() + "'");
  layout.metadata = parse_metadata(json, path.string(), layout.tag);
  return layout;
}

const at::Tensor& piece_tensor(const SafetensorsFile& file, const fs::path& path,
                               const std::string& kind, const std::string& name,
                               const SavedPiece& piece, at::ScalarType dtype) {
  const std::string key = piece_key(kind, name, piece.begin);
  const auto it = file.tensors.find(key);
  ZERO_CHECK(it != file.tensors.end(), "checkpoint file '", path.string(), "' lacks '", key,
             "' that the metadata lists");
  const at::Tensor& value = it->second;
  ZERO_CHECK(value.scalar_type() == dtype && value.dim() == 1 &&
                 value.numel() == piece.end - piece.begin,
             "checkpoint file '", path.string(), "': '", key, "' is ", value.scalar_type(),
             value.sizes(), " where the metadata says ", dtype_name(dtype), " [",
             piece.end - piece.begin, "]");
  return value;
}

}  // namespace zero::checkpoint_format
