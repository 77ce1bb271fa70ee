// Runs fallible work and returns its error's message instead of throwing it: the first half
// of Note [Agreeing on a failure] (zero/comm.h), whose second half is agree_on_failure.
#pragma once

#include <exception>
#include <string>

namespace zero {

/// "" when `work` returns; the message of the std::exception it throws otherwise (never
/// empty, so a failure cannot read as success).
template <typename Work>
std::string capture_error(Work&& work) {
  try {
    work();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    return message.empty() ? std::string("an error without a message") : message;
  }
  return {};
}

}  // namespace zero
