// Test helpers that damage or edit a saved checkpoint the way a careless user or a forger
// would, re-signing the metadata where the test is about the checks behind its checksum.
#pragma once

#include <zlib.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

namespace zero::test {

inline std::string file_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline uint32_t crc32_of(const std::string& bytes) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(bytes.data()),
                                     static_cast<uInt>(bytes.size())));
}

/// Rewrites CHECKPOINT/metadata.json through `edit`; with `sign`, recomputes its "crc32" as
/// docs/checkpoints.md defines it (computed here independently of the library): the CRC-32 of
/// the compact JSON without that key.
inline void edit_metadata_json(const std::filesystem::path& checkpoint,
                               const std::function<void(nlohmann::json&)>& edit,
                               bool sign = true) {
  nlohmann::json metadata = nlohmann::json::parse(file_text(checkpoint / "metadata.json"));
  edit(metadata);
  if (sign) {
    metadata.erase("crc32");
    metadata["crc32"] = crc32_of(metadata.dump());
  }
  std::ofstream(checkpoint / "metadata.json") << metadata.dump(1);
}

}  // namespace zero::test
