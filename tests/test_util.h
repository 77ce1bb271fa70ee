// Shared helpers for zero's tests.
#pragma once

#include <ATen/ATen.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "zero/comm.h"

/// Skips a test that needs another number of ranks; the same binary's ctest entry at that
/// count runs it. The skip report checks that it did (Note [Skipped tests are counted] in
/// tests/test_main.cpp): a skip with this prefix is not an untested case.
#define ZERO_SKIP_AT_THIS_RANK_COUNT(reason) GTEST_SKIP() << "[rank count] " << reason

namespace zero::test {

/// The MPI_COMM_WORLD communicator, created on first use and shared by every test of the
/// process (MPI can be initialized once per process).
std::shared_ptr<Communicator> world();

/// Collective: an empty directory under the system temp dir, the same path on every rank
/// ("zero-<name>-np<world>"; rank 0 empties it, then a barrier).
std::string shared_temp_dir(const std::string& name);

/// The bytes of the file `path` ("" when it cannot be read: the comparison that follows fails).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Whether this libtorch has fp16 CPU kernels for matmul and LayerNorm (libtorch >= 2.x does;
/// Debian's 1.13 does not). fp16 tests skip, saying so, where it has not.
inline bool cpu_supports_half() {
  try {
    const at::Tensor x = at::ones({2, 2}, at::kHalf);
    (void)at::layer_norm(at::mm(x, x), {2});
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace zero::test
