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

namespace {

// The integers the loader and the reader narrow (world size, stage, counters) are checked here,
// once, for both: an edited metadata.json with world_size 0 or -1, stage 7 or a counter beyond
// its type is refused with its key path instead of being cast.
void check_metadata_ranges(const Json& metadata, const fs::path& path) {
  auto check = [&](const Json& parent, const std::string& where, const char* key, int64_t least,
                   int64_t most) {
    const Json* value = parent.is_object() && parent.contains(key) ? &parent.at(key) : nullptr;
    bool ok = false;
    if (value != nullptr && value->is_number_unsigned()) {
      ok = value->get<uint64_t>() <= static_cast<uint64_t>(most) &&
           static_cast<int64_t>(value->get<uint64_t>()) >= least;
    } else if (value != nullptr && value->is_number_integer()) {
      ok = value->get<int64_t>() >= least && value->get<int64_t>() <= most;
    }
    ZERO_CHECK(ok, "checkpoint metadata '", path.string(), "': ", where, key, " = ",
               value != nullptr ? value->dump().substr(0, 100) : std::string("(missing)"),
               " is invalid; expected an integer in [", least, ", ", most, "]");
  };
  constexpr int64_t kInt = std::numeric_limits<int>::max();
  constexpr int64_t kInt64 = std::numeric_limits<int64_t>::max();
  check(metadata, "", "world_size", 1, kInt);
  check(metadata, "", "stage", 0, 3);
  const Json* files = metadata.contains("files") ? &metadata.at("files") : nullptr;
  ZERO_CHECK(files != nullptr && files->is_array() &&
                 files->size() == metadata.at("world_size").get<uint64_t>(),
             "checkpoint metadata '", path.string(), "': files must list one entry per rank (",
             metadata.at("world_size").get<int64_t>(), "), found ",
             files == nullptr ? std::string("none") : files->dump().substr(0, 100));
  const Json empty = Json::object();
  const Json& counters = metadata.contains("counters") ? metadata.at("counters") : empty;
  for (const char* key : {"global_steps", "skipped_steps", "micro_steps", "optimizer_steps"}) {
    check(counters, "counters.", key, 0, kInt64);
  }
  check(counters, "counters.", "gradient_accumulation_steps", 1, kInt);
  const Json& scaler = counters.contains("loss_scaler") ? counters.at("loss_scaler") : empty;
  check(scaler, "counters.loss_scaler.", "current_hysteresis", 0, kInt);
  check(scaler, "counters.loss_scaler.", "iteration", 0, kInt64);
  check(scaler, "counters.loss_scaler.", "last_overflow_iteration", -1, kInt64);
}

}  // namespace

Json read_metadata(const fs::path& checkpoint_dir) {
  const fs::path path = checkpoint_dir / kMetadataFile;
  ZERO_CHECK(fs::exists(path), "checkpoint '", checkpoint_dir.string(),
             "' is incomplete or missing: '", path.string(), "' does not exist");
  const Json metadata =
      parse_bounded_json(read_text_file(path, "checkpoint metadata", kMaxMetadataBytes),
                         "checkpoint metadata '" + path.string() + "'");
  const std::string format =
      metadata.is_object() ? metadata.value("format", std::string()) : std::string();
  ZERO_CHECK(format == kFormat, "'", path.string(), "' is not a zero checkpoint (format '",
             format, "', expected '", kFormat, "')");
  const int version = metadata.value("version", -1);
  ZERO_CHECK(version == kVersion, "'", path.string(), "' has checkpoint format version ",
             version, "; this build reads version ", kVersion);
  const Json* recorded = metadata.contains("crc32") ? &metadata.at("crc32") : nullptr;
  const uint32_t crc = metadata_checksum(metadata);
  ZERO_CHECK(recorded != nullptr && recorded->is_number_unsigned() &&
                 recorded->get<uint64_t>() == crc,
             "checkpoint metadata '", path.string(), "' was edited or damaged: its CRC-32 is ",
             crc, " but it records ",
             recorded == nullptr ? std::string("none") : recorded->dump().substr(0, 40),
             " (a save writes the CRC-32 of the metadata without its \"crc32\" key)");
  check_metadata_ranges(metadata, path);
  return metadata;
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

fs::path verify_rank_file(const fs::path& checkpoint_dir, const Json& files, int index) {
  const Json& entry = files.at(index);
  const Json& name = entry.at("file");
  const std::string expected = rank_file_name(index);
  ZERO_CHECK(name.is_string() && name.get_ref<const std::string&>() == expected,
             "checkpoint metadata '", (checkpoint_dir / kMetadataFile).string(), "': files[",
             index, "].file is ", name.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200),
             "; rank ", index, "'s file is '", expected, "' (no other name is read)");
  const fs::path path = checkpoint_dir / expected;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  ZERO_CHECK(!error && fs::exists(status), "checkpoint file '", path.string(), "' is missing");
  ZERO_CHECK(!fs::is_symlink(status), "checkpoint file '", path.string(),
             "' is a symbolic link; rank files must be regular files inside the checkpoint");
  const int64_t recorded_bytes = entry.at("bytes").get<int64_t>();
  const uint32_t recorded_crc = entry.at("crc32").get<uint32_t>();
  int64_t bytes = 0;
  const uint32_t crc = file_crc32(path, &bytes);
  ZERO_CHECK(bytes == recorded_bytes, "checkpoint file '", path.string(), "' has ", bytes,
             " bytes but the metadata records ", recorded_bytes, " (truncated or replaced)");
  ZERO_CHECK(crc == recorded_crc, "checkpoint file '", path.string(), "' is corrupted: CRC-32 ",
             crc, " does not match the recorded ", recorded_crc);
  return path;
}

std::map<std::string, std::vector<SavedPiece>> saved_pieces(const Json& files) {
  std::map<std::string, std::vector<SavedPiece>> pieces_of;
  for (int f = 0; f < static_cast<int>(files.size()); ++f) {
    for (const auto& piece : files[f].at("pieces")) {
      pieces_of[piece.at(0).get<std::string>()].push_back(
          {f, piece.at(1).get<int64_t>(), piece.at(2).get<int64_t>()});
    }
  }
  return pieces_of;
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
  layout.metadata = read_metadata(layout.dir);
  const fs::path metadata_path = layout.dir / kMetadataFile;
  try {
    for (const Json& p : layout.metadata.at("parameters")) {
      CheckpointSummary::Parameter parameter;
      parameter.name = p.at("name").get<std::string>();
      parameter.shape = p.at("shape").get<std::vector<int64_t>>();
      parameter.numel = 1;
      for (int64_t d : parameter.shape) {
        ZERO_CHECK(d >= 0 && (d == 0 || parameter.numel <= std::numeric_limits<int64_t>::max() / d),
                   "checkpoint metadata '", metadata_path.string(), "': parameter '",
                   parameter.name, "' has shape ", c10::IntArrayRef(parameter.shape),
                   "; dimensions must be non-negative and their product fit in 64 bits");
        parameter.numel *= d;
      }
      layout.parameters.push_back(std::move(parameter));
    }
    layout.pieces = saved_pieces(layout.metadata.at("files"));
  } catch (const Json::exception& e) {
    ZERO_CHECK(false, "checkpoint metadata '", metadata_path.string(), "' is malformed: ",
               e.what());
  }
  std::map<std::string, int> seen;
  for (const auto& p : layout.parameters) {
    ZERO_CHECK(++seen[p.name] == 1, "checkpoint metadata '", metadata_path.string(),
               "' lists parameter '", p.name, "' twice");
  }
  for (const auto& [name, pieces] : layout.pieces) {
    ZERO_CHECK(seen.count(name) == 1, "checkpoint metadata '", metadata_path.string(),
               "' lists pieces of '", name, "', which is not among its parameters");
  }
  return layout;
}

std::vector<std::string> coverage_problems(const Layout& layout) {
  std::vector<std::string> problems;
  for (const auto& p : layout.parameters) {
    const auto it = layout.pieces.find(p.name);
    std::string problem =
        coverage_problem(p.name, p.numel, it == layout.pieces.end() ? std::vector<SavedPiece>()
                                                                    : it->second);
    if (!problem.empty()) {
      problems.push_back("checkpoint '" + layout.dir.string() + "': " + problem);
    }
  }
  return problems;
}

const at::Tensor& piece_tensor(const SafetensorsFile& file, const fs::path& path,
                               const std::string& kind, const std::string& name,
                               const SavedPiece& piece) {
  const std::string key = piece_key(kind, name, piece.begin);
  const auto it = file.tensors.find(key);
  ZERO_CHECK(it != file.tensors.end(), "checkpoint file '", path.string(), "' lacks '", key,
             "' that the metadata lists");
  const at::Tensor& value = it->second;
  ZERO_CHECK(value.scalar_type() == at::kFloat && value.dim() == 1 &&
                 value.numel() == piece.end - piece.begin,
             "checkpoint file '", path.string(), "': '", key, "' is ", value.scalar_type(),
             value.sizes(), " where the metadata says fp32 [", piece.end - piece.begin, "]");
  return value;
}

nlohmann::json counters_to_json(const SavedCounters& saved) {
  const TrainingCounters& c = saved.training;
  return {{"global_steps", c.global_steps},
          {"skipped_steps", c.skipped_steps},
          {"micro_steps", c.micro_steps},
          {"optimizer_steps", c.optimizer_steps},
          {"gradient_accumulation_steps", saved.gradient_accumulation_steps},
          {"lr", c.lr},
          {"loss_scaler",
           {{"scale", c.scaler.scale},
            {"current_hysteresis", c.scaler.current_hysteresis},
            {"iteration", c.scaler.iteration},
            {"last_overflow_iteration", c.scaler.last_overflow_iteration}}}};
}

SavedCounters counters_from_json(const nlohmann::json& json) {
  SavedCounters saved;
  TrainingCounters& c = saved.training;
  c.global_steps = json.at("global_steps").get<int64_t>();
  c.skipped_steps = json.at("skipped_steps").get<int64_t>();
  c.micro_steps = json.at("micro_steps").get<int64_t>();
  c.optimizer_steps = json.at("optimizer_steps").get<int64_t>();
  saved.gradient_accumulation_steps = json.at("gradient_accumulation_steps").get<int>();
  c.lr = json.at("lr").get<double>();
  const nlohmann::json& scaler = json.at("loss_scaler");
  c.scaler.scale = scaler.at("scale").get<double>();
  c.scaler.current_hysteresis = scaler.at("current_hysteresis").get<int>();
  c.scaler.iteration = scaler.at("iteration").get<int64_t>();
  c.scaler.last_overflow_iteration = scaler.at("last_overflow_iteration").get<int64_t>();
  return saved;
}

}  // namespace zero::checkpoint_format
