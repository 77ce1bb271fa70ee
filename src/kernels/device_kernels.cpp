// The registry of a GPU's fused kernels (kernels/device_kernels.h).
#include "kernels/device_kernels.h"

#include <atomic>
#include <exception>
#include <mutex>

#include "zero/cuda_support.h"

namespace zero::kernels {
namespace {

// Constant-initialised: libzero_cuda's static initialiser may register before this library's
// own initialisers have run.
std::atomic<const DeviceKernels*> registered{nullptr};

}  // namespace

void register_cuda_kernels(const DeviceKernels* kernels) {
  registered.store(kernels, std::memory_order_release);
}

const DeviceKernels* cuda_kernels() {
  if (const DeviceKernels* kernels = registered.load(std::memory_order_acquire)) return kernels;
  // Once per process: loading libzero_cuda registers its kernels. Where it cannot be loaded
  // (zero built without CUDA, with a model on a GPU all the same) there are none, and the
  // models compose ATen's operations, as they did before these kernels existed.
  static std::once_flag tried;
  std::call_once(tried, [] {
    try {
      (void)cuda_support();
    } catch (const std::exception&) {
      // Not loadable: no GPU kernels; the models compose ATen's operations.
    }
  });
  return registered.load(std::memory_order_acquire);
}

}  // namespace zero::kernels
