# Hostile and careless inputs (Note [Bounded input] in src/common/bounded_input.h): single
# process, through the public API. A FIFO that blocked would hang: the timeout turns that into
# a failure.
zero_add_test(NAME test_bounded_input SOURCES test_bounded_input.cpp TIMEOUT 60)
# CRC-32C of swap records and TensorBoard records (INTERNAL: src/common/crc32c.h).
zero_add_test(NAME test_crc32c SOURCES test_crc32c.cpp INTERNAL)
