// Shared by the libFuzzer targets of tests/fuzz/ (built with ZERO_FUZZ; run by
// scripts/sanitize.sh). The contract every target checks (Note [Bounded input]): whatever the
// bytes, the code under test returns or throws zero::Error with a message. Anything else is a
// bug libFuzzer reports with the input: a crash or sanitizer report, an InternalError (a broken
// invariant), or another exception type escaping (a message without the file or key).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "zero/error.h"

namespace zero::fuzz {

/// A private directory for the files a target writes (the code under test reads paths).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string pattern = std::string(base) + "/zero-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    return std::filesystem::path(pattern);
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.good()) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

/// Runs `body`; a zero::Error is a clean refusal, an InternalError a bug (aborts with it).
template <typename Body>
void expect_clean(Body&& body) {
  try {
    body();
  } catch (const zero::InternalError& e) {
    std::fprintf(stderr, "internal error on a fuzzed input: %s\n", e.what());
    std::abort();
  } catch (const zero::Error&) {
  }
}

}  // namespace zero::fuzz
