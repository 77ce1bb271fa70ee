#include "common/host.h"

#include <unistd.h>

namespace zero {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace zero
