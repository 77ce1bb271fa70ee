// Note [Collective signatures] (src/comm/collective_signature.h): ranks that take different
// code paths are stopped at the first collective where they part, at once, every rank with the
// same message naming what each issued. Each test makes a communicator of its own, which the
// mismatch leaves refusing every later collective; world() stays usable for the others. A
// check that failed to fire would leave the ranks waiting: ctest's timeout fails the test.
#include <gtest/gtest.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "engine_harness.h"
#include "test_util.h"
#include "zero/comm_mpi.h"
#include "zero/engine.h"
#include "zero/gpt2.h"
#include "zero/unit.h"

namespace zero::test {
namespace {

std::string message_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// The common part of every mismatch message, and both sides named.
void expect_mismatch(const std::string& message, const std::string& first_side,
                     const std::string& other_side) {
  expect_contains(message, "the ranks issued different collectives as collective #");
  expect_contains(message, first_side);
  expect_contains(message, other_side);
  expect_contains(message, "Every rank must issue the same collectives in the same order");
}

TEST(CollectiveMismatch, DifferentCollectivesAreNamedOnEveryRank) {
  auto comm = make_mpi_communicator();
  if (comm->size() < 2) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  const bool last = comm->rank() == comm->size() - 1;
  at::Tensor buffer = at::ones({8 * comm->size()});
  at::Tensor part = at::empty({8});
  const std::string message = message_of([&] {
    if (last) {
      comm->all_gather(part, buffer)->wait();
    } else {
      comm->reduce_scatter(buffer, part, ReduceOp::kSum)->wait();
    }
  });
  // Ranks with the same call are listed together: "rank 0", "ranks 0, 1", "ranks 0-2".
  const int n = comm->size();
  const std::string others = n == 2   ? "rank 0 "
                             : n == 3 ? "ranks 0, 1 "
                                      : "ranks 0-" + std::to_string(n - 2) + " ";
  expect_mismatch(message, others + "issued reduce_scatter (" + std::to_string(8 * n) +
                               " elements of Float)",
                  "rank " + std::to_string(n - 1) + " issued all_gather (" +
                      std::to_string(8 * n) + " elements of Float)");
  // The sequences have parted: nothing after it runs.
  expect_contains(message_of([&] { comm->barrier()->wait(); }), "was not run");
}

// Collectives that agree run as before: the same labels on every rank, any sizes.
TEST(CollectiveMismatch, EqualCollectivesRun) {
  auto comm = make_mpi_communicator();
  CollectiveOptions labelled;
  labelled.label = "a test's all_reduce";
  at::Tensor x = at::full({5}, static_cast<float>(comm->rank() + 1));
  comm->all_reduce(x, ReduceOp::kSum, labelled)->wait();
  const int n = comm->size();
  EXPECT_TRUE(at::equal(x, at::full({5}, static_cast<float>(n * (n + 1) / 2))));
  at::Tensor whole = at::empty({3 * n + 1});
  std::vector<int64_t> counts(static_cast<size_t>(n), 3);
  counts[0] = 4;  // a part of its own length on rank 0
  at::Tensor mine = at::full({counts[static_cast<size_t>(comm->rank())]}, 1.0f);
  comm->all_gather(mine, whole, counts)->wait();
  EXPECT_TRUE(at::equal(whole, at::ones({3 * n + 1})));
}

// A stage-3 engine (every parameter partitioned, no prefetch, so each unit call gathers
// exactly its unit) on a communicator of the test's own, trained one step.
struct Stage3Run {
  std::shared_ptr<Communicator> comm = make_mpi_communicator();
  ModelSpec spec = tiny_gpt2_spec();
  RunResult run;
  Stage3Run() {
    RunOptions options;
    options.stage = 3;
    options.steps = 1;
    options.extra_zero_json =
        "\"stage3_param_persistence_threshold\": 0, \"stage3_prefetch_bucket_size\": 0";
    run = run_engine(spec, options, comm);
  }
  gpt2::GPT2Impl& gpt() { return dynamic_cast<gpt2::GPT2Impl&>(*run.model); }
  bool last() const { return comm->rank() == comm->size() - 1; }
  at::Tensor block(int i, const at::Tensor& x) {
    const std::shared_ptr<torch::nn::Module> b = gpt().transformer->h->ptr(i);
    return zero::run_with(*b, [&] { return b->as<gpt2::BlockImpl>()->forward(x); });
  }
  // GPT-2's forward with `blocks` in place of the model's order of blocks.
  at::Tensor loss(const std::vector<int>& blocks) {
    auto& body = gpt().transformer;
    auto [x, y] = spec.batch(11, 2);
    at::Tensor h = zero::run(body->wte, x) + zero::run(body->wpe, at::arange(x.size(1)));
    for (const int i : blocks) h = block(i, h);
    h = body->ln_f->forward(h);
    const auto& wte = body->wte;
    at::Tensor logits = zero::run_with(*wte, [&] { return at::matmul(h, wte->weight.t()); });
    return gpt().loss(logits, y);
  }
};

// A module called twice on one rank: the ranks' unit calls part; the first collective where
// they differ is named, with the unit and pass on each side.
TEST(CollectiveMismatch, ModuleCalledTwiceOnOneRank) {
  Stage3Run s;
  if (s.comm->size() < 2) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  const std::string message = message_of([&] {
    s.run.engine->backward(s.loss(s.last() ? std::vector<int>{0, 0, 1} : std::vector<int>{0, 1}));
    s.run.engine->step();
  });
  expect_mismatch(message, "issued reduce_scatter (",
                  "stage-3 gather of unit 'transformer.wte' in the backward pass)");
}

// A branch on rank-local data: one rank leaves block 1 out; its next gather (the embedding's
// in the backward pass) meets the others' gather of block 1 in the forward pass.
TEST(CollectiveMismatch, RankDependentBranch) {
  Stage3Run s;
  if (s.comm->size() < 2) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  const std::string message = message_of([&] {
    s.run.engine->backward(s.loss(s.last() ? std::vector<int>{0} : std::vector<int>{0, 1}));
    s.run.engine->step();
  });
  expect_mismatch(message, "stage-3 gather of unit 'transformer.h.1' in the forward pass",
                  "stage-3 gather of unit 'transformer.wte' in the backward pass");
}

// Blocks of one size called in a different order on one rank: the gathers move the same
// bytes, and without signatures would complete with each rank's block holding the other's
// parameters. Only the unit names differ.
TEST(CollectiveMismatch, SameSizedUnitsInAnotherOrder) {
  Stage3Run s;
  if (s.comm->size() < 2) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  const std::string message = message_of([&] {
    s.run.engine->backward(s.loss(s.last() ? std::vector<int>{1, 0} : std::vector<int>{0, 1}));
    s.run.engine->step();
  });
  expect_mismatch(message, "stage-3 gather of unit 'transformer.h.0' in the forward pass)",
                  "stage-3 gather of unit 'transformer.h.1' in the forward pass)");
  // Both sides gather the same number of elements: only the labels tell them apart.
  const std::regex gather("issued all_gather \\((\\d+) elements");
  std::vector<std::string> counts;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), gather);
       it != std::sregex_iterator(); ++it) {
    counts.push_back((*it)[1]);
  }
  ASSERT_EQ(counts.size(), 2u) << message;
  EXPECT_EQ(counts[0], counts[1]) << message;
}

// A backward skipped on one rank: the others' backward collectives meet its step's.
TEST(CollectiveMismatch, SkippedBackward) {
  Stage3Run s;
  if (s.comm->size() < 2) ZERO_SKIP_AT_THIS_RANK_COUNT("needs two ranks");
  const std::string message = message_of([&] {
    at::Tensor loss = s.loss({0, 1});
    if (!s.last()) s.run.engine->backward(loss);
    s.run.engine->step();
  });
  expect_mismatch(message, "stage-3 reduce-scatter of unit",
                  "issued all_reduce (1 elements of Double; the step's gradient norm)");
}

}  // namespace
}  // namespace zero::test
