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
              LIBS ${zero_harness_libs} RANKS 1 2 4 TIMEOUT 600)

# Interoperability with Hugging Face's safetensors package; skipped (exit 77) without it.
find_program(ZERO_PYTHON3 NAMES python3)  # the one on PATH, where pip installs
add_executable(safetensors_interop checkpoint/safetensors_interop.cpp)
target_compile_options(safetensors_interop PRIVATE ${ZERO_WARNINGS})
target_link_libraries(safetensors_interop PRIVATE zero)
if(ZERO_PYTHON3)
  add_test(NAME safetensors_python_interop
           COMMAND ${ZERO_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/check_python_interop.py
                   $<TARGET_FILE:safetensors_interop> ${CMAKE_CURRENT_BINARY_DIR}/safetensors-interop)
  set_tests_properties(safetensors_python_interop PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
endif()
