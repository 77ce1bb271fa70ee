# GPT-2 training throughput on one CUDA GPU: zero against plain libtorch (scripts/gpu-check.sh).
if(TARGET zero_cuda)
  find_package(CLI11 2.1 REQUIRED)
  add_executable(bench_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_cuda.cpp)
  target_link_libraries(bench_cuda PRIVATE zero zero_gpt2 zero_cuda zero::torch_cuda CLI11::CLI11)
  target_compile_options(bench_cuda PRIVATE ${ZERO_WARNINGS})
endif()
# ZeRO-Offload of a model larger than the GPU: time split, memory, MFU (white-box: it reads the
# engine's offload statistics, so on the static libraries).
if(TARGET zero_cuda)
  add_executable(bench_offload_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_offload_cuda.cpp)
  target_link_libraries(bench_offload_cuda PRIVATE zero_gpt2_internal zero_cuda_internal
                        zero::torch_cuda CLI11::CLI11)
  target_compile_options(bench_offload_cuda PRIVATE ${ZERO_WARNINGS})
endif()
