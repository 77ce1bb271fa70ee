// The name of the machine a rank runs on: what tells ranks of one host from another's (the
// start-up memory check, swap-directory owners).
#pragma once

#include <string>

namespace zero {

/// gethostname(), or "unknown-host" when it fails.
std::string host_name();

}  // namespace zero
