// Reading a Hugging Face config.json for a model family (src/models/gpt2_pretrained.cpp,
// llama.cpp): typed values with defaults, and what the family cannot compute refused by key.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "zero/export.h"

namespace zero::models {

class ZERO_INTERNAL_API HfConfigReader {
 public:
  /// `json` must be an object (else zero::Error naming `where`, the file).
  HfConfigReader(nlohmann::json json, std::string where);
  const nlohmann::json& json() const { return json_; }
  const std::string& where() const { return where_; }
  /// The value of `key`, or nullptr when absent or null.
  const nlohmann::json* value(const char* key) const;
  /// A positive integer (or `fallback` when absent); anything else is refused by key.
  int64_t integer(const char* key, int64_t fallback) const;
  /// A positive number (or `fallback` when absent).
  double number(const char* key, double fallback) const;
  /// A boolean (or `fallback` when absent).
  bool boolean(const char* key, bool fallback) const;
  /// Refuses `key` when present with a value other than `allowed` (or than each element of an
  /// array `allowed`): "<where>: <key> = <value> is not supported (allowed: ...): <why>".
  void refuse_unless(const char* key, const nlohmann::json& allowed, const std::string& why) const;

 private:
  nlohmann::json json_;
  std::string where_;
};

/// The config.json of the directory `dir`, read within zero's bounds on config files.
ZERO_INTERNAL_API HfConfigReader read_hf_config_dir(const std::string& dir);
/// The same from its text (`where` names it).
ZERO_INTERNAL_API HfConfigReader read_hf_config_text(const std::string& text,
                                                     const std::string& where);

}  // namespace zero::models
