// Reading checkpoints without an engine (zero/checkpoint.h), run under mpirun at 1 and 2 ranks:
// the weights assembled from every rank's file are bitwise the engine's parameters, the
// export (what zero-ckpt export writes) reads back identical, inspect_checkpoint reports what
// was saved, and each kind of damage gives its own message. The zero-ckpt binary itself is
// tested end to end by tests/checkpoint/check_zero_ckpt.sh.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "checkpoint/metadata_edit.h"
#include "engine_harness.h"
#include "test_util.h"
#include "zero/checkpoint.h"
#include "zero/error.h"
#include "zero/safetensors.h"
#include "zero/state_dict.h"

namespace zero::test {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string shared_dir(const std::string& name) { return shared_temp_dir("ckpt-export-test-" + name); }

RunOptions options_for(int stage, const std::string& dtype) {
  RunOptions options;
  options.stage = stage;
  options.dtype = dtype;
  options.steps = 3;
  if (stage == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
  return options;
}

// Same dtype, shape and bytes (NaN-safe, -0 != +0).
::testing::AssertionResult bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) {
    return ::testing::AssertionFailure() << a.scalar_type() << a.sizes() << " vs "
                                         << b.scalar_type() << b.sizes();
  }
  const at::Tensor x = a.contiguous();
  const at::Tensor y = b.contiguous();
  if (std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
    return ::testing::AssertionFailure() << "values differ (max |a - b| = "
                                         << (x.to(at::kDouble) - y.to(at::kDouble)).abs().max().item<double>()
                                         << ")";
  }
  return ::testing::AssertionSuccess();
}

// The same parameters by name, bitwise. (Not in the same order: at stage 3 a checkpoint lists
// the parameters in module order, full_state_dict in partition order, unit by unit.)
void expect_same_weights(const std::vector<std::pair<std::string, at::Tensor>>& got,
                         const std::vector<std::pair<std::string, at::Tensor>>& expected) {
  EXPECT_EQ(got.size(), expected.size());
  std::map<std::string, at::Tensor> by_name(got.begin(), got.end());
  for (const auto& [name, value] : expected) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_TRUE(bitwise_equal(it->second, value)) << name;
  }
}

// In the metadata's parameter order.
void expect_metadata_order(const std::vector<std::pair<std::string, at::Tensor>>& got,
                           const CheckpointSummary& summary) {
  ASSERT_EQ(got.size(), summary.parameters.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, summary.parameters[i].name) << "parameter " << i;
    EXPECT_EQ(got[i].second.sizes().vec(), summary.parameters[i].shape) << got[i].first;
  }
}

// The checkpoint holds exactly the engine's parameters, at stages 2 and 3 in fp32 and bf16:
// read back (fp32 master; bf16 rounded from it as the engine rounds its parameters) and
// exported to safetensors, every bit agrees with zero::full_state_dict.
TEST(CheckpointExport, WeightsAreTheEngineParametersBitwise) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage : {2, 3}) {
    for (const std::string dtype : {"fp32", "bf16"}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", " + dtype);
      const RunOptions options = options_for(stage, dtype);
      RunResult run = run_engine(spec, options, comm);
      const auto full = full_state_dict(*run.engine);  // rank 0 only
      const std::string dir = shared_dir("weights" + std::to_string(stage) + dtype);
      run.engine->save_checkpoint(dir, "", "{\"data_step\": 3}");
      // On rank 0, in a lambda: an ASSERT leaves it, not the test (the other ranks wait below).
      if (comm->rank() == 0) [&] {
        const at::ScalarType type = dtype == "fp32" ? at::kFloat : at::kBFloat16;
        ASSERT_EQ(full.front().second.scalar_type(), type);
        const auto weights = read_checkpoint_weights(dir, "", type);
        expect_same_weights(weights, full);
        expect_metadata_order(weights, inspect_checkpoint(dir));
        if (type != at::kFloat) {
          // The fp32 master weights round to the parameters.
          auto master = read_checkpoint_weights(dir, "global_step3", at::kFloat);
          for (auto& [name, value] : master) value = value.to(type);
          expect_same_weights(master, full);
        }

        const std::string out = (fs::path(dir) / "model.safetensors").string();
        export_checkpoint_weights(dir, "", out, type);
        const SafetensorsFile file = read_safetensors(out);
        EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
        EXPECT_EQ(file.tensors.size(), full.size());
        for (const auto& [name, value] : full) {
          const auto it = file.tensors.find(name);
          if (it == file.tensors.end()) {
            ADD_FAILURE() << "export lacks " << name;
            continue;
          }
          EXPECT_TRUE(bitwise_equal(it->second, value)) << name;
        }
        // Hugging Face GPT2LMHeadModel names; the tied lm_head is stored once, as wte.
        ASSERT_EQ(file.tensors.count("transformer.wte.weight"), 1u);
        EXPECT_EQ(file.tensors.at("transformer.wte.weight").sizes(), at::IntArrayRef({97, 32}));
        EXPECT_EQ(file.tensors.at("transformer.h.1.attn.c_attn.weight").sizes(),
                  at::IntArrayRef({32, 96}));
        EXPECT_EQ(file.tensors.count("lm_head.weight"), 0u);
      }();
      comm->barrier()->wait();
    }
  }
}

// inspect_checkpoint reports what save_checkpoint recorded.
TEST(CheckpointExport, InspectReportsWhatWasSaved) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  const RunOptions options = options_for(3, "bf16");
  RunResult run = run_engine(spec, options, comm);
  const auto full = full_state_dict(*run.engine);
  const std::string dir = shared_dir("inspect");
  EXPECT_EQ(run.engine->save_checkpoint(dir, "", "{\"data_step\": 3, \"note\": \"x\"}"),
            "global_step3");
  if (comm->rank() == 0) [&] {
    for (const std::string tag : {"", "global_step3"}) {
      const CheckpointSummary s = inspect_checkpoint(dir, tag, /*verify=*/true);
      EXPECT_EQ(s.tag, "global_step3");
      EXPECT_EQ(s.path, (fs::path(dir) / "global_step3").string());
      EXPECT_EQ(s.format, "zero-checkpoint");
      EXPECT_EQ(s.version, 2);
      EXPECT_EQ(s.world_size, comm->size());
      EXPECT_EQ(s.stage, 3);
      EXPECT_EQ(s.param_dtype, "bf16");
      EXPECT_EQ(s.master_dtype, "fp32");
      EXPECT_EQ(s.optimizer, "AdamW");
      EXPECT_EQ(s.optimizer_state, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
      EXPECT_EQ(s.global_steps, 3);
      EXPECT_EQ(s.skipped_steps, 0);
      EXPECT_EQ(s.micro_steps, 3);
      EXPECT_EQ(s.optimizer_steps, 3);
      EXPECT_EQ(s.gradient_accumulation_steps, 1);
      EXPECT_EQ(s.lr, run.engine->learning_rate());
      EXPECT_EQ(s.loss_scaler.scale, run.engine->loss_scale());
      EXPECT_FALSE(s.scheduler);
      EXPECT_EQ(s.client_state, "{\"data_step\":3,\"note\":\"x\"}");
      const Json config = Json::parse(s.config);  // the effective config
      EXPECT_EQ(config.at("zero_optimization").at("stage"), 3);
      EXPECT_EQ(config.at("train_micro_batch_size_per_gpu"), 2);
      EXPECT_EQ(config.at("bf16").at("enabled"), true);
      ASSERT_EQ(s.parameters.size(), full.size());
      std::map<std::string, at::Tensor> by_name(full.begin(), full.end());
      int64_t total = 0;
      for (const CheckpointSummary::Parameter& p : s.parameters) {
        ASSERT_EQ(by_name.count(p.name), 1u) << p.name;
        EXPECT_EQ(p.shape, by_name[p.name].sizes().vec()) << p.name;
        EXPECT_EQ(p.numel, by_name[p.name].numel()) << p.name;
        total += p.numel;
      }
      EXPECT_EQ(s.num_parameters, total);
      EXPECT_EQ(s.num_parameters, run.engine->num_parameters());
      ASSERT_EQ(s.files.size(), static_cast<size_t>(comm->size()));
      int64_t elements = 0;
      for (int r = 0; r < comm->size(); ++r) {
        const CheckpointSummary::File& f = s.files[r];
        char name[32];
        std::snprintf(name, sizeof(name), "rank_%05d.safetensors", r);
        EXPECT_EQ(f.name, name);
        EXPECT_EQ(f.bytes, static_cast<int64_t>(fs::file_size(fs::path(s.path) / name)));
        EXPECT_GT(f.pieces, 0);
        EXPECT_EQ(f.problem, "");
        elements += f.elements;
      }
      EXPECT_EQ(elements, total);  // every element saved once
      EXPECT_TRUE(s.verified);
      EXPECT_TRUE(s.ok()) << s.problems.front();
    }
    EXPECT_FALSE(inspect_checkpoint(dir).verified);
  }();
  comm->barrier()->wait();
}

// Each kind of damage is named: read_checkpoint_weights throws, inspect_checkpoint with verify
// reports file problems (and throws for what makes the metadata unreadable).
TEST(CheckpointExport, DamagedCheckpointsAreReportedClearly) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  RunResult run = run_engine(spec, options_for(2, "fp32"), comm);
  const std::string dir = shared_dir("damaged");
  run.engine->save_checkpoint(dir, "good");
  if (comm->rank() == 0) [&] {
    const fs::path good = fs::path(dir) / "good";
    // Edits are re-signed, so each case reaches the check it is about.
    auto edit_metadata = [](const fs::path& p, const std::function<void(Json&)>& edit) {
      edit_metadata_json(p, edit);
    };
    struct Case {
      std::string tag;
      std::function<void(const fs::path&)> damage;
      std::string expected;
      bool inspect_throws;  // else inspect with verify reports it as a problem
    };
    const std::string rank0 = "rank_00000.safetensors";
    const std::vector<Case> cases = {
        {"missing_file", [&](const fs::path& p) { fs::remove(p / rank0); },
         rank0 + "' is missing", false},
        {"truncated",
         [&](const fs::path& p) { fs::resize_file(p / rank0, fs::file_size(p / rank0) - 10); },
         "bytes but the metadata records", false},
        {"flipped_byte",
         [&](const fs::path& p) {
           std::fstream f(p / rank0, std::ios::in | std::ios::out | std::ios::binary);
           f.seekg(static_cast<std::streamoff>(fs::file_size(p / rank0) / 2));
           const char c = static_cast<char>(f.get());
           f.seekp(static_cast<std::streamoff>(fs::file_size(p / rank0) / 2));
           f.put(static_cast<char>(c ^ 0x10));
         },
         "is corrupted: CRC-32", false},
        // A crafted safetensors header (length 2^63 - 1) in a file whose size and CRC-32 the
        // forger re-recorded: verify runs the load's checks, so it reports what a load refuses.
        {"crafted_header",
         [&](const fs::path& p) {
           {
             std::fstream f(p / rank0, std::ios::in | std::ios::out | std::ios::binary);
             const char length[8] = {'\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\x7f'};
             f.write(length, 8);
           }
           const std::string bytes = file_text(p / rank0);
           edit_metadata(p, [&](Json& m) {
             m["files"][0]["bytes"] = bytes.size();
             m["files"][0]["crc32"] = crc32_of(bytes);
           });
         },
         "header length 9223372036854775807", false},
        {"version", [&](const fs::path& p) { edit_metadata(p, [](Json& m) { m["version"] = 99; }); },
         "format version 99; this build reads version 2", true},
        {"not_zero",
         [&](const fs::path& p) { edit_metadata(p, [](Json& m) { m["format"] = "other"; }); },
         "is not a zero checkpoint", true},
        {"no_metadata", [](const fs::path& p) { fs::remove(p / "metadata.json"); },
         "is incomplete or missing", true},
        {"malformed",
         [&](const fs::path& p) { edit_metadata(p, [](Json& m) { m.erase("parameters"); }); },
         "parameters is missing", true},
        {"gap",
         [&](const fs::path& p) {
           edit_metadata(p, [](Json& m) {
             Json& pieces = m["files"][0]["pieces"];
             pieces.erase(pieces.begin());
           });
         },
         "holds elements", true},
        {"overlap",
         [&](const fs::path& p) {
           edit_metadata(p, [](Json& m) {
             Json& pieces = m["files"][0]["pieces"];
             pieces.push_back(pieces[0]);
           });
         },
         "overlap at elements", true},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.tag);
      const fs::path target = fs::path(dir) / c.tag;
      fs::copy(good, target, fs::copy_options::recursive);
      c.damage(target);
      try {
        read_checkpoint_weights(dir, c.tag);
        ADD_FAILURE() << "read a damaged checkpoint";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos)
            << "the message names the checkpoint or file: " << e.what();
      }
      if (c.inspect_throws) {
        EXPECT_THROW(inspect_checkpoint(dir, c.tag, true), Error);
      } else {
        const CheckpointSummary s = inspect_checkpoint(dir, c.tag, true);
        ASSERT_EQ(s.problems.size(), 1u);
        EXPECT_NE(s.problems[0].find(c.expected), std::string::npos) << s.problems[0];
      }
    }
    // Export refuses too, and leaves no file behind.
    const fs::path out = fs::path(dir) / "out.safetensors";
    EXPECT_THROW(export_checkpoint_weights(dir, "flipped_byte", out.string(), at::kBFloat16), Error);
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
    // No checkpoint, an unknown tag, an unsupported dtype.
    try {
      read_checkpoint_weights((fs::path(dir) / "empty").string());
      ADD_FAILURE() << "read from a directory without a checkpoint";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no checkpoint to load"), std::string::npos) << e.what();
    }
    EXPECT_THROW(inspect_checkpoint(dir, "nope"), Error);
    EXPECT_THROW(inspect_checkpoint(dir, "../good"), Error);
    try {
      read_checkpoint_weights(dir, "good", at::kInt);
      ADD_FAILURE() << "read as int32";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fp32, bf16 or fp16"), std::string::npos) << e.what();
    }
    // The undamaged original still reads.
    EXPECT_TRUE(inspect_checkpoint(dir, "good", true).ok());
    EXPECT_NO_THROW(read_checkpoint_weights(dir, "good"));
  }();
  comm->barrier()->wait();
}

}  // namespace
}  // namespace zero::test
