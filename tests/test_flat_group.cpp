// The flat-group layer every stage shares (src/engine/flat_group.h, Note [Flat groups]) and the
// stage policies over it (src/engine/stage_policy.h), without communication: the policy of
// each stage and option, cutting a flat buffer into groups, the one parameter collector, and
// the buffer pool's keep policy.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <memory>
#include <string>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "engine/flat_group.h"
#include "engine/stage_policy.h"
#include "engine/unit_grouping.h"
#include "zero/unit.h"
#include "zero/error.h"

namespace zero::test {
namespace {

using G = StagePolicy::Gradients;
using R = StagePolicy::Reduction;
using W = StagePolicy::ReduceWhen;
using P = StagePolicy::Parameters;

StagePolicy policy_of(int stage, bool reduce_scatter = true, bool contiguous = true,
                      int64_t bucket = 1000) {
  ZeroOptimizationConfig zero;
  zero.stage = stage;
  zero.reduce_scatter = reduce_scatter;
  zero.contiguous_gradients = contiguous;
  zero.reduce_bucket_size = bucket;
  return stage_policy(zero);
}

TEST(StagePolicy, EachStageIsItsDecisions) {
  const StagePolicy s0 = policy_of(0), s1 = policy_of(1), s2 = policy_of(2), s3 = policy_of(3);
  // Where gradients live.
  EXPECT_EQ(s0.gradients, G::kFullBuffer);
  EXPECT_EQ(s1.gradients, G::kFullBuffer);
  EXPECT_EQ(s2.gradients, G::kOwnedShard);
  EXPECT_EQ(s3.gradients, G::kOwnedShard);
  // How they are reduced: stage 0 needs every gradient everywhere.
  EXPECT_EQ(s0.reduction, R::kAllReduce);
  EXPECT_EQ(s1.reduction, R::kReduceScatter);
  EXPECT_EQ(s2.reduction, R::kReduceScatter);
  EXPECT_EQ(s3.reduction, R::kReduceScatter);
  // When: a full buffer accumulates micro-steps; a shard takes each one's reduced gradients.
  EXPECT_EQ(s0.reduce_when, W::kBoundary);
  EXPECT_EQ(s1.reduce_when, W::kBoundary);
  EXPECT_EQ(s2.reduce_when, W::kEveryMicroStep);
  EXPECT_EQ(s3.reduce_when, W::kEveryMicroStep);
  // How parameters are held.
  EXPECT_EQ(s0.parameters, P::kReplicated);
  EXPECT_EQ(s1.parameters, P::kReplicated);
  EXPECT_EQ(s2.parameters, P::kReplicated);
  EXPECT_EQ(s3.parameters, P::kPartitioned);
  EXPECT_FALSE(s0.updates_owned_shard);
  EXPECT_TRUE(s1.updates_owned_shard);
  EXPECT_TRUE(s2.updates_owned_shard);
  EXPECT_TRUE(s3.updates_owned_shard);
  for (const StagePolicy& s : {s0, s1, s2, s3}) {
    EXPECT_EQ(s.group_capacity, 1000);
    EXPECT_FALSE(s.reduce_lone_gradient_in_place);
  }
}

TEST(StagePolicy, OptionsChangeOnlyTheirDecision) {
  // reduce_scatter = false all-reduces and keeps the owned part, at stages 1 and 2.
  for (int stage : {1, 2}) {
    const StagePolicy s = policy_of(stage, /*reduce_scatter=*/false);
    EXPECT_EQ(s.reduction, R::kAllReduce);
    EXPECT_EQ(s.gradients, policy_of(stage).gradients);
  }
  // contiguous_gradients = false: every gradient its own group, reduced in place (stage 2).
  const StagePolicy loose = policy_of(2, true, /*contiguous=*/false);
  EXPECT_EQ(loose.group_capacity, 1);
  EXPECT_TRUE(loose.reduce_lone_gradient_in_place);
  for (int stage : {0, 1}) {
    EXPECT_EQ(policy_of(stage, true, false).group_capacity, 1000);
    EXPECT_FALSE(policy_of(stage, true, false).reduce_lone_gradient_in_place);
  }
}

// Properties of cut_into_groups over random parameter sizes and capacities: groups tile the
// buffer in order, at parameter boundaries, each within the capacity unless it is one
// parameter larger than the capacity, no two neighbours mergeable, padding in the last.
TEST(CutIntoGroups, TilesTheBufferAtParameterBoundaries) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 500; ++trial) {
    SCOPED_TRACE(trial);
    const int count = 1 + static_cast<int>(random() % 20);
    std::vector<int64_t> numels(count);
    for (auto& n : numels) n = 1 + static_cast<int64_t>(random() % 300);
    const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
    const int64_t capacity = 1 + static_cast<int64_t>(random() % 600);
    const int64_t padded = total + static_cast<int64_t>(random() % 64);
    const std::vector<FlatGroup> groups = cut_into_groups(numels, capacity, padded);

    int next_param = 0;
    int64_t offset = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const FlatGroup& group = groups[g];
      ASSERT_FALSE(group.params.empty());
      EXPECT_EQ(group.range.begin, offset);
      int64_t size = 0;
      for (int i : group.params) {
        EXPECT_EQ(i, next_param++);
        size += numels[i];
      }
      offset += size;
      const bool last = g + 1 == groups.size();
      EXPECT_EQ(group.range.end, last ? padded : offset);
      EXPECT_TRUE(size <= capacity || group.params.size() == 1) << size << " > " << capacity;
      if (!last) {  // greedy: the next parameter did not fit
        EXPECT_GT(size + numels[groups[g + 1].params.front()], capacity);
      }
      EXPECT_EQ(group.pending, 0);
      EXPECT_FALSE(group.grad_buffer.defined());
    }
    EXPECT_EQ(next_param, count);
    EXPECT_EQ(offset, total);
  }
}

TEST(CutIntoGroups, CapacityOneGivesEveryParameterItsOwnGroup) {
  const std::vector<FlatGroup> groups = cut_into_groups({5, 1, 7}, 1, 16);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].range, (Range{0, 5}));
  EXPECT_EQ(groups[1].range, (Range{5, 6}));
  EXPECT_EQ(groups[2].range, (Range{6, 16}));
}

struct Shared : torch::nn::Module {
  Shared() {
    a = register_module("a", torch::nn::Linear(3, 4));
    b = register_module("b", torch::nn::Linear(4, 3));
    frozen = register_parameter("frozen", at::zeros({2}), /*requires_grad=*/false);
    tied = register_parameter("tied", a->weight);  // a's weight again, as tied embeddings
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
  at::Tensor frozen, tied;
};

TEST(CollectTrainableParameters, OnceEachInRegistrationOrderWithTheirUses) {
  auto model = std::make_shared<Shared>();
  const ModelParameters collected = collect_trainable_parameters(*model);
  std::vector<std::string> names;
  for (const auto& p : collected.parameters) names.push_back(p.name);
  // Pre-order: the root's own parameters first, then a's, then b's; frozen ones skipped, the
  // tied one listed once under its first name (a.weight is the same tensor).
  EXPECT_EQ(names, (std::vector<std::string>{"tied", "a.bias", "b.weight", "b.bias"}));
  EXPECT_EQ(collected.parameters[0].numel, 12);
  EXPECT_EQ(collected.modules.size(), 3u);
  // The root uses the tied tensor; a uses it again (index 0) and its bias.
  EXPECT_EQ(collected.uses[0], (std::vector<int>{0}));
  EXPECT_EQ(collected.uses[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(collected.uses[2], (std::vector<int>{2, 3}));
  for (const auto& p : collected.parameters) {
    EXPECT_EQ(p.group, -1);
    EXPECT_TRUE(p.tensor.requires_grad());
  }
}

TEST(CollectTrainableParameters, RejectsNoneAndNonFloatingPoint) {
  auto empty = std::make_shared<torch::nn::Module>();
  EXPECT_THROW(collect_trainable_parameters(*empty), Error);
  auto frozen_only = std::make_shared<torch::nn::Module>();
  frozen_only->register_parameter("w", at::zeros({2}), /*requires_grad=*/false);
  EXPECT_THROW(collect_trainable_parameters(*frozen_only), Error);  // no trainable one
}

// Stage 3's grouping rule (unit_grouping.h), the one the engine and ShardedInit share: a
// module belongs to its own unit when declared, else to its parent's; a parameter to the unit
// of its first registering module; small ones and those outside every unit stay whole.
struct Block : torch::nn::Module {
  explicit Block(int width) {
    big = register_module("big", torch::nn::Linear(width, width));  // width*width + width
    tiny = register_parameter("tiny", at::zeros({3}));
  }
  torch::nn::Linear big{nullptr};
  at::Tensor tiny;
};

struct Tower : torch::nn::Module {
  Tower() {
    outer = register_module("outer", std::make_shared<Block>(8));   // a unit
    inner = outer->register_module("inner", std::make_shared<Block>(4));  // a unit inside it
    loose = register_module("loose", torch::nn::Linear(2, 2));  // in no unit
    declare_unit(*outer);
    declare_unit(*inner);
  }
  std::shared_ptr<Block> outer, inner;
  torch::nn::Linear loose{nullptr};
};

TEST(AssignUnits, UnitsByModuleAndParametersByFirstRegistration) {
  auto model = std::make_shared<Tower>();
  const ModelParameters collected = collect_trainable_parameters(*model);
  const UnitAssignment a = assign_units(collected, /*threshold=*/3, /*cap=*/INT64_MAX);
  std::vector<std::string> unit_names;
  for (int m : a.unit_modules) unit_names.push_back(collected.modules[m].first);
  EXPECT_EQ(unit_names, (std::vector<std::string>{"outer", "outer.inner"}));
  for (size_t m = 0; m < collected.modules.size(); ++m) {
    const std::string& name = collected.modules[m].first;
    const int expected = name.rfind("outer.inner", 0) == 0 ? 1 : name.rfind("outer", 0) == 0 ? 0 : -1;
    EXPECT_EQ(a.unit_of_module[m], expected) << name;
  }
  for (size_t i = 0; i < collected.parameters.size(); ++i) {
    const TrainableParameter& p = collected.parameters[i];
    const int expected_unit = p.name.rfind("outer.inner.", 0) == 0 ? 1
                              : p.name.rfind("outer.", 0) == 0      ? 0
                                                                    : -1;
    EXPECT_EQ(a.home_unit[i], expected_unit) << p.name;
    // tiny (3 elements) is at the threshold; biases of 8 and 4 are above it; loose.* is in no unit.
    const bool expected_persistent = expected_unit < 0 || p.numel <= 3;
    EXPECT_EQ(a.persistent[i], expected_persistent) << p.name;
  }
}

TEST(AssignUnits, TheModelWideCapKeepsTheFirstSmallOnesWhole) {
  auto model = std::make_shared<Tower>();
  const ModelParameters collected = collect_trainable_parameters(*model);
  // Registration order: outer.tiny 3, outer.big.weight 64, outer.big.bias 8, outer.inner.tiny
  // 3, outer.inner.big.weight 16, outer.inner.big.bias 4, loose.weight 4, loose.bias 2. With
  // threshold 10 and cap 11 the small ones stay whole while the total fits: 3 + 8 = 11, then
  // outer.inner.tiny (14) and the bias of 4 (15) are partitioned; loose.* is in no unit and
  // stays whole regardless.
  const UnitAssignment a = assign_units(collected, /*threshold=*/10, /*cap=*/11);
  std::vector<std::string> whole;
  for (size_t i = 0; i < collected.parameters.size(); ++i) {
    if (a.persistent[i]) whole.push_back(collected.parameters[i].name);
  }
  EXPECT_EQ(whole, (std::vector<std::string>{"outer.tiny", "outer.big.bias", "loose.weight",
                                             "loose.bias"}));
}

// The one keep policy (Note [Flat groups]): a released buffer is reused, the smallest that
// fits, of the same dtype; nothing is freed between steps.
TEST(BufferPool, ReusesTheSmallestFittingBufferOfTheDtype) {
  BufferPool pool;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor big = pool.acquire(1000, f32);
  at::Tensor small = pool.acquire(100, f32);
  const void* big_data = big.data_ptr();
  const void* small_data = small.data_ptr();
  pool.put(big);
  pool.put(small);
  big = at::Tensor();
  small = at::Tensor();
  EXPECT_EQ(pool.acquire(50, f32).data_ptr(), small_data);  // smallest that fits
  at::Tensor again = pool.acquire(500, f32);
  EXPECT_EQ(again.data_ptr(), big_data);  // the only one that fits
  EXPECT_NE(pool.acquire(500, at::TensorOptions().dtype(at::kBFloat16)).data_ptr(), big_data);
  pool.put(again);
  EXPECT_EQ(pool.acquire(2000, f32).numel(), 2000);  // none fits: a new one, replacing `again`
  EXPECT_NE(pool.acquire(500, f32).data_ptr(), big_data);
}

TEST(BufferPool, GradientBuffersAreZeroedViewsReturnedOnRelease) {
  BufferPool pool;
  FlatGroup group;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  pool.acquire_gradients(group, 64, options);
  ASSERT_TRUE(group.grad_buffer.defined());
  EXPECT_EQ(group.grad_buffer.numel(), 64);
  group.grad_buffer.fill_(3.0f);
  const void* data = group.grad_pooled.data_ptr();
  pool.release_gradients(group);
  EXPECT_FALSE(group.grad_buffer.defined());
  EXPECT_FALSE(group.grad_pooled.defined());
  pool.acquire_gradients(group, 32, options);  // the same allocation, zeroed again
  EXPECT_EQ(group.grad_pooled.data_ptr(), data);
  EXPECT_EQ(group.grad_buffer.numel(), 32);
  EXPECT_EQ(group.grad_buffer.abs().sum().item<float>(), 0.0f);
}

// A far larger cached buffer is not lent to a small request: it stays for its own, which
// would otherwise allocate a second one of its size (stage 3's embedding gradients).
TEST(BufferPool, AFarLargerBufferIsKeptForItsOwnRequests) {
  BufferPool pool;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const int64_t big = 4 * BufferPool::kReuseSlack;
  at::Tensor large = pool.acquire(big, f32);
  const void* large_data = large.data_ptr();
  pool.put(std::move(large));
  at::Tensor small = pool.acquire(1000, f32);  // not the big one: a new small one
  EXPECT_NE(small.data_ptr(), large_data);
  EXPECT_EQ(small.numel(), 1000);
  at::Tensor again = pool.acquire(big, f32);  // the big one, while the small one is lent
  EXPECT_EQ(again.data_ptr(), large_data);
  pool.put(std::move(small));
  pool.put(std::move(again));
  // Half a big buffer's worth is close enough to take it.
  EXPECT_EQ(pool.acquire(big / 2 + 1, f32).data_ptr(), large_data);
}

// Buffers come back from the communicator's progress thread while the engine acquires.
TEST(BufferPool, ConcurrentAcquireAndPutKeepEveryBuffer) {
  BufferPool pool;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &options, t] {
      for (int i = 0; i < 200; ++i) {
        at::Tensor b = pool.acquire(16 + (i + t) % 8, options);
        b.fill_(static_cast<float>(t));
        pool.put(std::move(b));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  // At most one buffer per thread was ever in use at once, so the pool owns between one and
  // four, whatever sizes were asked for (a miss replaces a cached buffer), all back in it. Asking for 1 element tells them apart: a pooled
  // buffer has at least 16, a new one exactly 1.
  std::vector<at::Tensor> held;
  std::set<const void*> distinct;
  int pooled = 0;
  for (int i = 0; i < 5; ++i) {
    held.push_back(pool.acquire(1, options));
    distinct.insert(held.back().data_ptr());
    if (held.back().numel() >= 16) ++pooled;
  }
  EXPECT_EQ(distinct.size(), 5u);
  EXPECT_GE(pooled, 1);
  EXPECT_LE(pooled, 4);
}

}  // namespace
}  // namespace zero::test
