// libFuzzer target: a checkpoint's metadata.json as the checkpoint readers see it
// (zero::inspect_checkpoint with --verify, zero::read_checkpoint_weights): format, version,
// checksum, ranges, parameters, file entries, pieces and their coverage. See fuzz_util.h.
//
// Most mutations break the metadata's own CRC-32, which is checked first; so when the input's
// first byte is even and it parses as a JSON object, the harness re-signs it (the CRC-32 of the
// compact dump without "crc32", as docs/checkpoints.md defines it), and the checks behind the
// checksum see the fuzzer's edits too.
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "zero/checkpoint.h"

namespace {

// The input re-signed, or unchanged when it is not a JSON object (or nests deeper than the
// readers accept, which they refuse before any checksum).
std::string resigned(const std::string& text) {
  struct TooDeep {};
  nlohmann::json metadata;
  try {
    metadata = nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > 64) throw TooDeep{};
      return true;
    });
  } catch (...) {
    return text;
  }
  if (!metadata.is_object()) return text;
  metadata.erase("crc32");
  const std::string compact = metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  metadata["crc32"] = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(compact.data()),
            static_cast<uInt>(compact.size())));
  return metadata.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path& root = zero::fuzz::scratch_dir();
  static const bool prepared = [&] {
    fs::create_directories(root / "t");
    zero::fuzz::write_file(root / "latest", "t\n", 2);
    return true;
  }();
  (void)prepared;
  std::string text(reinterpret_cast<const char*>(data), size);
  if (size > 0 && data[0] % 2 == 0) text = resigned(text);
  zero::fuzz::write_file(root / "t" / "metadata.json", text.data(), text.size());
  zero::fuzz::expect_clean([&] { (void)zero::inspect_checkpoint(root.string(), "", /*verify=*/true); });
  zero::fuzz::expect_clean([&] { (void)zero::read_checkpoint_weights(root.string(), "t"); });
  return 0;
}
