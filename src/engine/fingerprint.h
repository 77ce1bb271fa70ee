// Start-up agreement check: every rank describes what it is about to train (config, world
// size, ordered parameter names, shapes and dtypes) and all ranks compare descriptions.
#pragma once

#include <string>
#include <vector>

#include "zero/comm.h"

namespace zero {

/// Collective. Compares `description` (lines of text) across ranks; on any difference throws
/// zero::CollectiveError on every rank naming the first rank that differs from rank 0 (its
/// origin_rank()) and the first differing line of each.
void check_ranks_agree_on(Communicator& comm, const std::string& description);

}  // namespace zero
