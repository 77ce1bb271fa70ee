# Hostile and careless inputs (Note [Bounded input] in src/common/bounded_input.h): single
# process, through the public API. A FIFO that blocked would hang: the timeout turns that into
# a failure.
zero_add_test(NAME test_bounded_input SOURCES test_bounded_input.cpp TIMEOUT 60)
