// libFuzzer target: the DeepSpeed config parser (zero::parse_config) on arbitrary text, at one
// and at three ranks (the batch solver depends on the world size), without a trainer and as
// one (TrainerValues fill "auto" values and a missing optimizer). See fuzz_util.h.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "zero/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  zero::TrainerValues trainer;
  trainer.total_steps = 10;
  trainer.hidden_size = 64;
  trainer.bf16_fast = true;  // no GEMM timing inside the fuzzer
  trainer.fp16_fast = false;
  trainer.micro_batch.set(3);
  for (int world : {1, 3}) {
    zero::fuzz::expect_clean([&] {
      const zero::Config config = zero::parse_config(text, world, "fuzz.json");
      // What a program does next with an accepted config.
      (void)zero::effective_config_lines(config);
      (void)zero::config_notices(config);
    });
    zero::fuzz::expect_clean([&] {
      const zero::Config config = zero::parse_config(text, world, "fuzz.json", trainer);
      (void)zero::effective_config_lines(config);
      (void)zero::config_notices(config);
    });
  }
  return 0;
}
