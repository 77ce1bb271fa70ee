#include "zero/error.h"

namespace zero::detail {

void throw_internal(const char* file, int line, const char* condition,
                    const std::string& message) {
  std::ostringstream out;
  out << "zero internal error at " << file << ":" << line << ": assertion `" << condition
      << "` failed";
  if (!message.empty()) out << ": " << message;
  out << " (this is a bug in zero; please report it)";
  throw InternalError(out.str());
}

}  // namespace zero::detail
