# libFuzzer targets (tests/fuzz/): built with ZERO_FUZZ (clang) and run by scripts/sanitize.sh
# for a bounded time each, from seeds it makes (configs/, a checkpoint it saves).
if(ZERO_FUZZ)
  foreach(name fuzz_config fuzz_safetensors fuzz_checkpoint_metadata)
    add_executable(${name} fuzz/${name}.cpp)
    target_compile_options(${name} PRIVATE ${ZERO_WARNINGS} -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE zero nlohmann_json::nlohmann_json ZLIB::ZLIB)
  endforeach()
endif()
