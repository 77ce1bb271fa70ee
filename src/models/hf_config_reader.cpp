// See hf_config_reader.h.
#include "models/hf_config_reader.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "common/bounded_input.h"
#include "zero/error.h"

namespace zero::models {

HfConfigReader::HfConfigReader(nlohmann::json json, std::string where)
    : json_(std::move(json)), where_(std::move(where)) {
  ZERO_CHECK(json_.is_object(), where_, ": expected a JSON object");
}

const nlohmann::json* HfConfigReader::value(const char* key) const {
  return json_.contains(key) && !json_[key].is_null() ? &json_[key] : nullptr;
}

int64_t HfConfigReader::integer(const char* key, int64_t fallback) const {
  const nlohmann::json* v = value(key);
  if (v == nullptr) return fallback;
  ZERO_CHECK(v->is_number_integer() && v->get<int64_t>() > 0, where_, ": ", key,
             " must be a positive integer, got ", v->dump());
  return v->get<int64_t>();
}

double HfConfigReader::number(const char* key, double fallback) const {
  const nlohmann::json* v = value(key);
  if (v == nullptr) return fallback;
  ZERO_CHECK(v->is_number() && v->get<double>() > 0, where_, ": ", key,
             " must be a positive number, got ", v->dump());
  return v->get<double>();
}

bool HfConfigReader::boolean(const char* key, bool fallback) const {
  const nlohmann::json* v = value(key);
  if (v == nullptr) return fallback;
  ZERO_CHECK(v->is_boolean(), where_, ": ", key, " must be true or false, got ", v->dump());
  return v->get<bool>();
}

void HfConfigReader::refuse_unless(const char* key, const nlohmann::json& allowed,
                                   const std::string& why) const {
  const nlohmann::json* v = value(key);
  if (v == nullptr) return;
  const bool ok = allowed.is_array()
                      ? std::find(allowed.begin(), allowed.end(), *v) != allowed.end()
                      : *v == allowed;
  ZERO_CHECK(ok, where_, ": ", key, " = ", v->dump(), " is not supported (allowed: ",
             allowed.dump(), "): ", why);
}

HfConfigReader read_hf_config_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  return read_hf_config_text(read_regular_file(path, "Hugging Face config", kMaxConfigBytes),
                             path);
}

HfConfigReader read_hf_config_text(const std::string& text, const std::string& where) {
  return HfConfigReader(parse_bounded_json(text, where), where);
}

}  // namespace zero::models
