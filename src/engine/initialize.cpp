// zero::initialize (zero/engine.h): the engine of the configured stage. Stages 0-2 hold the
// parameters replicated (flat_engine.cpp), stage 3 partitioned per unit (stage3_engine.cpp);
// what they share is in engine_core.h and flat_group.h.
#include <cstdio>

#include "engine/engine_core.h"
#include "zero/engine.h"

namespace zero {

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Config& config,
                                   std::shared_ptr<Communicator> communicator) {
  const bool report = communicator != nullptr && communicator->rank() == 0;
  std::unique_ptr<Engine> engine =
      config.zero_optimization.stage == 3
          ? make_stage3_engine(std::move(model), config, std::move(communicator))
          : make_flat_engine(std::move(model), config, std::move(communicator));
  if (report) {
    const std::string notice = compute_dtype_notice(config);
    if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
  }
  return engine;
}

}  // namespace zero
