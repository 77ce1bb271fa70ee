// Sharded checkpoints of an engine's training state (Note [Checkpoint format] in
// checkpoint.cpp). The public entry points are Engine::save_checkpoint / load_checkpoint
// (zero/engine.h); the engine implements CheckpointSubject, and this code sees nothing else
// of it (the dependency runs from the engine to here, never back).
#pragma once

#include <string>
#include <vector>

#include "state/shard_state.h"
#include "state/training_state.h"
#include "zero/comm.h"
#include "zero/config.h"

namespace zero {

/// What a checkpoint reads from and loads into: the communicator and config, the trainable
/// parameters in model order (what StateSegment::param indexes), the shard state (Note [Shard
/// state]: master weights, moments, segments) and the scalars of progress.
class CheckpointSubject {
 public:
  virtual Communicator& communicator() = 0;
  virtual const Config& config() const = 0;
  virtual std::vector<CheckpointParameter> checkpoint_parameters() const = 0;
  virtual ShardState& shard_state() = 0;
  /// Whether the 16-bit parameter copy of the shard space is saved too ("param16/...": stage
  /// 3 with 16-bit parameters, where readers export it; a load rounds it from the master).
  virtual bool saves_param_shard() const = 0;
  virtual TrainingCounters counters() const = 0;
  /// After a load committed the shard state (master weights, moments): take the counters and
  /// make the parameters whole again from the master weights (collective).
  virtual void finish_load(const TrainingCounters& counters) = 0;

 protected:
  ~CheckpointSubject() = default;
};

/// Collective. Returns the tag written.
std::string save_checkpoint(CheckpointSubject& subject, const std::string& dir,
                            const std::string& tag, const std::string& client_state);
/// Collective. Engine::check_checkpoint_destination: `dir` writable from every rank, with room
/// for one more checkpoint; throws CollectiveError on every rank otherwise.
void check_checkpoint_destination(CheckpointSubject& subject, const std::string& dir);
/// Collective. Returns the saved client state (JSON text).
std::string load_checkpoint(CheckpointSubject& subject, const std::string& dir,
                            const std::string& tag);

}  // namespace zero
