// ZeRO-Offload of a device model (Note [Offload of a device model], src/engine/host_offload.h),
// run on CPU ranks at 1-3 ranks through its CPU stand-in (ZERO_EMULATE_DEVICE_OFFLOAD: the
// engine's tensors play the device, the shard state lives in separate host tensors, a copy
// thread plays the copy stream), so every path of the pipeline runs here without a GPU:
//   - training is bitwise that of the state kept beside the parameters, at stages 1-3, fp32
//     and bf16, with and without accumulation, with clipping (the step after backward) and
//     without (the step overlapped with backward, as gradients arrive), fp16 with its loss
//     scale, and the optimizer state on NVMe;
//   - the overlapped step really runs during backward (counted), and what would make it wrong
//     is refused: a learning rate set, or a checkpoint saved, between that backward and its
//     step; a backward that fails after it began leaves an engine that says so until a
//     checkpoint is loaded;
//   - the transfer queue and the gradient pipeline alone: order, accumulation, conversion, the
//     arrival hook, failures.
// On a GPU the same tests run with the real copy stream in test_cuda (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/host_offload.h"
#include "engine_harness.h"
#include "offload/transfer_queue.h"
#include "test_util.h"
#include "zero/error.h"

namespace zero::test {
namespace {

// ZERO_EMULATE_DEVICE_OFFLOAD=1 while in scope (read when an engine is made).
class EmulatedDeviceOffload {
 public:
  EmulatedDeviceOffload() { setenv("ZERO_EMULATE_DEVICE_OFFLOAD", "1", 1); }
  ~EmulatedDeviceOffload() { unsetenv("ZERO_EMULATE_DEVICE_OFFLOAD"); }
};

std::string offload_json(int stage, const std::string& device = "cpu") {
  std::string json = stage == 3 ? "\"stage3_param_persistence_threshold\": 0, " : "";
  return json + "\"offload_optimizer\": {\"device\": \"" + device + "\", \"pin_memory\": true}";
}

EngineCore& core(const RunResult& run) { return dynamic_cast<EngineCore&>(*run.engine); }

// The equivalence: every stage, dtype, accumulation and clipping choice, offloaded through the
// pipeline against the state kept beside the parameters: the same bits.
TEST(DeviceOffload, TrainsBitwiseLikeTheStateBesideTheParameters) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage : {1, 2, 3}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      for (int gas : {1, 3}) {
        for (double clip : {0.0, 0.5}) {
          SCOPED_TRACE("stage " + std::to_string(stage) + " " + dtype + " gas " +
                       std::to_string(gas) + " clip " + std::to_string(clip));
          RunOptions options;
          options.stage = stage;
          options.dtype = dtype;
          options.gradient_accumulation_steps = gas;
          options.gradient_clipping = clip;
          options.steps = 3;
          options.extra_zero_json = stage == 3 ? "\"stage3_param_persistence_threshold\": 0" : "";
          const RunResult plain = run_engine(spec, options, comm);
          options.extra_zero_json = offload_json(stage);
          EmulatedDeviceOffload emulated;
          const RunResult offloaded = run_engine(spec, options, comm);
          ASSERT_TRUE(core(offloaded).offloads_from_device());
          EXPECT_EQ(plain.losses, offloaded.losses);
          EXPECT_EQ(plain.norms, offloaded.norms);
          EXPECT_TRUE(at::equal(plain.parameters, offloaded.parameters));
          EXPECT_EQ(plain.state_bytes.total(), offloaded.state_bytes.total());
          // Without clipping every step ran during backward; with it, after.
          EXPECT_EQ(core(offloaded).overlapped_steps(), clip == 0.0 ? options.steps : 0);
        }
      }
    }
  }
}

// overlap_comm off (reductions on the caller's thread), buckets of one parameter, fp16 with a
// loss scale that overflows at first (skipped steps), the optimizer state on NVMe behind the
// device model, and at stage 3 the parameter shards on the host too (offload_param "cpu" or
// "nvme": each gather copies its shard up first): still the same bits.
TEST(DeviceOffload, OtherSettingsChangeNoBit) {
  auto comm = world();
  const std::string nvme = shared_temp_dir("device-offload-nvme");
  const std::string cpu = "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}";
  const std::string on_nvme = "\"sub_group_size\": 500, \"offload_optimizer\": {\"device\": "
                              "\"nvme\", \"nvme_path\": \"" + nvme + "\"}";
  struct Case {
    const char* name;
    int stage;
    const char* dtype;
    std::string both;     // zero_optimization keys of both runs
    std::string offload;  // the offloaded run's
    bool overlapped;      // whether its steps overlap backward
  };
  const std::vector<Case> cases = {
      {"overlap_comm off", 2, "bf16", "\"overlap_comm\": false", cpu, true},
      {"stage 3 overlap_comm off", 3, "fp32", "\"overlap_comm\": false", cpu, true},
      {"fp16 loss scaling", 2, "fp16", "", cpu, false},
      {"nvme", 2, "bf16", "", on_nvme, false},
      {"stage 3 nvme", 3, "bf16", "", on_nvme, false},
      {"stage 3 offload_param cpu", 3, "bf16", "",
       cpu + ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}", true},
      {"stage 3 offload_param cpu, overlap_comm off", 3, "fp32", "\"overlap_comm\": false",
       cpu + ", \"offload_param\": {\"device\": \"cpu\"}", true},
      {"stage 3 offload_param nvme", 3, "bf16", "",
       on_nvme + ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" + nvme +
           "\", \"buffer_count\": 2}", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RunOptions options;
    options.stage = c.stage;
    options.dtype = c.dtype;
    options.steps = 3;
    options.reduce_bucket_size = 1;  // a bucket per parameter: many pieces
    // The same grouping in both runs (stage 3's grouping decides the reduction order).
    std::string both = c.stage == 3 ? "\"stage3_param_persistence_threshold\": 0" : "";
    if (!c.both.empty()) both += (both.empty() ? "" : ", ") + c.both;
    options.extra_zero_json = both;
    const RunResult plain = run_engine(mlp_spec(), options, comm);
    options.extra_zero_json = both + (both.empty() ? "" : ", ") + c.offload;
    EmulatedDeviceOffload emulated;
    const RunResult offloaded = run_engine(mlp_spec(), options, comm);
    ASSERT_TRUE(core(offloaded).offloads_from_device());
    EXPECT_EQ(plain.losses, offloaded.losses);
    EXPECT_TRUE(at::equal(plain.parameters, offloaded.parameters));
    EXPECT_EQ(core(offloaded).overlapped_steps(), c.overlapped ? options.steps : 0);
    // With the shards on the host, every gather copies its shard up (the parameters' only way
    // up: nothing else is published); without, the steps publish the updated shard.
    EXPECT_GT(core(offloaded).offload_stats().transfers.up_bytes, 0);
    EXPECT_GT(core(offloaded).offload_stats().transfers.down_bytes, 0);
  }
}

// Between a boundary backward that stepped during it and engine.step(), a new learning rate
// or a checkpoint would not match the state: both are refused, naming why.
TEST(DeviceOffload, OverlappedStepRefusesWhatWouldNotMatchIt) {
  auto comm = world();
  RunOptions options;
  options.stage = 2;
  options.steps = 1;
  options.extra_zero_json = offload_json(2);
  EmulatedDeviceOffload emulated;
  RunResult run = run_engine(mlp_spec(), options, comm);
  const ModelSpec spec = mlp_spec();
  auto [x, y] = spec.batch(9, comm->size() * options.micro_batch);
  const at::Tensor loss = spec.loss(*run.model, x.narrow(0, comm->rank() * 2, 2),
                                    y.narrow(0, comm->rank() * 2, 2));
  run.engine->backward(loss);
  try {
    run.engine->set_learning_rate(0.5);
    ADD_FAILURE() << "set_learning_rate accepted after an overlapped backward";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("set the rate before backward"), std::string::npos)
        << error.what();
  }
  try {
    run.engine->save_checkpoint(shared_temp_dir("overlapped-save"), "t");
    ADD_FAILURE() << "save_checkpoint accepted between an overlapped backward and its step";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("save after step()"), std::string::npos)
        << error.what();
  }
  run.engine->step();
  run.engine->set_learning_rate(0.5);  // fine again
  EXPECT_EQ(core(run).overlapped_steps(), 2);
}

// Throws from the backward of the first layer's output, after the later layers' gradients
// have been reduced (and, overlapped, stepped).
struct ThrowingMlp {
  torch::nn::Sequential head{torch::nn::Linear(6, 11), torch::nn::Tanh()};
  torch::nn::Sequential tail{torch::nn::Linear(11, 9), torch::nn::Tanh(), torch::nn::Linear(9, 5)};
  std::shared_ptr<torch::nn::Module> module = std::make_shared<torch::nn::Module>();
  ThrowingMlp() {
    torch::manual_seed(3);
    module->register_module("head", head.ptr());
    module->register_module("tail", tail.ptr());
  }
  at::Tensor loss(const at::Tensor& x, bool fail) {
    at::Tensor h = head->forward(x);
    if (fail) {
      h.register_hook([](const at::Tensor&) -> at::Tensor {
        throw std::runtime_error("injected backward failure");
      });
    }
    return tail->forward(h).square().mean();
  }
};

// A backward that fails while the overlapped step is under way leaves a state that may be
// half-updated (on some rank): every rank's engine says so at step and backward until a
// checkpoint is loaded.
TEST(DeviceOffload, FailedOverlappedBackwardIsReportedUntilALoad) {
  auto comm = world();
  RunOptions options;
  options.stage = 2;
  options.reduce_bucket_size = 50;  // the last layer's 50 elements are a bucket of their own
  options.extra_zero_json = offload_json(2);
  EmulatedDeviceOffload emulated;
  ThrowingMlp mlp;
  auto engine = initialize(mlp.module, parse_config(make_config_json(options), comm->size(), "t"),
                           comm);
  const at::Tensor x = at::randn({2, 6});
  engine->backward(mlp.loss(x, false));
  engine->step();
  const std::string dir = shared_temp_dir("half-updated");
  engine->save_checkpoint(dir, "before");
  EXPECT_THROW(engine->backward(mlp.loss(x, true)), std::runtime_error);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      if (attempt == 0) engine->step();
      if (attempt == 1) engine->backward(mlp.loss(x, false));
      ADD_FAILURE() << "a half-updated engine went on (attempt " << attempt << ")";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("half-updated"), std::string::npos) << error.what();
    }
  }
  engine->load_checkpoint(dir, "before");
  engine->backward(mlp.loss(x, false));
  engine->step();
  EXPECT_EQ(engine->global_steps(), 2);
}

// ---- the pieces alone -------------------------------------------------------------------

TEST(TransferQueue, CopiesInOrderOnItsThread) {
  auto queue = make_transfer_queue(at::kCPU);
  const at::Tensor dst = at::zeros({1000});
  TransferQueue::Ticket last = 0;
  for (int i = 0; i < 50; ++i) {
    // Each copy overwrites the whole buffer: only the last one's value may remain.
    last = queue->copy(dst, at::full({1000}, static_cast<float>(i)), TransferQueue::Direction::kUp);
  }
  EXPECT_EQ(last, queue->last());
  queue->wait(last);
  EXPECT_TRUE(at::equal(dst, at::full({1000}, 49.0f)));
  // Converting copies, and a pinned request on the CPU is ordinary memory.
  const at::Tensor half = queue->host_buffer(7, at::kBFloat16, /*pinned=*/true);
  EXPECT_EQ(half.scalar_type(), at::kBFloat16);
  queue->order_current_stream_after(
      queue->copy(half, at::arange(7, at::kFloat), TransferQueue::Direction::kDown));
  EXPECT_TRUE(at::equal(half.to(at::kFloat), at::arange(7, at::kFloat)));
  const TransferQueue::Stats stats = queue->stats();
  EXPECT_EQ(stats.up_bytes, 50 * 1000 * 4);
  EXPECT_EQ(stats.down_bytes, 7 * 4);  // the source's bytes
}

TEST(HostGradientPipeline, AccumulatesConvertsAndReportsInOrder) {
  auto queue = make_transfer_queue(at::kCPU);
  const at::Tensor host = at::zeros({100});
  HostGradientPipeline pipeline(queue, host, 40, at::kBFloat16, /*pinned=*/false);
  std::vector<std::pair<int64_t, int64_t>> arrived;
  pipeline.set_arrival_hook([&](int64_t begin, int64_t end) { arrived.emplace_back(begin, end); });
  // bf16 pieces are converted through staging; fp32 ones without accumulation go straight in.
  pipeline.gradient(at::full({40}, 1.0, at::kBFloat16), 0, /*accumulate=*/false);
  pipeline.gradient(at::full({40}, 2.0, at::kBFloat16), 0, /*accumulate=*/true);
  pipeline.gradient(at::full({30}, 5.0, at::kFloat), 40, /*accumulate=*/false);
  for (int i = 0; i < 10; ++i) {  // more pieces than staging buffers
    pipeline.gradient(at::full({3}, 1.0, at::kBFloat16), 70 + 3 * i, /*accumulate=*/true);
  }
  pipeline.drain();
  EXPECT_TRUE(at::equal(host.narrow(0, 0, 40), at::full({40}, 3.0)));
  EXPECT_TRUE(at::equal(host.narrow(0, 40, 30), at::full({30}, 5.0)));
  EXPECT_TRUE(at::equal(host.narrow(0, 70, 30), at::full({30}, 1.0)));
  ASSERT_EQ(arrived.size(), 13u);
  using Range = std::pair<int64_t, int64_t>;
  EXPECT_EQ(arrived[0], Range(0, 40));
  EXPECT_EQ(arrived[2], Range(40, 70));
  EXPECT_EQ(arrived[12], Range(97, 100));
  EXPECT_EQ(pipeline.staging_bytes(), 3 * 40 * 2);
}

TEST(HostGradientPipeline, AFailingHookFailsTheDrainOnceAndThePipelineGoesOn) {
  auto queue = make_transfer_queue(at::kCPU);
  const at::Tensor host = at::zeros({10});
  HostGradientPipeline pipeline(queue, host, 10, at::kFloat, /*pinned=*/false);
  pipeline.set_arrival_hook([](int64_t begin, int64_t) {
    if (begin == 0) throw Error("hook failed");
  });
  pipeline.gradient(at::ones({5}), 0, /*accumulate=*/true);
  pipeline.gradient(at::ones({5}), 5, /*accumulate=*/true);
  EXPECT_THROW(pipeline.drain(), Error);
  pipeline.set_arrival_hook(nullptr);
  pipeline.gradient(at::ones({10}), 0, /*accumulate=*/true);
  pipeline.drain();  // the failure was reported once
  EXPECT_EQ(host[9].item<float>(), 1.0f);  // the piece after the failure was skipped
  EXPECT_EQ(host[0].item<float>(), 2.0f);
}

}  // namespace
}  // namespace zero::test
