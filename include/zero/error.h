// zero::Error and the two checking macros every part of the library uses.
//
// ZERO_CHECK(cond, ...)       user errors: bad config, bad inputs, mismatched ranks.
//                             Throws zero::Error whose message is the streamed arguments.
//                             Messages name the key or file, the value received and what
//                             is allowed.
// ZERO_INTERNAL_ASSERT(cond, msg...)  invariants of the library itself; a failure is a bug in
//                             zero, never in the caller. Throws zero::InternalError with
//                             file:line so it can be reported.
// Both take a message (at least one argument). Neither macro is compiled out: both guard against silent corruption of training state.
#pragma once

#include "zero/export.h"

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace zero {

/// A user-facing error: configuration, inputs, or ranks that disagree.
class ZERO_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A broken internal invariant (a bug in zero). Derives from Error so callers that catch
/// zero::Error at a process boundary still report it cleanly.
class ZERO_API InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

/// An error every rank of a communicator throws together, after the ranks agreed on it: a
/// collective operation (save_checkpoint, load_checkpoint) failed on at least one rank. Every
/// rank is at the same point, so a program can end normally on each of them instead of aborting
/// the job. origin_rank() is the lowest rank where it failed, the same on every rank, so the
/// message can be printed once; on that rank what() is the failure itself, on the others
/// "OPERATION failed on rank R: ..." .
class ZERO_API CollectiveError : public Error {
 public:
  CollectiveError(const std::string& message, int origin_rank)
      : Error(message), origin_rank_(origin_rank) {}
  int origin_rank() const { return origin_rank_; }

 private:
  int origin_rank_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] ZERO_API void throw_internal(const char* file, int line, const char* condition,
                                 const std::string& message);
}  // namespace detail

/// Runs fallible work and returns its error's message instead of throwing it: the first half
/// of Note [Agreeing on a failure] (zero/comm.h), whose second half is agree_on_failure (both
/// at once: run_and_agree there).
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

#define ZERO_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) {                                              \
      throw ::zero::Error(::zero::detail::concat(__VA_ARGS__)); \
    }                                                           \
  } while (false)

#define ZERO_INTERNAL_ASSERT(cond, ...)                                                      \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ::zero::detail::throw_internal(__FILE__, __LINE__, #cond,                              \
                                     ::zero::detail::concat(__VA_ARGS__));                   \
    }                                                                                        \
  } while (false)
