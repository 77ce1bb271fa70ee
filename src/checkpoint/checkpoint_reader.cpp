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
#include "zero/error.h"
#include "zero/safetensors.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace checkpoint_format;

// The whole parameters in fp32, in the metadata's order.
std::vector<std::pair<std::string, at::Tensor>> assemble_master(const Layout& layout) {
  const std::vector<std::string> problems = coverage_problems(layout);
  ZERO_CHECK(problems.empty(), problems.front(), " (the pieces must cover every element once)");
  std::vector<std::pair<std::string, at::Tensor>> weights;
  std::map<std::string, at::Tensor> flat;  // by name: views of `weights`
  for (const auto& p : layout.parameters) {
    weights.emplace_back(p.name, at::empty(p.shape, at::kFloat));
    flat[p.name] = weights.back().second.view({-1});
  }
  const Json& files = layout.metadata.at("files");
  for (int f = 0; f < static_cast<int>(files.size()); ++f) {
    const fs::path path = verify_rank_file(layout.dir, files, f);
    const SafetensorsFile file = read_safetensors(path.string());
    for (const auto& [name, pieces] : layout.pieces) {
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
  const Json& m = layout.metadata;
  CheckpointSummary s;
  s.dir = dir;
  s.tag = layout.tag;
  s.path = layout.dir.string();
  try {
    s.format = m.at("format").get<std::string>();
    s.version = m.at("version").get<int>();
    s.world_size = m.at("world_size").get<int>();
    s.stage = m.at("stage").get<int>();
    s.param_dtype = m.at("param_dtype").get<std::string>();
    s.master_dtype = m.at("master_dtype").get<std::string>();
    s.optimizer = m.at("optimizer").at("type").get<std::string>();
    s.optimizer_state = m.at("optimizer").at("state").get<std::vector<std::string>>();
    const SavedCounters saved = counters_from_json(m.at("counters"));
    const TrainingCounters& c = saved.training;
    s.global_steps = c.global_steps;
    s.skipped_steps = c.skipped_steps;
    s.micro_steps = c.micro_steps;
    s.optimizer_steps = c.optimizer_steps;
    s.gradient_accumulation_steps = saved.gradient_accumulation_steps;
    s.lr = c.lr;
    s.loss_scaler = {c.scaler.scale, c.scaler.current_hysteresis, c.scaler.iteration,
                     c.scaler.last_overflow_iteration};
    s.scheduler = m.at("scheduler").get<bool>();
    s.client_state = m.at("client_state").dump();
    s.config = m.value("config", Json::object()).dump();
    for (const Json& entry : m.at("files")) {
      CheckpointSummary::File file;
      file.name = entry.at("file").get<std::string>();
      file.bytes = entry.at("bytes").get<int64_t>();
      file.crc32 = entry.at("crc32").get<uint32_t>();
      for (const Json& piece : entry.at("pieces")) {
        ++file.pieces;
        file.elements += piece.at(2).get<int64_t>() - piece.at(1).get<int64_t>();
      }
      s.files.push_back(std::move(file));
    }
  } catch (const Json::exception& e) {
    ZERO_CHECK(false, "checkpoint metadata '", (layout.dir / kMetadataFile).string(),
               "' is malformed: ", e.what());
  }
  s.parameters = layout.parameters;
  for (const auto& p : s.parameters) s.num_parameters += p.numel;
  s.problems = coverage_problems(layout);
  if (verify) {
    s.verified = true;
    for (size_t f = 0; f < s.files.size(); ++f) {
      try {
        verify_rank_file(layout.dir, m.at("files"), static_cast<int>(f));
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
