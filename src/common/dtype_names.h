// The names zero gives the training dtypes (dtype_name, declared in zero/config.h: configs,
// checkpoint metadata, messages, reports) and the 16-bit test every stage uses.
#pragma once

#include <c10/core/ScalarType.h>

#include "zero/config.h"

namespace zero {

/// bf16 or fp16.
bool is_16bit(at::ScalarType dtype);

}  // namespace zero
