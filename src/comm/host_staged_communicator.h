// The host-staged communicator (zero/comm_mpi.h, make_host_staged_communicator): collectives
// on tensors of any device run on a host communicator through host copies. Internal options
// for tests.
#pragma once

#include <memory>

#include "zero/comm.h"

namespace zero::comm {

struct HostStagedOptions {
  /// Stage CPU tensors too (copied into fresh host buffers and back), as device tensors are:
  /// how the CPU-only test suite runs the staging path. Off: CPU tensors go straight through.
  bool stage_cpu_tensors = false;
};

std::shared_ptr<Communicator> make_host_staged_communicator(std::shared_ptr<Communicator> host,
                                                            const HostStagedOptions& options);

}  // namespace zero::comm
