// zero::initialize (zero/engine.h): the engine of the configured stage. Stages 0-2 hold the
// parameters replicated (flat_engine.cpp), stage 3 partitioned per unit (stage3_engine.cpp);
// what they share is in engine_core.h and flat_group.h.
#include <cstdio>
#include <string>

#include <torch/nn/module.h>

#include "engine/engine_core.h"
#include "zero/activation_checkpointing.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/memory.h"

namespace zero {
namespace {

// Note [CPU offload on CPU ranks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// DeepSpeed's offload device "cpu" moves state from the GPU to host memory. A CPU rank's state is in host memory already, so the engine honours the key
// by keeping it there (Placement::kHost) and nothing moves; say so once, so that nobody
// expects a memory saving from it here.
std::string offload_notice(const Config& config) {
  const ZeroOptimizationConfig& zero = config.zero_optimization;
  std::string parts;
  if (zero.offload_optimizer.device == OffloadDevice::kCpu) parts = "offload_optimizer";
  if (zero.offload_param.device == OffloadDevice::kCpu) {
    parts += parts.empty() ? "offload_param" : " and offload_param";
  }
  if (parts.empty()) return "";
  return "zero: zero_optimization." + parts + ".device \"cpu\": this model is on the CPU, " +
         "so that state is in host memory already and stays there (no memory is saved on a " +
         "CPU rank; pin_memory has no effect without CUDA)";
}

// The same for activation_checkpointing.cpu_checkpointing (Note [CPU offload on CPU ranks]):
// a CPU model's checkpointed inputs are in host memory already.
std::string cpu_checkpointing_notice(const Config& config, const torch::nn::Module& model) {
  if (!config.activation_checkpointing.cpu_checkpointing) return "";
  for (const at::Tensor& parameter : model.parameters()) {
    if (!parameter.is_cpu()) return "";
  }
  return "zero: activation_checkpointing.cpu_checkpointing: this model is on the CPU, so the "
         "checkpointed inputs are in host memory already and stay there";
}

}  // namespace

void check_config_for_ranks(const Config& config, const Communicator& comm) {
  const ZeroPlusPlusConfig& zeropp = config.zero_optimization.zeropp;
  const Topology& topology = comm.topology();
  const int64_t hpz = zeropp.hpz_partition_size;
  // hpZ and qgZ run collectives over node groups (Note [ZeRO++] in stage3_engine.cpp).
  const char* grouped = hpz > 1                       ? "zero_hpz_partition_size"
                        : zeropp.quantized_gradients ? "zero_quantized_gradients"
                                                      : nullptr;
  ZERO_CHECK(grouped == nullptr || comm.capabilities().node_groups, config.source,
             ": zero_optimization.", grouped ? grouped : "", " needs collectives inside a node ",
             "and across nodes (CollectiveGroup), which the ", comm.backend_name(),
             " communicator does not have on ", topology.describe(), "; allowed here: the ",
             "default, or the MPI backend (host staging over it on GPUs) with the same number ",
             "of consecutive ranks on every node");
  ZERO_CHECK(hpz == 1 || (topology.blocked() && hpz == topology.ranks_per_node()),
             config.source, ": zero_optimization.zero_hpz_partition_size = ", hpz,
             " must be 1 (off) or the number of ranks per node, ", topology.ranks_per_node(),
             " on ", topology.describe(), " (the secondary partition is shared by a node's ranks)");
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Config& config,
                                   std::shared_ptr<Communicator> communicator) {
  const bool report = communicator != nullptr && communicator->rank() == 0;
  ZERO_CHECK(model != nullptr, "zero::initialize: the model is null");
  const std::string checkpointing_notice = cpu_checkpointing_notice(config, *model);
  const ActivationCheckpointingConfig& checkpointing = config.activation_checkpointing;
  configure_activation_checkpointing(
      ActivationCheckpointingOptions{checkpointing.cpu_checkpointing, checkpointing.profile});
  std::unique_ptr<Engine> engine =
      config.zero_optimization.stage == 3
          ? make_stage3_engine(std::move(model), config, std::move(communicator))
          : make_flat_engine(std::move(model), config, std::move(communicator));
  release_freed_host_memory();  // what partitioning freed (zero/memory.h says why)
  if (report) {
    // What the config left open and what it became, keys that change nothing here, ...
    for (const std::string& line : config_notices(config)) std::fprintf(stderr, "%s\n", line.c_str());
    // A device model's offload (or its emulation) says what it does instead.
    const std::string device_offload =
        dynamic_cast<const EngineCore&>(*engine).device_offload_notice();
    for (const std::string& notice :
         {compute_dtype_notice(config), device_offload.empty() ? offload_notice(config) : device_offload,
          checkpointing_notice, dynamic_cast<const EngineCore&>(*engine).muon_notice()}) {
      if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
    }
  }
  return engine;
}

}  // namespace zero
