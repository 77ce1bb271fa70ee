// Note [A step without a device read] (src/engine/engine_core.cpp): the step without a read
// of its norm (the multiplier handed to the optimizer as the step's tensor, a GPU step's path),
// taken here on CPU ranks (white-box: the engine's switch), gives the reading path's
// parameters and norms bit for bit, with clipping that cuts and without, at every stage, in
// fp32 and bf16; fp16 reads whatever the switch (its overflow check).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>

#include "engine/engine_core.h"
#include "engine_harness.h"
#include "test_util.h"

namespace zero::test {
namespace {

constexpr double kClip = 0.05;  // below these models' gradient norms: clipping cuts
constexpr const char* kStage3Partitioned =
    "\"stage3_param_persistence_threshold\": 0, \"overlap_comm\": true";

void multiplier_on_tensors(Engine& engine) {
  auto* core = dynamic_cast<EngineCore*>(&engine);
  ASSERT_NE(core, nullptr);
  core->set_multiplier_on_tensors(true);
}

TEST(StepMultiplier, AsTensorsItChangesNoBit) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  for (const char* dtype : {"fp32", "bf16", "fp16"}) {
    for (const double clipping : {kClip, 0.0}) {
      for (int stage = 0; stage <= 3; ++stage) {
        SCOPED_TRACE(std::string(dtype) + " clipping " + std::to_string(clipping) + " stage " +
                     std::to_string(stage));
        RunOptions options;
        options.dtype = dtype;
        options.gradient_clipping = clipping;
        options.stage = stage;
        options.steps = 3;
        options.extra_zero_json = stage == 3 ? kStage3Partitioned : "";
        const RunResult host = run_engine(spec, options, comm);
        options.on_engine = multiplier_on_tensors;
        const RunResult tensors = run_engine(spec, options, comm);
        EXPECT_TRUE(at::equal(tensors.parameters, host.parameters));
        EXPECT_EQ(tensors.norms, host.norms);
      }
    }
  }
}

}  // namespace
}  // namespace zero::test
