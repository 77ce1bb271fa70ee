# Learning-rate schedules (src/config/scheduler.cpp): single process, no MPI.
zero_add_test(NAME test_scheduler SOURCES test_scheduler.cpp)
