add_library(zero_engine_harness STATIC engine_harness.cpp)
target_link_libraries(zero_engine_harness PUBLIC zero_test_main)
target_compile_options(zero_engine_harness PRIVATE ${ZERO_WARNINGS})
zero_add_test(NAME test_engine_equivalence SOURCES test_engine_equivalence.cpp
              LIBS zero_engine_harness RANKS 1 2 3 4 TIMEOUT 900)
zero_add_test(NAME test_engine SOURCES test_engine.cpp LIBS zero_engine_harness RANKS 1 2 3
              TIMEOUT 600)
zero_add_test(NAME test_stage3 SOURCES test_stage3.cpp LIBS zero_engine_harness RANKS 1 2 3 4
              TIMEOUT 600)
