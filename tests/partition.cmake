zero_add_test(NAME test_shard SOURCES test_shard.cpp)
