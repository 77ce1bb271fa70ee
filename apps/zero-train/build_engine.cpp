// zero-train, phase 4 (Note [zero-train's phases] in trainer.h): the plan against the machine,
// the communicator, the model and its engine, and --init's weights.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "trainer.h"
#include "zero/error.h"
#include "zero/memory.h"
#include "zero/sharded_init.h"

namespace zero::train {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// --device cuda: does the plan fit the GPU? If not, one message with the offload that would
// make it fit.
void check_plan_fits_gpu(const Options& o, const Config& config, const Planned& p, int world) {
  const CudaMemory memory = p.cuda->memory(p.device.index());
  if (p.plan.device_bytes <= memory.free_bytes) return;
  const int64_t host = host_memory_available();
  const std::string fits = offload_that_fits(config, p.plan_model, memory.free_bytes,
                                             host > 0 ? host / world : INT64_MAX);
  char needed[192];
  std::snprintf(needed, sizeof(needed),
                "%s at ZeRO stage %d needs %.2f GiB of %s per rank at the peak of a step "
                "(zero-train --plan shows what), but %.2f GiB of its %.2f GiB are free",
                o.model.c_str(), config.zero_optimization.stage, gib(p.plan.device_bytes),
                p.device.str().c_str(), gib(memory.free_bytes), gib(memory.total_bytes));
  throw Error(std::string(needed) + "; " +
              (fits.empty() ? "no offload of the optimizer state makes it fit: use more GPUs "
                              "(stage 3 divides the parameters too) or a smaller micro-batch"
                            : "it fits with " + fits));
}

}  // namespace

Trainee build_engine(const Options& o, Inputs& in, const Planned& p, const ResumeFrom& from,
                     const std::shared_ptr<Communicator>& comm) {
  const Config& config = in.config;
  Trainee t;
  t.engine_comm = comm;
  if (p.cuda) {
    run_and_agree(*comm, "checking the GPU's memory",
                  [&] { check_plan_fits_gpu(o, config, p, comm->size()); });
    // The communicator of the engine: NCCL between the GPUs (collective), else MPI's.
    run_and_agree(*comm, "connecting the GPUs", [&] {
      NcclOptions nccl;
      nccl.device = p.device.index();
      t.engine_comm = p.cuda->make_nccl_communicator(*comm, nccl);
    });
  }
  // Before anything is allocated: does the planned peak fit this machine's memory, and the
  // swap files its disk? (A CollectiveError on every rank when not: one message, exit 2.)
  t.estimate = check_plan_fits(config, p.plan, in.model->num_parameters(), *comm);
  torch::manual_seed(config.seed);
  if (config.zero_optimization.stage == 3) {
    // Partitioned unit by unit as it is built: the whole model is never in memory. On a GPU
    // each unit's shards go there as it is partitioned; what stays whole follows after.
    ShardedInit sharded(config, t.engine_comm,
                        p.cuda ? std::optional<c10::Device>(p.device) : std::nullopt);
    t.model = in.model->build();
  } else {
    t.model = in.model->build();
  }
  if (p.cuda) {
    // Built on the host (same values as a CPU run), moved in the training dtype at stages
    // 0-2, where the engine would convert it anyway: the fp32 copy never reaches the GPU.
    if (config.zero_optimization.stage == 3) {
      t.model->to(p.device);
    } else {
      t.model->to(p.device, config.param_dtype);
    }
    p.cuda->reset_memory_peaks(p.device.index());
  }
  t.engine = initialize(t.model, config, t.engine_comm);
  // --init: the Hugging Face weights, a block at a time (zero/causal_lm.h); a resumed run's
  // checkpoint holds the weights it continues from instead.
  if (!o.init.empty() && from.dir.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    load_hf_weights(*t.engine, *t.model, o.init, *comm);
    char line[64];
    std::snprintf(line, sizeof(line), " (%.1f s)",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    t.init_note = "starting from the weights of " + o.init + line;
  }
  // Before training: every rank can write the checkpoint directory, with room for a
  // checkpoint (a failure is a CollectiveError on every rank).
  if (o.save_every > 0) t.engine->check_checkpoint_destination(checkpoint_dir(o));
  return t;
}

}  // namespace zero::train
