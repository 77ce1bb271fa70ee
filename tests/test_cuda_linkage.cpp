// A program that links zero_cuda the way users' programs do (the shared library, nothing of
// libtorch's CUDA named on its own link line) has libtorch's CUDA kernels registered, whether
// or not the machine has a GPU. libtorch_cuda registers them when it is loaded and zero need
// not call any of its symbols, so a linker run with --as-needed (Ubuntu's default; CI links
// with it too) would drop it unless zero_cuda is linked to keep it (cmake/ZeroCuda.cmake):
// then every CUDA tensor operation fails at run time with "Could not run 'aten::empty_strided'
// with arguments from the 'CUDA' backend".
#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <utility>

#include "zero/comm_nccl.h"

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

}  // namespace
}  // namespace zero::test
