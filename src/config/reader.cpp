#include "config/reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "common/bounded_input.h"
#include "common/text.h"
#include "config/keys.h"
#include "zero/error.h"

namespace zero::config_detail {

namespace {

const char* type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    default: return "an unsupported JSON value";
  }
}

// One open object or array while parsing, to detect duplicate keys and name their path.
struct ParseFrame {
  bool is_object = true;
  std::set<std::string> keys;
  std::string current_key;  // object: the key whose value is being read
  size_t index = 0;         // array: index of the element being read
};

std::string frames_path(const std::vector<ParseFrame>& frames, size_t count) {
  std::string path;
  for (size_t i = 0; i < count; ++i) {
    if (frames[i].is_object) {
      path = join_path(path, frames[i].current_key);
    } else {
      path += '[';
      path += std::to_string(frames[i].index);
      path += ']';
    }
  }
  return path;
}

// 1-based line and column of a byte offset (nlohmann's parse_error::byte is 1-based: the
// position of the last character read).
std::pair<size_t, size_t> line_and_column(const std::string& text, size_t byte) {
  size_t line = 1, column = 1;
  const size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string needle = lower_ascii(word);
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(needle, lower_ascii(candidate));
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  if (best.empty()) return best;
  // A plausible typo: at most max(2, length/4) edits, and fewer than half the characters.
  const size_t length = std::max(needle.size(), best.size());
  const size_t limit = std::max<size_t>(2, length / 4);
  if (best_distance <= limit && 2 * best_distance < length) return best;
  return {};
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string show(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr size_t kMax = 200;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

bool is_auto(const Json& value) { return value.is_string() && value.get_ref<const std::string&>() == "auto"; }

void fail(const std::string& source, const std::string& message) {
  throw Error(source + ": " + message);
}

Json parse_json_text(const std::string& text, const std::string& source) {
  std::vector<ParseFrame> frames;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
        check_json_depth(depth, source);
        frames.push_back(ParseFrame{true, {}, {}, 0});
        break;
      case Json::parse_event_t::array_start:
        check_json_depth(depth, source);
        frames.push_back(ParseFrame{false, {}, {}, 0});
        break;
      case Json::parse_event_t::key: {
        ZERO_INTERNAL_ASSERT(!frames.empty() && frames.back().is_object,
                             "JSON key event outside an object");
        ParseFrame& frame = frames.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!frame.keys.insert(key).second) {
          const std::string container = frames_path(frames, frames.size() - 1);
          fail(source, "duplicate key '" + join_path(container, key) +
                           "': a key may appear only once in an object (DeepSpeed rejects "
                           "duplicate keys too)");
        }
        frame.current_key = key;
        break;
      }
      case Json::parse_event_t::value:
        if (!frames.empty() && !frames.back().is_object) ++frames.back().index;
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        ZERO_INTERNAL_ASSERT(!frames.empty(), "JSON end event without an open container");
        frames.pop_back();
        if (!frames.empty() && !frames.back().is_object) ++frames.back().index;
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, callback, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    const auto [line, column] = line_and_column(text, e.byte);
    std::ostringstream message;
    message << "invalid JSON at line " << line << ", column " << column << " (byte " << e.byte
            << "): " << e.what();
    fail(source, message.str());
  } catch (const Json::exception& e) {
    // Raised while parsing, without a position: a number beyond double's range (1e400).
    fail(source, std::string("invalid JSON: ") + e.what());
  }
}

std::optional<int64_t> json_to_integer(const Json& value) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double v = value.get<double>();
    // [-2^63, 2^63): the doubles that convert to int64 without overflow.
    if (!std::isfinite(v) || v != std::floor(v) || v < -9223372036854775808.0 ||
        v >= 9223372036854775808.0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(v);
  }
  return std::nullopt;
}

ObjectView::ObjectView(const Json& object, std::string path, std::string source)
    : object_(&object), path_(std::move(path)), source_(std::move(source)) {
  if (!object.is_object()) {
    if (path_.empty()) {
      fail(source_, std::string("the config must be a JSON object; got ") + type_name(object) +
                        " " + show(object));
    }
    fail(source_, path_ + " = " + show(object) + " is invalid; expected an object");
  }
}

// Note [Unknown keys]
// ~~~~~~~~~~~~~~~~~~~
// Inside a section an unknown key is an error, with the closest known key or the section it
// belongs to suggested: DeepSpeed's pydantic sections reject them too, and a misspelled key
// would otherwise be a silent no-op. At the top level DeepSpeed ignores unknown keys, and real
// configs carry harmless extras there ("_comment", a launcher's "cuda_visible_devices"), so
// zero ignores an unknown top-level key with a note, unless it looks like a mistake:
//   - it is close to a known key ("zero_optimisation": a typo);
//   - it is a key of a section, put at the top level ("stage", "loss_scale");
//   - it is an object holding a known key of the top level or of a section with a value that
//     would act there ("log": {"steps_per_print": 50}, which DeepSpeed ignores whole: the user
//     meant the inner key). A held value that would change nothing (null, false, {}, or a
//     section with "enabled": false, as LLaMA-Factory's "monitor_config": {"csv_monitor":
//     {"enabled": false}}) leaves the key ignored with a note.
// Those stay errors, with the same suggestions.

namespace {

// A value that would change nothing where its key is read: null, false, {}, or an object with
// "enabled": false.
bool inert(const Json& value) {
  if (value.is_null() || (value.is_boolean() && !value.get<bool>())) return true;
  if (!value.is_object()) return false;
  if (value.empty()) return true;
  auto enabled = value.find("enabled");
  return enabled != value.end() && enabled->is_boolean() && !enabled->get<bool>();
}

// Why an unknown key of `view` looks like a mistake (Note [Unknown keys]), as the end of its
// error message; nullopt when it does not.
std::optional<std::string> mistake_hint(const ObjectView& view, const std::string& key,
                                        const std::vector<std::string>& known) {
  const std::string suggestion = closest_match(key, known);
  if (!suggestion.empty()) return "; did you mean '" + view.key_path(suggestion) + "'?";
  const std::optional<std::string> section = section_knowing(key, view.path());
  const std::string here = view.path().empty() ? "the top level" : "'" + view.path() + "'";
  if (section && section->empty()) return "; '" + key + "' is a top-level key, not a key of " + here;
  if (section) {
    return "; did you mean '" + join_path(*section, key) + "'? ('" + key + "' is a key of '" +
           *section + "', not of " + here + ")";
  }
  const Json& value = view.json().at(key);
  if (value.is_object()) {
    for (const auto& inner : value.items()) {
      const std::string& name = inner.key();
      if (inert(inner.value())) continue;
      if (std::find(known.begin(), known.end(), name) != known.end()) {
        return "; it holds '" + name + "', a key of " + here + ", which is read only there: " +
               "did you mean '" + view.key_path(name) + "'?";
      }
      if (const std::optional<std::string> home = section_knowing(name, view.path())) {
        return "; it holds '" + name + "', a key of '" + (home->empty() ? "the top level" : *home) +
               "', which is read only there: did you mean '" + join_path(*home, name) + "'?";
      }
    }
  }
  return std::nullopt;
}

// "; known keys: a, b, c" when there are few enough to list, else "".
std::string known_keys_hint(const std::vector<std::string>& known) {
  if (known.size() > 16) return "";
  std::string hint = "; known keys:";
  for (size_t i = 0; i < known.size(); ++i) hint += (i ? ", " : " ") + known[i];
  return hint;
}

}  // namespace

void ObjectView::check_keys(const std::vector<std::string>& known) const {
  for (const auto& item : object_->items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    fail(source_, "unknown key '" + key_path(key) + "'" +
                      mistake_hint(*this, key, known).value_or(known_keys_hint(known)));
  }
}

void ObjectView::check_keys_ignoring_extras(const std::vector<std::string>& known,
                                            std::vector<std::string>& notes) const {
  for (const auto& item : object_->items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (const std::optional<std::string> hint = mistake_hint(*this, key, known)) {
      fail(source_, "unknown key '" + key_path(key) + "'" + *hint);
    }
    notes.push_back("unknown key '" + key_path(key) +
                    "' ignored: not a DeepSpeed key (DeepSpeed ignores it too)");
  }
}

const Json* ObjectView::raw(const std::string& key) const {
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &*it;
}

const Json* ObjectView::given(const std::string& key) const {
  const Json* value = raw(key);
  return value == nullptr || is_auto(*value) ? nullptr : value;
}

bool ObjectView::get_bool(const std::string& key, bool fallback) const {
  const Json* value = given(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) invalid(key, *value, "true or false");
  return value->get<bool>();
}

std::optional<bool> ObjectView::get_optional_bool(const std::string& key) const {
  const Json* value = given(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_boolean()) invalid(key, *value, "true, false or null");
  return value->get<bool>();
}

double ObjectView::get_number(const std::string& key, double fallback, bool (*ok)(double),
                              const char* expected) const {
  const Json* value = given(key);
  if (value == nullptr) return fallback;
  if (!value->is_number()) invalid(key, *value, expected);
  const double v = value->get<double>();
  if (!std::isfinite(v) || !ok(v)) invalid(key, *value, expected);
  return v;
}

int64_t ObjectView::get_integer(const std::string& key, int64_t fallback, int64_t min,
                                int64_t max, const char* expected) const {
  const Json* value = given(key);
  if (value == nullptr) return fallback;
  const std::optional<int64_t> v = json_to_integer(*value);
  if (!v || *v < min || *v > max) invalid(key, *value, expected);
  return *v;
}

std::optional<int64_t> ObjectView::get_optional_integer(const std::string& key,
                                                        const char* expected) const {
  const Json* value = given(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  const std::optional<int64_t> v = json_to_integer(*value);
  if (!v) invalid(key, *value, expected);
  return v;
}

std::optional<std::string> ObjectView::get_optional_string(const std::string& key,
                                                           const char* expected) const {
  const Json* value = given(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_string()) invalid(key, *value, expected);
  return value->get<std::string>();
}

std::optional<size_t> ObjectView::get_choice(const std::string& key,
                                             const std::vector<std::string>& choices,
                                             const char* expected) const {
  const std::optional<std::string> value = get_optional_string(key, expected);
  if (!value) return std::nullopt;
  const auto it = std::find(choices.begin(), choices.end(), *value);
  if (it == choices.end()) invalid(key, *raw(key), expected);
  return static_cast<size_t>(it - choices.begin());
}

void ObjectView::invalid(const std::string& key, const Json& value,
                         const std::string& expected) const {
  fail(source_, key_path(key) + " = " + show(value) + " is invalid; expected " + expected);
}

void ObjectView::not_supported(const std::string& key, const Json& value,
                               const std::string& allowed) const {
  fail(source_, key_path(key) + " = " + show(value) + " is not supported yet; " + allowed);
}

}  // namespace zero::config_detail
