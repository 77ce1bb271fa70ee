// The host-staged communicator (zero/comm_mpi.h, src/comm/host_staged_communicator.cpp), run
// under mpirun at 1-3 ranks. Without a GPU its staging path runs on CPU tensors
// (HostStagedOptions::stage_cpu_tensors: copied into fresh host buffers, the collective run in
// the host communicator's order, copied back): every collective gives the host backend's bits
// and byte counts, argument errors are thrown at issue, and the engine trains bit for bit
// through it at stages 0-3. tests/test_cuda.cpp runs it on CUDA tensors where there is a GPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "comm/host_staged_communicator.h"
#include "engine_harness.h"
#include "test_util.h"
#include "zero/comm_mpi.h"
#include "zero/error.h"

namespace zero::test {
namespace {

std::shared_ptr<Communicator> staged_world() {
  comm::HostStagedOptions options;
  options.stage_cpu_tensors = true;
  return comm::make_host_staged_communicator(world(), options);
}

// Rank-dependent values, exactly representable in every dtype below.
at::Tensor values(int64_t n, at::ScalarType dtype, int salt) {
  return (at::arange(n, at::kFloat).remainder(13) + world()->rank() * 3 + salt).to(dtype);
}

TEST(HostStaged, CollectivesGiveTheHostBackendsBitsAndBytes) {
  auto host = world();
  auto staged = staged_world();
  const int world_size = host->size();
  const int rank = host->rank();
  EXPECT_EQ(staged->backend_name(), host->backend_name() + "+host-staged");
  EXPECT_EQ(staged->capabilities().deterministic_reduction,
            host->capabilities().deterministic_reduction);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    // all_reduce, sum and max.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      at::Tensor a = values(101, dtype, 1), b = a.clone();
      const CommStats start = host->stats();
      host->all_reduce(a, op)->wait();
      const CommStats middle = staged->stats();
      staged->all_reduce(b, op)->wait();
      EXPECT_TRUE(at::equal(a, b));
      // The same bytes counted (by the host backend, which ran both).
      EXPECT_EQ(staged->stats().all_reduce.bytes - middle.all_reduce.bytes,
                middle.all_reduce.bytes - start.all_reduce.bytes);
    }
    // reduce_scatter: equal chunks, unequal ones, in place.
    const std::vector<int64_t> uneven = [&] {
      std::vector<int64_t> c;
      for (int r = 0; r < world_size; ++r) c.push_back(5 + 3 * r);
      return c;
    }();
    int64_t total = 0;
    for (int64_t c : uneven) total += c;
    {
      at::Tensor in_a = values(7 * world_size, dtype, 2), in_b = in_a.clone();
      at::Tensor out_a = at::empty({7}, dtype), out_b = at::empty({7}, dtype);
      host->reduce_scatter(in_a, out_a, ReduceOp::kSum)->wait();
      staged->reduce_scatter(in_b, out_b, ReduceOp::kSum)->wait();
      EXPECT_TRUE(at::equal(out_a, out_b));
    }
    {
      at::Tensor in_a = values(total, dtype, 3), in_b = in_a.clone();
      at::Tensor out_a = at::empty({uneven[rank]}, dtype), out_b = at::empty({uneven[rank]}, dtype);
      host->reduce_scatter(in_a, out_a, ReduceOp::kSum, uneven)->wait();
      staged->reduce_scatter(in_b, out_b, ReduceOp::kSum, uneven)->wait();
      EXPECT_TRUE(at::equal(out_a, out_b));
      // In place: the output is the input's own chunk.
      int64_t offset = 0;
      for (int r = 0; r < rank; ++r) offset += uneven[r];
      at::Tensor whole_a = values(total, dtype, 4), whole_b = whole_a.clone();
      host->reduce_scatter(whole_a, whole_a.narrow(0, offset, uneven[rank]), ReduceOp::kSum, uneven)
          ->wait();
      staged->reduce_scatter(whole_b, whole_b.narrow(0, offset, uneven[rank]), ReduceOp::kSum,
                             uneven)->wait();
      EXPECT_TRUE(at::equal(whole_a.narrow(0, offset, uneven[rank]),
                            whole_b.narrow(0, offset, uneven[rank])));
    }
    // all_gather: unequal chunks, then in place.
    {
      at::Tensor in = values(uneven[rank], dtype, 5);
      at::Tensor out_a = at::zeros({total}, dtype), out_b = at::zeros({total}, dtype);
      host->all_gather(in, out_a, uneven)->wait();
      staged->all_gather(in, out_b, uneven)->wait();
      EXPECT_TRUE(at::equal(out_a, out_b));
      at::Tensor whole = at::zeros({9 * world_size}, dtype);
      whole.narrow(0, 9 * rank, 9).copy_(values(9, dtype, 6));
      at::Tensor expected = whole.clone();
      host->all_gather(expected.narrow(0, 9 * rank, 9), expected)->wait();
      staged->all_gather(whole.narrow(0, 9 * rank, 9), whole)->wait();
      EXPECT_TRUE(at::equal(whole, expected));
    }
  }
  // broadcast of bytes from the last rank.
  at::Tensor bytes = at::full({33}, rank, at::kByte);
  staged->broadcast(bytes, world_size - 1)->wait();
  EXPECT_TRUE(at::equal(bytes, at::full({33}, world_size - 1, at::kByte)));
}

// Bad arguments are refused on the calling thread, naming the backend, before anything is
// staged or queued; the host communicator's order is intact afterwards.
TEST(HostStaged, ArgumentErrorsAreThrownAtIssue) {
  auto staged = staged_world();
  const int world_size = staged->size();
  at::Tensor in = at::zeros({4 * world_size});
  at::Tensor out = at::zeros({3});
  try {
    (void)staged->reduce_scatter(in, out, ReduceOp::kSum);
    ADD_FAILURE() << "a reduce_scatter with a 3-element output of 4-element chunks was issued";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("reduce_scatter (mpi+host-staged, rank "), std::string::npos) << message;
    EXPECT_NE(message.find("input must hold sum(counts) = "), std::string::npos) << message;
  }
  try {
    (void)staged->all_reduce(at::zeros({3}, at::kInt), ReduceOp::kSum);
    ADD_FAILURE() << "an integer all_reduce was issued";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("reductions support Float"), std::string::npos)
        << error.what();
  }
  at::Tensor ok = at::ones({5});
  staged->all_reduce(ok, ReduceOp::kSum)->wait();
  EXPECT_TRUE(at::equal(ok, at::full({5}, static_cast<float>(world_size))));
}

// The engine through the staging path: the same losses and parameters, bit for bit, as through
// the host backend itself, at every stage (stage 3 gathers inside in_order tasks; the flat
// engines reduce buckets in them).
TEST(HostStaged, EngineTrainsBitwiseThroughIt) {
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    RunOptions options;
    options.stage = stage;
    options.steps = 3;
    options.gradient_clipping = 0.5;
    options.dtype = "bf16";
    if (stage == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
    const RunResult direct = run_engine(spec, options, world());
    const RunResult staged = run_engine(spec, options, staged_world());
    EXPECT_EQ(direct.losses, staged.losses);
    EXPECT_TRUE(at::equal(direct.parameters, staged.parameters));
  }
}

}  // namespace
}  // namespace zero::test
