// Whole parameters outside a unit's forward (DeepSpeed's zero.GatheredParameters).
//
//   {
//     zero::GatheredParameters full(*engine, model->parameters(), /*modifier_rank=*/0);
//     if (engine->rank() == 0) model->lm_head->weight.normal_(0, 0.02);  // under NoGradGuard
//   }  // rank 0's values are now every rank's, in the shards and the fp32 master copy
//
// At stage 3 the parameters' full values exist on every rank while the guard lives; at
// stages 0-2 they always do and only the write-back communicates. Collective: every rank
// must create and end the guard with the same parameters, in the same order.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <vector>

#include "zero/engine.h"

namespace zero {

class ZERO_API GatheredParameters {
 public:
  /// Gathers `params` (trainable parameters of the engine's model). With modifier_rank >= 0,
  /// that rank's values are written back to every rank when the guard ends.
  GatheredParameters(Engine& engine, std::vector<at::Tensor> params, int modifier_rank = -1);
  /// Ends the guard (collective). Called by the destructor if not called before; when the
  /// scope is left by an exception the write-back is skipped and nothing is communicated.
  void release();
  ~GatheredParameters() noexcept(false);

  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  Engine& engine_;
  std::vector<at::Tensor> params_;
  int modifier_rank_;
  int uncaught_at_start_;
  bool released_ = false;
};

}  // namespace zero
