# Communicator tests: real multi-process runs under mpirun (1 to 4 ranks).
zero_add_test(NAME test_comm SOURCES test_comm.cpp INTERNAL RANKS 1 2 3 4 6 TIMEOUT 300)
# White-box parts (segmented ring, ring all-gather, the reduction kernels) use src/comm's
# internals (INTERNAL: the static library).
zero_add_test(NAME test_comm_shared SOURCES test_comm_shared.cpp RANKS 1 2 3 4 TIMEOUT 300)
# Work handles and in_order tasks (zero/comm.h): what overlap_comm is built on.
zero_add_test(NAME test_comm_work SOURCES test_comm_work.cpp RANKS 1 2 3 4 TIMEOUT 120)
# The host-staged communicator (src/comm/host_staged_communicator.cpp) on CPU tensors, and the
# engine through it (INTERNAL: HostStagedOptions, the harness).
zero_add_test(NAME test_comm_staged SOURCES test_comm_staged.cpp INTERNAL RANKS 1 2 3
              LIBS zero_engine_harness_internal TIMEOUT 300)
