add_executable(bench_engine ${CMAKE_CURRENT_LIST_DIR}/bench_engine.cpp)
target_link_libraries(bench_engine PRIVATE zero zero_gpt2)
target_compile_options(bench_engine PRIVATE ${ZERO_WARNINGS})
add_executable(bench_stage3_memory ${CMAKE_CURRENT_LIST_DIR}/bench_stage3_memory.cpp)
target_link_libraries(bench_stage3_memory PRIVATE zero zero_gpt2)
target_compile_options(bench_stage3_memory PRIVATE ${ZERO_WARNINGS})
add_executable(bench_lm_head ${CMAKE_CURRENT_LIST_DIR}/bench_lm_head.cpp)
target_link_libraries(bench_lm_head PRIVATE zero_gpt2_internal)  # models/lm_head_loss.h
target_compile_options(bench_lm_head PRIVATE ${ZERO_WARNINGS})
