# GPT-2 model (src/models/gpt2.cpp): single process.
zero_add_test(NAME test_gpt2 SOURCES test_gpt2.cpp)
