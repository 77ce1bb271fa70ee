// libFuzzer target: the safetensors reader (zero::read_safetensors) on arbitrary file contents:
// header length, JSON header, dtypes, shapes, offsets, coverage. See fuzz_util.h.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "zero/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = zero::fuzz::scratch_dir() / "input.safetensors";
  zero::fuzz::write_file(path, data, size);
  zero::fuzz::expect_clean([&] {
    const zero::SafetensorsFile file = zero::read_safetensors(path.string());
    for (const auto& [name, tensor] : file.tensors) (void)tensor.sum();  // touch every byte
  });
  return 0;
}
