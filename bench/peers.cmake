# zero's side of the peers benchmark (bench/peers/run.sh drives it beside the Python systems).
add_executable(bench_peer_zero ${CMAKE_CURRENT_LIST_DIR}/bench_peer_zero.cpp)
target_link_libraries(bench_peer_zero PRIVATE zero zero_gpt2 nlohmann_json::nlohmann_json)
target_compile_options(bench_peer_zero PRIVATE ${ZERO_WARNINGS})
