// What the tests against transformers-made directories share (test_gpt2_pretrained,
// test_llama_pretrained): the manifest their ctest script writes, its token rows, and the
// check that every bad directory is refused with its message.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "zero/error.h"

namespace zero::test {

/// ZERO_TEST_HF_MANIFEST's JSON, or null when the variable is unset (run outside its ctest).
inline nlohmann::json hf_manifest() {
  const char* path = std::getenv("ZERO_TEST_HF_MANIFEST");
  if (path == nullptr) return nullptr;
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

/// `rows` (a JSON array of token rows) as an int64 tensor [rows, length].
inline at::Tensor hf_token_rows(const nlohmann::json& rows) {
  std::vector<int64_t> flat;
  for (const auto& row : rows) {
    for (const auto& id : row) flat.push_back(id.get<int64_t>());
  }
  return at::tensor(flat, at::kLong).view({static_cast<int64_t>(rows.size()), -1});
}

/// The DeepSpeed config both tests fine-tune with: micro-batch 1, clipping, AdamW 1e-3, `stage`
/// (stage 3 partitioning every parameter).
inline std::string hf_finetune_config(int stage) {
  return "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 1.0, \"optimizer\": "
         "{\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": "
         "{\"stage\": " + std::to_string(stage) +
         (stage == 3 ? ", \"stage3_param_persistence_threshold\": 0" : "") + "}}";
}

/// Every entry of `bad` ({"name", "dir", "message"}) is refused by `load(dir)` with a
/// zero::Error containing its message.
inline void expect_every_bad_directory_refused(const nlohmann::json& bad,
                                               const std::function<void(const std::string&)>& load) {
  for (const auto& entry : bad) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    try {
      load(entry["dir"].get<std::string>());
      ADD_FAILURE() << "accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(entry["message"].get<std::string>()),
                std::string::npos)
          << error.what();
    }
  }
}

}  // namespace zero::test
