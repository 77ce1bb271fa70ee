# Note [Block quantization] (src/quant): the wire format of ZeRO++ (INTERNAL: an internal header).
zero_add_test(NAME test_block_quantization SOURCES test_block_quantization.cpp INTERNAL)
