// GPT2Decoder (include/zero/tokenizer.h) and the byte-level alphabet (src/data/byte_level.h).
#include "zero/tokenizer.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstring>

#include "common/bounded_input.h"
#include "data/byte_level.h"
#include "data/utf8.h"
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

std::string escaped(const std::string& s) {
  // The JSON dump of a string, quoted: shows control characters readably in messages.
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
  static const std::vector<uint32_t> table = build_byte_to_unicode();
  return table;
}

namespace byte_level {
namespace {

// The alphabet's code points are all below U+0144 (the 188 printable bytes stand for
// themselves, the other 68 for U+0100..U+0143).
constexpr uint32_t kAlphabetEnd = 0x144;

std::array<int16_t, kAlphabetEnd> build_byte_of() {
  std::array<int16_t, kAlphabetEnd> table;
  table.fill(-1);
  const auto& unicode = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) table[unicode[b]] = static_cast<int16_t>(b);
  return table;
}

}  // namespace

int byte_of(uint32_t cp) {
  static const std::array<int16_t, kAlphabetEnd> table = build_byte_of();
  return cp < kAlphabetEnd ? table[cp] : -1;
}

bool to_bytes(std::string_view symbols, std::string* bytes, uint32_t* outside) {
  bytes->clear();
  size_t at = 0;
  while (at < symbols.size()) {
    const size_t length = utf8::sequence_length(symbols, at);
    const uint32_t cp = length > 0 ? utf8::code_point(symbols, at, length) : kNotUtf8;
    const int byte = byte_of(cp);
    if (byte < 0) {
      if (outside != nullptr) *outside = cp;
      return false;
    }
    bytes->push_back(static_cast<char>(byte));
    at += length;
  }
  return true;
}

}  // namespace byte_level

GPT2Decoder GPT2Decoder::load(const std::string& path) {
  const nlohmann::json json = parse_bounded_json(
      read_regular_file(path, "GPT-2 encoder", kMaxEncoderBytes), "GPT-2 encoder '" + path + "'");
  ZERO_CHECK(json.is_object(), "GPT-2 encoder '", path,
             "': expected a JSON object mapping token strings to ids, found a JSON ",
             json.type_name());

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
    uint32_t outside = 0;
    if (!byte_level::to_bytes(token, &bytes, &outside)) {
      ZERO_CHECK(outside != byte_level::kNotUtf8, "GPT-2 encoder '", path, "': token with id ",
                 id, " is not valid UTF-8");
      ZERO_CHECK(false, "GPT-2 encoder '", path, "': token ", escaped(token), " (id ", id,
                 ") contains U+", std::hex, std::uppercase, outside, std::dec,
                 ", which is not in GPT-2's byte-to-unicode table");
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

}  // namespace zero
