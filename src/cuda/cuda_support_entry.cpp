// libzero_cuda's entry point for zero::cuda_support() (zero/cuda_support.h), and the device
// memory figures it offers.
#include <cuda_runtime_api.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "cuda/fused_kernels_cuda.h"
#include "zero/comm_nccl.h"
#include "zero/cuda_support.h"
#include "zero/error.h"

namespace zero {
namespace {

CudaMemory cuda_memory(int device) {
  size_t free = 0, total = 0;
  cudaError_t rc = cudaSuccess;
  {
    // c10's guard restores the previous device without making a context on it (a raw
    // cudaSetDevice back would: a context on GPU 0 for every rank).
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    rc = cudaMemGetInfo(&free, &total);
  }
  ZERO_CHECK(rc == cudaSuccess, "cannot read the memory of CUDA device ", device, ": ",
             cudaGetErrorString(rc));
  using c10::CachingAllocator::StatType;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  CudaMemory memory;
  memory.free_bytes = static_cast<int64_t>(free);
  memory.total_bytes = static_cast<int64_t>(total);
  memory.peak_allocated_bytes = stats.allocated_bytes[aggregate].peak;
  memory.peak_reserved_bytes = stats.reserved_bytes[aggregate].peak;
  return memory;
}

void reset_cuda_memory_peaks(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
}

}  // namespace
}  // namespace zero

const zero::CudaSupport* zero_cuda_support_v1() {
  static const zero::CudaSupport support = [] {
    // The fused kernels too (also registered when the library loads; this reference keeps
    // their object in programs that link libzero_cuda statically and call the entry).
    zero::kernels::register_cuda_kernels(&zero::cuda_fused_kernels());
    zero::CudaSupport s;
    s.make_nccl_communicator = &zero::make_nccl_communicator;
    s.cuda_device_count = &zero::cuda_device_count;
    s.default_cuda_device = &zero::default_cuda_device;
    s.memory = &zero::cuda_memory;
    s.reset_memory_peaks = &zero::reset_cuda_memory_peaks;
    return s;
  }();
  return &support;
}
