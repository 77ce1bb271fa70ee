#include "common/dtype_names.h"

namespace zero {

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    default: return c10::toString(dtype);
  }
}

bool is_16bit(at::ScalarType dtype) { return dtype == at::kBFloat16 || dtype == at::kHalf; }

}  // namespace zero
