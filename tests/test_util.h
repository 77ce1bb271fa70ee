// Shared helpers for zero's tests.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "zero/comm.h"

namespace zero::test {

/// The MPI_COMM_WORLD communicator, created on first use and shared by every test of the
/// process (MPI can be initialized once per process).
std::shared_ptr<Communicator> world();

/// Collective: an empty directory under the system temp dir, the same path on every rank
/// ("zero-<name>-np<world>"; rank 0 empties it, then a barrier).
std::string shared_temp_dir(const std::string& name);

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
