// zero::cuda_support (zero/cuda_support.h): libzero_cuda loaded on first use.
//
// dlopen by hand rather than a link dependency: a program linked to zero_cuda loads libtorch's
// CUDA libraries at start whether it uses a GPU or not (the header says what that costs), and
// only some runs of a program like zero-train do. The library is looked for beside libzero
// first (the build tree and an installed prefix keep them together), then on the loader's
// search path.
#include "zero/cuda_support.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "zero/error.h"

namespace zero {
namespace {

constexpr const char* kLibrary = "libzero_cuda.so.0";

// The directory libzero (or the program, when zero is linked statically) was loaded from.
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_support), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

const CudaSupport& load() {
#ifndef ZERO_BUILT_WITH_CUDA
  throw Error(detail::concat(
      "CUDA ranks need libzero_cuda, and this zero was built without it (ZERO_CUDA: it needs a "
      "torch package with CUDA, the CUDA toolkit and NCCL; cmake/ZeroCuda.cmake says which was "
      "missing at configure time)"));
#else
  std::string tried;
  void* handle = nullptr;
  const std::string beside = own_directory();
  for (const std::string& path :
       {beside.empty() ? std::string() : beside + "/" + kLibrary, std::string(kLibrary)}) {
    if (path.empty()) continue;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle != nullptr) break;
    const char* why = dlerror();
    tried += "\n  " + path + ": " + (why != nullptr ? why : "not loadable");
  }
  ZERO_CHECK(handle != nullptr, "cannot load libzero_cuda for CUDA ranks:", tried);
  using Entry = const CudaSupport* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "zero_cuda_support_v1"));
  ZERO_CHECK(entry != nullptr, "libzero_cuda has no zero_cuda_support_v1 (a libzero_cuda of ",
             "another zero version?)");
  return *entry();
#endif
}

}  // namespace

int cuda_device_for_local_rank(int local_rank, int device_count) {
  if (device_count <= 0) return -1;
  return local_rank >= 0 ? local_rank % device_count : 0;
}

const CudaSupport& cuda_support() {
  // A failure is not cached: the next call tries again and says why again.
  static std::mutex mutex;
  static const CudaSupport* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded == nullptr) loaded = &load();
  return *loaded;
}

}  // namespace zero
