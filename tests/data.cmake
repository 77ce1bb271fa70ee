# Token files, batching and the GPT-2 decoder (src/data/): single process, no MPI. The shipped
# data files are found through ZERO_DATA_DIR (the repository's data/).
zero_add_test(NAME test_data SOURCES test_data.cpp)
target_compile_definitions(test_data PRIVATE ZERO_DATA_DIR="${PROJECT_SOURCE_DIR}/data")
# GPT-2's BPE encoder and text -> token files (src/data/bpe_encoder.cpp, text_corpus.cpp).
zero_add_test(NAME test_encoder SOURCES test_encoder.cpp TIMEOUT 300)
target_compile_definitions(test_encoder PRIVATE ZERO_DATA_DIR="${PROJECT_SOURCE_DIR}/data")
# zero-tokenize against tiktoken (from the same local vocabulary files) on the three corpora
# and on fuzzed UTF-8; skips without the tiktoken package (scripts/setup.sh installs it).
add_test(NAME encoder_vs_tiktoken
         COMMAND ${ZERO_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/data/check_encoder_vs_tiktoken.py
                 $<TARGET_FILE:zero-tokenize> ${PROJECT_SOURCE_DIR}/data
                 ${CMAKE_CURRENT_BINARY_DIR}/encoder_vs_tiktoken)
set_tests_properties(encoder_vs_tiktoken PROPERTIES TIMEOUT 300)
# zero-tokenize's command line: outputs and bad inputs.
add_test(NAME zero_tokenize_cli
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/data/check_zero_tokenize.sh $<TARGET_FILE:zero-tokenize>
                 ${PROJECT_SOURCE_DIR}/data ${CMAKE_CURRENT_BINARY_DIR}/zero_tokenize_cli)
set_tests_properties(zero_tokenize_cli PROPERTIES TIMEOUT 120)
# The encoder's bytes -> id table (src/data/token_table.h), white-box.
zero_add_test(NAME test_token_table SOURCES test_token_table.cpp INTERNAL)
target_compile_definitions(test_token_table PRIVATE ZERO_DATA_DIR="${PROJECT_SOURCE_DIR}/data")
# Hugging Face tokenizer.json files (src/data/hf_tokenizer*.cpp) against the tokenizers library:
# the tokenizers and their ids made by tests/data/make_hf_tokenizers.py, then test_hf_tokenizer
# and zero-tokenize --tokenizer checked; skips without the tokenizers package.
zero_add_test(NAME test_hf_tokenizer SOURCES test_hf_tokenizer.cpp INTERNAL RUN_BY hf_tokenizer)
target_compile_definitions(test_hf_tokenizer PRIVATE ZERO_DATA_DIR="${PROJECT_SOURCE_DIR}/data")
add_test(NAME hf_tokenizer
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/data/check_hf_tokenizer.sh
                 $<TARGET_FILE:test_hf_tokenizer> $<TARGET_FILE:zero-tokenize> ${ZERO_PYTHON3}
                 ${CMAKE_CURRENT_BINARY_DIR}/hf_tokenizer)
set_tests_properties(hf_tokenizer PROPERTIES TIMEOUT 900)
