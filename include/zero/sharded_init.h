// Building a model for ZeRO stage 3 without ever holding all of it (DeepSpeed's zero.Init).
//
//   auto config = zero::load_config("ds_config.json", comm->size());   // stage 3
//   std::shared_ptr<GPT2Impl> model;
//   {
//     zero::ShardedInit sharded(config, comm);
//     model = std::make_shared<GPT2Impl>(preset);   // each declared unit is partitioned at once
//   }
//   auto engine = zero::initialize(model, config, comm);  // adopts the shards
//
// While a ShardedInit is alive on this thread, every zero::declare_unit call partitions that
// unit right away: its parameters (except those of units declared inside it, which were
// partitioned already, and those small enough to stay whole) are converted to the config's
// dtype, rank 0's values are broadcast, this rank keeps its 1/N shard and the full copy is
// freed. Peak memory while building is therefore one unit (plus the small persistent
// parameters and the shards), not the model. Consequences for the model's code:
//   - a unit must be fully initialised when it is declared (declare it at the end of its
//     construction; zero::gpt2 does);
//   - after that its partitioned parameters are released: touch them only inside zero::run or
//     under zero::GatheredParameters;
//   - every rank must build the same model (each declaration is a collective).
// Without a ShardedInit, zero::initialize partitions the finished model one unit at a time;
// the peak is then the model as built plus one unit.
#pragma once

#include "zero/export.h"

#include <c10/core/Device.h>

#include <memory>
#include <optional>

#include "zero/comm.h"
#include "zero/config.h"

namespace zero {

class ZERO_API ShardedInit {
 public:
  /// `config` must be a stage-3 config for `comm`'s world size (zero::Error otherwise).
  /// `device`: where each unit's partitioned parameters go as it is partitioned (e.g. the
  /// rank's GPU while the model is built on the CPU); nullopt: where they were created. The
  /// parameters that stay whole (persistent) are not moved: move the finished model with
  /// `model->to(device)`, which leaves the partitioned ones where they are.
  ShardedInit(const Config& config, std::shared_ptr<Communicator> comm,
              std::optional<c10::Device> device = std::nullopt);
  ~ShardedInit();
  ShardedInit(const ShardedInit&) = delete;
  ShardedInit& operator=(const ShardedInit&) = delete;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace zero
