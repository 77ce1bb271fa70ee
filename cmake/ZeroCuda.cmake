# zero::torch_cuda: what zero_cuda (the NCCL communicator and CUDA helpers, src/cuda/) builds
# against: libtorch's CUDA libraries (torch_cuda, c10_cuda), the CUDA runtime and NCCL.
# Needs find_package(Torch) first. Sets ZERO_CUDA_FOUND, and ZERO_CUDA_MISSING to what is
# missing otherwise.
#   - libtorch's CUDA libraries: beside torch_cpu, in a torch package built with CUDA (the
#     pinned PyPI wheel is);
#   - the CUDA runtime headers and library: the toolkit's (find_package(Torch) looked for it);
#   - NCCL: the torch wheel's own (site-packages/nvidia/nccl, the library torch itself loads,
#     so one NCCL is in the process), else the toolkit's or the system's. Nothing is
#     downloaded.
set(ZERO_CUDA_FOUND FALSE)
set(ZERO_CUDA_MISSING "")
if(NOT TARGET zero::torch_cuda)
  find_library(ZERO_TORCH_CUDA_LIBRARY torch_cuda HINTS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
  find_library(ZERO_C10_CUDA_LIBRARY c10_cuda HINTS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
  if(NOT ZERO_TORCH_CUDA_LIBRARY OR NOT ZERO_C10_CUDA_LIBRARY)
    list(APPEND ZERO_CUDA_MISSING "libtorch_cuda/libc10_cuda (a torch package without CUDA)")
  endif()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND ZERO_CUDA_MISSING "the CUDA toolkit (cuda_runtime_api.h, libcudart)")
  endif()
  set(zero_wheel_nccl "${TORCH_INSTALL_PREFIX}/../nvidia/nccl")
  find_path(ZERO_NCCL_INCLUDE_DIR nccl.h
            HINTS "${zero_wheel_nccl}/include" ${CUDAToolkit_INCLUDE_DIRS})
  find_library(ZERO_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS "${zero_wheel_nccl}/lib" ${CUDAToolkit_LIBRARY_DIR})
  if(NOT ZERO_NCCL_INCLUDE_DIR OR NOT ZERO_NCCL_LIBRARY)
    list(APPEND ZERO_CUDA_MISSING "NCCL (nccl.h, libnccl)")
  endif()
  if(NOT ZERO_CUDA_MISSING)
    # libtorch_cuda registers ATen's CUDA kernels and hooks when it is loaded; zero may call
    # none of its symbols directly, so a linker that drops unused libraries (--as-needed, the
    # default of Ubuntu's toolchain) would leave it out, and every CUDA tensor operation would
    # fail at run time ("Could not run 'aten::empty_strided' ... 'CUDA' backend"). It is linked
    # with --no-as-needed, scoped by --push-state/--pop-state so nothing else changes; CI links
    # with --as-needed (scripts/setup.sh) and test_cuda's CudaKernels.Registered checks it.
    add_library(zero::torch_cuda INTERFACE IMPORTED)
    set_target_properties(zero::torch_cuda PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${ZERO_NCCL_INCLUDE_DIR};${CUDAToolkit_INCLUDE_DIRS}"
      INTERFACE_LINK_LIBRARIES
        "zero::torch;-Wl,--push-state,--no-as-needed;${ZERO_TORCH_CUDA_LIBRARY};${ZERO_C10_CUDA_LIBRARY};-Wl,--pop-state;CUDA::cudart;${ZERO_NCCL_LIBRARY}")
  endif()
endif()
if(TARGET zero::torch_cuda)
  set(ZERO_CUDA_FOUND TRUE)
endif()
