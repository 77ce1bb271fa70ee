add_executable(bench_engine ${CMAKE_CURRENT_LIST_DIR}/bench_engine.cpp)
target_link_libraries(bench_engine PRIVATE zero)
target_compile_options(bench_engine PRIVATE ${ZERO_WARNINGS})
