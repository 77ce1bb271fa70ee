// zero::save_16bit_model (src/checkpoint/model_export.cpp): the file written on the root rank
// holds exactly the values zero::full_state_dict gathers, bit for bit, at stages 2 and 3;
// stage 3 without stage3_gather_16bit_weights_on_model_save is refused on every rank; a
// failure on the root (bad path, wrong module) does not leave the other ranks waiting. Run
// under mpirun at world sizes 1-3.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "engine_harness.h"
#include "test_util.h"
#include "zero/error.h"
#include "zero/model_export.h"
#include "zero/safetensors.h"
#include "zero/state_dict.h"

namespace zero::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPartitioned = "\"stage3_param_persistence_threshold\": 0";
constexpr const char* kGather = "\"stage3_gather_16bit_weights_on_model_save\": true";

// A directory every rank names alike (rank 0's pid), removed on destruction by rank 0.
class SharedDir {
 public:
  explicit SharedDir(const std::string& tag) : comm_(world()) {
    at::Tensor pid = at::full({1}, static_cast<int64_t>(::getpid()), at::kLong);
    comm_->broadcast(pid, 0)->wait();
    path_ = fs::temp_directory_path() /
            ("zero_test_model_export_" + std::to_string(pid.item<int64_t>()) + "_" + tag);
    if (comm_->rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    comm_->barrier()->wait();
  }
  ~SharedDir() {
    comm_->barrier()->wait();
    if (comm_->rank() == 0) fs::remove_all(path_);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::shared_ptr<Communicator> comm_;
  fs::path path_;
};

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.contiguous();
  const at::Tensor y = b.contiguous();
  return x.nbytes() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Trains the tiny GPT-2 for two steps, saves from `root` and compares the file with the
// gathered state dict.
void check_export(int stage, const std::string& dtype, const std::string& extra_zero_json) {
  auto comm = world();
  SCOPED_TRACE("stage " + std::to_string(stage) + " " + dtype + " world " +
               std::to_string(comm->size()));
  RunOptions options;
  options.stage = stage;
  options.dtype = dtype;
  options.steps = 2;
  options.extra_zero_json = extra_zero_json;
  RunResult run = run_engine(tiny_gpt2_spec(), options, comm);
  const at::ScalarType param_dtype = dtype == "bf16" ? at::kBFloat16 : dtype == "fp16" ? at::kHalf : at::kFloat;

  SharedDir dir("stage" + std::to_string(stage) + dtype);
  const int root = comm->size() - 1;  // not always 0
  const std::string path = dir.file("model.safetensors");
  save_16bit_model(*run.engine, *run.model, path, root);
  const auto expected = full_state_dict(*run.engine, root);
  if (comm->rank() != root) {
    EXPECT_TRUE(expected.empty());
    return;
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"producer", "zero"}}));
  ASSERT_EQ(file.tensors.size(), expected.size());
  // HF names; the tied lm_head reuses wte.weight and is not stored separately.
  EXPECT_TRUE(file.tensors.count("transformer.wte.weight"));
  EXPECT_FALSE(file.tensors.count("lm_head.weight"));
  int64_t numel = 0;
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(file.tensors.count(name)) << name;
    const at::Tensor& saved = file.tensors.at(name);
    EXPECT_EQ(saved.scalar_type(), param_dtype) << name;
    EXPECT_TRUE(bitwise_equal(saved, value)) << name;
    numel += saved.numel();
  }
  EXPECT_EQ(numel, run.engine->num_parameters());
}

TEST(ModelExport, Stage2MatchesTheGatheredStateDict) { check_export(2, "bf16", ""); }

TEST(ModelExport, Stage3MatchesTheGatheredStateDict) {
  check_export(3, "bf16", std::string(kPartitioned) + ", " + kGather);
  check_export(3, "fp32", std::string(kPartitioned) + ", " + kGather);
}

TEST(ModelExport, Stage3WithoutTheGatherFlagIsRefusedOnEveryRank) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.steps = 1;
  options.extra_zero_json = kPartitioned;
  RunResult run = run_engine(tiny_gpt2_spec(), options, comm);
  SharedDir dir("noflag");
  const std::string path = dir.file("model.safetensors");
  try {
    save_16bit_model(*run.engine, *run.model, path, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("zero_optimization.stage3_gather_16bit_weights_on_model_save"), std::string::npos) << message;
    EXPECT_NE(message.find("false"), std::string::npos) << message;
    EXPECT_NE(message.find("set it to true"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(path));
  // No collective was started: the engine still gathers in step on every rank.
  const auto state = full_state_dict(*run.engine, 0);
  EXPECT_EQ(state.empty(), comm->rank() != 0);
}

// A failure on the root is thrown there after the gathers, so the others are not left waiting.
void expect_root_failure(Engine& engine, const torch::nn::Module& model, const std::string& path,
                         const std::string& part) {
  auto comm = world();
  const int root = comm->size() - 1;
  bool threw = false;
  try {
    save_16bit_model(engine, model, path, root);
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
  EXPECT_EQ(threw, comm->rank() == root);
  (void)full_state_dict(engine, 0);  // every rank is in step again
  comm->barrier()->wait();                   // the root has removed its .tmp file by now
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(ModelExport, RootFailuresDoNotHangTheOtherRanks) {
  auto comm = world();
  RunOptions options;
  options.stage = 3;
  options.steps = 1;
  options.extra_zero_json = std::string(kPartitioned) + ", " + kGather;
  RunResult run = run_engine(tiny_gpt2_spec(), options, comm);
  SharedDir dir("failures");
  const std::string nowhere = dir.file("no/such/dir/model.safetensors");
  expect_root_failure(*run.engine, *run.model, nowhere, std::strerror(ENOENT));
  // A module other than the engine's: names do not match.
  const auto other = mlp_spec().build();
  expect_root_failure(*run.engine, *other, dir.file("other.safetensors"),
                      "not a trainable parameter of the module passed in");
}

}  // namespace
}  // namespace zero::test
