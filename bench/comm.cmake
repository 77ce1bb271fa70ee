# Collective benchmarks: run under mpirun by hand (not a ctest); results in docs/benchmarks.md.
add_executable(bench_collectives ${CMAKE_CURRENT_SOURCE_DIR}/bench_collectives.cpp)
target_compile_options(bench_collectives PRIVATE ${ZERO_WARNINGS})
# OMPI_SKIP_MPICXX: see the top-level CMakeLists.txt. The baselines call MPI directly.
target_compile_definitions(bench_collectives PRIVATE OMPI_SKIP_MPICXX=1)
target_link_libraries(bench_collectives PRIVATE zero_internal MPI::MPI_C)  # src/comm internals
add_executable(bench_shared_reduce_scatter ${CMAKE_CURRENT_LIST_DIR}/bench_shared_reduce_scatter.cpp)
target_link_libraries(bench_shared_reduce_scatter PRIVATE zero)
target_compile_options(bench_shared_reduce_scatter PRIVATE ${ZERO_WARNINGS})
# Block quantization kernels of ZeRO++ (src/quant/): loops per SIMD level against ATen.
add_executable(bench_quantization ${CMAKE_CURRENT_LIST_DIR}/bench_quantization.cpp)
target_link_libraries(bench_quantization PRIVATE zero_internal CLI11::CLI11)
target_compile_options(bench_quantization PRIVATE ${ZERO_WARNINGS})
