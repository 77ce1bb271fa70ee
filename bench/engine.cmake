add_executable(bench_engine ${CMAKE_CURRENT_LIST_DIR}/bench_engine.cpp)
target_link_libraries(bench_engine PRIVATE zero zero_gpt2)
target_compile_options(bench_engine PRIVATE ${ZERO_WARNINGS})
add_executable(bench_stage3_memory ${CMAKE_CURRENT_LIST_DIR}/bench_stage3_memory.cpp)
target_link_libraries(bench_stage3_memory PRIVATE zero zero_gpt2)
target_compile_options(bench_stage3_memory PRIVATE ${ZERO_WARNINGS})
add_executable(bench_lm_head ${CMAKE_CURRENT_LIST_DIR}/bench_lm_head.cpp)
target_link_libraries(bench_lm_head PRIVATE zero_gpt2_internal)  # models/lm_head_loss.h
target_compile_options(bench_lm_head PRIVATE ${ZERO_WARNINGS})
# NVMe offload: swapper bandwidth, optimizer elements/s, offloaded step time (src/offload/).
find_package(CLI11 2.1 REQUIRED)
add_executable(bench_offload ${CMAKE_CURRENT_LIST_DIR}/bench_offload.cpp)
target_link_libraries(bench_offload PRIVATE zero_internal CLI11::CLI11)
target_compile_options(bench_offload PRIVATE ${ZERO_WARNINGS})
# The memory planner against measured peaks; activation checkpointing's memory and time.
add_executable(bench_memory_plan ${CMAKE_CURRENT_LIST_DIR}/bench_memory_plan.cpp)
target_link_libraries(bench_memory_plan PRIVATE zero zero_gpt2 CLI11::CLI11)
target_compile_options(bench_memory_plan PRIVATE ${ZERO_WARNINGS})
# Note [Collective signatures]: their cost per step (comm/mpi_communicator.h's options).
add_executable(bench_collective_checks ${CMAKE_CURRENT_LIST_DIR}/bench_collective_checks.cpp)
target_link_libraries(bench_collective_checks PRIVATE zero_gpt2_internal CLI11::CLI11)
target_compile_options(bench_collective_checks PRIVATE ${ZERO_WARNINGS})
# Note [fp16 GEMMs on CPUs without fp16 arithmetic]: GPT-2's step by dtype and fp16 path.
add_executable(bench_fp16_step ${CMAKE_CURRENT_LIST_DIR}/bench_fp16_step.cpp)
target_link_libraries(bench_fp16_step PRIVATE zero_gpt2_internal CLI11::CLI11)
target_compile_options(bench_fp16_step PRIVATE ${ZERO_WARNINGS})
# Note [Fused element-wise kernels]: each kernel and GPT-2's step, fused against unfused.
add_executable(bench_fused_kernels ${CMAKE_CURRENT_LIST_DIR}/bench_fused_kernels.cpp)
target_link_libraries(bench_fused_kernels PRIVATE zero_gpt2_internal CLI11::CLI11)
if(TARGET zero_cuda)  # --device cuda: the GPU's kernels (scripts/gpu-check.sh tier 1)
  target_link_libraries(bench_fused_kernels PRIVATE zero_cuda_internal zero::torch_cuda)
  target_compile_definitions(bench_fused_kernels PRIVATE ZERO_BENCH_WITH_CUDA)
endif()
target_compile_options(bench_fused_kernels PRIVATE ${ZERO_WARNINGS})
# Note [Muon under partitioning]: the owner exchange against every holder (bench/muon_exchange.sh).
add_executable(bench_muon_exchange ${CMAKE_CURRENT_LIST_DIR}/bench_muon_exchange.cpp)
target_link_libraries(bench_muon_exchange PRIVATE zero_gpt2_internal CLI11::CLI11)  # engine_core.h
target_compile_options(bench_muon_exchange PRIVATE ${ZERO_WARNINGS})
