# GPT-2 model (src/models/gpt2.cpp): single process.
zero_add_test(NAME test_gpt2 SOURCES test_gpt2.cpp)
# Hugging Face GPT-2 directories in (zero/gpt2_pretrained.h): made with transformers by
# tests/models/make_hf_checkpoints.py, with a zero-ckpt export beside; skipped without it.
zero_add_test(NAME test_gpt2_pretrained SOURCES test_gpt2_pretrained.cpp TIMEOUT 600)
find_program(ZERO_PYTHON3_FOR_HF NAMES python3)
add_test(NAME hf_init
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/models/check_hf_init.sh $<TARGET_FILE:test_gpt2_pretrained>
                 $<TARGET_FILE:zero-train> ${PROJECT_BINARY_DIR}/bin/zero-run $<TARGET_FILE:zero-ckpt>
                 ${MPIEXEC_EXECUTABLE} ${ZERO_PYTHON3_FOR_HF} ${CMAKE_CURRENT_BINARY_DIR}/hf_init)
set_tests_properties(hf_init PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")
# zero-generate against transformers' greedy generate, with and without the KV cache.
add_test(NAME zero_generate
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/models/check_generate.sh $<TARGET_FILE:zero-generate>
                 $<TARGET_FILE:zero-train> ${PROJECT_BINARY_DIR}/bin/zero-run ${ZERO_PYTHON3_FOR_HF}
                 ${CMAKE_CURRENT_BINARY_DIR}/zero_generate)
set_tests_properties(zero_generate PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")
