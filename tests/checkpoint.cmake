# Checkpoint formats (src/checkpoint/): the safetensors writer and reader, and save_16bit_model.
zero_add_test(NAME test_safetensors SOURCES test_safetensors.cpp TIMEOUT 60)

# The engine tests below use the engine harness; compile its source here when engine.cmake
# (which defines zero_engine_harness) is filtered out by ZERO_TEST_FILTER.
if("${CMAKE_CURRENT_SOURCE_DIR}/engine.cmake" IN_LIST ZERO_TEST_CMAKE)
  set(zero_harness_sources "")
  set(zero_harness_libs zero_engine_harness)
else()
  set(zero_harness_sources engine_harness.cpp)
  set(zero_harness_libs "")
endif()
zero_add_test(NAME test_model_export SOURCES test_model_export.cpp ${zero_harness_sources}
              LIBS ${zero_harness_libs} RANKS 1 2 3 TIMEOUT 120)
zero_add_test(NAME test_checkpoint SOURCES test_checkpoint.cpp ${zero_harness_sources}
              LIBS ${zero_harness_libs} nlohmann_json::nlohmann_json ZLIB::ZLIB RANKS 1 2 4
              TIMEOUT 600)

# Interoperability with Hugging Face's safetensors package; skipped (exit 77) without it.
add_executable(safetensors_interop checkpoint/safetensors_interop.cpp)
target_compile_options(safetensors_interop PRIVATE ${ZERO_WARNINGS})
target_link_libraries(safetensors_interop PRIVATE ${zero_test_libs})
if(ZERO_PYTHON3)
  add_test(NAME safetensors_python_interop
           COMMAND ${ZERO_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/check_python_interop.py
                   $<TARGET_FILE:safetensors_interop> ${CMAKE_CURRENT_BINARY_DIR}/safetensors-interop)
  set_tests_properties(safetensors_python_interop PROPERTIES TIMEOUT 60)
endif()

# Reading checkpoints without an engine (zero/checkpoint.h) and the zero-ckpt tool.
zero_add_test(NAME test_checkpoint_export SOURCES test_checkpoint_export.cpp
              ${zero_harness_sources} LIBS ${zero_harness_libs} nlohmann_json::nlohmann_json
              ZLIB::ZLIB RANKS 1 2 TIMEOUT 300)
if(TARGET zero-ckpt)
  # A real 2-rank checkpoint for zero-ckpt to read (tests/checkpoint/make_test_checkpoint.cpp).
  add_executable(make_test_checkpoint checkpoint/make_test_checkpoint.cpp ${zero_harness_sources})
  target_compile_options(make_test_checkpoint PRIVATE ${ZERO_WARNINGS})
  target_include_directories(make_test_checkpoint PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(make_test_checkpoint PRIVATE ${zero_test_libs} ${zero_harness_libs})
  if(ZERO_PRECOMPILED_HEADERS)
    target_precompile_headers(make_test_checkpoint REUSE_FROM zero_test_main)
  endif()
  add_test(NAME zero_ckpt_cli
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/check_zero_ckpt.sh $<TARGET_FILE:zero-ckpt>
                   ${PROJECT_BINARY_DIR}/bin/zero-run $<TARGET_FILE:make_test_checkpoint>
                   ${CMAKE_CURRENT_BINARY_DIR}/zero-ckpt)
  set_tests_properties(zero_ckpt_cli PROPERTIES TIMEOUT 600 FIXTURES_SETUP zero_ckpt_exports)
  if(ZERO_PYTHON3)  # Hugging Face's safetensors reads the exports; skipped (77) without it.
    add_test(NAME zero_ckpt_python_interop
             COMMAND ${ZERO_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/check_zero_ckpt_export.py
                     ${CMAKE_CURRENT_BINARY_DIR}/zero-ckpt)
    set_tests_properties(zero_ckpt_python_interop PROPERTIES TIMEOUT 120
                         FIXTURES_REQUIRED zero_ckpt_exports)
  endif()
endif()

# Resharding across world sizes (tests/checkpoint/check_reshard.sh): save at N ranks and
# stage s, resume at M ranks and stage t, for every N in {1, 2, 4} and s in {0, ..., 3}; each
# job is its own mpirun, driven by reshard_driver.
add_executable(reshard_driver checkpoint/reshard_driver.cpp ${zero_harness_sources})
target_compile_options(reshard_driver PRIVATE ${ZERO_WARNINGS})
target_include_directories(reshard_driver PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(reshard_driver PRIVATE ${zero_test_libs} ${zero_harness_libs})
if(ZERO_PRECOMPILED_HEADERS)  # the tests' precompiled header (tests/CMakeLists.txt)
  target_precompile_headers(reshard_driver REUSE_FROM zero_test_main)
endif()
add_test(NAME checkpoint_reshard
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/check_reshard.sh
                 $<TARGET_FILE:reshard_driver> ${CMAKE_CURRENT_BINARY_DIR}/reshard ${ZERO_MPIRUN})
set_tests_properties(checkpoint_reshard PROPERTIES TIMEOUT 600
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")

# Killing a rank while zero-train saves leaves `latest` naming the previous checkpoint, which
# loads (tests/checkpoint/check_kill_during_save.sh; skipped, exit 77, if no save in progress
# could be caught).
if(TARGET zero-train)
  add_test(NAME checkpoint_kill_during_save
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/check_kill_during_save.sh
                   $<TARGET_FILE:zero-train> ${PROJECT_BINARY_DIR}/bin/zero-run
                   ${CMAKE_CURRENT_BINARY_DIR}/kill-during-save)
  set_tests_properties(checkpoint_kill_during_save PROPERTIES TIMEOUT 900)
endif()

# Note [Checkpoint metadata] (src/checkpoint/metadata.h), property-tested on metadata made the
# way a save makes it (INTERNAL: the reader's internal header).
zero_add_test(NAME test_checkpoint_metadata SOURCES test_checkpoint_metadata.cpp INTERNAL
              LIBS nlohmann_json::nlohmann_json)
