// The smallest complete use of zero: GPT-2 trained with ZeRO across MPI ranks.
//
//   mpirun -np 2 train_minimal [CONFIG.json] [STEPS]
//
// Each rank trains on its own slice of a fixed synthetic batch (the real data pipeline is the
// zero-train job); the loss falls because the batch repeats. Rank 0 prints the loss and what
// each rank holds, against the ZeRO paper's formula for the configured stage.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gpt2.h"
#include "zero/memory.h"

namespace {

const char* kDefaultConfig = R"({
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e6}
})";

}  // namespace

int main(int argc, char** argv) {
  try {
    zero::keep_freed_host_memory();
    auto comm = zero::make_mpi_communicator();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / comm->size()));
    const zero::Config config = argc > 1 ? zero::load_config(argv[1], comm->size())
                                         : zero::parse_config(kDefaultConfig, comm->size(), "built-in");
    const int steps = argc > 2 ? std::stoi(argv[2]) : 30;

    torch::manual_seed(0);  // the same initial model on every rank (rank 0's is broadcast anyway)
    auto model = std::make_shared<zero::gpt2::GPT2Impl>(zero::gpt2::GPT2Config::preset("gpt2-tiny"));
    auto engine = zero::initialize(model, config, comm);

    const int64_t batch = config.train_micro_batch_size_per_gpu;
    const int64_t seq = 64;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + comm->rank());
    at::Tensor tokens = at::randint(0, model->config().vocab_size, {batch, seq + 1}, generator);
    at::Tensor x = tokens.narrow(1, 0, seq).contiguous();
    at::Tensor y = tokens.narrow(1, 1, seq).contiguous();

    for (int step = 0; step < steps; ++step) {
      at::Tensor loss = model->loss(model->forward(x), y);
      engine->backward(loss);
      engine->step();
      if (comm->rank() == 0 && (step % 5 == 0 || step == steps - 1)) {
        std::printf("step %3d  loss %.4f  grad norm %.3f  loss scale %g\n", step,
                    loss.item<double>(), engine->global_grad_norm(), engine->loss_scale());
      }
    }
    const zero::ModelStateBytes bytes = engine->model_state_bytes();
    const auto comm_stats = engine->communication();
    if (comm->rank() == 0) {
      const double n = comm->size();
      const double p = static_cast<double>(engine->num_parameters());
      std::printf("\nZeRO stage %d on %d ranks, %.2fM parameters\n", config.zero_optimization.stage,
                  comm->size(), p / 1e6);
      std::printf("model state per rank: %.1f MiB (params %.1f, grads %.1f, fp32 master %.1f, "
                  "optimizer %.1f) = %.2f bytes/parameter\n",
                  bytes.total() / 1048576.0, bytes.params / 1048576.0, bytes.grads / 1048576.0,
                  bytes.master_params / 1048576.0, bytes.optimizer_state / 1048576.0,
                  bytes.total() / p);
      if (config.param_dtype != at::kFloat) {
        const int stage = config.zero_optimization.stage;
        const double formula = stage == 0 ? 16 : stage == 1 ? 4 + 12 / n : 2 + 14 / n;
        std::printf("ZeRO paper formula for stage %d at N=%d: %.2f bytes/parameter "
                    "(plain data parallel: 16)\n", stage, comm->size(), formula);
      }
      std::printf("communicated per rank: reduce-scatter %.1f MiB, all-gather %.1f MiB over %d steps\n",
                  comm_stats.reduce_scatter.bytes / 1048576.0, comm_stats.all_gather.bytes / 1048576.0,
                  steps);
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
