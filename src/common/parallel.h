// Splitting a loop over libtorch's intra-op threads from code compiled without OpenMP.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace zero {

/// Calls fn(begin, end) over [0, like.numel()) in contiguous ranges, one per libtorch intra-op
/// thread (all on the calling thread below `grain` elements or inside a parallel region).
/// `like` (contiguous, any dtype) only sets the length; its data is not touched. Which ranges
/// run where varies with the thread count, so fn must give the same result for any split.
///
/// Not at::parallel_for: that is an inline template which parallelizes only where its caller
/// is compiled with -fopenmp (libtorch's backend is OpenMP), and zero is not (a second OpenMP
/// runtime beside the wheel's own libgomp would be a second spinning thread pool), so in zero
/// it ran every range on the calling thread. TensorIterator::for_each is compiled into libtorch
/// and splits with libtorch's own threads.
void parallel_ranges(const at::Tensor& like, int64_t grain,
                     const std::function<void(int64_t, int64_t)>& fn);

}  // namespace zero
