// ZeRO stage 3 beyond the equivalence matrix (test_engine_equivalence covers fp32 at world
// 1-4, accumulation 1 and 3, clipping): communication volume 3Ψ(N-1)/N, model-state bytes
// 16Ψ/N, prefetch within its budget, persistence, skipped units, shared parameters across
// units, GatheredParameters write-back, the consolidated state dict, evaluation forwards,
// 16-bit precisions, and misuse errors. Run under mpirun at world sizes 1-4.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>

#include <cmath>

#include <unordered_set>

#include "engine_harness.h"
#include "test_util.h"
#include "zero/error.h"
#include "zero/gathered_parameters.h"
#include "zero/gpt2.h"
#include "zero/shard.h"
#include "zero/sharded_init.h"
#include "zero/state_dict.h"
#include "zero/unit.h"

namespace zero::test {
namespace {

constexpr const char* kPartitioned = "\"stage3_param_persistence_threshold\": 0";

// The groups the engine forms (Note [Stage 3 units]) for a model whose units have no nested
// units and no shared parameters: per declared unit, its partitioned elements; plus the
// persistent elements (parameters outside every unit or with numel <= threshold).
struct ExpectedGroups {
  std::vector<int64_t> partitioned;
  int64_t persistent = 0;
};

ExpectedGroups expected_groups(torch::nn::Module& model, int64_t threshold) {
  ExpectedGroups groups;
  std::unordered_set<const void*> in_units;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (!is_declared_unit(*module)) continue;
    int64_t numel = 0;
    for (const auto& p : module->parameters()) {
      if (!in_units.insert(p.unsafeGetTensorImpl()).second) continue;
      if (p.numel() <= threshold) {
        groups.persistent += p.numel();
      } else {
        numel += p.numel();
      }
    }
    if (numel > 0) groups.partitioned.push_back(numel);
  }
  for (const auto& p : model.parameters()) {
    if (!in_units.count(p.unsafeGetTensorImpl())) groups.persistent += p.numel();
  }
  return groups;
}

// Bytes a ring moves for a collective over `numel` padded elements (Note [Counting
// communicated bytes]).
int64_t ring_bytes(int64_t numel, int world, int64_t element_size) {
  const ShardLayout layout = shard_layout(numel, world, kShardAlignment);
  return layout.shard_numel * (world - 1) * element_size;
}

// Trains `steps` steps of `spec` and returns the engine's communication during the last one.
CommStats last_step_communication(const ModelSpec& spec, const RunOptions& options,
                                  const std::shared_ptr<Communicator>& comm, RunResult* out) {
  RunResult run;
  run.model = spec.build();
  run.engine = initialize(run.model,
                          parse_config(make_config_json(options), comm->size(), "test config"),
                          comm);
  CommStats before;
  for (int step = 0; step < options.steps; ++step) {
    if (step == options.steps - 1) before = run.engine->communication();
    auto [x, y] = spec.batch(step, comm->size() * options.micro_batch);
    const int64_t row = comm->rank() * options.micro_batch;
    run.engine->backward(spec.loss(*run.model, x.narrow(0, row, options.micro_batch),
                                   y.narrow(0, row, options.micro_batch)));
    run.engine->step();
  }
  const CommStats after = run.engine->communication();
  CommStats delta;
  delta.all_gather.bytes = after.all_gather.bytes - before.all_gather.bytes;
  delta.reduce_scatter.bytes = after.reduce_scatter.bytes - before.reduce_scatter.bytes;
  delta.all_reduce.bytes = after.all_reduce.bytes - before.all_reduce.bytes;
  delta.broadcast.bytes = after.broadcast.bytes - before.broadcast.bytes;
  if (out != nullptr) *out = std::move(run);
  return delta;
}

// Per step: every partitioned element is all-gathered twice (forward, backward) and
// reduce-scattered once: 3Ψ(N-1)/N. Persistent elements: reduce-scatter + all-gather after
// the step. With stage3_max_reuse_distance 0 nothing stays gathered between uses, so GPT-2's
// tied wte, used by the embedding and by lm_head, is gathered once more than other units.
TEST(Stage3, CommunicatesThreePsiPerStep) {
  auto comm = world();
  const int n = comm->size();
  for (bool gpt2 : {false, true}) {
    for (int64_t threshold : {int64_t{0}, int64_t{40}}) {
      for (const char* overlap : {"false", "true"}) {
        SCOPED_TRACE(std::string(gpt2 ? "gpt2" : "mlp") + " threshold " +
                     std::to_string(threshold) + " overlap " + overlap);
        const ModelSpec spec = gpt2 ? tiny_gpt2_spec() : mlp_spec();
        RunOptions options;
        options.stage = 3;
        options.steps = 3;  // the last step replays the recorded trace
        options.extra_zero_json = "\"stage3_param_persistence_threshold\": " +
                                  std::to_string(threshold) +
                                  ", \"stage3_max_reuse_distance\": 0, \"overlap_comm\": " + overlap;
        const CommStats moved = last_step_communication(spec, options, comm, nullptr);
        auto model = spec.build();
        const ExpectedGroups groups = expected_groups(*model, threshold);
        int64_t gathered = ring_bytes(groups.persistent, n, 4);
        int64_t scattered = ring_bytes(groups.persistent, n, 4);
        for (int64_t numel : groups.partitioned) {
          gathered += 2 * ring_bytes(numel, n, 4);
          scattered += ring_bytes(numel, n, 4);
        }
        if (gpt2) gathered += ring_bytes(97 * 32, n, 4);  // wte's second forward use
        EXPECT_EQ(moved.all_gather.bytes, gathered);
        EXPECT_EQ(moved.reduce_scatter.bytes, scattered);
        EXPECT_EQ(moved.broadcast.bytes, 0);
        // The ZeRO paper's 3Ψ(N-1)/N, Ψ the padded size, when everything is partitioned.
        if (groups.persistent == 0) {
          int64_t psi = 0;
          for (int64_t numel : groups.partitioned) {
            psi += shard_layout(numel, n, kShardAlignment).padded_numel;
          }
          EXPECT_EQ(moved.all_gather.bytes + moved.reduce_scatter.bytes,
                    3 * psi * 4 * (n - 1) / n);
        }
      }
    }
  }
}

// bf16 with a single micro-step: 2 (param shard) + 2 (grad shard) + 4 (master) + 8 (Adam)
// bytes per owned element, plus the persistent parameters whole: 16Ψ/N.
TEST(Stage3, ModelStateIsSixteenBytesPerParameterOverN) {
  auto comm = world();
  const int n = comm->size();
  RunOptions options;
  options.stage = 3;
  options.dtype = "bf16";
  options.steps = 1;
  options.extra_zero_json = kPartitioned;
  const ModelSpec spec = tiny_gpt2_spec();
  const RunResult run = run_engine(spec, options, comm);
  const ExpectedGroups groups = expected_groups(*spec.build(), 0);
  int64_t owned = shard_layout(groups.persistent, n, kShardAlignment).shard_numel;
  for (int64_t numel : groups.partitioned) owned += shard_layout(numel, n, kShardAlignment).shard_numel;
  const int64_t persistent_padded = shard_layout(groups.persistent, n, kShardAlignment).padded_numel;
  const ModelStateBytes bytes = run.state_bytes;
  EXPECT_EQ(bytes.params, 2 * owned + 2 * persistent_padded);
  EXPECT_EQ(bytes.grads, 2 * owned);
  EXPECT_EQ(bytes.master_params, 4 * owned);
  EXPECT_EQ(bytes.optimizer_state, 8 * owned);
  // owned is Ψ/N plus at most one alignment block per group and rank.
  const int64_t psi = run.engine->num_parameters();
  EXPECT_LE(owned * n, psi + static_cast<int64_t>(groups.partitioned.size() + 1) * kShardAlignment * n);
  EXPECT_GE(owned * n, psi);
  EXPECT_GT(bytes.gathered_peak, 0);
}

// Prefetch gathers ahead (a higher peak than gathering on demand) but never beyond
// stage3_max_live_parameters, and none of it changes a bit of the result.
TEST(Stage3, PrefetchRespectsLiveBudgetAndChangesNothing) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  RunOptions options;
  options.stage = 3;
  options.steps = 3;
  const std::string base = std::string(kPartitioned) + ", \"stage3_max_reuse_distance\": 0, ";
  options.extra_zero_json = base + "\"overlap_comm\": true, \"stage3_prefetch_bucket_size\": 0";
  const RunResult on_demand = run_engine(spec, options, comm);
  options.extra_zero_json = base + "\"overlap_comm\": true";
  const RunResult prefetched = run_engine(spec, options, comm);
  EXPECT_TRUE(at::equal(prefetched.parameters, on_demand.parameters));
  const int64_t demand_peak = on_demand.state_bytes.gathered_peak;
  EXPECT_GT(prefetched.state_bytes.gathered_peak, demand_peak)
      << "prefetch did not gather anything ahead";
  // A budget a little above the on-demand peak (in elements; fp32 here): prefetch stays
  // within it. (Fetches a unit needs now are never refused; the budget limits gathering
  // ahead, as in DeepSpeed.)
  const int64_t budget = demand_peak / 4 + 600;
  options.extra_zero_json =
      base + "\"overlap_comm\": true, \"stage3_max_live_parameters\": " + std::to_string(budget);
  const RunResult bounded = run_engine(spec, options, comm);
  EXPECT_TRUE(at::equal(bounded.parameters, on_demand.parameters));
  EXPECT_LE(bounded.state_bytes.gathered_peak, budget * 4);
  EXPECT_LT(bounded.state_bytes.gathered_peak,
            prefetched.state_bytes.gathered_peak);
  // Default reuse distance: units stay gathered from forward to backward; same result.
  options.extra_zero_json = std::string(kPartitioned) + ", \"overlap_comm\": true";
  EXPECT_TRUE(at::equal(run_engine(spec, options, comm).parameters, on_demand.parameters));
}

// An MLP whose middle unit is skipped on every third forward (on every rank alike): the
// trace changes, prefetch falls back, nothing hangs and the skipped unit's gradients are
// zero that step, exactly as in plain libtorch.
ModelSpec skipping_mlp_spec() {
  ModelSpec spec = mlp_spec();
  spec.build = [] {
    torch::manual_seed(99);
    auto model = std::make_shared<torch::nn::SequentialImpl>(
        torch::nn::Linear(6, 11), torch::nn::Linear(11, 11), torch::nn::Linear(11, 5));
    for (const auto& child : model->children()) declare_unit(*child);
    return std::static_pointer_cast<torch::nn::Module>(model);
  };
  auto calls = std::make_shared<int>(0);
  spec.loss = [calls](torch::nn::Module& model, const at::Tensor& x, const at::Tensor& y) {
    auto& layers = dynamic_cast<torch::nn::SequentialImpl&>(model);
    const bool skip = (*calls)++ % 3 == 1;
    at::Tensor h = x;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i == 1 && skip) continue;
      auto& layer = layers.begin()[static_cast<std::ptrdiff_t>(i)];
      h = at::tanh(run_with(*layer.ptr(), [&] { return layer.forward(h); }));
    }
    return at::mse_loss(h, y);
  };
  return spec;
}

TEST(Stage3, SkippedUnitMatchesReference) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.steps = 7;
  options.extra_zero_json = std::string(kPartitioned) + ", \"overlap_comm\": true";
  const RunResult reference = run_reference(skipping_mlp_spec(), options, comm->size());
  const RunResult run = run_engine(skipping_mlp_spec(), options, comm);
  for (size_t s = 0; s < run.losses.size(); ++s) {
    EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5 * reference.losses[s]) << "step " << s;
  }
  EXPECT_LE(relative_error(run.parameters, reference.parameters), 1e-5);
}

// Two units share one weight (the second registers the first's tensor): the weight belongs to
// the first unit, the second gathers that unit's group too, and its gradient (both uses
// summed by autograd) is reduced once.
struct SharedLinearImpl : torch::nn::Module {
  SharedLinearImpl(const at::Tensor& shared, int64_t out) {
    weight = register_parameter("weight", shared);
    bias = register_parameter("bias", at::zeros({out}));
  }
  at::Tensor forward(const at::Tensor& x) { return at::linear(x, weight, bias); }
  at::Tensor weight, bias;
};
TORCH_MODULE(SharedLinear);

ModelSpec shared_weight_spec() {
  ModelSpec spec = mlp_spec();
  spec.build = [] {
    torch::manual_seed(7);
    torch::nn::Linear first(6, 6);
    auto model = std::make_shared<torch::nn::SequentialImpl>(
        first, SharedLinear(first->weight, 6), torch::nn::Linear(6, 5));
    for (const auto& child : model->children()) declare_unit(*child);
    return std::static_pointer_cast<torch::nn::Module>(model);
  };
  spec.loss = [](torch::nn::Module& model, const at::Tensor& x, const at::Tensor& y) {
    at::Tensor h = x;
    for (auto& layer : dynamic_cast<torch::nn::SequentialImpl&>(model)) {
      h = at::tanh(run_with(*layer.ptr(), [&] { return layer.forward(h); }));
    }
    return at::mse_loss(h, y);
  };
  return spec;
}

TEST(Stage3, ParameterSharedAcrossUnitsMatchesReference) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = std::string(kPartitioned) + ", \"overlap_comm\": true";
  const RunResult reference = run_reference(shared_weight_spec(), options, comm->size());
  const RunResult run = run_engine(shared_weight_spec(), options, comm);
  EXPECT_LE(relative_error(run.parameters, reference.parameters), 1e-5);
  EXPECT_EQ(run.engine->num_parameters(), 6 * 6 + 6 + 6 + 6 * 5 + 5);
}

// bf16 and fp16 at stage 3 behave like stage 2: bitwise equal where the reduction order is
// the same (two ranks or fewer), close otherwise.
TEST(Stage3, SixteenBitPrecisionsMatchStage2) {
  auto comm = world();
  for (const char* dtype : {"bf16", "fp16"}) {
    if (std::string(dtype) == "fp16" && !cpu_supports_half()) continue;
    SCOPED_TRACE(dtype);
    RunOptions options;
    options.dtype = dtype;
    options.steps = 5;
    options.stage = 2;
    const RunResult stage2 = run_engine(tiny_gpt2_spec(), options, comm);
    options.stage = 3;
    options.extra_zero_json = std::string(kPartitioned) + ", \"overlap_comm\": true";
    const RunResult stage3 = run_engine(tiny_gpt2_spec(), options, comm);
    EXPECT_EQ(stage3.engine->skipped_steps(), stage2.engine->skipped_steps());
    EXPECT_EQ(stage3.engine->loss_scale(), stage2.engine->loss_scale());
    if (comm->size() <= 2) {
      EXPECT_TRUE(at::equal(stage3.parameters, stage2.parameters));
    } else {
      EXPECT_LE(relative_error(stage3.parameters, stage2.parameters), 1e-2);
    }
  }
}

// Rank 0 rewrites a weight under GatheredParameters(modifier_rank 0): every rank sees it,
// and training continues from it exactly as a stage-2 engine given the same edit does.
TEST(Stage3, GatheredParametersWritesBackFromModifierRank) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  std::vector<at::Tensor> finals;
  for (int stage : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    RunOptions options;
    options.stage = stage;
    options.dtype = "bf16";
    if (stage == 3) options.extra_zero_json = kPartitioned;
    auto model = spec.build();
    auto engine = initialize(
        model, parse_config(make_config_json(options), comm->size(), "test config"), comm);
    auto& gpt = dynamic_cast<gpt2::GPT2Impl&>(*model);
    at::Tensor weight = gpt.transformer->h[0]->as<gpt2::BlockImpl>()->mlp->c_fc->weight;
    {
      GatheredParameters whole(*engine, {weight}, /*modifier_rank=*/0);
      at::NoGradGuard no_grad;
      if (comm->rank() == 0) weight.fill_(0.125);
    }
    {
      GatheredParameters whole(*engine, {weight});
      EXPECT_TRUE(at::equal(weight, at::full_like(weight, 0.125)));
    }
    auto [x, y] = spec.batch(0, comm->size() * 2);
    engine->backward(spec.loss(*model, x.narrow(0, 2 * comm->rank(), 2),
                               y.narrow(0, 2 * comm->rank(), 2)));
    engine->step();
    GatheredParameters whole(*engine, model->parameters());
    finals.push_back(flatten_parameters(*model));
  }
  if (comm->size() <= 2) {
    EXPECT_TRUE(at::equal(finals[0], finals[1]));
  } else {
    EXPECT_LE(relative_error(finals[1], finals[0]), 1e-2);
  }
}

// full_state_dict: rank 0 gets every parameter whole (HF names, shared ones once), other
// ranks nothing, and the values are the ones GatheredParameters shows.
TEST(Stage3, FullStateDictOnRoot) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = kPartitioned;
  RunResult run = run_engine(tiny_gpt2_spec(), options, comm);
  const auto state = full_state_dict(*run.engine, /*root=*/0);
  if (comm->rank() != 0) {
    EXPECT_TRUE(state.empty());
    return;
  }
  std::vector<at::Tensor> values;
  std::unordered_set<std::string> names;
  for (const auto& [name, value] : state) {
    names.insert(name);
    EXPECT_TRUE(value.device().is_cpu());
  }
  EXPECT_EQ(static_cast<int64_t>(state.size()), static_cast<int64_t>(names.size()));
  EXPECT_TRUE(names.count("transformer.wte.weight"));
  EXPECT_TRUE(names.count("transformer.h.1.mlp.c_proj.weight"));
  int64_t total = 0;
  for (const auto& [name, value] : state) total += value.numel();
  EXPECT_EQ(total, run.engine->num_parameters());
  // Same values as the model's own parameters, name by name.
  const auto named = run.model->named_parameters();
  // (GatheredParameters is collective; only rank 0 is here, and at world 1 that is all.)
  if (comm->size() == 1) {
    GatheredParameters whole(*run.engine, run.model->parameters());
    for (const auto& [name, value] : state) {
      EXPECT_TRUE(at::equal(value, named[name])) << name;
    }
  }
}

// Evaluation under NoGradGuard gathers on demand and releases; it gives the same logits as
// the whole model and does not disturb the training trace or results.
TEST(Stage3, EvaluationForwardMatchesWholeModel) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = std::string(kPartitioned) + ", \"overlap_comm\": true";
  RunResult run = run_engine(spec, options, comm);
  auto& gpt = dynamic_cast<gpt2::GPT2Impl&>(*run.model);
  auto [x, y] = spec.batch(99, 2);
  at::Tensor partitioned_logits;
  {
    at::NoGradGuard no_grad;
    partitioned_logits = gpt.forward(x);
  }
  at::Tensor whole_logits;
  {
    GatheredParameters whole(*run.engine, run.model->parameters());
    at::NoGradGuard no_grad;
    whole_logits = gpt.forward(x);
  }
  EXPECT_TRUE(at::equal(partitioned_logits, whole_logits));
}

// Incremental decoding with the KV cache (zero-train's samples) under stage 3: each unit is
// gathered for its call, and the logits are those of the whole model's cached forward.
TEST(Stage3, CachedForwardMatchesWholeModel) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = kPartitioned;
  RunResult run = run_engine(spec, options, comm);
  auto& gpt = dynamic_cast<gpt2::GPT2Impl&>(*run.model);
  const at::Tensor x = spec.batch(98, 1).first;
  const auto decode = [&] {
    at::NoGradGuard no_grad;
    gpt2::KVCache cache;
    std::vector<at::Tensor> pieces = {gpt.forward_cached(x.narrow(1, 0, 3), cache)};
    for (int64_t t = 3; t < x.size(1); ++t) pieces.push_back(gpt.forward_cached(x.narrow(1, t, 1), cache));
    return at::cat(pieces, 1);
  };
  const at::Tensor partitioned_logits = decode();
  at::Tensor whole_logits;
  {
    GatheredParameters whole(*run.engine, run.model->parameters());
    whole_logits = decode();
  }
  EXPECT_TRUE(at::equal(partitioned_logits, whole_logits));
  EXPECT_EQ(partitioned_logits.size(1), x.size(1));
}

// Building under zero::ShardedInit partitions each unit as it is declared: the finished model
// holds no full copy of a partitioned parameter, and training is bit for bit the same as
// partitioning the finished model in zero::initialize (both start from rank 0's values).
TEST(Stage3, ShardedInitMatchesPartitioningTheFinishedModel) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.dtype = "bf16";
  options.extra_zero_json = kPartitioned;
  const ModelSpec plain = tiny_gpt2_spec();
  const RunResult expected = run_engine(plain, options, comm);

  const Config config = parse_config(make_config_json(options), comm->size(), "test config");
  ModelSpec sharded = plain;
  bool released_while_building = false;
  sharded.build = [&] {
    ShardedInit scope(config, comm);
    auto model = plain.build();
    auto& gpt = dynamic_cast<gpt2::GPT2Impl&>(*model);
    const auto* block = gpt.transformer->h[1]->as<gpt2::BlockImpl>();
    released_while_building = block->mlp->c_fc->weight.storage().nbytes() == 0 &&
                              gpt.transformer->wte->weight.storage().nbytes() == 0 &&
                              gpt.transformer->ln_f->weight.storage().nbytes() > 0;  // no unit
    return model;
  };
  const RunResult run = run_engine(sharded, options, comm);
  EXPECT_TRUE(released_while_building);
  EXPECT_TRUE(at::equal(run.parameters, expected.parameters));
  EXPECT_EQ(run.state_bytes.total(), expected.state_bytes.total());

  // A mismatched config at initialize is refused, naming what differs.
  RunOptions other = options;
  other.dtype = "fp32";
  std::shared_ptr<torch::nn::Module> model;
  {
    ShardedInit scope(config, comm);
    model = plain.build();
  }
  try {
    initialize(model, parse_config(make_config_json(other), comm->size(), "other config"), comm);
    FAIL() << "expected zero::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was partitioned by zero::ShardedInit for bf16"),
              std::string::npos)
        << e.what();
  }
  // ShardedInit is for stage 3 only.
  options.stage = 2;
  EXPECT_THROW(ShardedInit(parse_config(make_config_json(options), comm->size(), "s2"), comm),
               Error);
}

// A partitioned parameter read outside its unit fails with a message saying what to do (on
// libtorch 2.x; 1.x has no way to make a storage throw).
TEST(Stage3, ReadingAReleasedParameterThrows) {
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "libtorch 1.x cannot make a released storage throw";
#else
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = kPartitioned;
  RunResult run = run_engine(tiny_gpt2_spec(), options, comm);
  auto& gpt = dynamic_cast<gpt2::GPT2Impl&>(*run.model);
  const at::Tensor weight = gpt.transformer->h[0]->as<gpt2::BlockImpl>()->attn->c_attn->weight;
  try {
    const double total = weight.sum().item<double>();
    FAIL() << "read a released parameter: " << total;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("stage-3 unit 'transformer.h.0'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("zero::GatheredParameters"), std::string::npos)
        << e.what();
  }
  GatheredParameters whole(*run.engine, {weight});
  EXPECT_TRUE(std::isfinite(weight.sum().item<double>()));
#endif
}

TEST(Stage3, ModelWithoutUnitsIsRejected) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  auto model = std::static_pointer_cast<torch::nn::Module>(
      std::make_shared<torch::nn::LinearImpl>(4, 4));
  try {
    initialize(model, parse_config(make_config_json(options), comm->size(), "test config"), comm);
    FAIL() << "expected zero::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("declares no units"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("zero::declare_unit"), std::string::npos) << e.what();
  }
}

TEST(Stage3, LossBackwardOutsideEngineIsRejected) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = kPartitioned;
  const ModelSpec spec = mlp_spec();
  auto model = spec.build();
  auto engine =
      initialize(model, parse_config(make_config_json(options), comm->size(), "test config"), comm);
  auto [x, y] = spec.batch(0, 2);
  at::Tensor loss = spec.loss(*model, x, y);
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("engine.backward(loss)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zero::test
