# Config parsing and validation (src/config/): single process, no MPI.
zero_add_test(NAME test_config SOURCES test_config.cpp)
