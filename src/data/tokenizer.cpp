// GPT2Decoder (include/zero/tokenizer.h).
#include "zero/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <unordered_map>

#include "common/bounded_input.h"
#include "zero/error.h"

namespace zero {
namespace {

std::vector<uint32_t> build_byte_to_unicode() {
  std::vector<uint32_t> table(256, 0);
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    table[b] = printable[b] ? static_cast<uint32_t>(b) : next++;
  }
  return table;
}

// Decodes one UTF-8 code point at s[i], advancing i; false on a malformed sequence.
bool next_code_point(const std::string& s, size_t& i, uint32_t& cp) {
  const auto c0 = static_cast<unsigned char>(s[i]);
  int extra;
  if (c0 < 0x80) {
    cp = c0;
    extra = 0;
  } else if ((c0 & 0xE0) == 0xC0) {
    cp = c0 & 0x1F;
    extra = 1;
  } else if ((c0 & 0xF0) == 0xE0) {
    cp = c0 & 0x0F;
    extra = 2;
  } else if ((c0 & 0xF8) == 0xF0) {
    cp = c0 & 0x07;
    extra = 3;
  } else {
    return false;
  }
  if (i + extra >= s.size()) return false;  // truncated sequence
  for (int k = 1; k <= extra; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (c & 0x3F);
  }
  i += 1 + extra;
  return true;
}

std::string escaped(const std::string& s) {
  // The JSON dump of a string, quoted: shows control characters readably in messages.
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
  static const std::vector<uint32_t> table = build_byte_to_unicode();
  return table;
}

GPT2Decoder GPT2Decoder::load(const std::string& path) {
  const nlohmann::json json = parse_bounded_json(
      read_regular_file(path, "GPT-2 encoder", kMaxEncoderBytes), "GPT-2 encoder '" + path + "'");
  ZERO_CHECK(json.is_object(), "GPT-2 encoder '", path,
             "': expected a JSON object mapping token strings to ids, found a JSON ",
             json.type_name());

  std::unordered_map<uint32_t, char> unicode_to_byte;
  const auto& table = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) unicode_to_byte[table[b]] = static_cast<char>(b);

  const auto n = static_cast<int64_t>(json.size());
  GPT2Decoder decoder;
  decoder.path_ = path;
  decoder.bytes_.assign(static_cast<size_t>(n), std::string());
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (const auto& [token, value] : json.items()) {
    ZERO_CHECK(value.is_number_integer(), "GPT-2 encoder '", path, "': the id of token ",
               escaped(token), " must be an integer, found ", value.dump());
    const auto id = value.get<int64_t>();
    ZERO_CHECK(id >= 0 && id < n, "GPT-2 encoder '", path, "': id ", id, " of token ",
               escaped(token), " is outside [0, ", n,
               ") (ids must be 0..n-1 for the file's n = ", n, " tokens)");
    ZERO_CHECK(!seen[static_cast<size_t>(id)], "GPT-2 encoder '", path, "': id ", id,
               " is used twice (token ", escaped(token), " and token ",
               escaped(decoder.bytes_[static_cast<size_t>(id)]), ")");
    std::string bytes;
    size_t i = 0;
    while (i < token.size()) {
      uint32_t cp = 0;
      ZERO_CHECK(next_code_point(token, i, cp), "GPT-2 encoder '", path, "': token with id ",
                 id, " is not valid UTF-8");
      const auto it = unicode_to_byte.find(cp);
      ZERO_CHECK(it != unicode_to_byte.end(), "GPT-2 encoder '", path, "': token ",
                 escaped(token), " (id ", id, ") contains U+", std::hex, std::uppercase, cp,
                 std::dec, ", which is not in GPT-2's byte-to-unicode table");
      bytes.push_back(it->second);
    }
    seen[static_cast<size_t>(id)] = true;
    decoder.bytes_[static_cast<size_t>(id)] = std::move(bytes);
  }
  // n distinct ids all in [0, n) cover 0..n-1.
  return decoder;
}

const std::string& GPT2Decoder::token_bytes(int64_t id) const {
  ZERO_CHECK(id >= 0 && id < vocab_size(), "GPT-2 decoder ('", path_, "'): token id ", id,
             " is out of range for vocab size ", vocab_size(), " (ids must be in [0, ",
             vocab_size(), "))");
  return bytes_[static_cast<size_t>(id)];
}

std::string GPT2Decoder::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (const int64_t id : ids) out += token_bytes(id);
  return out;
}

std::string GPT2Decoder::decode(const uint16_t* ids, int64_t count) const {
  std::string out;
  for (int64_t i = 0; i < count; ++i) out += token_bytes(ids[i]);
  return out;
}

}  // namespace zero
