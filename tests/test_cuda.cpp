// CUDA ranks (zero/comm_nccl.h, zero/comm_mpi.h's host staging, the engine on a GPU), run under
// mpirun at 1 and 2 ranks. Without a CUDA device every test skips with one line saying so: the
// CPU-only suite builds this file (when zero_cuda is built) but cannot run it. With one GPU,
// NCCL runs at world size 1 and the host-staged communicator lets 2 ranks share the GPU.
//   - NCCL collectives give the values the MPI backend computes on CPU copies (every dtype
//     exact: small integers), equal and unequal chunks, in place, CPU tensors through NCCL, and
//     arguments refused at issue.
//   - Host staging of CUDA tensors gives the MPI backend's bits.
//   - The engine on CUDA at stages 0-3 x fp32/bf16 x accumulation 1 and 3 x clipping matches
//     single-process libtorch CUDA training with torch::optim::AdamW: per-step losses within
//     1e-5 relative in fp32 (the fused CUDA kernels round differently from torch::optim's
//     unfused ones, hence not bitwise), 2e-2 in bf16.
//   - A bf16 training step reads nothing from the device (Note [A step without a device
//     read]): counted with c10's CUDA sync debug mode, which warns on every synchronizing ATen
//     call.
//   - ZeRO-Offload of the CUDA model's optimizer against the state on the device, at stages 1-3
//     (fp32 within 1e-6 relative per step), and cpu_checkpointing keeping the gradients.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/fused_kernels_cuda.h"
#include "engine/engine_core.h"
#include "engine_harness.h"
#include "test_util.h"
#include "zero/comm_mpi.h"
#include "zero/comm_nccl.h"
#include "zero/cuda_support.h"
#include "zero/activation_checkpointing.h"
#include "zero/error.h"
#include "zero/gpt2.h"

namespace zero::test {
namespace {

// The fused CUDA kernels for the models' GPU runs: linked statically here, so registered by
// hand (a lookup through zero::cuda_support would load the shared libraries, a second copy).
[[maybe_unused]] const bool kernels_registered =
    (kernels::register_cuda_kernels(&cuda_fused_kernels()), true);

// Skips (every rank alike) unless this process sees a CUDA device.
#define ZERO_REQUIRE_CUDA()                                                                   \
  do {                                                                                        \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA tests need a GPU";   \
  } while (0)

// The communicator for CUDA tensors at this world size: NCCL when every rank has a GPU of its
// own, else host staging over MPI (ranks sharing one GPU).
std::shared_ptr<Communicator> cuda_world() {
  auto host = world();
  if (host->size() <= cuda_device_count()) return make_nccl_communicator(*host);
  return make_host_staged_communicator(host);
}

// This rank's GPU (its local rank's, zero::cuda_device_for_local_rank), as the programs take
// it: on a machine with a GPU per rank, rank 1 must not train on cuda:0.
std::string rank_device() { return "cuda:" + std::to_string(default_cuda_device()); }

at::Tensor values(int64_t n, at::ScalarType dtype, int salt, const at::Device& device) {
  return (at::arange(n, at::kFloat).remainder(13) + world()->rank() * 3 + salt)
      .to(dtype)
      .to(device);
}

// Every collective on CUDA tensors against the MPI backend on CPU copies of the same values.
void check_collectives(Communicator& cuda) {
  auto host = world();
  const at::Device gpu(rank_device());
  const int rank = host->rank();
  const int size = host->size();
  std::vector<int64_t> uneven;
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    uneven.push_back(4 + 5 * r);
    total += uneven.back();
  }
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    at::Tensor d = values(97, dtype, 1, gpu), h = d.cpu();
    cuda.all_reduce(d, ReduceOp::kSum)->wait();
    host->all_reduce(h, ReduceOp::kSum)->wait();
    EXPECT_TRUE(at::equal(d.cpu(), h));
    for (const std::vector<int64_t>& counts : {std::vector<int64_t>{}, uneven}) {
      const int64_t mine = counts.empty() ? 6 : counts[rank];
      const int64_t whole = counts.empty() ? 6 * size : total;
      at::Tensor in_d = values(whole, dtype, 2, gpu), in_h = in_d.cpu();
      at::Tensor out_d = at::empty({mine}, in_d.options()), out_h = at::empty({mine}, dtype);
      cuda.reduce_scatter(in_d, out_d, ReduceOp::kSum, counts)->wait();
      host->reduce_scatter(in_h, out_h, ReduceOp::kSum, counts)->wait();
      EXPECT_TRUE(at::equal(out_d.cpu(), out_h));
      at::Tensor part = values(mine, dtype, 3, gpu);
      at::Tensor gathered_d = at::zeros({whole}, part.options()), gathered_h = at::zeros({whole}, dtype);
      cuda.all_gather(part, gathered_d, counts)->wait();
      host->all_gather(part.cpu(), gathered_h, counts)->wait();
      EXPECT_TRUE(at::equal(gathered_d.cpu(), gathered_h));
    }
  }
  at::Tensor bytes = at::full({41}, rank, at::TensorOptions().dtype(at::kByte).device(gpu));
  cuda.broadcast(bytes, size - 1)->wait();
  EXPECT_TRUE(at::equal(bytes.cpu(), at::full({41}, size - 1, at::kByte)));
  // Host tensors through the same communicator (texts, agreement, summaries).
  EXPECT_EQ(all_gather_texts(cuda, "rank " + std::to_string(rank)).size(),
            static_cast<size_t>(size));
  at::Tensor on_host = at::full({3}, 1.0, at::kDouble);
  cuda.all_reduce(on_host, ReduceOp::kSum)->wait();
  EXPECT_TRUE(at::equal(on_host, at::full({3}, static_cast<double>(size), at::kDouble)));
}

TEST(Cuda, NcclCollectivesMatchTheMpiBackend) {
  ZERO_REQUIRE_CUDA();
  if (world()->size() > cuda_device_count()) {
    GTEST_SKIP() << world()->size() << " ranks on " << cuda_device_count()
                 << " GPU(s): NCCL needs one GPU per rank (the host-staged test covers this)";
  }
  auto nccl = make_nccl_communicator(*world());
  EXPECT_EQ(nccl->backend_name(), "nccl");
  check_collectives(*nccl);
  // A CUDA input with a CPU output is refused at issue, naming both.
  try {
    (void)nccl->all_gather(at::zeros({2}, at::Device(rank_device())),
                           at::zeros({2 * nccl->size()}));
    ADD_FAILURE() << "an all_gather from a CUDA tensor into a CPU one was issued";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("all_gather (nccl, rank "), std::string::npos)
        << error.what();
  }
}

// One GPU per rank and nothing on the others: after collectives, in_order tasks (NCCL's and
// host staging's, whose copies run on other threads) and a memory reading, no other GPU has a
// primary context in this process (a context costs hundreds of MB of the other rank's GPU).
// Read through the driver API, loaded at run time (CI machines have no libcuda).
TEST(CudaDevice, NoContextOnAnotherGpu) {
  ZERO_REQUIRE_CUDA();
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU: no other GPU to keep clean";
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) GTEST_SKIP() << "libcuda.so.1 not loadable: " << dlerror();
  using GetState = int (*)(int device, unsigned* flags, int* active);
  const auto get_state = reinterpret_cast<GetState>(dlsym(driver, "cuDevicePrimaryCtxGetState"));
  ASSERT_NE(get_state, nullptr);
  auto comm = cuda_world();
  check_collectives(*comm);
  comm->in_order([] {})->wait();
  auto staged = make_host_staged_communicator(world());
  at::Tensor values_on_gpu = at::ones({8}, at::Device(rank_device()));
  staged->all_reduce(values_on_gpu, ReduceOp::kSum)->wait();
  (void)zero_cuda_support_v1()->memory(default_cuda_device());  // the linked copy
  for (int device = 0; device < cuda_device_count(); ++device) {
    unsigned flags = 0;
    int active = 0;
    ASSERT_EQ(get_state(device, &flags, &active), 0);
    if (device == default_cuda_device()) {
      EXPECT_EQ(active, 1) << "no context on this rank's own GPU " << device;
    } else {
      EXPECT_EQ(active, 0) << "rank " << world()->rank() << " (GPU " << default_cuda_device()
                           << ") made a context on GPU " << device;
    }
  }
}

TEST(Cuda, HostStagedCollectivesMatchTheMpiBackend) {
  ZERO_REQUIRE_CUDA();
  auto staged = make_host_staged_communicator(world());
  check_collectives(*staged);
}

TEST(Cuda, EngineMatchesTorchOptimOnCuda) {
  ZERO_REQUIRE_CUDA();
  auto comm = cuda_world();
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage = 0; stage <= 3; ++stage) {
    for (const char* dtype : {"fp32", "bf16"}) {
      for (int gas : {1, 3}) {
        for (double clip : {0.0, 0.5}) {
          SCOPED_TRACE("stage " + std::to_string(stage) + " " + dtype + " gas " +
                       std::to_string(gas) + " clip " + std::to_string(clip));
          RunOptions options;
          options.device = rank_device();
          options.stage = stage;
          options.dtype = dtype;
          options.gradient_accumulation_steps = gas;
          options.gradient_clipping = clip;
          options.steps = 4;
          if (stage == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
          const RunResult engine = run_engine(spec, options, comm);
          RunOptions reference_options = options;
          reference_options.dtype = "fp32";
          const RunResult reference = run_reference(spec, reference_options, comm->size());
          const double tolerance = std::string(dtype) == "fp32" ? 1e-5 : 2e-2;
          ASSERT_EQ(engine.losses.size(), reference.losses.size());
          for (size_t i = 0; i < engine.losses.size(); ++i) {
            EXPECT_NEAR(engine.losses[i], reference.losses[i],
                        tolerance * std::abs(reference.losses[i]))
                << "step " << i;
          }
        }
      }
    }
  }
}

// ZeRO-Offload of a CUDA model (Note [Offload of a device model]): the optimizer state on the
// host, gradients down and parameters up on the copy stream, the CPU optimizer loop. Against
// the state kept on the device (ATen's fused CUDA optimizer): per-step losses within 1e-6
// relative in fp32 (the two loops round differently: not bitwise), 1e-2 in bf16, at stages 1-3
// with and without clipping (the step after backward, and overlapped with it) and accumulation;
// the engine really offloads (its notice's state) and the optimizer state is off the device.
TEST(Cuda, OffloadedOptimizerMatchesTheStateOnTheDevice) {
  ZERO_REQUIRE_CUDA();
  auto comm = cuda_world();
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage = 1; stage <= 3; ++stage) {
    for (const char* dtype : {"fp32", "bf16"}) {
      for (int gas : {1, 3}) {
        for (double clip : {0.0, 0.5}) {
          SCOPED_TRACE("stage " + std::to_string(stage) + " " + dtype + " gas " +
                       std::to_string(gas) + " clip " + std::to_string(clip));
          RunOptions options;
          options.device = rank_device();
          options.stage = stage;
          options.dtype = dtype;
          options.gradient_accumulation_steps = gas;
          options.gradient_clipping = clip;
          options.steps = 4;
          const std::string base = stage == 3 ? "\"stage3_param_persistence_threshold\": 0" : "";
          options.extra_zero_json = base;
          const RunResult on_device = run_engine(spec, options, comm);
          options.extra_zero_json = base + (base.empty() ? "" : ", ") +
                                    "\"offload_optimizer\": {\"device\": \"cpu\", "
                                    "\"pin_memory\": true}";
          const RunResult offloaded = run_engine(spec, options, comm);
          auto& core = dynamic_cast<EngineCore&>(*offloaded.engine);
          EXPECT_TRUE(core.offloads_from_device());
          EXPECT_EQ(core.overlapped_steps(), clip == 0.0 ? options.steps : 0);
          const double tolerance = std::string(dtype) == "fp32" ? 1e-6 : 1e-2;
          ASSERT_EQ(on_device.losses.size(), offloaded.losses.size());
          for (size_t i = 0; i < on_device.losses.size(); ++i) {
            EXPECT_NEAR(offloaded.losses[i], on_device.losses[i],
                        tolerance * std::abs(on_device.losses[i]))
                << "step " << i;
          }
          EXPECT_LT(relative_error(offloaded.parameters, on_device.parameters),
                    std::string(dtype) == "fp32" ? 1e-5 : 2e-2);
        }
      }
    }
  }
}

// offload_param on a CUDA model: the shards on the host, copied up for each gather, bitwise
// what the offloaded optimizer alone gives (the same host loop steps the same values); alone,
// without offload_optimizer, it is refused by name.
TEST(Cuda, OffloadedParametersMatchTheOffloadedOptimizer) {
  ZERO_REQUIRE_CUDA();
  auto comm = cuda_world();
  const ModelSpec spec = tiny_gpt2_spec();
  RunOptions options;
  options.device = rank_device();
  options.stage = 3;
  options.dtype = "bf16";
  options.gradient_clipping = 1.0;
  options.steps = 4;
  const std::string base = "\"stage3_param_persistence_threshold\": 0, \"offload_optimizer\": "
                           "{\"device\": \"cpu\", \"pin_memory\": true}";
  options.extra_zero_json = base;
  const RunResult optimizer_only = run_engine(spec, options, comm);
  options.extra_zero_json = base + ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}";
  const RunResult both = run_engine(spec, options, comm);
  EXPECT_EQ(optimizer_only.losses, both.losses);
  EXPECT_TRUE(at::equal(optimizer_only.parameters, both.parameters));
  options.extra_zero_json = "\"offload_param\": {\"device\": \"cpu\"}";
  try {
    (void)run_engine(spec, options, comm);
    ADD_FAILURE() << "offload_param without offload_optimizer accepted on a GPU";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("needs zero_optimization.offload_optimizer"),
              std::string::npos) << error.what();
  }
}

// activation_checkpointing.cpu_checkpointing on a GPU: the checkpointed blocks' saved inputs
// wait in host memory, and the gradients are those of the plain model (and of checkpointing
// without it) to rounding; the CUDA generator is restored for the recompute (dropout 0.1).
TEST(Cuda, CpuCheckpointingKeepsGradients) {
  ZERO_REQUIRE_CUDA();
  const at::Device gpu(rank_device());
  auto gradients = [&](int64_t blocks, bool cpu_checkpointing) {
    configure_activation_checkpointing(ActivationCheckpointingOptions{cpu_checkpointing, false});
    gpt2::GPT2Config config = gpt2::GPT2Config::named("L3-C64-H4-T32");
    config.vocab_size = 97;
    config.dropout = 0.1;
    config.checkpointed_blocks = blocks;
    torch::manual_seed(11);
    auto model = std::make_shared<gpt2::GPT2Impl>(config);
    model->to(gpu);
    const at::Tensor tokens = at::randint(0, 97, {2, 17}, at::TensorOptions().dtype(at::kLong)).to(gpu);
    at::manual_seed(5);  // the CUDA generator too: the same dropout draws in every run
    model->forward_loss(tokens.narrow(1, 0, 16).contiguous(), tokens.narrow(1, 1, 16).contiguous())
        .backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().cpu());
    configure_activation_checkpointing(ActivationCheckpointingOptions{});
    return grads;
  };
  const std::vector<at::Tensor> plain = gradients(0, false);
  for (bool cpu : {false, true}) {
    SCOPED_TRACE(cpu ? "cpu_checkpointing" : "checkpointing");
    const std::vector<at::Tensor> checkpointed = gradients(3, cpu);
    ASSERT_EQ(plain.size(), checkpointed.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_LT(relative_error(checkpointed[i], plain[i]), 1e-6) << "parameter " << i;
    }
  }
}

// Counts c10's warnings about synchronizing CUDA calls while installed.
class SyncCounter : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchroniz") != std::string::npos) ++count;
  }
  int count = 0;
};

TEST(Cuda, OneDeviceReadPerStep) {
  ZERO_REQUIRE_CUDA();
  if (world()->size() > cuda_device_count()) {
    GTEST_SKIP() << "host staging synchronizes by design; this counts NCCL's steps";
  }
  auto comm = make_nccl_communicator(*world());
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    RunOptions options;
    options.device = rank_device();
    options.stage = stage;
    options.dtype = "bf16";
    options.gradient_clipping = 1.0;
    options.steps = 1;
    if (stage == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
    RunResult warm = run_engine(spec, options, comm);  // builds the model, engine and trace
    auto [x, y] = spec.batch(7, comm->size() * options.micro_batch);
    const at::Tensor xs = x.narrow(0, comm->rank() * options.micro_batch, options.micro_batch)
                              .to(at::Device(rank_device()));
    const at::Tensor ys = y.narrow(0, comm->rank() * options.micro_batch, options.micro_batch)
                              .to(at::Device(rank_device()));
    const at::Tensor loss = spec.loss(*warm.model, xs, ys);
    SyncCounter counter;
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    {
      const c10::WarningUtils::WarningHandlerGuard guard(&counter);
      warm.engine->backward(loss);
      warm.engine->step();
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    // Note [A step without a device read]: bf16 keeps the norm on the device.
    EXPECT_EQ(counter.count, 0) << "synchronizing CUDA calls in one training step";
  }
}

}  // namespace
}  // namespace zero::test
