// Hugging Face GPT-2 checkpoints in (include/zero/gpt2_pretrained.h).
#include "zero/gpt2_pretrained.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "common/bounded_input.h"
#include "common/capture_error.h"
#include "zero/error.h"
#include "zero/gathered_parameters.h"
#include "zero/safetensors.h"

namespace zero::gpt2 {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string canonical(const std::string& name) {
  const std::string prefix = "transformer.";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// Buffers older transformers versions saved beside the weights: the causal mask.
bool is_mask_buffer(const std::string& name) {
  static const std::regex pattern(R"(h\.[0-9]+\.attn\.(masked_)?bias)");
  return std::regex_match(name, pattern);
}

// Where each tensor of the directory is: its file's reader and its name there.
struct WeightFiles {
  std::vector<SafetensorsReader> readers;
  struct Place {
    size_t reader;
    std::string name;  // as in the file
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Place> by_name;  // canonical name

  at::Tensor read(const std::string& canonical_name) const {
    const Place& place = by_name.at(canonical_name);
    return readers[place.reader].read(place.name);
  }
};

WeightFiles open_weights(const std::string& dir) {
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
      const std::string name = canonical(entry.name);
      ZERO_CHECK(files.by_name.count(name) == 0, "Hugging Face directory '", dir, "': tensor '",
                 entry.name, "' appears twice (in ", path, ")");
      files.by_name[name] = {files.readers.size() - 1, entry.name, entry.dtype, entry.shape};
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
void check_weights(const WeightFiles& files, GPT2Impl& model, const std::string& dir) {
  std::set<std::string> expected;
  for (const auto& item : model.named_parameters()) {
    const std::string name = canonical(item.key());
    expected.insert(name);
    const auto it = files.by_name.find(name);
    ZERO_CHECK(it != files.by_name.end(), "Hugging Face directory '", dir, "' has no tensor '",
               item.key(), "' (nor '", name, "')");
    const WeightFiles::Place& place = it->second;
    ZERO_CHECK(place.shape == item.value().sizes().vec(), "Hugging Face directory '", dir,
               "': tensor '", place.name, "' has shape ", shape_text(place.shape), ", the model's ",
               item.key(), " ", shape_text(item.value().sizes()),
               " (config.json and the weights disagree?)");
    ZERO_CHECK(at::isFloatingType(place.dtype), "Hugging Face directory '", dir, "': tensor '",
               place.name, "' is ", place.dtype, ", not floating point");
  }
  for (const auto& [name, place] : files.by_name) {
    if (expected.count(name) || is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") {
      ZERO_CHECK(place.shape == files.by_name.at("wte.weight").shape, "Hugging Face directory '",
                 dir, "': lm_head.weight has shape ", shape_text(place.shape),
                 ", not wte's (zero's GPT-2 ties them)");
      continue;
    }
    ZERO_CHECK(false, "Hugging Face directory '", dir, "': tensor '", place.name,
               "' is not a parameter of GPT-2 (", expected.size(), " expected)");
  }
}

}  // namespace

GPT2Config hf_config_from_dir(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  return hf_config_from_json(read_regular_file(path, "Hugging Face config", kMaxConfigBytes),
                             path);
}

GPT2Config hf_config_from_json(const std::string& text, const std::string& path) {
  const Json json = parse_bounded_json(text, path);
  ZERO_CHECK(json.is_object(), path, ": expected a JSON object");
  auto value = [&](const char* key) -> const Json* {
    return json.contains(key) && !json[key].is_null() ? &json[key] : nullptr;
  };
  auto integer = [&](const char* key, int64_t fallback) {
    const Json* v = value(key);
    if (v == nullptr) return fallback;
    ZERO_CHECK(v->is_number_integer() && v->get<int64_t>() > 0, path, ": ", key,
               " must be a positive integer, got ", v->dump());
    return v->get<int64_t>();
  };
  auto number = [&](const char* key, double fallback) {
    const Json* v = value(key);
    if (v == nullptr) return fallback;
    ZERO_CHECK(v->is_number() && v->get<double>() > 0, path, ": ", key,
               " must be a positive number, got ", v->dump());
    return v->get<double>();
  };
  auto refuse_unless = [&](const char* key, const Json& allowed, const char* why) {
    const Json* v = value(key);
    if (v == nullptr) return;
    const bool ok = allowed.is_array() ? std::find(allowed.begin(), allowed.end(), *v) != allowed.end()
                                       : *v == allowed;
    ZERO_CHECK(ok, path, ": ", key, " = ", v->dump(), " is not supported (allowed: ",
               allowed.dump(), "): ", why);
  };
  refuse_unless("model_type", "gpt2", "zero builds GPT-2");
  refuse_unless("activation_function", Json::array({"gelu_new", "gelu_pytorch_tanh"}),
                "zero's GPT-2 uses GELU's tanh approximation");
  refuse_unless("tie_word_embeddings", true, "zero's GPT-2 ties the LM head to wte");
  refuse_unless("scale_attn_weights", true, "attention is scaled by 1/sqrt(head size)");
  refuse_unless("scale_attn_by_inverse_layer_idx", false, "attention is scaled by 1/sqrt(head size)");
  refuse_unless("add_cross_attention", false, "zero's GPT-2 is a decoder only");
  GPT2Config c;
  c.vocab_size = integer("vocab_size", 50257);
  c.n_positions = integer("n_positions", integer("n_ctx", 1024));
  c.n_embd = integer("n_embd", 768);
  c.n_layer = integer("n_layer", 12);
  c.n_head = integer("n_head", 12);
  c.layer_norm_epsilon = number("layer_norm_epsilon", 1e-5);
  c.initializer_range = number("initializer_range", 0.02);
  if (const Json* inner = value("n_inner")) {
    ZERO_CHECK(*inner == 4 * c.n_embd, path, ": n_inner = ", inner->dump(),
               " is not supported (allowed: null or 4 n_embd = ", 4 * c.n_embd,
               "): zero's MLP is 4 n_embd wide");
  }
  ZERO_CHECK(c.n_embd % c.n_head == 0, path, ": n_embd ", c.n_embd, " is not divisible by n_head ",
             c.n_head);
  return c;
}

void load_hf_weights(GPT2Impl& model, const std::string& dir) {
  const WeightFiles files = open_weights(dir);
  check_weights(files, model, dir);
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters()) {
    const at::Tensor value = files.read(canonical(item.key()));
    item.value().copy_(value.to(item.value().scalar_type()));
  }
  if (files.by_name.count("lm_head.weight")) {
    ZERO_CHECK(at::equal(files.read("lm_head.weight"), files.read("wte.weight")),
               "Hugging Face directory '", dir,
               "': lm_head.weight differs from wte.weight (zero's GPT-2 ties them)");
  }
}

void load_hf_weights(Engine& engine, GPT2Impl& model, const std::string& dir,
                     Communicator& comm) {
  const bool reader = comm.rank() == 0;
  WeightFiles files;
  agree_on_failure(comm, "loading the Hugging Face weights of '" + dir + "'",
                   reader ? capture_error([&] {
                     files = open_weights(dir);
                     check_weights(files, model, dir);
                   })
                          : std::string());
  // Blocks first (each a stage-3 unit), then the embeddings and the final norm together.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> groups(model.config().n_layer + 1);
  for (const auto& item : model.named_parameters()) {
    const std::string name = canonical(item.key());
    size_t group = groups.size() - 1;
    if (name.rfind("h.", 0) == 0) group = std::stoul(name.substr(2, name.find('.', 2) - 2));
    groups[group].emplace_back(name, item.value());
  }
  std::string error;  // rank 0's first failure; the loop goes on so no rank waits alone
  for (const auto& group : groups) {
    std::vector<at::Tensor> params;
    for (const auto& [name, param] : group) params.push_back(param);
    GatheredParameters gathered(engine, params, /*modifier_rank=*/0);
    if (reader && error.empty()) {
      error = capture_error([&] {
        at::NoGradGuard no_grad;
        for (const auto& [name, param] : group) {
          const at::Tensor value = files.read(name);
          param.copy_(value.to(param.scalar_type()));
          if (name == "wte.weight" && files.by_name.count("lm_head.weight")) {
            ZERO_CHECK(at::equal(files.read("lm_head.weight"), value), "Hugging Face directory '",
                       dir, "': lm_head.weight differs from wte.weight (zero's GPT-2 ties them)");
          }
        }
      });
    }
    gathered.release();
  }
  agree_on_failure(comm, "loading the Hugging Face weights of '" + dir + "'", error);
}

}  // namespace zero::gpt2
