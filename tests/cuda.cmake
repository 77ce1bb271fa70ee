# CUDA ranks (zero::cuda): NCCL, host staging of CUDA tensors, the engine on a GPU. Built when
# zero_cuda is; without a CUDA device every test skips with a one-line reason (the CPU-only
# suite compiles it). scripts/gpu-check.sh runs it on a GPU machine.
if(TARGET zero_cuda)
  zero_add_test(NAME test_cuda SOURCES test_cuda.cpp RANKS 1 2
                LIBS zero_engine_harness zero_cuda zero::torch_cuda TIMEOUT 900)
endif()
