// The whole model's weights from a partitioned engine, one unit at a time.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "zero/engine.h"

namespace zero {

/// Collective. Calls visit(name, value) on rank `root` for every trainable parameter (shared
/// ones once, in partition order) with its whole value in the parameter dtype, copied to the
/// CPU. At stage 3 one unit is gathered at a time, so memory stays bounded by one unit plus
/// what `visit` keeps. Other ranks take part in the gathers but are not called.
ZERO_API void visit_full_parameters(Engine& engine,
                           const std::function<void(const std::string&, const at::Tensor&)>& visit,
                           int root = 0);

/// Collective. The whole trainable parameters on rank `root` (param dtype, CPU), in partition
/// order; empty on other ranks. This holds the entire model on `root`.
ZERO_API std::vector<std::pair<std::string, at::Tensor>> full_state_dict(Engine& engine, int root = 0);

}  // namespace zero
