# Token files, batching and the GPT-2 decoder (src/data/): single process, no MPI. The shipped
# data files are found through ZERO_DATA_DIR (the repository's data/).
zero_add_test(NAME test_data SOURCES test_data.cpp)
target_compile_definitions(test_data PRIVATE ZERO_DATA_DIR="${PROJECT_SOURCE_DIR}/data")
