# GPT-2 model (src/models/gpt2.cpp): single process.
zero_add_test(NAME test_gpt2 SOURCES test_gpt2.cpp)
# Hugging Face GPT-2 directories in (zero/gpt2_pretrained.h): made with transformers by
# tests/models/make_hf_checkpoints.py, with a zero-ckpt export beside. Run only by hf_init,
# which makes those directories first (skipped, exit 77, without transformers).
zero_add_test(NAME test_gpt2_pretrained SOURCES test_gpt2_pretrained.cpp RUN_BY hf_init)
add_test(NAME hf_init
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/models/check_hf_init.sh $<TARGET_FILE:test_gpt2_pretrained>
                 $<TARGET_FILE:zero-train> ${PROJECT_BINARY_DIR}/bin/zero-run $<TARGET_FILE:zero-ckpt>
                 ${MPIEXEC_EXECUTABLE} ${ZERO_PYTHON3} ${CMAKE_CURRENT_BINARY_DIR}/hf_init)
set_tests_properties(hf_init PROPERTIES TIMEOUT 900
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")
# zero-generate against transformers' greedy generate, with and without the KV cache.
add_test(NAME zero_generate
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/models/check_generate.sh $<TARGET_FILE:zero-generate>
                 $<TARGET_FILE:zero-train> ${PROJECT_BINARY_DIR}/bin/zero-run ${ZERO_PYTHON3}
                 ${CMAKE_CURRENT_BINARY_DIR}/zero_generate)
set_tests_properties(zero_generate PROPERTIES TIMEOUT 300
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")
# Llama-family models (zero/llama.h) against transformers: directories made by
# tests/models/make_hf_llama.py; run only by hf_llama (skipped, exit 77, without transformers).
zero_add_test(NAME test_llama_pretrained SOURCES test_llama_pretrained.cpp RUN_BY hf_llama)
add_test(NAME hf_llama
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/models/check_hf_llama.sh $<TARGET_FILE:test_llama_pretrained>
                 ${MPIEXEC_EXECUTABLE} ${ZERO_PYTHON3} ${CMAKE_CURRENT_BINARY_DIR}/hf_llama)
set_tests_properties(hf_llama PROPERTIES TIMEOUT 900
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")
# The README's Llama fine-tuning walk-through through the programs: zero-train --init with the
# directory's tokenizer.json, zero-generate from the run against transformers' generate() on the
# export (skipped, exit 77, without transformers and tokenizers).
add_test(NAME llama_walkthrough
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/models/check_llama_walkthrough.sh $<TARGET_FILE:zero-train>
                 ${PROJECT_BINARY_DIR}/bin/zero-run $<TARGET_FILE:zero-generate> $<TARGET_FILE:zero-ckpt>
                 ${ZERO_PYTHON3} ${CMAKE_CURRENT_BINARY_DIR}/llama_walkthrough)
set_tests_properties(llama_walkthrough PROPERTIES TIMEOUT 600
                     ENVIRONMENT "OPENBLAS_CORETYPE=;OMP_NUM_THREADS=1")
