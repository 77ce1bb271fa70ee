# Config parsing and validation (src/config/): single process, no MPI.
zero_add_test(NAME test_config SOURCES test_config.cpp)
target_compile_definitions(test_config PRIVATE ZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
zero_add_test(NAME test_trainer_fill SOURCES test_trainer_fill.cpp)
