# The fused optimizer loop (src/optim): every SIMD level against the scalar loop and
# torch::optim, bitwise. Single process, no MPI; internal (adam_update is not public API).
zero_add_test(NAME test_optimizer SOURCES test_optimizer.cpp INTERNAL TIMEOUT 120)
zero_add_test(NAME test_muon SOURCES test_muon.cpp INTERNAL TIMEOUT 120)
