// Hugging Face GPT-2 directories in (zero/gpt2_pretrained.h), under mpirun at 1 and 2 ranks, on
// the directories tests/models/make_hf_checkpoints.py makes with transformers (manifest in
// ZERO_TEST_HF_MANIFEST; the ctest hf_init runs both):
//   - every variant (one file, shards with an index, the original gpt2 names in bf16 with the
//     mask buffers, a zero-ckpt export) loads at stages 0-3 and gives the Hugging Face model's
//     loss on the same tokens within 1e-5 relative;
//   - fine-tuning from it gives the same losses at every stage (bitwise at stages 0-2; stage 3
//     too at 1-2 ranks, where its reduction order is the same);
//   - every bad directory is refused on every rank with the message naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

#include "test_util.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/gpt2_pretrained.h"
#include "zero/sharded_init.h"

namespace zero::test {
namespace {

nlohmann::json manifest() {
  const char* path = std::getenv("ZERO_TEST_HF_MANIFEST");
  if (path == nullptr) return nullptr;
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct Loaded {
  std::shared_ptr<gpt2::GPT2Impl> model;
  std::unique_ptr<Engine> engine;
};

Loaded load(const std::string& dir, int stage) {
  auto comm = world();
  const Config config = parse_config(
      "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 1.0, \"optimizer\": "
      "{\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": {\"stage\": " +
          std::to_string(stage) +
          (stage == 3 ? ", \"stage3_param_persistence_threshold\": 0" : "") + "}}",
      comm->size(), "test");
  Loaded loaded;
  const gpt2::GPT2Config shape = gpt2::hf_config_from_dir(dir);
  torch::manual_seed(1);  // the random init the weights replace
  if (stage == 3) {
    ShardedInit sharded(config, comm);
    loaded.model = std::make_shared<gpt2::GPT2Impl>(shape);
  } else {
    loaded.model = std::make_shared<gpt2::GPT2Impl>(shape);
  }
  loaded.engine = initialize(loaded.model, config, comm);
  gpt2::load_hf_weights(*loaded.engine, *loaded.model, dir, *comm);
  return loaded;
}

at::Tensor tokens_of(const nlohmann::json& m) {
  std::vector<int64_t> flat;
  for (const auto& row : m["tokens"]) {
    for (const auto& id : row) flat.push_back(id.get<int64_t>());
  }
  const int64_t rows = static_cast<int64_t>(m["tokens"].size());
  return at::tensor(flat, at::kLong).view({rows, -1});
}

TEST(HuggingFaceInit, EveryVariantGivesTheHuggingFaceLossAtEveryStage) {
  const nlohmann::json m = manifest();
  if (m.is_null()) GTEST_SKIP() << "ZERO_TEST_HF_MANIFEST is not set (ctest hf_init sets it)";
  const at::Tensor tokens = tokens_of(m);
  const int64_t t = tokens.size(1) - 1;
  const at::Tensor x = tokens.narrow(1, 0, t).contiguous(), y = tokens.narrow(1, 1, t).contiguous();
  for (const auto& variant : m["variants"]) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(variant["name"].get<std::string>() + " at stage " + std::to_string(stage));
      Loaded loaded = load(variant["dir"].get<std::string>(), stage);
      at::NoGradGuard no_grad;
      loaded.model->eval();
      const double loss = loaded.model->forward_loss(x, y).item<double>();
      const double expected = variant["loss"].get<double>();
      EXPECT_NEAR(loss, expected, 1e-5 * expected);
    }
  }
}

TEST(HuggingFaceInit, FineTuningGivesTheSameLossesAtEveryStage) {
  const nlohmann::json m = manifest();
  if (m.is_null()) GTEST_SKIP() << "ZERO_TEST_HF_MANIFEST is not set (ctest hf_init sets it)";
  auto comm = world();
  const at::Tensor tokens = tokens_of(m);
  const int64_t t = tokens.size(1) - 1;
  // Each rank one of the two rows (at one rank: the first), the same four steps.
  const int64_t row = comm->rank() % tokens.size(0);
  const at::Tensor x = tokens.narrow(0, row, 1).narrow(1, 0, t).contiguous();
  const at::Tensor y = tokens.narrow(0, row, 1).narrow(1, 1, t).contiguous();
  std::vector<std::vector<double>> losses;
  for (int stage = 0; stage <= 3; ++stage) {
    Loaded loaded = load(m["variants"][0]["dir"].get<std::string>(), stage);
    std::vector<double> mine;
    for (int step = 0; step < 4; ++step) {
      const at::Tensor loss = loaded.model->forward_loss(x, y);
      at::Tensor total = at::full({1}, loss.item<double>(), at::kDouble);
      comm->all_reduce(total, ReduceOp::kSum)->wait();
      mine.push_back(total.item<double>());
      loaded.engine->backward(loss);
      loaded.engine->step();
    }
    losses.push_back(mine);
  }
  EXPECT_LT(losses[0].back(), losses[0].front());  // it learns
  for (int stage = 1; stage <= 3; ++stage) {
    if (stage == 3 && comm->size() > 2) continue;  // its reduction order differs beyond 2 ranks
    EXPECT_EQ(losses[stage], losses[0]) << "stage " << stage;
  }
}

TEST(HuggingFaceInit, BadDirectoriesAreRefusedOnEveryRank) {
  const nlohmann::json m = manifest();
  if (m.is_null()) GTEST_SKIP() << "ZERO_TEST_HF_MANIFEST is not set (ctest hf_init sets it)";
  for (const auto& bad : m["bad"]) {
    SCOPED_TRACE(bad["name"].get<std::string>());
    try {
      (void)load(bad["dir"].get<std::string>(), 2);
      ADD_FAILURE() << "accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(bad["message"].get<std::string>()),
                std::string::npos)
          << error.what();
    }
  }
}

}  // namespace
}  // namespace zero::test
