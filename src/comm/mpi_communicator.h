// Internal entry point of the MPI communicator with its tuning options spelled out, for tests
// and benchmarks that need small segments or a small message limit to reach code paths that
// production sizes reach only with multi-GiB buffers. zero::make_mpi_communicator() is this
// with MpiOptions::from_env().
#pragma once

#include <cstdint>
#include <memory>

#include "zero/comm.h"
#include "zero/comm_mpi.h"

namespace zero::comm {

struct MpiOptions {
  /// Largest message of the ring reduce-scatter (bytes, rounded down to whole elements, at
  /// least one element). Also bounds the persistent receive scratch buffer.
  int64_t ring_segment_bytes = int64_t{256} << 10;
  /// Largest byte count (and displacement) handed to one MPI call: all_gather uses
  /// MPI_Allgatherv while the whole output fits, a segmented ring of MPI_Sendrecv beyond it;
  /// broadcast is split into MPI_Bcast calls of at most this size. At most INT_MAX.
  int64_t max_message_bytes = int64_t{1} << 30;
  /// all_gather (and all_reduce's gather phase) with the Sendrecv ring at every size instead
  /// of MPI_Allgatherv; for benchmarks and tests.
  bool ring_all_gather = false;
  /// Deadline of one collective in seconds, 0 for none (Note [Collective timeout],
  /// src/comm/collective_watchdog.h).
  int64_t collective_timeout_seconds = 600;
  /// > 0: the ranks act as nodes of this many consecutive ranks (ZERO_RANKS_PER_NODE; Note
  /// [Topology] in zero/comm.h); 0: the machines they run on.
  int64_t ranks_per_node = 0;
  /// Hierarchical collectives where the topology allows them (ZERO_HIERARCHICAL_COLLECTIVES;
  /// Note [Hierarchical collectives] in mpi_communicator.cpp).
  bool hierarchical = true;
  /// The ranks compare each collective's signature before it runs (ZERO_COLLECTIVE_CHECKS;
  /// Note [Collective signatures] in collective_signature.h).
  bool check_signatures = true;

  /// ring_segment_bytes, collective_timeout_seconds, ranks_per_node, hierarchical and
  /// check_signatures from ZERO_RING_SEGMENT_BYTES, ZERO_COLLECTIVE_TIMEOUT_S,
  /// ZERO_RANKS_PER_NODE, ZERO_HIERARCHICAL_COLLECTIVES and ZERO_COLLECTIVE_CHECKS (see
  /// src/common/env.h).
  static MpiOptions from_env();
};

std::shared_ptr<Communicator> make_mpi_communicator(const MpiOptions& options);

}  // namespace zero::comm
