// HfTokenizer::load (include/zero/hf_tokenizer.h): tokenizer.json (and tokenizer_config.json)
// into HfTokenizer::Impl, refusing by key whatever encode() would not compute as tokenizers does.
// The ids of added tokens, the merges' ranks and the vocabulary checks follow tokenizers' own
// loading (Tokenizer deserialization, AddedVocabulary::add_tokens, BpeBuilder::build).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>

#include "common/bounded_input.h"
#include "data/byte_level.h"
#include "data/hf_tokenizer_impl.h"
#include "zero/error.h"
#include "zero/tokenizer.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// tokenizers' ByteLevel pre-tokenizer pattern (GPT-2's) with use_regex.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// tokenizers' Digits: char::is_numeric (Unicode's N), each digit alone or runs of them.
constexpr const char* kDigitPattern = R"(\p{N})";
constexpr const char* kDigitRunPattern = R"(\p{N}+)";

constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;

// A value as JSON for messages, shortened when long (a regex or a vocabulary can be large).
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 160) {
    text = text.substr(0, 120) + "... (" + std::to_string(text.size()) + " characters)";
  }
  return text;
}

std::string member_key(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "." + name;
}

std::string element_key(const std::string& array, size_t index) {
  return array + "[" + std::to_string(index) + "]";
}

// Typed reads of one JSON file's values whose messages name the file, the key (its path from
// the top, e.g. "pre_tokenizer.pretokenizers[1].behavior"), the value and what is allowed.
class JsonFile {
 public:
  explicit JsonFile(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::concat(where_, ": ", args...));
  }
  [[noreturn]] void refuse(const std::string& key, const json& value,
                           const std::string& supported) const {
    fail(key, " = ", shown(value), " is not supported (supported: ", supported, ")");
  }

  // object[name], or nullptr when absent or null.
  static const json* optional(const json& object, const char* name) {
    const auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(const json& object, const char* name, const std::string& parent) const {
    const auto it = object.find(name);
    if (it == object.end()) fail(member_key(parent, name), " is missing");
    return *it;
  }
  const json& object(const json& value, const std::string& key) const {
    if (!value.is_object()) fail(key, " = ", shown(value), " must be a JSON object");
    return value;
  }
  const json& array(const json& value, const std::string& key) const {
    if (!value.is_array()) fail(key, " = ", shown(value), " must be a JSON array");
    return value;
  }
  bool flag(const json& object, const char* name, const std::string& parent) const {
    const json& value = required(object, name, parent);
    if (!value.is_boolean()) {
      fail(member_key(parent, name), " = ", shown(value), " must be true or false");
    }
    return value.get<bool>();
  }
  const std::string& text(const json& value, const std::string& key) const {
    if (!value.is_string()) fail(key, " = ", shown(value), " must be a string");
    return value.get_ref<const std::string&>();
  }
  // The object's "type", a string.
  const std::string& type(const json& value, const std::string& key) const {
    return text(required(object(value, key), "type", key), member_key(key, "type"));
  }
  // A flag that must be `wanted` when present and not null.
  void expect_flag(const json& object, const char* name, const std::string& parent,
                   bool wanted) const {
    const json* value = optional(object, name);
    if (value != nullptr && *value != json(wanted)) {
      refuse(member_key(parent, name), *value, wanted ? "true" : "false");
    }
  }

 private:
  std::string where_;
};

// tokenizer.json's model.vocab: token string -> id, viewing the JSON's keys.
using Vocab = std::unordered_map<std::string_view, int32_t>;

struct PreTokenizerStep {
  std::string key;      // where in tokenizer.json
  std::string pattern;  // empty: ByteLevel without its regex
  bool digits = false;
  bool byte_level = false;
};

void read_normalizer(const JsonFile& file, const json& normalizer, const std::string& key,
                     HfTokenizer::Impl& impl) {
  const std::string& type = file.type(normalizer, key);
  if (type == "NFC") {
    impl.nfc = true;
  } else if (type == "Sequence") {
    const json& steps = file.array(file.required(normalizer, "normalizers", key),
                                   member_key(key, "normalizers"));
    for (size_t i = 0; i < steps.size(); ++i) {
      read_normalizer(file, steps[i], element_key(member_key(key, "normalizers"), i), impl);
    }
  } else {
    file.refuse(member_key(key, "type"), type,
                "\"NFC\" (for text below U+0300), a \"Sequence\" of it, or null");
  }
}

void read_pre_tokenizer(const JsonFile& file, const json& pre_tokenizer, const std::string& key,
                        std::vector<PreTokenizerStep>& steps) {
  const std::string& type = file.type(pre_tokenizer, key);
  if (type == "Sequence") {
    const std::string list = member_key(key, "pretokenizers");
    const json& members = file.array(file.required(pre_tokenizer, "pretokenizers", key), list);
    for (size_t i = 0; i < members.size(); ++i) {
      read_pre_tokenizer(file, members[i], element_key(list, i), steps);
    }
  } else if (type == "ByteLevel") {
    if (file.flag(pre_tokenizer, "add_prefix_space", key)) {
      file.refuse(member_key(key, "add_prefix_space"), true, "false");
    }
    const bool use_regex = JsonFile::optional(pre_tokenizer, "use_regex") == nullptr ||
                           file.flag(pre_tokenizer, "use_regex", key);
    steps.push_back({key, use_regex ? kByteLevelPattern : "", false, true});
  } else if (type == "Split") {
    const std::string pattern_key = member_key(key, "pattern");
    const json& pattern = file.object(file.required(pre_tokenizer, "pattern", key), pattern_key);
    const json* regex = JsonFile::optional(pattern, "Regex");
    if (regex == nullptr || pattern.size() != 1) {
      file.refuse(pattern_key, pattern, "{\"Regex\": PATTERN}");
    }
    const std::string& behavior = file.text(file.required(pre_tokenizer, "behavior", key),
                                            member_key(key, "behavior"));
    if (behavior != "Isolated") file.refuse(member_key(key, "behavior"), behavior, "\"Isolated\"");
    if (file.flag(pre_tokenizer, "invert", key)) {
      file.refuse(member_key(key, "invert"), true, "false");
    }
    steps.push_back({member_key(pattern_key, "Regex"),
                     file.text(*regex, member_key(pattern_key, "Regex")), false, false});
  } else if (type == "Digits") {
    const bool individual = file.flag(pre_tokenizer, "individual_digits", key);
    steps.push_back({key, individual ? kDigitPattern : kDigitRunPattern, true, false});
  } else {
    file.refuse(member_key(key, "type"), type,
                "\"ByteLevel\", or a \"Sequence\" of \"Split\" and \"Digits\" steps ending "
                "with \"ByteLevel\"");
  }
}

// The pre-tokenizer's regexes into `impl`, checked: one ByteLevel, last (tokenizers maps the
// text to the byte-level alphabet there: a step after it would split that alphabet's text).
void build_pre_tokenizer(const JsonFile& file, const json& root, HfTokenizer::Impl& impl) {
  const json* pre_tokenizer = JsonFile::optional(root, "pre_tokenizer");
  if (pre_tokenizer == nullptr) {
    file.refuse("pre_tokenizer", nullptr, "\"ByteLevel\", alone or last in a \"Sequence\"");
  }
  std::vector<PreTokenizerStep> steps;
  read_pre_tokenizer(file, *pre_tokenizer, "pre_tokenizer", steps);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].byte_level != (i + 1 == steps.size())) {
      file.fail("pre_tokenizer: ByteLevel must be the last step, and only there (found ",
                steps[i].byte_level ? "it at " : "no ByteLevel at the end but ", steps[i].key,
                "); supported: \"ByteLevel\", alone or last in a \"Sequence\"");
    }
  }
  if (steps.empty()) file.refuse("pre_tokenizer", *pre_tokenizer, "\"ByteLevel\", alone or last");
  for (const PreTokenizerStep& step : steps) {
    if (step.pattern.empty()) continue;
    PreTokenizationRegex regex(with_oniguruma_classes(step.pattern),
                               file.where() + ": " + step.key);
    if (regex.may_match_empty()) {
      file.fail(step.key, " = ", shown(step.pattern), " can match the empty string (not "
                "supported: a Split regex must match at least one character)");
    }
    impl.pretokenizers.push_back(std::move(regex));
  }
  for (const PreTokenizerStep& step : steps) {
    if (step.digits) continue;
    impl.space_cuts = starts_piece_at_space_between_ascii(step.pattern);
    break;
  }
}

// model.vocab and model.merges, and the model's options.
void read_model(const JsonFile& file, const json& model, Vocab& vocab, HfTokenizer::Impl& impl,
                std::vector<std::pair<std::string_view, int32_t>>& tokens) {
  const std::string& type = file.type(model, "model");
  if (type != "BPE") file.refuse("model.type", type, "\"BPE\"");
  if (const json* dropout = JsonFile::optional(model, "dropout");
      dropout != nullptr && *dropout != json(0) && *dropout != json(0.0)) {
    file.refuse("model.dropout", *dropout, "null");
  }
  file.expect_flag(model, "byte_fallback", "model", false);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* value = JsonFile::optional(model, affix);
    if (value != nullptr && *value != json("")) {
      file.refuse(member_key("model", affix), *value, "null");
    }
  }
  impl.ignore_merges = JsonFile::optional(model, "ignore_merges") != nullptr &&
                       file.flag(model, "ignore_merges", "model");
  impl.fuse_unk = JsonFile::optional(model, "fuse_unk") != nullptr &&
                  file.flag(model, "fuse_unk", "model");
  if (const json* unk = JsonFile::optional(model, "unk_token")) {
    impl.unk_token = file.text(*unk, "model.unk_token");
  }

  const json& entries = file.object(file.required(model, "vocab", "model"), "model.vocab");
  vocab.reserve(entries.size());
  std::unordered_map<int32_t, std::string_view> token_of;
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    const std::string& token = it.key();
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxId) {
      file.fail("model.vocab[", shown(token), "] = ", shown(*it), " must be an integer id in [0, ",
                kMaxId, "]");
    }
    const auto id = static_cast<int32_t>(it->get<int64_t>());
    if (const auto [other, fresh] = token_of.emplace(id, token); !fresh) {
      file.fail("model.vocab[", shown(token), "]: id ", id, " is also the id of ",
                shown(std::string(other->second)), " (each id must name one token)");
    }
    vocab.emplace(token, id);
    tokens.emplace_back(token, id);
  }
  if (impl.unk_token) {
    const auto unk = vocab.find(*impl.unk_token);
    if (unk != vocab.end()) impl.unk_id = unk->second;
  }
  const auto& byte_to_unicode = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    const uint32_t cp = byte_to_unicode[static_cast<size_t>(b)];
    if (cp < 0x80) {
      symbol.push_back(static_cast<char>(cp));
    } else {  // the alphabet is below U+0800: two bytes
      symbol.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      symbol.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    const auto found = vocab.find(symbol);
    impl.byte_ids[static_cast<size_t>(b)] = found == vocab.end() ? -1 : found->second;
  }

  // merges: "A B" strings (a "#version" line skipped, as tokenizers does) or ["A", "B"] pairs;
  // a merge's rank is its index. A and B and their concatenation must be tokens.
  const json& merges = file.array(file.required(model, "merges", "model"), "model.merges");
  impl.merges = MergeTable(merges.size());
  uint32_t rank = 0;
  std::string merged;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& merge = merges[i];
    std::string_view left, right;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space != std::string::npos && line.find(' ', space + 1) == std::string::npos) {
        left = std::string_view(line).substr(0, space);
        right = std::string_view(line).substr(space + 1);
      }
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get_ref<const std::string&>();
      right = merge[1].get_ref<const std::string&>();
    }
    if (left.empty() || right.empty()) {
      file.fail(element_key("model.merges", i), " = ", shown(merge), " is malformed (expected "
                "\"A B\": two tokens and one space, or [\"A\", \"B\"])");
    }
    merged.assign(left);
    merged.append(right);
    int32_t ids[3] = {};
    const std::string_view parts[3] = {left, right, merged};
    for (int k = 0; k < 3; ++k) {
      const auto found = vocab.find(parts[k]);
      if (found == vocab.end()) {
        file.fail(element_key("model.merges", i), " = ", shown(merge), ": ",
                  shown(std::string(parts[k])),
                  k == 2 ? " (the merged token)" : "", " is not in model.vocab");
      }
      ids[k] = found->second;
    }
    impl.merges.set(ids[0], ids[1], {rank++, ids[2]});
  }
}

// The added tokens, with the ids tokenizers gives them on load (AddedVocabulary::add_tokens):
// an added token already seen keeps its id, else a token of the model vocab its id there, else
// the next id from the vocab's size up; the "id" in the file is not used. Returns content -> id.
std::unordered_map<std::string, int32_t> read_added_tokens(const JsonFile& file, const json& root,
                                                           const Vocab& vocab,
                                                           HfTokenizer::Impl& impl) {
  struct Added {
    std::string content;
    bool normalized;
    bool special;
    bool operator==(const Added& other) const {
      return content == other.content && normalized == other.normalized &&
             special == other.special;
    }
  };
  std::unordered_map<std::string, int32_t> ids;
  std::map<int32_t, Added> by_id;
  const json* list = JsonFile::optional(root, "added_tokens");
  if (list == nullptr) return ids;
  file.array(*list, "added_tokens");
  int64_t next_id = static_cast<int64_t>(vocab.size());
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string key = element_key("added_tokens", i);
    const json& entry = file.object((*list)[i], key);
    const json& id = file.required(entry, "id", key);
    if (!id.is_number_integer()) {
      file.fail(member_key(key, "id"), " = ", shown(id), " must be an integer");
    }
    for (const char* strip : {"single_word", "lstrip", "rstrip"}) {
      if (file.flag(entry, strip, key)) file.refuse(member_key(key, strip), true, "false");
    }
    Added token{file.text(file.required(entry, "content", key), member_key(key, "content")),
                file.flag(entry, "normalized", key), file.flag(entry, "special", key)};
    if (token.content.empty()) continue;  // tokenizers ignores it
    const auto known = ids.find(token.content);
    if (known != ids.end() && by_id[known->second] == token) continue;
    int64_t assigned = 0;
    if (known != ids.end()) {
      assigned = known->second;
    } else if (const auto in_vocab = vocab.find(token.content); in_vocab != vocab.end()) {
      assigned = in_vocab->second;
    } else {
      assigned = next_id++;
    }
    if (assigned > kMaxId) file.fail(key, ": id ", assigned, " is beyond ", kMaxId);
    if (impl.nfc && token.normalized) {
      for (size_t at = 0; at < token.content.size(); ++at) {
        if (static_cast<unsigned char>(token.content[at]) >= 0xCC) {
          file.fail(member_key(key, "content"), " = ", shown(token.content), ": NFC "
                    "normalization of a normalized added token with code points from U+0300 "
                    "on is not implemented");
        }
      }
    }
    ids[token.content] = static_cast<int32_t>(assigned);
    by_id[static_cast<int32_t>(assigned)] = std::move(token);
  }
  for (const auto& [id, token] : by_id) {
    (token.normalized ? impl.normalized_added : impl.raw_added).add(token.content, id);
  }
  impl.raw_added.finish();
  impl.normalized_added.finish();
  return ids;
}

// id -> bytes as tokenizers' ByteLevel decoder makes them: a token whose characters are all in
// the byte-level alphabet stands for their bytes, any other for its own UTF-8.
std::string decoded_bytes(std::string_view token) {
  std::string bytes;
  if (!byte_level::to_bytes(token, &bytes)) bytes.assign(token);
  return bytes;
}

// tokenizer_config.json's bos_token and eos_token as ids (tokenizers' token_to_id: an added
// token, else a token of the model vocab).
void read_special_ids(const std::string& path, const Vocab& vocab,
                      const std::unordered_map<std::string, int32_t>& added_ids,
                      HfTokenizer::Impl& impl) {
  const JsonFile file("tokenizer config '" + path + "'");
  const json config = parse_bounded_json(
      read_regular_file(path, "tokenizer config", kMaxConfigBytes), file.where());
  file.object(config, "the top level");
  for (const auto& [name, id] : {std::pair{"bos_token", &impl.bos_id},
                                 std::pair{"eos_token", &impl.eos_id}}) {
    const json* value = JsonFile::optional(config, name);
    if (value == nullptr) continue;
    const json& content = value->is_object() ? file.required(*value, "content", name) : *value;
    if (!content.is_string()) {
      file.fail(name, " = ", shown(*value), " must be a token string or {\"content\": TOKEN}");
    }
    const std::string& token = content.get_ref<const std::string&>();
    if (const auto added = added_ids.find(token); added != added_ids.end()) {
      *id = added->second;
    } else if (const auto model = vocab.find(token); model != vocab.end()) {
      *id = model->second;
    } else {
      file.fail(name, " = ", shown(*value), " is no token of '", impl.path, "'");
    }
  }
}

}  // namespace

bool HfTokenizer::present(const std::string& dir) {
  std::error_code error;
  return fs::is_regular_file(fs::path(dir) / "tokenizer.json", error);
}

HfTokenizer HfTokenizer::load(const std::string& path) {
  std::error_code error;
  const bool directory = fs::is_directory(path, error);
  auto impl = std::make_unique<Impl>();
  impl->path = directory ? (fs::path(path) / "tokenizer.json").string() : path;
  const JsonFile file("tokenizer '" + impl->path + "'");
  const json root = parse_bounded_json(
      read_regular_file(impl->path, "tokenizer", kMaxTokenizerBytes), file.where());
  file.object(root, "the top level");
  if (const json* version = JsonFile::optional(root, "version"); version && *version != "1.0") {
    file.refuse("version", *version, "\"1.0\"");
  }
  for (const char* option : {"truncation", "padding"}) {
    if (const json* value = JsonFile::optional(root, option)) {
      file.refuse(option, *value, "null (encode() neither truncates nor pads)");
    }
  }

  Vocab vocab;
  std::vector<std::pair<std::string_view, int32_t>> tokens;
  read_model(file, file.required(root, "model", ""), vocab, *impl, tokens);
  if (const json* normalizer = JsonFile::optional(root, "normalizer")) {
    read_normalizer(file, *normalizer, "normalizer", *impl);
  }
  build_pre_tokenizer(file, root, *impl);
  if (const json* decoder = JsonFile::optional(root, "decoder")) {
    const std::string& type = file.type(*decoder, "decoder");
    if (type != "ByteLevel") file.refuse("decoder.type", type, "\"ByteLevel\" or null");
  }
  const std::unordered_map<std::string, int32_t> added_ids =
      read_added_tokens(file, root, vocab, *impl);

  // Decoding: the model's tokens, then the added tokens' contents (tokenizers looks an id up
  // among the added tokens first).
  int64_t size = 0;
  for (const auto& [token, id] : tokens) size = std::max<int64_t>(size, int64_t{id} + 1);
  for (const auto& [content, id] : added_ids) size = std::max<int64_t>(size, int64_t{id} + 1);
  impl->token_bytes.assign(static_cast<size_t>(size), std::string());
  impl->is_token.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : tokens) {
    impl->token_bytes[static_cast<size_t>(id)] = decoded_bytes(token);
    impl->is_token[static_cast<size_t>(id)] = true;
  }
  for (const auto& [content, id] : added_ids) {
    impl->token_bytes[static_cast<size_t>(id)] = decoded_bytes(content);
    impl->is_token[static_cast<size_t>(id)] = true;
  }

  // The pieces that encode to one token without merging: with ignore_merges every token of the
  // byte-level alphabet (tokenizers looks the piece up in the vocab first); otherwise those
  // whose bytes the merges make whole. Tokens with a byte that is no token are left to
  // merge_word (it may need unk_token).
  impl->whole_words = TokenTable(tokens.size());
  std::string bytes;
  std::vector<int32_t> ids;
  for (const auto& [token, id] : tokens) {
    if (token.empty() || !byte_level::to_bytes(token, &bytes)) continue;
    if (!impl->ignore_merges) {
      const bool all_tokens = std::all_of(bytes.begin(), bytes.end(), [&](char c) {
        return impl->byte_ids[static_cast<unsigned char>(c)] >= 0;
      });
      if (!all_tokens) continue;
      ids.clear();
      impl->merge_word(bytes, ids);
      if (ids.size() != 1) continue;
    }
    const bool fresh = impl->whole_words.insert(
        bytes, static_cast<uint32_t>(impl->ignore_merges ? id : ids[0]));
    ZERO_INTERNAL_ASSERT(fresh, "two tokens of '", impl->path, "' have the same bytes");
  }

  const fs::path config =
      (directory ? fs::path(path) : fs::path(impl->path).parent_path()) / "tokenizer_config.json";
  if (fs::exists(config, error)) {
    impl->config_path = config.string();
    read_special_ids(impl->config_path, vocab, added_ids, *impl);
  }
  return HfTokenizer(std::move(impl));
}

}  // namespace zero
