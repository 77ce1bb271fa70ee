// Every environment variable zero reads is declared here and read in env.cpp, nowhere else.
// Values are parsed strictly: a malformed value is a zero::Error naming the variable.
#pragma once

#include <cstdint>

namespace zero::env {

/// ZERO_RING_SEGMENT_BYTES: largest message of the MPI ring collectives (default 4 MiB; buckets
/// of at most 4 MiB stay in cache, see docs/benchmarks.md).
int64_t ring_segment_bytes();

}  // namespace zero::env
