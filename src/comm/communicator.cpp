// What zero::Communicator (zero/comm.h) defines for every backend.
#include <ATen/ops/zeros.h>

#include "zero/comm.h"

namespace zero {

CommStats& CommStats::operator+=(const CommStats& other) {
  for (auto which : {&CommStats::all_reduce, &CommStats::reduce_scatter, &CommStats::all_gather,
                     &CommStats::broadcast}) {
    (this->*which).calls += (other.*which).calls;
    (this->*which).bytes += (other.*which).bytes;
  }
  return *this;
}

at::Tensor Communicator::allocate_buffer(int64_t numel, at::ScalarType dtype) {
  return at::zeros({numel}, at::TensorOptions().dtype(dtype));
}

}  // namespace zero
