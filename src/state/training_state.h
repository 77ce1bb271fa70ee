// The vocabulary of a rank's training state that checkpoints read and write: which elements of
// which parameters the shard space holds (StateSegment), the parameters by name and shape, and
// the scalars of training progress. Shared by the engine (src/engine) and the checkpoint code
// (src/checkpoint), which depends on this and on the shard state, never on the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "state/loss_scaler.h"

namespace zero {

/// Elements [begin, end) of trainable parameter `param` (flattened; an index into the
/// parameter list in model order), stored at [offset, offset + end - begin) of the shard space.
struct StateSegment {
  int param = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t offset = 0;
};

struct CheckpointParameter {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

/// The scalars of training progress.
struct TrainingCounters {
  int64_t global_steps = 0;
  int64_t skipped_steps = 0;
  int64_t micro_steps = 0;
  int64_t optimizer_steps = 0;
  double lr = 0;
  LossScaler::State scaler;
};

}  // namespace zero
