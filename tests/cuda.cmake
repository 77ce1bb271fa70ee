# CUDA ranks (zero::cuda): NCCL, host staging of CUDA tensors, the engine on a GPU. Built when
# zero_cuda is; without a CUDA device every test skips with a one-line reason (the CPU-only
# suite compiles it). scripts/gpu-check.sh runs it on a GPU machine.
if(TARGET zero_cuda)
  # White-box (it reads whether the engine offloads), so on the static libraries.
  zero_add_test(NAME test_cuda SOURCES test_cuda.cpp RANKS 1 2 INTERNAL
                LIBS zero_engine_harness_internal zero_cuda_internal zero::torch_cuda TIMEOUT 900
                LABELS gpu)
endif()
# Note [Fused element-wise kernels on a GPU]: the CUDA kernels against the CPU kernels. Their
# registration and the column partials' plan run anywhere; the comparisons need a GPU.
if(TARGET zero_cuda)
  zero_add_test(NAME test_cuda_kernels SOURCES test_cuda_kernels.cpp INTERNAL
                LIBS zero_cuda_internal zero::torch_cuda LABELS gpu)
endif()
# A program linking the shared zero_cuda alone (no libtorch CUDA library on its own link line)
# has libtorch's CUDA kernels registered: runs without a GPU, so CI checks the linkage.
if(TARGET zero_cuda)
  add_executable(test_cuda_linkage test_cuda_linkage.cpp)
  target_compile_options(test_cuda_linkage PRIVATE ${ZERO_WARNINGS})
  target_link_libraries(test_cuda_linkage PRIVATE zero_cuda GTest::gtest GTest::gtest_main)
  add_test(NAME test_cuda_linkage COMMAND $<TARGET_FILE:test_cuda_linkage>)
endif()
# scripts/gpu-check.sh --dry-run: each tier's steps and time budgets, without a GPU (issue 41).
add_test(NAME gpu_check_dry_run COMMAND ${PROJECT_SOURCE_DIR}/scripts/gpu-check.sh --dry-run)
set_tests_properties(gpu_check_dry_run PROPERTIES
                     PASS_REGULAR_EXPRESSION "tier 1 \\(budget [0-9]+ s\\):.*torch.compile baseline.*tier 2 \\(budget [0-9]+ s\\):.*ZeRO-Offload, the largest GPT-2")
