// Note [Checkpoint metadata] in metadata.h.
#include "checkpoint/metadata.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "checkpoint/format.h"
#include "optim/optimizer_state.h"
#include "zero/config.h"
#include "zero/error.h"

namespace zero::checkpoint_format {
namespace {

using Json = nlohmann::json;

constexpr int64_t kInt = std::numeric_limits<int>::max();
constexpr int64_t kInt64 = std::numeric_limits<int64_t>::max();

// A value as the messages show it: compact JSON, cut at 100 characters.
std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 100) text = text.substr(0, 100) + "...";
  return text;
}

// Reads fields of one metadata.json, each checked for presence, type and range; every failure
// names the file, the key path, the value and what was expected.
class Fields {
 public:
  explicit Fields(const std::string& path) : path_(path) {}

  [[noreturn]] void invalid(const std::string& key, const Json* value,
                            const std::string& expected) const {
    throw Error("checkpoint metadata '" + path_ + "': " + key +
                (value != nullptr ? " = " + shown(*value) + " is invalid" : " is missing") +
                "; expected " + expected);
  }
  // Two fields that cannot both be right.
  [[noreturn]] void contradiction(const std::string& key, const Json& value,
                                  const std::string& other, const std::string& why) const {
    throw Error("checkpoint metadata '" + path_ + "': " + key + " = " + shown(value) +
                " contradicts " + other + ": " + why);
  }

  const Json& field(const Json& parent, const std::string& prefix, const std::string& key,
                    const char* expected) const {
    if (!parent.is_object() || !parent.contains(key)) invalid(prefix + key, nullptr, expected);
    return parent.at(key);
  }

  // An integer in [least, most]: a JSON integer, not a float or a string of digits.
  int64_t integer(const Json& parent, const std::string& prefix, const std::string& key,
                  int64_t least, int64_t most) const {
    return integer_value(field(parent, prefix, key, range(least, most).c_str()), prefix + key,
                         least, most);
  }
  int64_t integer_value(const Json& value, const std::string& key, int64_t least,
                        int64_t most) const {
    bool ok = false;
    int64_t result = 0;
    if (value.is_number_unsigned()) {
      ok = value.get<uint64_t>() <= static_cast<uint64_t>(most);
      result = ok ? static_cast<int64_t>(value.get<uint64_t>()) : 0;
      ok = ok && result >= least;
    } else if (value.is_number_integer()) {
      result = value.get<int64_t>();
      ok = result >= least && result <= most;
    }
    if (!ok) invalid(key, &value, range(least, most));
    return result;
  }

  // A finite number in [least, most] (an integer is a number too).
  double number(const Json& parent, const std::string& prefix, const std::string& key,
                double least, bool least_open) const {
    char expected[96];
    std::snprintf(expected, sizeof expected, "a finite number %s %g", least_open ? ">" : ">=", least);
    const Json& value = field(parent, prefix, key, expected);
    const double x = value.is_number() ? value.get<double>() : std::nan("");
    if (!std::isfinite(x) || x < least || (least_open && x == least)) invalid(prefix + key, &value, expected);
    return x;
  }

  bool boolean(const Json& parent, const std::string& prefix, const std::string& key) const {
    const Json& value = field(parent, prefix, key, "true or false");
    if (!value.is_boolean()) invalid(prefix + key, &value, "true or false");
    return value.get<bool>();
  }

  std::string string(const Json& parent, const std::string& prefix, const std::string& key,
                     const std::vector<std::string>& allowed, const std::string& why = "") const {
    std::string expected = "one of";
    for (const std::string& a : allowed) expected += " \"" + a + "\"";
    expected += why;
    const Json& value = field(parent, prefix, key, expected.c_str());
    if (!value.is_string() ||
        std::find(allowed.begin(), allowed.end(), value.get_ref<const std::string&>()) == allowed.end()) {
      invalid(prefix + key, &value, expected);
    }
    return value.get<std::string>();
  }

  // Exactly `keys` (those in `optional` may be absent).
  void only_keys(const Json& object, const std::string& where, const std::set<std::string>& keys,
                 const std::set<std::string>& optional = {}) const {
    std::string list;
    for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
    for (const auto& item : object.items()) {
      if (keys.count(item.key()) == 0) {
        throw Error("checkpoint metadata '" + path_ + "': " + where + " has the unknown key '" +
                    item.key() + "'; a version " + std::to_string(kVersion) +
                    " checkpoint has exactly " + list);
      }
    }
    for (const std::string& k : keys) {
      if (optional.count(k) == 0 && !object.contains(k)) invalid(where == "the metadata" ? k : where + "." + k, nullptr, "it in every version " + std::to_string(kVersion) + " checkpoint");
    }
  }

  const std::string& path() const { return path_; }

 private:
  static std::string range(int64_t least, int64_t most) {
    return "an integer in [" + std::to_string(least) + ", " + std::to_string(most) + "]";
  }

  const std::string& path_;
};

void parse_counters(const Fields& f, const Json& metadata, Metadata& m) {
  const Json& json = f.field(metadata, "", "counters", "an object");
  if (!json.is_object()) f.invalid("counters", &json, "an object");
  f.only_keys(json, "counters",
              {"global_steps", "skipped_steps", "micro_steps", "optimizer_steps",
               "gradient_accumulation_steps", "lr", "loss_scaler"});
  TrainingCounters& c = m.counters.training;
  const std::string p = "counters.";
  c.global_steps = f.integer(json, p, "global_steps", 0, kInt64);
  c.skipped_steps = f.integer(json, p, "skipped_steps", 0, kInt64 - c.global_steps);
  c.micro_steps = f.integer(json, p, "micro_steps", 0, kInt64);
  c.optimizer_steps = f.integer(json, p, "optimizer_steps", 0, kInt64);
  m.counters.gradient_accumulation_steps =
      static_cast<int>(f.integer(json, p, "gradient_accumulation_steps", 1, kInt));
  c.lr = f.number(json, p, "lr", 0.0, false);
  const Json& scaler = f.field(json, p, "loss_scaler", "an object");
  if (!scaler.is_object()) f.invalid(p + "loss_scaler", &scaler, "an object");
  f.only_keys(scaler, "counters.loss_scaler",
              {"scale", "current_hysteresis", "iteration", "last_overflow_iteration"});
  const std::string q = p + "loss_scaler.";
  c.scaler.scale = f.number(scaler, q, "scale", 0.0, true);
  c.scaler.current_hysteresis = static_cast<int>(f.integer(scaler, q, "current_hysteresis", 1, kInt));
  c.scaler.iteration = f.integer(scaler, q, "iteration", 0, kInt64);
  c.scaler.last_overflow_iteration = f.integer(scaler, q, "last_overflow_iteration", -1, kInt64);

  // Consistency (Note [Checkpoint metadata]).
  const int64_t boundaries = c.global_steps + c.skipped_steps;
  const int64_t gas = m.counters.gradient_accumulation_steps;
  if (boundaries > kInt64 / gas || c.micro_steps != boundaries * gas) {
    f.contradiction("counters.micro_steps", json.at("micro_steps"),
                    "counters.global_steps + counters.skipped_steps = " + std::to_string(boundaries) +
                        " and counters.gradient_accumulation_steps = " + std::to_string(gas),
                    "a save happens at an accumulation boundary, after (global_steps + "
                    "skipped_steps) x gradient_accumulation_steps micro-steps");
  }
  if (c.optimizer_steps != c.global_steps) {
    f.contradiction("counters.optimizer_steps", json.at("optimizer_steps"),
                    "counters.global_steps = " + std::to_string(c.global_steps),
                    "every applied step is one optimizer step (Adam's bias correction counts "
                    "them), so the two are equal");
  }
  const bool fp16 = m.param_dtype == c10::ScalarType::Half;
  const std::string no_scaling = " (param_dtype " + dtype_name(m.param_dtype) +
                                 ": loss scaling and skipped steps exist only with fp16)";
  if (!fp16) {
    if (c.skipped_steps != 0) {
      f.contradiction("counters.skipped_steps", json.at("skipped_steps"), "param_dtype",
                      "only fp16 overflows skip steps" + no_scaling);
    }
    if (c.scaler.scale != 1.0 || c.scaler.iteration != 0 || c.scaler.last_overflow_iteration != -1) {
      f.contradiction("counters.loss_scaler", scaler, "param_dtype",
                      "expected scale 1, iteration 0 and last_overflow_iteration -1" + no_scaling);
    }
  } else {
    if (c.scaler.iteration > boundaries) {
      f.contradiction("counters.loss_scaler.iteration", scaler.at("iteration"),
                      "counters.global_steps + counters.skipped_steps = " + std::to_string(boundaries),
                      "the scaler counts at most one iteration per boundary");
    }
    if (c.scaler.last_overflow_iteration >= c.scaler.iteration && c.scaler.last_overflow_iteration != -1) {
      f.contradiction("counters.loss_scaler.last_overflow_iteration",
                      scaler.at("last_overflow_iteration"),
                      "counters.loss_scaler.iteration = " + std::to_string(c.scaler.iteration),
                      "an overflow is recorded at an iteration before the current one (or -1)");
    }
  }
}

void parse_parameters(const Fields& f, const Json& metadata, Metadata& m) {
  const char* expected = "an array of {name, shape}";
  const Json& parameters = f.field(metadata, "", "parameters", expected);
  if (!parameters.is_array()) f.invalid("parameters", &parameters, expected);
  std::set<std::string> seen;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Json& p = parameters[i];
    const std::string where = "parameters[" + std::to_string(i) + "]";
    if (!p.is_object()) f.invalid(where, &p, "an object {name, shape}");
    f.only_keys(p, where, {"name", "shape"});
    const Json& name = p.at("name");
    if (!name.is_string() || name.get_ref<const std::string&>().empty()) {
      f.invalid(where + ".name", &name, "a non-empty string");
    }
    CheckpointSummary::Parameter parameter;
    parameter.name = name.get<std::string>();
    if (!seen.insert(parameter.name).second) {
      f.invalid(where + ".name", &name, "a name no other parameter has");
    }
    const Json& shape = p.at("shape");
    if (!shape.is_array() || shape.size() > 64) {
      f.invalid(where + ".shape", &shape, "an array of at most 64 dimensions");
    }
    parameter.numel = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t size = f.integer_value(shape[d], where + ".shape[" + std::to_string(d) + "]", 0, kInt64);
      if (size != 0 && parameter.numel > kInt64 / size) {
        f.invalid(where + ".shape", &shape, "dimensions whose product fits in 64 bits");
      }
      parameter.shape.push_back(size);
      parameter.numel *= size;
    }
    m.parameters.push_back(std::move(parameter));
  }
}

void parse_files(const Fields& f, const Json& metadata, Metadata& m) {
  const std::string expected = "an array of " + std::to_string(m.world_size) +
                               " entries {file, bytes, crc32, pieces}, one per rank (world_size)";
  const Json& files = f.field(metadata, "", "files", expected.c_str());
  if (!files.is_array() || files.size() != static_cast<size_t>(m.world_size)) {
    f.invalid("files", &files, expected);
  }
  std::map<std::string, int64_t> numel_of;
  for (const auto& p : m.parameters) numel_of[p.name] = p.numel;
  for (int r = 0; r < m.world_size; ++r) {
    const Json& entry = files[static_cast<size_t>(r)];
    const std::string where = "files[" + std::to_string(r) + "]";
    if (!entry.is_object()) f.invalid(where, &entry, "an object {file, bytes, crc32, pieces}");
    f.only_keys(entry, where, {"file", "bytes", "crc32", "pieces"});
    SavedFile file;
    // Only rank r's own name: no metadata can make zero open a file outside the checkpoint.
    file.name = f.string(entry, where + ".", "file", {rank_file_name(r)},
                         " (rank " + std::to_string(r) + "'s file; no other name is read)");
    file.bytes = f.integer(entry, where + ".", "bytes", 0, kInt64);
    file.crc32 = static_cast<uint32_t>(f.integer(entry, where + ".", "crc32", 0, 0xFFFFFFFFLL));
    const Json& pieces = entry.at("pieces");
    if (!pieces.is_array()) f.invalid(where + ".pieces", &pieces, "an array of [name, begin, end]");
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Json& piece = pieces[k];
      const std::string at = where + ".pieces[" + std::to_string(k) + "]";
      if (!piece.is_array() || piece.size() != 3 || !piece[0].is_string()) {
        f.invalid(at, &piece, "[name, begin, end]: a parameter's name and an element range");
      }
      const std::string& name = piece[0].get_ref<const std::string&>();
      const auto numel = numel_of.find(name);
      if (numel == numel_of.end()) f.invalid(at + "[0]", &piece[0], "the name of one of the parameters");
      const int64_t begin = f.integer_value(piece[1], at + "[1]", 0, numel->second);
      const int64_t end = f.integer_value(piece[2], at + "[2]", begin, numel->second);
      m.pieces[name].push_back({r, begin, end});
      ++file.pieces;
      file.elements += end - begin;
    }
    m.files.push_back(std::move(file));
  }
  // Every element of every parameter in exactly one piece: none missing, doubled or relabelled.
  for (const auto& p : m.parameters) {
    const auto it = m.pieces.find(p.name);
    const std::string problem = coverage_problem(
        p.name, p.numel, it == m.pieces.end() ? std::vector<SavedPiece>() : it->second);
    if (!problem.empty()) {
      throw Error("checkpoint metadata '" + f.path() + "': " + problem +
                  " (the pieces of files[*].pieces must cover every element once)");
    }
  }
}

// The effective config a save records (metadata "config") says how the run was set up; the
// fields that describe the saved state must agree with it. A config without a key (a program
// that built its Config by hand records {}) is not checked for it.
void check_against_config(const Fields& f, const Json& metadata, const Metadata& m) {
  const Json& config = m.config;
  auto at = [&](std::initializer_list<const char*> keys) -> const Json* {
    const Json* node = &config;
    for (const char* key : keys) {
      if (!node->is_object() || !node->contains(key)) return nullptr;
      node = &node->at(key);
    }
    return node;
  };
  if (const Json* stage = at({"zero_optimization", "stage"});
      stage != nullptr && stage->is_number_integer() && stage->get<int64_t>() != m.stage) {
    f.contradiction("stage", metadata.at("stage"), "config.zero_optimization.stage = " + shown(*stage),
                    "the checkpoint was saved by a run of that config");
  }
  if (const Json* gas = at({"gradient_accumulation_steps"});
      gas != nullptr && gas->is_number_integer() &&
      gas->get<int64_t>() != m.counters.gradient_accumulation_steps) {
    f.contradiction("counters.gradient_accumulation_steps",
                    metadata.at("counters").at("gradient_accumulation_steps"),
                    "config.gradient_accumulation_steps = " + shown(*gas),
                    "the checkpoint was saved by a run of that config");
  }
  if (const Json* scheduler = at({"scheduler"});
      scheduler != nullptr && (scheduler->is_null() || scheduler->is_object()) &&
      scheduler->is_object() != m.scheduler) {
    f.contradiction("scheduler", metadata.at("scheduler"), "config.scheduler = " + shown(*scheduler),
                    "it records whether that config had a scheduler");
  }
  // The parameter dtype is the config's fp16/bf16 choice, or fp32 where compute_data_type
  // "auto" found 16-bit GEMMs slow at stages 0-2 (Note [Compute dtype] in zero/config.h).
  const Json* fp16 = at({"fp16", "enabled"});
  const Json* bf16 = at({"bf16", "enabled"});
  if (fp16 != nullptr && bf16 != nullptr && fp16->is_boolean() && bf16->is_boolean()) {
    const c10::ScalarType configured = fp16->get<bool>()   ? c10::ScalarType::Half
                                       : bf16->get<bool>() ? c10::ScalarType::BFloat16
                                                           : c10::ScalarType::Float;
    const Json* compute = at({"compute_data_type"});
    std::string compute_name = compute != nullptr && compute->is_string() ? compute->get<std::string>() : "";
    for (char& ch : compute_name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const bool auto_compute = compute_name == "auto";  // the config reads it case-insensitively
    const bool fell_back = auto_compute && m.stage < 3 && m.param_dtype == c10::ScalarType::Float;
    if (m.param_dtype != configured && !fell_back) {
      f.contradiction("param_dtype", metadata.at("param_dtype"),
                      "config fp16.enabled = " + shown(*fp16) + ", bf16.enabled = " + shown(*bf16),
                      "that config trains " + dtype_name(configured) + " parameters");
    }
  }
}

}  // namespace

std::optional<int64_t> boundary_in_tag(const std::string& tag) {
  const std::string prefix = "global_step";
  if (tag.size() <= prefix.size() || tag.size() > prefix.size() + 18 || tag.rfind(prefix, 0) != 0 ||
      tag.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(tag.substr(prefix.size()));
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

std::vector<std::string> Metadata::piece_kinds() const {
  std::vector<std::string> kinds{"master"};
  kinds.insert(kinds.end(), optimizer_state.begin(), optimizer_state.end());
  if (saves_param16()) kinds.push_back("param16");
  return kinds;
}

Metadata parse_metadata(const Json& json, const std::string& path, const std::string& tag) {
  const Fields f(path);
  if (!json.is_object()) throw Error("checkpoint metadata '" + path + "' is not a JSON object");
  Metadata m;
  // What says which reader applies first, so a checkpoint of another kind or version is named
  // as such rather than by its first unfamiliar key.
  f.string(json, "", "format", {kFormat}, ": it is not a zero checkpoint");
  const Json& version = f.field(json, "", "version", "an integer");
  if (!version.is_number_integer()) {
    f.invalid("version", &version,
              "the integer " + std::to_string(kVersion) + " (this build reads checkpoint format version " +
                  std::to_string(kVersion) + ")");
  }
  if (version.get<int64_t>() != kVersion) {
    throw Error("'" + path + "' has checkpoint format version " + shown(version) +
                "; this build reads version " + std::to_string(kVersion));
  }
  m.version = kVersion;
  // Then its checksum, before any field it covers is believed.
  const Json* recorded = json.contains("crc32") ? &json.at("crc32") : nullptr;
  const uint32_t crc = metadata_checksum(json);
  if (recorded == nullptr || !recorded->is_number_unsigned() || recorded->get<uint64_t>() != crc) {
    throw Error("checkpoint metadata '" + path + "' was edited or damaged: its CRC-32 is " +
                std::to_string(crc) + " but it records " +
                (recorded == nullptr ? std::string("none") : shown(*recorded)) +
                " (a save writes the CRC-32 of the metadata without its \"crc32\" key)");
  }
  m.crc32 = crc;
  f.only_keys(json, "the metadata",
              {"format", "version", "crc32", "world_size", "stage", "param_dtype", "master_dtype",
               "optimizer", "counters", "scheduler", "config", "client_state", "parameters",
               "files"},
              {"config"});
  m.world_size = static_cast<int>(f.integer(json, "", "world_size", 1, kInt));
  m.stage = static_cast<int>(f.integer(json, "", "stage", 0, 3));
  const std::string param_dtype = f.string(json, "", "param_dtype", {"fp32", "bf16", "fp16"});
  m.param_dtype = param_dtype == "fp32"   ? c10::ScalarType::Float
                  : param_dtype == "bf16" ? c10::ScalarType::BFloat16
                                          : c10::ScalarType::Half;
  f.string(json, "", "master_dtype", {"fp32"});

  const Json& optimizer = f.field(json, "", "optimizer", "an object {type, state}");
  if (!optimizer.is_object()) f.invalid("optimizer", &optimizer, "an object {type, state}");
  f.only_keys(optimizer, "optimizer", {"type", "state"});
  m.optimizer =
      f.string(optimizer, "optimizer.", "type", optimizer_type_names());
  const Json& state = optimizer.at("state");
  bool strings = state.is_array();
  for (const Json& kind : state) strings = strings && kind.is_string();
  if (strings) m.optimizer_state = state.get<std::vector<std::string>>();
  if (!strings || !state_fits_optimizer(m.optimizer, m.optimizer_state)) {
    f.invalid("optimizer.state", &state, allowed_states(m.optimizer));
  }

  parse_counters(f, json, m);
  const TrainingCounters& c = m.counters.training;
  const std::optional<int64_t> named = boundary_in_tag(tag);
  if (named && *named != c.global_steps + c.skipped_steps) {
    throw Error("checkpoint metadata '" + path + "': the tag '" + tag +
                "' names the boundary the checkpoint was saved at, but counters.global_steps + "
                "counters.skipped_steps = " + std::to_string(c.global_steps + c.skipped_steps));
  }
  m.scheduler = f.boolean(json, "", "scheduler");
  if (json.contains("config")) {
    m.config = json.at("config");
    if (!m.config.is_object()) f.invalid("config", &m.config, "an object (the effective config)");
  }
  check_against_config(f, json, m);
  m.client_state = json.at("client_state");
  parse_parameters(f, json, m);
  parse_files(f, json, m);
  return m;
}

}  // namespace zero::checkpoint_format
