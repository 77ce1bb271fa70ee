// libzero_cuda's fused kernels (kernels/device_kernels.h's table for CUDA tensors). Loading
// the library registers them (fused_kernels_cuda.cpp); tests that link it statically may
// register them by hand.
#pragma once

#include "kernels/device_kernels.h"
#include "zero/export.h"

namespace zero {

ZERO_INTERNAL_API const kernels::DeviceKernels& cuda_fused_kernels();

}  // namespace zero
