// Strict, typed access to the JSON of a DeepSpeed config (internal to src/config/).
//
// Every error this file raises is a zero::Error whose message starts with the config's source
// ("ds_config.json: ") and names the full key path, the value received (as JSON) and what is
// allowed. Two value conventions, both DeepSpeed's:
//   - the string "auto" (Hugging Face integration) means "not given" here: the key takes its
//     default (or is derived, for the batch triple); a trainer's values have replaced the
//     "auto"s it fills before the parse (trainer_fill.h);
//   - JSON null means "not given" only where DeepSpeed's own default is None (the get_optional_*
//     getters); elsewhere it is a type error.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero::config_detail {

using Json = nlohmann::json;

/// Levenshtein distance between two strings (insert, delete, substitute all cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word` (case-insensitively) when it is close enough to be a
/// plausible typo; empty when none is.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

/// Parses JSON text. `//` and `/* */` comments are allowed (DeepSpeed reads files with hjson);
/// duplicate keys in any object are rejected (DeepSpeed rejects them too). Syntax errors name
/// the line, column and byte. Errors are prefixed with `source`.
Json parse_json_text(const std::string& text, const std::string& source);

/// `parent.key` ("key" at the top level).
std::string join_path(const std::string& parent, const std::string& key);

/// Compact JSON of a value for messages, shortened when very long.
std::string show(const Json& value);

/// True for the string "auto" (treated as "not given").
bool is_auto(const Json& value);

/// Throws zero::Error("<source>: <message>").
[[noreturn]] void fail(const std::string& source, const std::string& message);

/// One JSON object of the config at a key path ("" for the top level).
class ObjectView {
 public:
  /// `object` must outlive the view. Throws when it is not a JSON object.
  ObjectView(const Json& object, std::string path, std::string source);

  const std::string& path() const { return path_; }
  const std::string& source() const { return source_; }
  const Json& json() const { return *object_; }
  /// Full path of a key of this object.
  std::string key_path(const std::string& key) const { return join_path(path_, key); }

  /// Rejects every key not in `known`, suggesting the closest known key, or else the section
  /// a misplaced key belongs to (keys.h: section_knowing).
  void check_keys(const std::vector<std::string>& known) const;
  /// The top level's rule (DeepSpeed ignores unknown top-level keys; Note [Unknown keys] in
  /// reader.cpp): an unknown key that looks like a mistake is an error as in check_keys; any
  /// other is ignored and said in `notes`.
  void check_keys_ignoring_extras(const std::vector<std::string>& known,
                                  std::vector<std::string>& notes) const;

  /// The value, or nullptr when absent.
  const Json* raw(const std::string& key) const;
  /// The value, or nullptr when absent or "auto".
  const Json* given(const std::string& key) const;

  bool get_bool(const std::string& key, bool fallback) const;
  std::optional<bool> get_optional_bool(const std::string& key) const;

  /// A finite number satisfying `ok`; `expected` describes the allowed range in messages.
  double get_number(const std::string& key, double fallback, bool (*ok)(double),
                    const char* expected) const;

  /// An integer in [min, max]. JSON numbers with an integral value (2e8) are accepted; 1.5 is
  /// not.
  int64_t get_integer(const std::string& key, int64_t fallback, int64_t min, int64_t max,
                      const char* expected) const;
  /// As get_integer, but absent / null / "auto" give nullopt; no range check.
  std::optional<int64_t> get_optional_integer(const std::string& key,
                                              const char* expected) const;

  /// A string; absent / null / "auto" give nullopt.
  std::optional<std::string> get_optional_string(const std::string& key,
                                                 const char* expected) const;
  /// One of `choices` (exact strings): its index; absent / null / "auto" give nullopt; any
  /// other value is invalid, with `expected` in the message.
  std::optional<size_t> get_choice(const std::string& key, const std::vector<std::string>& choices,
                                   const char* expected) const;

  /// "<source>: <path.key> = <value> is invalid; expected <expected>".
  [[noreturn]] void invalid(const std::string& key, const Json& value,
                            const std::string& expected) const;
  /// "<source>: <path.key> = <value> is not supported yet; <allowed>".
  [[noreturn]] void not_supported(const std::string& key, const Json& value,
                                  const std::string& allowed) const;

 private:
  const Json* object_;
  std::string path_;
  std::string source_;
};

/// Converts a JSON number to int64 when it holds an integral value in range.
std::optional<int64_t> json_to_integer(const Json& value);

}  // namespace zero::config_detail
