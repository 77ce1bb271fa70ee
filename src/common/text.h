// Small text helpers shared by the config reader and the optimizers.
#pragma once

#include <cctype>
#include <string>

namespace zero {

/// `text` with ASCII letters in lower case (config names are case-insensitive ASCII).
inline std::string lower_ascii(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace zero
