// Access to whole parameters outside a unit's forward: what zero::GatheredParameters and the
// consolidated state dict need from an engine. Both engines implement it; at stages 0-2 the
// parameters are always whole and only write-back communicates.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace zero {

class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;
  /// Collective: makes `params` whole on every rank until unpin().
  virtual void pin(const std::vector<at::Tensor>& params) = 0;
  /// Collective: ends pin(); with modifier_rank >= 0 that rank's values of the pinned groups
  /// are broadcast and written into every rank's shards and fp32 master copy.
  virtual void unpin(const std::vector<at::Tensor>& params, int modifier_rank) = 0;
  /// Collective: calls visit(name, whole value) on every rank for each trainable parameter,
  /// shared ones once, with at most one stage-3 group gathered beyond the usual.
  virtual void visit_full_parameters(
      const std::function<void(const std::string&, const at::Tensor&)>& visit) = 0;
};

}  // namespace zero
