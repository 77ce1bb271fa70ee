// Hugging Face weights into any causal LM (zero::load_hf_weights, include/zero/causal_lm.h): the
// directory's safetensors files, checked against the model's parameters by their names there
// (CausalLM::parameter_of_hf_tensor, tied_hf_tensor, ignored_hf_tensor), then copied a block
// at a time.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>

#include "common/bounded_input.h"
#include "zero/causal_lm.h"
#include "zero/comm.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gathered_parameters.h"
#include "zero/safetensors.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Where each tensor of the directory is: its file's reader and its name there.
struct WeightFiles {
  std::vector<SafetensorsReader> readers;
  struct Place {
    size_t reader;
    std::string name;  // as in the file
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Place> by_name;  // the parameter's name (CausalLM::parameter_of_hf_tensor)
  std::map<std::string, Place> tied;     // tied tensors, by the parameter they stand for

  at::Tensor read(const Place& place) const { return readers[place.reader].read(place.name); }
};

WeightFiles open_weights(const std::string& dir, const CausalLM& model) {
  WeightFiles files;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::vector<std::string> paths;
  if (fs::exists(index)) {
    const Json json = parse_bounded_json(
        read_regular_file(index.string(), "safetensors index", kMaxConfigBytes), index.string());
    ZERO_CHECK(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
               index.string(), ": expected an object with a \"weight_map\" object");
    std::set<std::string> names;
    for (const auto& [tensor, file] : json["weight_map"].items()) {
      ZERO_CHECK(file.is_string(), index.string(), ": weight_map[\"", tensor,
                 "\"] must be a file name, got ", file.dump());
      const std::string name = file.get<std::string>();
      ZERO_CHECK(name.find('/') == std::string::npos && name != "..", index.string(),
                 ": weight_map[\"", tensor, "\"] = \"", name,
                 "\" is not a file of the directory");
      names.insert(name);
    }
    for (const std::string& name : names) paths.push_back((fs::path(dir) / name).string());
  } else {
    ZERO_CHECK(fs::exists(single), "Hugging Face directory '", dir,
               "' has neither model.safetensors nor model.safetensors.index.json",
               fs::exists(fs::path(dir) / "pytorch_model.bin")
                   ? " (only pytorch_model.bin: zero reads safetensors; re-save it with "
                     "save_pretrained(dir, safe_serialization=True))"
                   : "");
    paths.push_back(single.string());
  }
  for (const std::string& path : paths) {
    files.readers.emplace_back(path);
    for (const SafetensorsEntry& entry : files.readers.back().entries()) {
      if (model.ignored_hf_tensor(entry.name)) continue;
      const WeightFiles::Place place{files.readers.size() - 1, entry.name, entry.dtype,
                                     entry.shape};
      const std::optional<std::string> tied = model.tied_hf_tensor(entry.name);
      const std::string name = tied ? *tied : model.parameter_of_hf_tensor(entry.name);
      auto& table = tied ? files.tied : files.by_name;
      ZERO_CHECK(table.count(name) == 0, "Hugging Face directory '", dir, "': tensor '",
                 entry.name, "' appears twice (in ", path, ")");
      table[name] = place;
    }
  }
  return files;
}

std::string shape_text(c10::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Every model parameter present with its shape and a floating dtype, nothing unknown beside.
void check_weights(const WeightFiles& files, const CausalLM& model, const std::string& dir) {
  std::map<std::string, std::vector<int64_t>> expected;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    expected[name] = item.value().sizes().vec();
    const auto it = files.by_name.find(name);
    ZERO_CHECK(it != files.by_name.end(), "Hugging Face directory '", dir, "' has no tensor '",
               name, "'");
    const WeightFiles::Place& place = it->second;
    ZERO_CHECK(place.shape == item.value().sizes().vec(), "Hugging Face directory '", dir,
               "': tensor '", place.name, "' has shape ", shape_text(place.shape), ", the model's ",
               name, " ", shape_text(item.value().sizes()),
               " (config.json and the weights disagree?)");
    ZERO_CHECK(at::isFloatingType(place.dtype), "Hugging Face directory '", dir, "': tensor '",
               place.name, "' is ", place.dtype, ", not floating point");
  }
  const std::string family = model.causal_lm_config().display_name();
  for (const auto& [name, place] : files.by_name) {
    ZERO_CHECK(expected.count(name), "Hugging Face directory '", dir, "': tensor '", place.name,
               "' is not a parameter of ", family, " (", expected.size(), " expected)");
  }
  for (const auto& [name, place] : files.tied) {
    const auto it = expected.find(name);
    ZERO_CHECK(it != expected.end() && place.shape == it->second, "Hugging Face directory '",
               dir, "': ", place.name, " has shape ", shape_text(place.shape), ", not ", name,
               "'s (", family, " ties them)");
  }
}

// A parameter's value from the files, in the parameter's dtype; a tensor tied to it must be
// equal (the model computes with one).
at::Tensor read_parameter(const WeightFiles& files, const std::string& name,
                          const at::Tensor& param, const std::string& dir,
                          const std::string& family) {
  const at::Tensor value = files.read(files.by_name.at(name));
  const auto tied = files.tied.find(name);
  if (tied != files.tied.end()) {
    ZERO_CHECK(at::equal(files.read(tied->second), value), "Hugging Face directory '", dir,
               "': ", tied->second.name, " differs from ", name, " (", family, " ties them)");
  }
  return value.to(param.scalar_type());
}

}  // namespace

void load_hf_weights(CausalLM& model, const std::string& dir) {
  const WeightFiles files = open_weights(dir, model);
  check_weights(files, model, dir);
  const std::string family = model.causal_lm_config().display_name();
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters()) {
    item.value().copy_(read_parameter(files, item.key(), item.value(), dir, family));
  }
}

void load_hf_weights(Engine& engine, CausalLM& model, const std::string& dir,
                     Communicator& comm) {
  const bool reader = comm.rank() == 0;
  const std::string what = "loading the Hugging Face weights of '" + dir + "'";
  WeightFiles files;
  agree_on_failure(comm, what, reader ? capture_error([&] {
                                          files = open_weights(dir, model);
                                          check_weights(files, model, dir);
                                        })
                                      : std::string());
  // Blocks first (each a stage-3 unit), then everything else together (embeddings, the final
  // norm, an untied head).
  const std::string prefix = model.block_prefix();
  const int64_t layers = model.causal_lm_config().shape().num_layers;
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> groups(layers + 1);
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    size_t group = groups.size() - 1;
    if (name.rfind(prefix, 0) == 0) {
      group = std::stoul(name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size()));
      ZERO_INTERNAL_ASSERT(group < groups.size() - 1, "parameter ", name, " of a block past the last");
    }
    groups[group].emplace_back(name, item.value());
  }
  const std::string family = model.causal_lm_config().display_name();
  std::string error;  // rank 0's first failure; the loop goes on so no rank waits alone
  for (const auto& group : groups) {
    std::vector<at::Tensor> params;
    for (const auto& [name, param] : group) params.push_back(param);
    GatheredParameters gathered(engine, params, /*modifier_rank=*/0);
    if (reader && error.empty()) {
      error = capture_error([&] {
        at::NoGradGuard no_grad;
        for (const auto& [name, param] : group) {
          param.copy_(read_parameter(files, name, param, dir, family));
        }
      });
    }
    gathered.release();
  }
  agree_on_failure(comm, what, error);
}

}  // namespace zero
