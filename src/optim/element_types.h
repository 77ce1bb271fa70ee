// The element types of an optimizer loop's operands, as template arguments: shared by the
// loops of src/optim (shard_optimizer.cpp, adagrad_lion.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

#include "zero/error.h"

namespace zero::optim_detail {

// Elements per parallel task: large enough to amortize scheduling, small enough to balance.
constexpr int64_t kGrainSize = 32768;

// Calls fn(grad_ptr, param_out_ptr) with the concrete element types: the gradient fp32, bf16
// or fp16; the parameter copy absent (void*: the master is the parameter) or bf16/fp16.
template <typename Fn>
void dispatch_types(const at::Tensor& grad, const at::Tensor& param_out, Fn&& fn) {
  auto with_param = [&](auto* g) {
    if (!param_out.defined()) {
      fn(g, static_cast<void*>(nullptr));
    } else if (param_out.scalar_type() == at::kBFloat16) {
      fn(g, param_out.data_ptr<c10::BFloat16>());
    } else if (param_out.scalar_type() == at::kHalf) {
      fn(g, param_out.data_ptr<c10::Half>());
    } else {
      ZERO_INTERNAL_ASSERT(false, "unsupported parameter dtype ", param_out.scalar_type());
    }
  };
  switch (grad.scalar_type()) {
    case at::kFloat: with_param(grad.data_ptr<float>()); break;
    case at::kBFloat16: with_param(grad.data_ptr<c10::BFloat16>()); break;
    case at::kHalf: with_param(grad.data_ptr<c10::Half>()); break;
    default: ZERO_INTERNAL_ASSERT(false, "unsupported gradient dtype ", grad.scalar_type());
  }
}

// The operands of one loop: contiguous, `numel` elements each (undefined ones skipped).
inline void check_operands(std::initializer_list<const at::Tensor*> operands, int64_t numel,
                           const char* what) {
  for (const at::Tensor* t : operands) {
    ZERO_INTERNAL_ASSERT(!t->defined() || (t->is_contiguous() && t->numel() == numel), what,
                         " operands must be contiguous with ", numel, " elements");
  }
}

}  // namespace zero::optim_detail
