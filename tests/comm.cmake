# Communicator tests: real multi-process runs under mpirun (1 to 4 ranks).
zero_add_test(NAME test_comm SOURCES test_comm.cpp INTERNAL RANKS 1 2 3 4 TIMEOUT 300)
# White-box parts (segmented ring, ring all-gather, the reduction kernels) use src/comm's
# internals (INTERNAL: the static library).
zero_add_test(NAME test_comm_shared SOURCES test_comm_shared.cpp RANKS 1 2 3 4 TIMEOUT 300)
# The communication thread of overlap_comm (src/engine/comm_queue.h).
zero_add_test(NAME test_comm_queue SOURCES test_comm_queue.cpp INTERNAL RANKS 1 2 TIMEOUT 120)
