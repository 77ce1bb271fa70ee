// Sharded, atomic, reshardable checkpoints of an engine's training state.
//
// Note [Checkpoint format]
// ~~~~~~~~~~~~~~~~~~~~~~~~
//   DIR/latest                      one line: the tag of the newest complete checkpoint
//   DIR/TAG/metadata.json           written last, by rank 0
//   DIR/TAG/rank_00000.safetensors  what rank 0 owned; one file per rank
// Every value is keyed by parameter name and element range, never by memory layout: a rank
// file holds, for each piece [begin, end) of a flattened parameter the rank owned, the tensors
// "master/NAME/BEGIN" (fp32 master weights), "exp_avg/NAME/BEGIN" and "exp_avg_sq/NAME/BEGIN"
// (Adam; SGD momentum is exp_avg), at stage 3 with 16-bit parameters "param16/NAME/BEGIN",
// and "rng/cpu" (the rank's CPU generator). Every element of every parameter is written by
// exactly one rank (stage 0 too: rank r writes its 1/N). metadata.json records the format
// version, world size, stage, dtypes, optimizer, the effective config, the parameters (name,
// shape), the step counters, loss scaler and learning rate, the client state, and per rank
// file its byte size, CRC-32 and list of pieces. A load at any world size and stage computes which pieces of which
// files overlap what the new rank owns, so no conversion step is needed.
//
// Atomicity: ranks write into DIR/.tmp-TAG; after every rank has reported its file (an
// all-gather, so also a barrier), rank 0 writes metadata.json, renames the directory to
// DIR/TAG and then replaces DIR/latest (write, fsync, rename). A crash at any point leaves
// DIR/latest naming the previous complete checkpoint; a leftover .tmp- directory is ignored
// and cleared by the next save of that tag.
#include "checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include "checkpoint/format.h"
#include "common/bounded_input.h"
#include "optim/optimizer_state.h"
#include "zero/error.h"
#include "zero/files.h"
#include "zero/safetensors.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using namespace checkpoint_format;  // See Note [Checkpoint format]

std::string system_error(const std::string& what, const fs::path& path) {
  return what + " '" + path.string() + "': " + std::strerror(errno);
}

// Makes a rename or a new entry in `dir` durable (files themselves: write_file_atomically).
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ZERO_CHECK(fd >= 0, system_error("cannot open for fsync", dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  ZERO_CHECK(rc == 0, system_error("cannot fsync", dir));
}


}  // namespace

std::string save_checkpoint(CheckpointSubject& subject, const std::string& dir,
                            const std::string& tag_in, const std::string& client_state) {
  Communicator& comm = subject.communicator();
  ShardState& state = subject.shard_state();
  const int rank = comm.rank();
  const int world = comm.size();
  const TrainingCounters counters = subject.counters();
  const int gas = subject.config().gradient_accumulation_steps;
  ZERO_CHECK(counters.micro_steps % gas == 0, "save_checkpoint at micro-step ",
             counters.micro_steps, ", inside an accumulation window of ", gas,
             " micro-steps: save after the step() that ends the window");
  const std::string tag =
      tag_in.empty() ? "global_step" + std::to_string(counters.global_steps + counters.skipped_steps)
                     : tag_in;
  check_tag(tag);
  // A tag of the default form names the boundary it was saved at (Note [Checkpoint metadata]):
  // "global_step5" at boundary 3 would mislead every reader, and loads refuse it.
  const int64_t boundary = counters.global_steps + counters.skipped_steps;
  const std::optional<int64_t> named = boundary_in_tag(tag);
  ZERO_CHECK(!named || *named == boundary, "save_checkpoint: tag '", tag,
             "' has the form of the default tag, which names the boundary saved at; this is ",
             "boundary ", boundary, " (pass no tag, \"global_step", boundary,
             "\", or a tag of another form)");
  const Json client = parse_bounded_json(client_state, "save_checkpoint: client_state");
  const fs::path root(dir);
  const fs::path final_dir = root / tag;
  const fs::path temporary_dir = root / (kTemporaryPrefix + tag);

  // 1. Rank 0 prepares an empty temporary directory.
  agree_on_failure(comm, "save_checkpoint", rank != 0 ? std::string() : capture_error([&] {
    fs::create_directories(root);
    std::string latest;
    if (fs::exists(root / kLatestFile)) latest = read_text_file(root / kLatestFile, "checkpoint index", kMaxIndexBytes);
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back()))) latest.pop_back();
    ZERO_CHECK(!(fs::exists(final_dir) && latest == tag), "checkpoint '", final_dir.string(),
               "' exists and is the latest one; save under another tag (replacing it in place ",
               "could lose it if the save is interrupted)");
    fs::remove_all(temporary_dir);
    fs::create_directory(temporary_dir);
  }));

  // A failed save removes its temporary directory, so a full disk or a dead rank leaves no
  // .tmp- behind. Rank 0 does it once agree_on_failure has thrown: it is collective, so every
  // rank has finished (or given up) writing by then.
  try {
    // 2. Every rank writes what it owns.
    const std::vector<CheckpointParameter> params = subject.checkpoint_parameters();
    const std::vector<StateSegment>& segments = state.saved_segments();
    Json file_info;
    agree_on_failure(comm, "save_checkpoint", capture_error([&] {
      // Streamed a piece at a time (Note [NVMe offload]: an offloaded state is never in memory
      // whole): every entry is declared first, then each piece is read and written.
      const std::vector<std::string>& parts = state.part_names();
      const bool param16 = subject.saves_param_shard();
      std::vector<SafetensorsEntry> entries;
      Json pieces = Json::array();
      for (const StateSegment& s : segments) {
        const std::string& name = params[s.param].name;
        const int64_t length = s.end - s.begin;
        for (const std::string& part : parts) {
          entries.push_back({piece_key(part, name, s.begin), at::kFloat, {length}});
        }
        if (param16) {
          entries.push_back({piece_key("param16", name, s.begin), state.param_dtype(), {length}});
        }
        pieces.push_back({name, s.begin, s.end});
      }
      at::Tensor rng;
      {
        auto generator = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(generator.mutex());
        rng = generator.get_state();
      }
      entries.push_back({kGeneratorKey, rng.scalar_type(), {rng.numel()}});
      const fs::path path = temporary_dir / rank_file_name(rank);
      {
        SafetensorsWriter writer(path.string(), entries, {{"format", "zero-checkpoint-shard"}});
        for (const StateSegment& s : segments) {
          const std::string& name = params[s.param].name;
          const int64_t length = s.end - s.begin;
          at::Tensor piece = at::empty({length}, at::kFloat);
          for (size_t k = 0; k < parts.size(); ++k) {
            state.read_part(static_cast<int>(k), s.offset, piece);
            writer.write(piece_key(parts[k], name, s.begin), piece);
          }
          if (param16) {
            at::Tensor piece16 = at::empty({length}, state.param_dtype());
            state.params().read(s.offset, piece16);
            writer.write(piece_key("param16", name, s.begin), piece16);
          }
        }
        writer.write(kGeneratorKey, rng.reshape({rng.numel()}));
        writer.finish();
      }
      int64_t bytes = 0;
      const uint32_t crc = file_crc32(path, &bytes);
      file_info = {{"file", rank_file_name(rank)}, {"bytes", bytes}, {"crc32", crc},
                   {"pieces", pieces}};
    }));
    // Also the barrier: rank 0 sees every file only after every rank has finished it.
    const std::vector<std::string> infos = all_gather_texts(comm, file_info.dump());

    // 3. Rank 0 writes the metadata and publishes the checkpoint.
    agree_on_failure(comm, "save_checkpoint", rank != 0 ? std::string() : capture_error([&] {
      const Config& config = subject.config();
      Json metadata;
      metadata["format"] = kFormat;
      metadata["version"] = kVersion;
      metadata["world_size"] = world;
      metadata["stage"] = config.zero_optimization.stage;
      metadata["param_dtype"] = dtype_name(state.param_dtype());
      metadata["master_dtype"] = "fp32";
      metadata["optimizer"] = {{"type", optimizer_type_name(config.optimizer.type)},
                               {"state", Json::array()}};
      for (size_t k = 1; k < state.part_names().size(); ++k) {
        metadata["optimizer"]["state"].push_back(state.part_names()[k]);
      }
      const SavedCounters saved{counters, gas};
      metadata["counters"] = counters_to_json(saved);
      metadata["scheduler"] = config.scheduler.has_value();
      // The whole effective config, for readers (zero-ckpt inspect); a load uses its own.
      metadata["config"] = config.effective_json.empty() ? Json::object()
                                                          : Json::parse(config.effective_json);
      Json parameters = Json::array();
      for (const auto& p : params) parameters.push_back({{"name", p.name}, {"shape", p.shape}});
      metadata["parameters"] = parameters;
      Json files = Json::array();
      for (const std::string& info : infos) files.push_back(Json::parse(info));
      metadata["files"] = files;
      metadata["client_state"] = client;
      metadata["crc32"] = metadata_checksum(metadata);
      // What is written is what loads accept: the reader's checks, run on it first.
      try {
        (void)parse_metadata(metadata, (final_dir / kMetadataFile).string(), tag);
      } catch (const Error& e) {
        ZERO_INTERNAL_ASSERT(false, "save_checkpoint made metadata its reader refuses: ", e.what());
      }
      write_file_atomically((temporary_dir / kMetadataFile).string(), metadata.dump(1));
      fsync_directory(temporary_dir);
      if (fs::exists(final_dir)) fs::remove_all(final_dir);  // not the latest (checked above)
      fs::rename(temporary_dir, final_dir);
      fsync_directory(root);
      write_file_atomically((root / kLatestFile).string(), tag + "\n");
    }));
  } catch (...) {
    if (rank == 0) {
      std::error_code ignored;  // best effort: the save's own error is the one to report
      fs::remove_all(temporary_dir, ignored);
    }
    throw;
  }
  return tag;
}

namespace {

// What this rank's file of a checkpoint will take: its pieces of the fp32 master and of each
// fp32 optimizer state, the 16-bit shard at stage 3, the generator state, and the safetensors
// header (a JSON entry per tensor: name, dtype, shape, offsets; 256 bytes each is above what a
// GPT-2 parameter name needs).
int64_t estimated_rank_file_bytes(CheckpointSubject& subject) {
  const ShardState& state = subject.shard_state();
  const bool param16 = subject.saves_param_shard();
  const int64_t moments = static_cast<int64_t>(state.part_names().size()) - 1;
  const int64_t tensors_per_piece = 1 + moments + (param16 ? 1 : 0);
  const int64_t bytes_per_element =
      4 * (1 + moments) + (param16 ? static_cast<int64_t>(c10::elementSize(state.param_dtype())) : 0);
  int64_t bytes = 0;
  const std::vector<StateSegment>& segments = state.saved_segments();
  for (const StateSegment& s : segments) bytes += (s.end - s.begin) * bytes_per_element;
  at::Tensor rng;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng = generator.get_state();
  }
  constexpr int64_t kHeaderBytesPerTensor = 256;
  return bytes + rng.numel() +
         kHeaderBytesPerTensor * (static_cast<int64_t>(segments.size()) * tensors_per_piece + 1);
}

}  // namespace

void check_checkpoint_destination(CheckpointSubject& subject, const std::string& dir) {
  Communicator& comm = subject.communicator();
  const int rank = comm.rank();
  const fs::path root(dir);
  // 1. Every rank can make the directory and create a file in it (each writes its own file).
  struct statvfs space {};
  agree_on_failure(comm, "check_checkpoint_destination", capture_error([&] {
    std::error_code error;
    fs::create_directories(root, error);
    ZERO_CHECK(!error && fs::is_directory(root), "checkpoint directory '", root.string(),
               "' cannot be made: ", error ? error.message() : "a file of that name exists");
    const fs::path probe =
        root / (".zero-write-test-" + std::to_string(rank) + "-" + std::to_string(::getpid()));
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ZERO_CHECK(fd >= 0, system_error("checkpoint directory is not writable: cannot create", probe));
    const bool written = ::write(fd, "0", 1) == 1;
    const std::string write_error = system_error("cannot write", probe);
    ::close(fd);
    ::unlink(probe.c_str());
    ZERO_CHECK(written, "checkpoint directory is not writable: ", write_error);
    ZERO_CHECK(::statvfs(root.c_str(), &space) == 0, system_error("cannot read the free space of",
                                                                   root));
  }));
  // 2. Room for one more checkpoint on every file system the ranks write to: ranks that see the
  // same file system (the same f_fsid) need the sum of their files there. The metadata is small
  // next to the rank files (a few hundred bytes per parameter and piece): 1 MiB of slack.
  const int64_t needed = estimated_rank_file_bytes(subject);
  const int64_t free_bytes = static_cast<int64_t>(space.f_bavail) * static_cast<int64_t>(space.f_frsize);
  std::ostringstream mine;
  mine << space.f_fsid << " " << free_bytes << " " << needed;
  const std::vector<std::string> all = all_gather_texts(comm, mine.str());
  int64_t needed_here = int64_t{1} << 20;
  std::vector<int> writers;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    std::istringstream in(all[r]);
    unsigned long fsid = 0;
    int64_t their_free = 0, their_need = 0;
    in >> fsid >> their_free >> their_need;
    if (fsid != space.f_fsid) continue;
    needed_here += their_need;
    writers.push_back(r);
  }
  auto mib = [](int64_t bytes) {
    std::ostringstream text;
    text << bytes << " bytes (" << std::fixed << std::setprecision(1)
         << static_cast<double>(bytes) / (1 << 20) << " MiB)";
    return text.str();
  };
  agree_on_failure(comm, "check_checkpoint_destination", capture_error([&] {
    ZERO_CHECK(free_bytes >= needed_here, "checkpoint directory '", root.string(), "' has ",
               mib(free_bytes), " free on its file system, but a checkpoint needs about ",
               mib(needed_here), " there (the files of ", writers.size(), " rank(s), ",
               mib(needed), " on this one); free space, or save elsewhere");
  }));
}

std::string load_checkpoint(CheckpointSubject& subject, const std::string& dir,
                            const std::string& tag_in) {
  Communicator& comm = subject.communicator();
  const int rank = comm.rank();
  const fs::path root(dir);
  const std::vector<CheckpointParameter> params = subject.checkpoint_parameters();
  ShardState& shard = subject.shard_state();
  const std::vector<StateSegment>& wanted = shard.loaded_segments();
  const std::vector<std::string>& parts = shard.part_names();

  // Everything is read and checked into a staging copy first (of the state's placement: a
  // swap file when offloaded), and the state changes only after every rank has succeeded.
  // Made by every rank before anything can fail on one (it is collective when offloaded).
  std::unique_ptr<StateStore> staging = shard.make_staging();
  SavedCounters saved;
  Layout layout;
  at::Tensor rng;
  const std::string error = capture_error([&] {
    // The metadata, checked (Note [Checkpoint metadata]): the same checks as zero-ckpt's.
    layout = read_layout(root, tag_in);
    const fs::path& checkpoint_dir = layout.dir;
    const Metadata& metadata = layout.metadata;

    // The same model: every parameter by name and shape.
    std::map<std::string, std::vector<int64_t>> saved_shapes;
    for (const auto& p : metadata.parameters) saved_shapes[p.name] = p.shape;
    for (const auto& p : params) {
      const auto it = saved_shapes.find(p.name);
      ZERO_CHECK(it != saved_shapes.end(), "checkpoint '", checkpoint_dir.string(),
                 "' is of a different model: it has no parameter '", p.name, "'");
      ZERO_CHECK(it->second == p.shape, "checkpoint '", checkpoint_dir.string(),
                 "' is of a different model: parameter '", p.name, "' has shape ",
                 c10::IntArrayRef(it->second), " there but ", c10::IntArrayRef(p.shape), " here");
    }
    ZERO_CHECK(saved_shapes.size() == params.size(), "checkpoint '", checkpoint_dir.string(),
               "' is of a different model: it has ", saved_shapes.size(),
               " trainable parameters, this model ", params.size());
    const std::string configured = optimizer_type_name(subject.config().optimizer.type);
    ZERO_CHECK(metadata.optimizer == configured, "checkpoint '", checkpoint_dir.string(),
               "' was saved with optimizer ", metadata.optimizer, " but this config uses ",
               configured);
    const std::vector<std::string> engine_state(parts.begin() + 1, parts.end());
    ZERO_CHECK(metadata.optimizer_state == engine_state, "checkpoint '", checkpoint_dir.string(),
               "' records optimizer state [", c10::Join(", ", metadata.optimizer_state), "] but ",
               configured, " here keeps [", c10::Join(", ", engine_state), "]");

    // Which pieces of which files this rank needs; each file read is checked whole
    // (read_rank_file), as zero-ckpt inspect --verify checks it.
    const int files = metadata.world_size;
    std::vector<bool> needed(static_cast<size_t>(files), false);
    for (const StateSegment& s : wanted) {
      for (const SavedPiece& piece : metadata.pieces.at(params[s.param].name)) {
        if (piece.begin < s.end && s.begin < piece.end) needed[piece.file] = true;
      }
    }
    const bool same_world = metadata.world_size == comm.size();
    int64_t filled = 0;
    for (int f = 0; f < files; ++f) {
      const bool rng_file = same_world && f == rank;
      if (!needed[f] && !rng_file) continue;
      const SafetensorsFile file = read_rank_file(layout, f);
      const fs::path path = checkpoint_dir / metadata.files[f].name;
      if (rng_file) rng = file.tensors.at(kGeneratorKey);
      if (!needed[f]) continue;
      for (const StateSegment& s : wanted) {
        const std::string& name = params[s.param].name;
        for (const SavedPiece& piece : metadata.pieces.at(name)) {
          if (piece.file != f) continue;
          const int64_t begin = std::max(piece.begin, s.begin);
          const int64_t end = std::min(piece.end, s.end);
          if (begin >= end) continue;
          for (size_t k = 0; k < parts.size(); ++k) {
            staging->write(static_cast<int>(k), s.offset + begin - s.begin,
                           piece_tensor(file, path, parts[k], name, piece)
                               .narrow(0, begin - piece.begin, end - begin));
          }
          filled += end - begin;
        }
      }
    }
    int64_t expected = 0;
    for (const StateSegment& s : wanted) expected += s.end - s.begin;
    ZERO_CHECK(filled == expected, "checkpoint '", checkpoint_dir.string(), "' covers ", filled,
               " of the ", expected, " elements rank ", rank,
               " needs: its pieces do not cover every parameter");
    staging->flush();
    saved = metadata.counters;
  });
  agree_on_failure(comm, "load_checkpoint", error);

  // Every rank has everything: commit. In memory it cannot fail; with NVMe offload it writes
  // swap files, which can fail on one rank (the disk), and then every rank fails together,
  // its training state part old and part loaded: load again before training on.
  agree_on_failure(comm, "load_checkpoint (committing the loaded state; load again)",
                   capture_error([&] {
                     at::NoGradGuard no_grad;
                     shard.commit(*staging);
                   }));
  TrainingCounters counters = saved.training;
  // Boundaries so far, in this config's micro-steps (its accumulation may differ).
  counters.micro_steps = (counters.global_steps + counters.skipped_steps) *
                         subject.config().gradient_accumulation_steps;
  if (rng.defined()) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }
  subject.finish_load(counters);
  return layout.metadata.client_state.dump();
}

}  // namespace zero
