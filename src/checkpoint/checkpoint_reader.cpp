// Reading checkpoints in one process, without an engine (zero/checkpoint.h). The layout and
// the checks are checkpoint.cpp's (src/checkpoint/format.h); see Note [Checkpoint format].
#include "zero/checkpoint.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>

#include "checkpoint/format.h"
#include "zero/config.h"
#include "zero/error.h"
#include "zero/safetensors.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace checkpoint_format;

// The whole parameters in fp32, in the metadata's order.
std::vector<std::pair<std::string, at::Tensor>> assemble_master(const Layout& layout) {
  const Metadata& m = layout.metadata;
  std::vector<std::pair<std::string, at::Tensor>> weights;
  std::map<std::string, at::Tensor> flat;  // by name: views of `weights`
  for (const auto& p : m.parameters) {
    weights.emplace_back(p.name, at::empty(p.shape, at::kFloat));
    flat[p.name] = weights.back().second.view({-1});
  }
  for (int f = 0; f < m.world_size; ++f) {
    const SafetensorsFile file = read_rank_file(layout, f);
    const fs::path path = layout.dir / m.files[f].name;
    for (const auto& [name, pieces] : m.pieces) {
      for (const SavedPiece& piece : pieces) {
        if (piece.file != f) continue;
        flat[name]
            .narrow(0, piece.begin, piece.end - piece.begin)
            .copy_(piece_tensor(file, path, "master", name, piece));
      }
    }
  }
  return weights;
}

void check_export_dtype(at::ScalarType dtype) {
  ZERO_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
             "checkpoint weights can be read as fp32, bf16 or fp16, not ", dtype);
}

}  // namespace

std::string latest_checkpoint_tag(const std::string& dir) { return resolve_tag(dir, ""); }

CheckpointSummary inspect_checkpoint(const std::string& dir, const std::string& tag, bool verify) {
  const Layout layout = read_layout(dir, tag);
  const Metadata& m = layout.metadata;
  CheckpointSummary s;
  s.dir = dir;
  s.tag = layout.tag;
  s.path = layout.dir.string();
  s.format = kFormat;
  s.version = m.version;
  s.world_size = m.world_size;
  s.stage = m.stage;
  s.param_dtype = dtype_name(m.param_dtype);
  s.master_dtype = "fp32";
  s.optimizer = m.optimizer;
  s.optimizer_state = m.optimizer_state;
  const TrainingCounters& c = m.counters.training;
  s.global_steps = c.global_steps;
  s.skipped_steps = c.skipped_steps;
  s.micro_steps = c.micro_steps;
  s.optimizer_steps = c.optimizer_steps;
  s.gradient_accumulation_steps = m.counters.gradient_accumulation_steps;
  s.lr = c.lr;
  s.loss_scaler = {c.scaler.scale, c.scaler.current_hysteresis, c.scaler.iteration,
                   c.scaler.last_overflow_iteration};
  s.scheduler = m.scheduler;
  s.client_state = m.client_state.dump();
  s.config = m.config.dump();
  for (const SavedFile& saved : m.files) {
    CheckpointSummary::File file;
    file.name = saved.name;
    file.bytes = saved.bytes;
    file.crc32 = saved.crc32;
    file.pieces = saved.pieces;
    file.elements = saved.elements;
    s.files.push_back(std::move(file));
  }
  s.parameters = m.parameters;
  for (const auto& p : s.parameters) s.num_parameters += p.numel;
  if (verify) {
    // Exactly the checks a load makes of each file it reads (read_rank_file).
    s.verified = true;
    for (size_t f = 0; f < s.files.size(); ++f) {
      try {
        (void)read_rank_file(layout, static_cast<int>(f));
      } catch (const Error& e) {
        s.files[f].problem = e.what();
        s.problems.push_back(e.what());
      }
    }
  }
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> read_checkpoint_weights(const std::string& dir,
                                                                        const std::string& tag,
                                                                        at::ScalarType dtype) {
  check_export_dtype(dtype);
  std::vector<std::pair<std::string, at::Tensor>> weights = assemble_master(read_layout(dir, tag));
  if (dtype != at::kFloat) {
    for (auto& [name, value] : weights) value = value.to(dtype);
  }
  return weights;
}

int64_t export_checkpoint_weights(const std::string& dir, const std::string& tag,
                                  const std::string& out, at::ScalarType dtype) {
  check_export_dtype(dtype);
  // Writing into a checkpoint could replace one of its rank files or `latest`: the output may
  // sit beside the checkpoints in DIR, not inside one of them, and not be DIR/latest.
  const fs::path root = fs::weakly_canonical(fs::absolute(dir));
  const fs::path target = fs::weakly_canonical(fs::absolute(out));
  const auto [in_root, in_target] = std::mismatch(root.begin(), root.end(), target.begin(), target.end());
  const bool inside = in_root == root.end() && in_target != target.end() &&
                      (std::next(in_target) != target.end() || *in_target == kLatestFile);
  ZERO_CHECK(!inside, "export: output '", out, "' is inside a checkpoint of '", dir,
             "' or is its '", kLatestFile, "'; write the weights beside the checkpoints or elsewhere");
  // fp32 whole, converted one tensor at a time as it is written.
  const std::vector<std::pair<std::string, at::Tensor>> weights =
      assemble_master(read_layout(dir, tag));
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, value] : weights) entries.push_back({name, dtype, value.sizes().vec()});
  SafetensorsWriter writer(out, std::move(entries), {{"format", "pt"}});
  for (const auto& [name, value] : weights) writer.write(name, value.to(dtype));
  writer.finish();
  return writer.file_bytes();
}

}  // namespace zero
