#include "common/parallel.h"

#include <ATen/TensorIterator.h>

#include "zero/error.h"

namespace zero {

void parallel_ranges(const at::Tensor& like, int64_t grain,
                     const std::function<void(int64_t, int64_t)>& fn) {
  ZERO_INTERNAL_ASSERT(like.is_contiguous(), "parallel ranges over a tensor that is not contiguous");
  if (like.numel() == 0) return;
  const at::Tensor flat = like.reshape({-1});
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(flat)
                                .resize_outputs(false)
                                .check_all_same_dtype(false)
                                .set_check_mem_overlap(false)
                                .build();
  const char* base = static_cast<const char*>(flat.data_ptr());
  const int64_t element = static_cast<int64_t>(flat.element_size());
  iter.for_each(
      [&](char** data, const int64_t* strides, int64_t size0, int64_t size1) {
        // Contiguous and one-dimensional: data[0] is the range's first element.
        ZERO_INTERNAL_ASSERT(size1 == 1 && (size0 == 1 || strides[0] == element),
                             "unexpected iteration shape");
        const int64_t begin = (data[0] - base) / element;
        fn(begin, begin + size0);
      },
      grain);
}

}  // namespace zero
