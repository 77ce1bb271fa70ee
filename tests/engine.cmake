# The harness is compiled once (it uses the public API only) and linked twice: against the
# shared library for most tests, against the static one for white-box tests (test_offload).
add_library(zero_engine_harness_objects OBJECT engine_harness.cpp)
target_link_libraries(zero_engine_harness_objects PRIVATE zero_test_main)
target_compile_options(zero_engine_harness_objects PRIVATE ${ZERO_WARNINGS})
if(ZERO_PRECOMPILED_HEADERS)
  target_precompile_headers(zero_engine_harness_objects REUSE_FROM zero_test_main)
endif()
add_library(zero_engine_harness STATIC $<TARGET_OBJECTS:zero_engine_harness_objects>)
target_link_libraries(zero_engine_harness PUBLIC zero_test_main)
add_library(zero_engine_harness_internal STATIC $<TARGET_OBJECTS:zero_engine_harness_objects>)
target_link_libraries(zero_engine_harness_internal PUBLIC zero_test_main_internal)
zero_add_test(NAME test_engine_equivalence SOURCES test_engine_equivalence.cpp
              LIBS zero_engine_harness RANKS 1 2 3 4 TIMEOUT 900)
zero_add_test(NAME test_engine SOURCES test_engine.cpp LIBS zero_engine_harness RANKS 1 2 3
              TIMEOUT 600)
# Note [A step without a device read]: the GPU's tensor multiplier on CPU ranks (white-box).
zero_add_test(NAME test_step_multiplier SOURCES test_step_multiplier.cpp INTERNAL
              LIBS zero_engine_harness_internal RANKS 1 3)
zero_add_test(NAME test_stage3 SOURCES test_stage3.cpp LIBS zero_engine_harness RANKS 1 2 3 4
              TIMEOUT 600)
# Note [Compute dtype]: twice, acting as a CPU with slow and with fast 16-bit GEMMs
# (ZERO_GEMM_RATES replaces the measured rates), so "auto" is exercised both ways anywhere.
zero_add_test(NAME test_compute_dtype SOURCES test_compute_dtype.cpp LIBS zero_engine_harness
              RANKS 1 2 3 TIMEOUT 600)
foreach(name test_compute_dtype test_compute_dtype_np2 test_compute_dtype_np3)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
                       "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1;ZERO_GEMM_RATES=fp32=80,bf16=8,fp16=8")
endforeach()
add_test(NAME test_compute_dtype_fast16 COMMAND $<TARGET_FILE:test_compute_dtype>
         --gtest_filter=ComputeDtype.AutoFollowsTheGemmRates:ComputeDtype.DefaultsToTheParameterDtype)
set_tests_properties(test_compute_dtype_fast16 PROPERTIES TIMEOUT 120 ENVIRONMENT
                     "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1;ZERO_GEMM_RATES=fp32=80,bf16=160,fp16=160")
# Stage 3's gather schedule, without communication (src/engine/gather_schedule.h).
zero_add_test(NAME test_gather_schedule SOURCES test_gather_schedule.cpp INTERNAL TIMEOUT 60)
# The flat-group layer and the stage policies (src/engine/flat_group.h, stage_policy.h).
zero_add_test(NAME test_flat_group SOURCES test_flat_group.cpp INTERNAL TIMEOUT 60)
# NVMe offload: swap files, the pipelined optimizer step, swap directories (src/offload/).
# White-box (it makes swap files directly), so with the harness on the static library.
zero_add_test(NAME test_offload SOURCES test_offload.cpp LIBS zero_engine_harness_internal
              INTERNAL RANKS 1 2 3 TIMEOUT 600)
# Activation checkpointing (zero/activation_checkpointing.h) at stages 0-3.
zero_add_test(NAME test_activation_checkpoint SOURCES test_activation_checkpoint.cpp
              LIBS zero_engine_harness RANKS 1 2 3 TIMEOUT 600)
# The memory planner (zero/memory_plan.h) against measured peaks.
zero_add_test(NAME test_memory_plan SOURCES test_memory_plan.cpp INTERNAL LIBS zero_engine_harness
              RANKS 1 2 4 TIMEOUT 600)
# The host block cache (Note [Host block cache]).
zero_add_test(NAME test_host_memory SOURCES test_host_memory.cpp)
# ZeRO-Offload of a device model through its CPU stand-in (Note [Offload of a device model]).
# White-box (it reads the engine's overlapped-step count), so on the static library.
zero_add_test(NAME test_device_offload SOURCES test_device_offload.cpp
              LIBS zero_engine_harness_internal INTERNAL RANKS 1 2 3 TIMEOUT 600)
# ZeRO++ (Note [ZeRO++]): on virtual nodes of 2 ranks (INTERNAL: the MPI communicator's options).
zero_add_test(NAME test_zeropp SOURCES test_zeropp.cpp INTERNAL LIBS zero_engine_harness_internal
              RANKS 4 6 TIMEOUT 300)
# Note [Collective signatures]: ranks on different code paths stopped at once, by name.
zero_add_test(NAME test_collective_mismatch SOURCES test_collective_mismatch.cpp
              LIBS zero_engine_harness RANKS 1 2 3 TIMEOUT 300)
# Note [fp16 GEMMs on CPUs without fp16 arithmetic] (INTERNAL: src/hardware/half_gemm.h).
zero_add_test(NAME test_half_gemm SOURCES test_half_gemm.cpp INTERNAL)
# The fused element-wise kernels (Note [Fused element-wise kernels]).
zero_add_test(NAME test_fused_kernels SOURCES test_fused_kernels.cpp INTERNAL)
