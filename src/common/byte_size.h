// Byte counts as people read them, for plans and messages: one format for the library.
#pragma once

#include <cstdint>
#include <string>

namespace zero {

/// "2.50 GiB", "12.3 MiB", "640 KiB": the unit that shows the size.
std::string byte_size_text(int64_t bytes);

}  // namespace zero
