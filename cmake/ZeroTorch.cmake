# zero::torch: the CPU libraries of libtorch (torch_cpu, c10), its headers and flags, for zero
# and for projects that use zero's installed package (zeroConfig.cmake includes this file).
# Needs find_package(Torch) first: the PyPI torch wheel (its cmake prefix) or Debian's
# libtorch-dev. Only the CPU libraries are linked: the wheel's libtorch.so also drags in
# libtorch_cuda and its NCCL, which a CPU build does not need.
if(NOT TARGET zero::torch)
  find_library(ZERO_TORCH_CPU_LIBRARY torch_cpu HINTS "${TORCH_INSTALL_PREFIX}/lib" REQUIRED)
  find_library(ZERO_C10_LIBRARY c10 HINTS "${TORCH_INSTALL_PREFIX}/lib" REQUIRED)
  separate_arguments(zero_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  add_library(zero::torch INTERFACE IMPORTED)
  set_target_properties(zero::torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
    INTERFACE_COMPILE_OPTIONS "${zero_torch_flags}"
    INTERFACE_LINK_LIBRARIES "${ZERO_TORCH_CPU_LIBRARY};${ZERO_C10_LIBRARY}")
  # libtorch >= 2.10's headers require C++20.
  if(Torch_VERSION VERSION_GREATER_EQUAL 2.10)
    set_property(TARGET zero::torch PROPERTY INTERFACE_COMPILE_FEATURES cxx_std_20)
  endif()
endif()
