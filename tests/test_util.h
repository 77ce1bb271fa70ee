// Shared helpers for zero's tests.
#pragma once

#include <memory>

#include "zero/comm.h"

namespace zero::test {

/// The MPI_COMM_WORLD communicator, created on first use and shared by every test of the
/// process (MPI can be initialized once per process).
std::shared_ptr<Communicator> world();

}  // namespace zero::test
