// A program that links zero_cuda the way users' programs do (the shared library, nothing of
// libtorch's CUDA named on its own link line) has libtorch's CUDA kernels registered, whether
// or not the machine has a GPU. libtorch_cuda registers them when it is loaded and zero need
// not call any of its symbols, so a linker run with --as-needed (Ubuntu's default; CI links
// with it too) would drop it unless zero_cuda is linked to keep it (cmake/ZeroCuda.cmake):
// then every CUDA tensor operation fails at run time with "Could not run 'aten::empty_strided'
// with arguments from the 'CUDA' backend". Also what of CUDA support runs without a GPU: the
// GPU a rank takes (test_cuda's tests all need one, so without one ctest reports it skipped).
#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <string>
#include <utility>

#include "zero/comm_nccl.h"
#include "zero/cuda_support.h"

namespace zero::test {
namespace {

TEST(CudaLinkage, LibtorchCudaKernelsAreRegistered) {
  // Keeps zero_cuda on the link line under --as-needed, as any user of it does.
  volatile int devices = cuda_device_count();
  (void)devices;
  const std::pair<const char*, const char*> ops[] = {
      {"aten::empty_strided", ""}, {"aten::empty", "memory_format"}, {"aten::add", "Tensor"}};
  for (const auto& [name, overload] : ops) {
    const auto handle = c10::Dispatcher::singleton().findOp({name, overload});
    ASSERT_TRUE(handle.has_value()) << name << "." << overload << " is not a registered operator";
    EXPECT_TRUE(handle->hasKernelForDispatchKey(c10::DispatchKey::CUDA))
        << name << "." << overload << " has no CUDA kernel: libtorch_cuda was not loaded with "
        << "zero_cuda (dropped by the linker's --as-needed?)";
  }
}

// Which GPU a rank takes: its rank on the machine modulo the GPUs it sees (ranks beyond the
// count share them, through host staging), GPU 0 without a launcher's local rank, none
// without GPUs. Runs without a GPU.
TEST(CudaDevice, EachRankTakesItsLocalGpu) {
  EXPECT_EQ(cuda_device_for_local_rank(-1, 0), -1);
  EXPECT_EQ(cuda_device_for_local_rank(3, 0), -1);
  EXPECT_EQ(cuda_device_for_local_rank(-1, 4), 0);
  EXPECT_EQ(cuda_device_for_local_rank(0, 4), 0);
  EXPECT_EQ(cuda_device_for_local_rank(3, 4), 3);
  EXPECT_EQ(cuda_device_for_local_rank(5, 4), 1);
  EXPECT_EQ(cuda_device_for_local_rank(7, 1), 0);
  const int devices = cuda_device_count();
  EXPECT_EQ(default_cuda_device() < 0, devices == 0);
  EXPECT_LT(default_cuda_device(), std::max(devices, 1));
}

}  // namespace
}  // namespace zero::test
