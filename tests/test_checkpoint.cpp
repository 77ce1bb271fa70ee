// Checkpoints at one world size (run under mpirun at 1-4 ranks): bit-exact resume at every
// stage with fp16 loss scaling and a scheduler, loading across stages, atomic publication,
// and a clear error for each kind of bad checkpoint. Resharding across world sizes is
// tests/checkpoint/check_reshard.sh (it needs several mpirun jobs).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "checkpoint/metadata_edit.h"
#include "engine_harness.h"
#include "test_util.h"
#include "zero/error.h"
#include "zero/gathered_parameters.h"
#include "zero/safetensors.h"

namespace zero::test {
namespace {

namespace fs = std::filesystem;

std::string shared_dir(const std::string& name) { return shared_temp_dir("ckpt-test-" + name); }

RunOptions fp16_scheduled(int stage) {
  RunOptions options;
  options.stage = stage;
  options.dtype = cpu_supports_half() ? "fp16" : "bf16";
  options.gradient_clipping = 0.05;
  options.gradient_accumulation_steps = 2;
  options.extra_top_json =
      "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
      "\"warmup_max_lr\": 0.003, \"warmup_num_steps\": 5}}";
  if (stage == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
  return options;
}

struct Trainer {
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<Engine> engine;
};

Trainer make_trainer(const ModelSpec& spec, const RunOptions& options) {
  auto comm = world();
  Trainer t;
  t.model = spec.build();
  t.engine = initialize(t.model, parse_config(make_config_json(options), comm->size(), "test"),
                        comm);
  return t;
}

// Steps [first, last) of the harness's data schedule; returns the global mean loss per step.
std::vector<double> train(Trainer& t, const ModelSpec& spec, const RunOptions& options, int first,
                          int last) {
  auto comm = world();
  const int world_size = comm->size();
  const int64_t mbs = options.micro_batch;
  const int gas = options.gradient_accumulation_steps;
  std::vector<double> losses;
  for (int step = first; step < last; ++step) {
    auto [x, y] = spec.batch(step, world_size * mbs * gas);
    double sum = 0;
    for (int micro = 0; micro < gas; ++micro) {
      const int64_t row = (static_cast<int64_t>(micro) * world_size + comm->rank()) * mbs;
      at::Tensor loss = spec.loss(*t.model, x.narrow(0, row, mbs), y.narrow(0, row, mbs));
      sum += loss.item<double>();
      t.engine->backward(loss);
      t.engine->step();
    }
    at::Tensor total = at::full({1}, sum, at::kDouble);
    comm->all_reduce(total, ReduceOp::kSum)->wait();
    losses.push_back(total.item<double>() / (world_size * gas));
  }
  return losses;
}

at::Tensor parameters_of(Trainer& t) {
  GatheredParameters whole(*t.engine, t.model->parameters());
  return flatten_parameters(*t.model);
}

// Stopping at step 3, saving, and resuming in a new engine gives bit for bit the losses,
// parameters, loss scale and learning rate of an uninterrupted run.
TEST(Checkpoint, ResumeIsBitExactAtEveryStage) {
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const RunOptions options = fp16_scheduled(stage);
    Trainer straight = make_trainer(spec, options);
    const std::vector<double> expected = train(straight, spec, options, 0, 7);

    const std::string dir = shared_dir("resume" + std::to_string(stage));
    std::string tag;
    {
      Trainer first = make_trainer(spec, options);
      train(first, spec, options, 0, 3);
      tag = first.engine->save_checkpoint(dir, "", "{\"data_step\": 3}");
    }
    EXPECT_EQ(tag, "global_step3");
    Trainer resumed = make_trainer(spec, options);
    EXPECT_EQ(resumed.engine->load_checkpoint(dir), "{\"data_step\":3}");
    EXPECT_EQ(resumed.engine->global_steps() + resumed.engine->skipped_steps(), 3);
    const std::vector<double> rest = train(resumed, spec, options, 3, 7);
    for (size_t i = 0; i < rest.size(); ++i) {
      EXPECT_EQ(rest[i], expected[3 + i]) << "step " << 3 + i;
    }
    EXPECT_TRUE(at::equal(parameters_of(resumed), parameters_of(straight)));
    EXPECT_EQ(resumed.engine->loss_scale(), straight.engine->loss_scale());
    EXPECT_EQ(resumed.engine->learning_rate(), straight.engine->learning_rate());
    EXPECT_EQ(resumed.engine->skipped_steps(), straight.engine->skipped_steps());
  }
}

// NVMe offload (Note [NVMe offload]): a run with its optimizer state in swap files resumes bit
// for bit, and its checkpoints are those of the in-memory run: each loads into the other.
TEST(Checkpoint, OffloadedResumeIsBitExact) {
  const ModelSpec spec = tiny_gpt2_spec();
  const std::string nvme = shared_dir("nvme");
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const RunOptions in_memory = fp16_scheduled(stage);
    const RunOptions offloaded = [&] {
      RunOptions o = in_memory;
      o.extra_zero_json += std::string(stage == 3 ? ", " : "") +
                           "\"sub_group_size\": 500, \"offload_optimizer\": {\"device\": "
                           "\"nvme\", \"nvme_path\": \"" + nvme + "\"}";
      // At stage 3 the parameter shards too (Note [Parameter offload]).
      if (stage == 3) {
        o.extra_zero_json += ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" +
                             nvme + "\", \"buffer_count\": 2}";
      }
      return o;
    }();
    Trainer straight = make_trainer(spec, in_memory);
    const std::vector<double> expected = train(straight, spec, in_memory, 0, 6);
    for (const auto* saver : {&offloaded, &in_memory}) {
      const std::string dir = shared_dir("offload-resume" + std::to_string(stage));
      {
        Trainer first = make_trainer(spec, *saver);
        train(first, spec, *saver, 0, 3);
        first.engine->save_checkpoint(dir, "mid");
      }
      // Offloaded saves load offloaded and in memory; in-memory saves load offloaded.
      for (const auto* loader : {&offloaded, &in_memory}) {
        if (saver == &in_memory && loader == &in_memory) continue;  // ResumeIsBitExact...
        const char* saved_as = saver == &offloaded ? "saved offloaded" : "saved in memory";
        const char* loaded_as = loader == &offloaded ? "loaded offloaded" : "loaded in memory";
        SCOPED_TRACE(saved_as);
        SCOPED_TRACE(loaded_as);
        Trainer resumed = make_trainer(spec, *loader);
        resumed.engine->load_checkpoint(dir, "mid");
        const std::vector<double> rest = train(resumed, spec, *loader, 3, 6);
        for (size_t i = 0; i < rest.size(); ++i) {
          EXPECT_EQ(rest[i], expected[3 + i]) << "step " << 3 + i;
        }
        EXPECT_TRUE(at::equal(parameters_of(resumed), parameters_of(straight)));
      }
    }
  }
}

// Adagrad (its sum starting at initial_accumulator_value), Lion, LAMB and Muon (its matrices'
// momentum and its AdamW half's moments) keep their state in checkpoints as Adam does: resumed
// at every stage, in memory and with the state on NVMe (saved one way, loaded the other), they
// give the uninterrupted run's losses and parameters bit for bit; and a checkpoint names its
// optimizer, so loading it under the other refuses.
TEST(Checkpoint, AdagradLionLambAndMuonResumeBitExactly) {
  const ModelSpec spec = tiny_gpt2_spec();
  const std::string nvme = shared_dir("adagrad-lion-nvme");
  for (const char* type : {"Adagrad", "Lion", "Lamb", "Muon"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(std::string(type) + " stage " + std::to_string(stage));
      RunOptions in_memory = fp16_scheduled(stage);
      in_memory.optimizer = type;
      in_memory.lr = std::string(type) == "Adagrad" ? 0.02 : 1e-3;
      in_memory.initial_accumulator_value = 0.1;
      in_memory.lr_decay = 0.01;
      RunOptions offloaded = in_memory;
      if (stage >= 1) {
        offloaded.extra_zero_json += std::string(stage == 3 ? ", " : "") +
                                     "\"sub_group_size\": 500, \"offload_optimizer\": "
                                     "{\"device\": \"nvme\", \"nvme_path\": \"" + nvme + "\"}";
      }
      Trainer straight = make_trainer(spec, in_memory);
      const std::vector<double> expected = train(straight, spec, in_memory, 0, 6);
      const std::vector<std::pair<const RunOptions*, const RunOptions*>> ways =
          stage == 0 ? std::vector<std::pair<const RunOptions*, const RunOptions*>>{
                           {&in_memory, &in_memory}}
                     : std::vector<std::pair<const RunOptions*, const RunOptions*>>{
                           {&in_memory, &in_memory}, {&offloaded, &in_memory},
                           {&in_memory, &offloaded}};
      for (const auto& [saver, loader] : ways) {
        SCOPED_TRACE(std::string(saver == &offloaded ? "saved on NVMe" : "saved in memory") +
                     (loader == &offloaded ? ", loaded on NVMe" : ", loaded in memory"));
        const std::string dir = shared_dir(std::string("resume-") + type + std::to_string(stage));
        {
          Trainer first = make_trainer(spec, *saver);
          train(first, spec, *saver, 0, 3);
          first.engine->save_checkpoint(dir, "mid");
        }
        Trainer resumed = make_trainer(spec, *loader);
        resumed.engine->load_checkpoint(dir, "mid");
        const std::vector<double> rest = train(resumed, spec, *loader, 3, 6);
        for (size_t i = 0; i < rest.size(); ++i) {
          EXPECT_EQ(rest[i], expected[3 + i]) << "step " << 3 + i;
        }
        EXPECT_TRUE(at::equal(parameters_of(resumed), parameters_of(straight)));
      }
      if (stage == 2) {
        RunOptions other = in_memory;
        other.optimizer = std::string(type) == "Adagrad" ? "Lion" : "Adagrad";
        Trainer wrong = make_trainer(spec, other);
        const std::string dir = shared_dir(std::string("resume-") + type + "2");
        try {
          wrong.engine->load_checkpoint(dir, "mid");
          ADD_FAILURE() << "a " << type << " checkpoint loaded under " << other.optimizer;
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find(type), std::string::npos) << e.what();
        }
      }
    }
  }
}

// A device model's offloaded optimizer (Note [Offload of a device model], run through its CPU
// stand-in, ZERO_EMULATE_DEVICE_OFFLOAD) saves what training in memory saves: its checkpoints
// resume in memory and the other way round, bit for bit, at stages 1-3, with the overlapped
// step (bf16, no clipping, a schedule: stages 1 and 3) and with the step after backward (fp16
// or clipping: stage 2). (Each stage and step kind is also run, without a checkpoint, by
// test_device_offload; three cases keep this test's sanitizer run short.)
TEST(Checkpoint, DeviceOffloadResumesAcrossPlacementsBitExactly) {
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage = 1; stage <= 3; ++stage) {
    for (bool overlapped : {stage != 2}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (overlapped ? " overlapped" : " after"));
      RunOptions in_memory = fp16_scheduled(stage);
      if (overlapped) {
        in_memory.dtype = "bf16";
        in_memory.gradient_clipping = 0;
      }
      RunOptions offloaded = in_memory;
      offloaded.extra_zero_json += std::string(stage == 3 ? ", " : "") +
                                   "\"offload_optimizer\": {\"device\": \"cpu\"}";
      auto make = [&](const RunOptions& options) {
        if (&options == &offloaded) setenv("ZERO_EMULATE_DEVICE_OFFLOAD", "1", 1);
        Trainer t = make_trainer(spec, options);
        unsetenv("ZERO_EMULATE_DEVICE_OFFLOAD");
        return t;
      };
      Trainer straight = make(in_memory);
      const std::vector<double> expected = train(straight, spec, in_memory, 0, 6);
      for (const RunOptions* saver : {&offloaded, &in_memory}) {
        const RunOptions* loader = saver == &offloaded ? &in_memory : &offloaded;
        SCOPED_TRACE(saver == &offloaded ? "saved offloaded" : "saved in memory");
        const std::string dir = shared_dir("device-offload-resume" + std::to_string(stage));
        {
          Trainer first = make(*saver);
          train(first, spec, *saver, 0, 3);
          first.engine->save_checkpoint(dir, "mid");
        }
        Trainer resumed = make(*loader);
        resumed.engine->load_checkpoint(dir, "mid");
        const std::vector<double> rest = train(resumed, spec, *loader, 3, 6);
        for (size_t i = 0; i < rest.size(); ++i) {
          EXPECT_EQ(rest[i], expected[3 + i]) << "step " << 3 + i;
        }
        EXPECT_TRUE(at::equal(parameters_of(resumed), parameters_of(straight)));
      }
    }
  }
}

// A swap write that fails in the middle of a step (Note [NVMe offload], Note [Parameter
// offload]) loses nothing: on one rank the writes fail (a file-size limit below the swap
// files' ends makes the kernel refuse them, as a disk that runs out of blocks would), every
// rank throws zero::Error (the failing one naming the swap file, the error and the bytes), and
// the checkpoint saved before the failure resumes bit for bit. Stage 3, bf16, both offloads:
// the optimizer's tiles and the parameter shards are both written during the step.
TEST(Checkpoint, SwapWriteFailingMidStepLosesNothing) {
  auto comm = world();
  const ModelSpec spec = tiny_gpt2_spec();
  const std::string nvme = shared_dir("nvme-write-failure");
  const std::string dir = shared_dir("write-failure");
  RunOptions options;
  options.stage = 3;
  options.dtype = "bf16";
  options.extra_zero_json =
      "\"stage3_param_persistence_threshold\": 0, \"sub_group_size\": 500, "
      "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" + nvme + "\"}, "
      "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" + nvme +
      "\", \"buffer_count\": 2}";
  Trainer straight = make_trainer(spec, options);
  const std::vector<double> expected = train(straight, spec, options, 0, 4);
  {
    Trainer failing = make_trainer(spec, options);
    train(failing, spec, options, 0, 2);
    failing.engine->save_checkpoint(dir, "before");
    const bool victim = comm->rank() == comm->size() - 1;
    struct rlimit old_limit {};
    ::getrlimit(RLIMIT_FSIZE, &old_limit);
    if (victim) {
      std::signal(SIGXFSZ, SIG_IGN);
      struct rlimit small = old_limit;
      small.rlim_cur = 8192;  // every write past the first two 4 KiB blocks of a file fails
      ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    }
    std::string message;
    try {
      train(failing, spec, options, 2, 3);
    } catch (const Error& error) {
      message = error.what();
    }
    if (victim) ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ASSERT_FALSE(message.empty()) << "a step whose swap writes failed went on";
    if (victim) {
      std::cout << "the failing rank's message: " << message << std::endl;
      EXPECT_NE(message.find(".swp"), std::string::npos) << message;
      EXPECT_NE(message.find("File too large"), std::string::npos) << message;
      EXPECT_NE(message.find(" bytes"), std::string::npos) << message;
    } else {
      EXPECT_NE(message.find("failed on rank " + std::to_string(comm->size() - 1)),
                std::string::npos) << message;
    }
  }  // the failed engine goes (its swap files with it)
  Trainer resumed = make_trainer(spec, options);
  resumed.engine->load_checkpoint(dir, "before");
  const std::vector<double> rest = train(resumed, spec, options, 2, 4);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[2 + i]) << "step " << 2 + i;
  EXPECT_TRUE(at::equal(parameters_of(resumed), parameters_of(straight)));
}

// A checkpoint saved at one stage loads at every other (same world size), and training goes on
// as it would have: within 1e-5 of continuing at the saving stage (fp32: the stages agree to
// that tolerance, not bitwise, once per-unit ownership changes the summation order).
TEST(Checkpoint, LoadsAcrossStages) {
  const ModelSpec spec = tiny_gpt2_spec();
  for (int saved = 0; saved <= 3; ++saved) {
    RunOptions options;
    options.stage = saved;
    if (saved == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
    Trainer straight = make_trainer(spec, options);
    const std::vector<double> expected = train(straight, spec, options, 0, 5);
    const std::string dir = shared_dir("stages" + std::to_string(saved));
    {
      Trainer first = make_trainer(spec, options);
      train(first, spec, options, 0, 3);
      first.engine->save_checkpoint(dir, "mid");
    }
    for (int loaded = 0; loaded <= 3; ++loaded) {
      if (loaded == saved) continue;
      SCOPED_TRACE("saved at stage " + std::to_string(saved) + ", loaded at " +
                   std::to_string(loaded));
      RunOptions other = options;
      other.stage = loaded;
      other.extra_zero_json =
          loaded == 3 ? "\"stage3_param_persistence_threshold\": 40" : "";
      Trainer resumed = make_trainer(spec, other);
      resumed.engine->load_checkpoint(dir, "mid");
      const std::vector<double> rest = train(resumed, spec, other, 3, 5);
      for (size_t i = 0; i < rest.size(); ++i) {
        EXPECT_NEAR(rest[i], expected[3 + i], 1e-5 * expected[3 + i]) << "step " << 3 + i;
      }
      EXPECT_LE(relative_error(parameters_of(resumed), parameters_of(straight)), 1e-5);
    }
  }
}

// Only complete checkpoints are published: `latest` moves after every rank has written, and a
// leftover temporary directory (a save that died) is ignored by load.
TEST(Checkpoint, LatestNamesTheNewestCompleteCheckpoint) {
  auto comm = world();
  const ModelSpec spec = mlp_spec();
  RunOptions options;
  options.stage = 2;
  const std::string dir = shared_dir("latest");
  Trainer t = make_trainer(spec, options);
  train(t, spec, options, 0, 1);
  EXPECT_EQ(t.engine->save_checkpoint(dir), "global_step1");
  train(t, spec, options, 1, 2);
  EXPECT_EQ(t.engine->save_checkpoint(dir), "global_step2");
  if (comm->rank() == 0) {
    std::ifstream latest(fs::path(dir) / "latest");
    std::string tag;
    latest >> tag;
    EXPECT_EQ(tag, "global_step2");
    fs::create_directories(fs::path(dir) / ".tmp-global_step3");  // an interrupted save
  }
  comm->barrier()->wait();
  Trainer other = make_trainer(spec, options);
  other.engine->load_checkpoint(dir);
  EXPECT_EQ(other.engine->global_steps(), 2);
  EXPECT_TRUE(at::equal(parameters_of(other), parameters_of(t)));
  // Overwriting the latest checkpoint in place is refused (an interrupted save could lose it).
  EXPECT_THROW(t.engine->save_checkpoint(dir, "global_step2"), Error);
}

// check_checkpoint_destination (Note [Agreeing on a failure]): a directory every rank can write
// is made and left empty; one that cannot be made fails on every rank together, each with the
// same origin rank, naming the directory.
TEST(Checkpoint, DestinationIsCheckedBeforeTraining) {
  auto comm = world();
  const ModelSpec spec = mlp_spec();
  RunOptions options;
  options.stage = 2;
  Trainer t = make_trainer(spec, options);
  const std::string dir = shared_dir("destination");
  const std::string fresh = (fs::path(dir) / "new" / "checkpoints").string();
  t.engine->check_checkpoint_destination(fresh);
  EXPECT_TRUE(fs::is_directory(fresh));
  EXPECT_TRUE(fs::is_empty(fresh)) << "the write test left a file in " << fresh;
  if (comm->rank() == 0) std::ofstream(fs::path(dir) / "a-file") << "not a directory\n";
  comm->barrier()->wait();
  const std::string under_file = (fs::path(dir) / "a-file" / "checkpoints").string();
  try {
    t.engine->check_checkpoint_destination(under_file);
    ADD_FAILURE() << "accepted a checkpoint directory inside a regular file";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.origin_rank(), 0);
    EXPECT_NE(std::string(e.what()).find(under_file), std::string::npos) << e.what();
  }
  // The engine is still usable: a save into the good directory succeeds.
  EXPECT_EQ(t.engine->save_checkpoint(fresh), "global_step0");
}

// Each kind of bad checkpoint fails on every rank with a message naming the file and the
// problem, and leaves the engine untouched.
TEST(Checkpoint, BadCheckpointsAreRejectedClearly) {
  auto comm = world();
  const ModelSpec spec = mlp_spec();
  RunOptions options;
  options.stage = 1;
  const std::string dir = shared_dir("bad");
  {
    Trainer t = make_trainer(spec, options);
    train(t, spec, options, 0, 2);
    t.engine->save_checkpoint(dir, "good");
  }
  const fs::path good = fs::path(dir) / "good";
  auto copy_to = [&](const std::string& tag) {
    if (comm->rank() == 0) {
      fs::remove_all(fs::path(dir) / tag);
      fs::copy(good, fs::path(dir) / tag, fs::copy_options::recursive);
    }
  };
  struct Case {
    std::string tag;
    std::function<void(const fs::path&)> damage;  // on rank 0
    std::string expected;
  };
  using Json = nlohmann::json;
  auto resign = [](const fs::path& p) { edit_metadata_json(p, [](Json&) {}); };
  // Rewrites every occurrence of `from` in the metadata; `sign` recomputes its checksum, as a
  // careful forger would, so the checks behind the checksum are the ones tested.
  auto edit_metadata = [&](const fs::path& p, const std::string& from, const std::string& to,
                           bool sign = true) {
    std::string text = file_text(p / "metadata.json");
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
    std::ofstream(p / "metadata.json") << text;
    if (sign) resign(p);
  };
  // Rewrites tensors of rank 0's file and records its new size and CRC-32 in the (re-signed)
  // metadata: every check but the content's own must pass.
  auto edit_rank0_file = [&](const fs::path& p, const std::function<void(SafetensorsFile&)>& edit) {
    const fs::path file = p / "rank_00000.safetensors";
    SafetensorsFile content = read_safetensors(file.string());
    edit(content);
    std::vector<std::pair<std::string, at::Tensor>> tensors(content.tensors.begin(),
                                                            content.tensors.end());
    write_safetensors(file.string(), tensors, content.metadata);
    const std::string bytes = file_text(file);
    edit_metadata_json(p, [&](Json& metadata) {
      metadata["files"][0]["bytes"] = bytes.size();
      metadata["files"][0]["crc32"] = crc32_of(bytes);
    });
  };
  auto first_master_key = [](const SafetensorsFile& content) {
    for (const auto& [key, tensor] : content.tensors) {
      if (key.rfind("master/", 0) == 0) return key;
    }
    return std::string();
  };
  const std::vector<Case> cases = {
      {"missing_file", [](const fs::path& p) { fs::remove(p / "rank_00000.safetensors"); },
       "rank_00000.safetensors' is missing"},
      // Metadata naming a file outside the checkpoint, even one that exists, is not followed.
      {"file_outside",
       [&](const fs::path& p) {
         edit_metadata(p, "\"rank_00000.safetensors\"", "\"../outside/rank_00000.safetensors\"");
       },
       "no other name is read"},
      {"file_absolute",
       [&](const fs::path& p) { edit_metadata(p, "\"rank_00000.safetensors\"", "\"/etc/passwd\""); },
       "no other name is read"},
      // Edited header integers are refused by key instead of being cast.
      {"world_size_zero",
       [&](const fs::path& p) {
         edit_metadata(p, "\"world_size\": " + std::to_string(comm->size()), "\"world_size\": 0");
       },
       "world_size = 0 is invalid"},
      {"stage_seven", [&](const fs::path& p) { edit_metadata(p, "\"stage\": 1,", "\"stage\": 7,"); },
       "stage = 7 is invalid"},
      {"gas_beyond_int",
       [&](const fs::path& p) {
         edit_metadata(p, "\"gradient_accumulation_steps\": 1,",
                       "\"gradient_accumulation_steps\": 4294967297,");
       },
       "counters.gradient_accumulation_steps = 4294967297 is invalid"},
      // metadata.json carries its own CRC-32: an edited step counter (the wrong learning
      // rate after resume) is refused.
      {"metadata_edited",
       [&](const fs::path& p) {
         edit_metadata(p, "\"global_steps\": 2,", "\"global_steps\": 7,", /*sign=*/false);
       },
       "was edited or damaged: its CRC-32"},
      {"metadata_unsigned",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& metadata) { metadata.erase("crc32"); }, /*sign=*/false);
       },
       "records none"},
      // Note [Checkpoint metadata]: edits that keep the JSON valid and are re-signed, but
      // contradict the other fields, are refused by key (they loaded silently before).
      {"optimizer_steps_reset",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& m) { m["counters"]["optimizer_steps"] = 1; });
       },
       "counters.optimizer_steps = 1 contradicts counters.global_steps = 2"},
      {"optimizer_steps_huge",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& m) {
           m["counters"]["optimizer_steps"] = std::numeric_limits<int64_t>::max();
         });
       },
       "counters.optimizer_steps = 9223372036854775807 contradicts"},
      {"global_steps_shifted",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& m) {
           m["counters"]["global_steps"] = 7;
           m["counters"]["optimizer_steps"] = 7;
         });
       },
       "counters.micro_steps = 2 contradicts counters.global_steps + counters.skipped_steps = 7"},
      {"param_dtype_int8",
       [](const fs::path& p) { edit_metadata_json(p, [](Json& m) { m["param_dtype"] = "int8"; }); },
       "param_dtype = \"int8\" is invalid; expected one of \"fp32\" \"bf16\" \"fp16\""},
      {"param_dtype_not_the_configs",
       [](const fs::path& p) { edit_metadata_json(p, [](Json& m) { m["param_dtype"] = "bf16"; }); },
       "param_dtype = \"bf16\" contradicts config fp16.enabled = false, bf16.enabled = false"},
      {"stage_not_the_configs",
       [](const fs::path& p) { edit_metadata_json(p, [](Json& m) { m["stage"] = 2; }); },
       "stage = 2 contradicts config.zero_optimization.stage = 1"},
      {"loss_scale_negative",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& m) { m["counters"]["loss_scaler"]["scale"] = -4.0; });
       },
       "counters.loss_scaler.scale = -4.0 is invalid; expected a finite number > 0"},
      {"version_as_string",
       [](const fs::path& p) { edit_metadata_json(p, [](Json& m) { m["version"] = "2"; }); },
       "version = \"2\" is invalid; expected the integer 2"},
      {"counter_as_string",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& m) { m["counters"]["global_steps"] = "2"; });
       },
       "counters.global_steps = \"2\" is invalid; expected an integer"},
      // A tag of the default form names its boundary: global_step9 holding step 2's state.
      {"global_step9", [](const fs::path&) {},
       "the tag 'global_step9' names the boundary the checkpoint was saved at, but "
       "counters.global_steps + counters.skipped_steps = 2"},
      // A 16-bit copy in a stage-1 fp32 checkpoint's file: a kind the metadata does not list.
      {"param16_at_stage1",
       [&](const fs::path& p) {
         edit_rank0_file(p, [&](SafetensorsFile& content) {
           const std::string master = first_master_key(content);
           content.tensors["param16" + master.substr(6)] = content.tensors[master].to(at::kBFloat16);
         });
       },
       "a kind of tensor the metadata does not list"},
      // A piece relabelled as another parameter of the same shape leaves one parameter
      // doubled and one uncovered: the loader checks coverage as the reader does.
      {"piece_relabelled",
       [](const fs::path& p) {
         edit_metadata_json(p, [](Json& metadata) {
           Json& piece = metadata["files"][0]["pieces"][0];
           for (const Json& other : metadata["parameters"]) {
             if (other["name"] == piece[0]) continue;
             piece[0] = other["name"];
             break;
           }
         });
       },
       "must cover every element once"},
      // Master pieces relabelled I32 with a recomputed CRC: refused by dtype, not trained on.
      {"master_as_int32",
       [&](const fs::path& p) {
         edit_rank0_file(p, [&](SafetensorsFile& content) {
           at::Tensor& master = content.tensors[first_master_key(content)];
           master = master.view(at::kInt);
         });
       },
       "where the metadata says fp32"},
      // A short or reshaped generator state fails before the ranks agree to commit, on the
      // rank that reads it (it crashed that rank alone after the commit before).
      {"rng_short",
       [&](const fs::path& p) {
         edit_rank0_file(p, [](SafetensorsFile& content) {
           at::Tensor& rng = content.tensors["rng/cpu"];
           rng = rng.narrow(0, 0, rng.numel() - 16).clone();
         });
       },
       "'rng/cpu' is Byte[5040]; a CPU generator state is uint8 [5056]"},
      {"rng_two_dimensional",
       [&](const fs::path& p) {
         edit_rank0_file(p, [](SafetensorsFile& content) {
           at::Tensor& rng = content.tensors["rng/cpu"];
           rng = rng.view({2, -1});
         });
       },
       "a CPU generator state is uint8 [5056]"},
      // A tag directory that is a link could lead out of DIR.
      {"tag_symlink",
       [](const fs::path& p) {
         fs::rename(p, p.string() + "-real");
         fs::create_directory_symlink(p.string() + "-real", p);
       },
       "' is a symbolic link; a checkpoint must be a directory inside"},
      {"rank_file_symlink",
       [](const fs::path& p) {
         fs::rename(p / "rank_00000.safetensors", p.parent_path() / "elsewhere.safetensors");
         fs::create_symlink(p.parent_path() / "elsewhere.safetensors", p / "rank_00000.safetensors");
       },
       "is a symbolic link"},
      {"truncated",
       [](const fs::path& p) {
         fs::resize_file(p / "rank_00000.safetensors",
                         fs::file_size(p / "rank_00000.safetensors") - 10);
       },
       "(truncated or replaced)"},
      {"corrupted",
       [](const fs::path& p) {
         std::fstream f(p / "rank_00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(-5, std::ios::end);
         f.put('\x7f');
       },
       "is corrupted: CRC-32"},
      {"no_metadata", [](const fs::path& p) { fs::remove(p / "metadata.json"); },
       "is incomplete or missing"},
      {"bad_json",
       [](const fs::path& p) { std::ofstream(p / "metadata.json") << "{\"format\": "; },
       "invalid JSON"},
      {"version",
       [](const fs::path& p) {
         std::ifstream in(p / "metadata.json");
         std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
         in.close();
         text.replace(text.find("\"version\": 2"), 12, "\"version\": 99");
         std::ofstream(p / "metadata.json") << text;
       },
       "format version 99; this build reads version 2"},
  };
  // The file "file_outside" names exists, and must not even be opened: rank 0 watches it
  // (inotify sees an open by any process on this machine, every rank included).
  const fs::path outside = fs::path(dir) / "outside" / "rank_00000.safetensors";
  int watch = -1;
  if (comm->rank() == 0) {
    fs::create_directories(outside.parent_path());
    fs::copy_file(good / "rank_00000.safetensors", outside);
    watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    EXPECT_GE(watch, 0);
    EXPECT_GE(::inotify_add_watch(watch, outside.c_str(), IN_OPEN | IN_ACCESS), 0);
  }
  Trainer target = make_trainer(spec, options);
  const at::Tensor before = parameters_of(target);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag);
    copy_to(c.tag);
    if (comm->rank() == 0) c.damage(fs::path(dir) / c.tag);
    comm->barrier()->wait();
    try {
      target.engine->load_checkpoint(dir, c.tag);
      ADD_FAILURE() << "loaded a damaged checkpoint";
    } catch (const Error& e) {
      // Rank 0 damaged the shared files; every rank sees the problem (or that a rank failed).
      const std::string message = e.what();
      EXPECT_TRUE(message.find(c.expected) != std::string::npos ||
                  message.find("load_checkpoint failed on rank") != std::string::npos)
          << message;
    }
    EXPECT_TRUE(at::equal(parameters_of(target), before)) << "a failed load changed the engine";
  }
  if (comm->rank() == 0) {
    alignas(inotify_event) char events[4096];
    const ssize_t n = ::read(watch, events, sizeof(events));
    EXPECT_TRUE(n < 0 && errno == EAGAIN) << outside << " was opened or read by a load";
    std::ifstream(outside).get();  // the watch itself works: this open is seen
    EXPECT_GT(::read(watch, events, sizeof(events)), 0) << "the inotify watch saw nothing";
    ::close(watch);
  }
  // A checkpoint of a different model.
  Trainer gpt = make_trainer(tiny_gpt2_spec(), options);
  try {
    gpt.engine->load_checkpoint(dir, "good");
    ADD_FAILURE() << "loaded another model's checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is of a different model"), std::string::npos) << e.what();
  }
  // A `latest` that is a link (here to a file outside the checkpoints) is refused without
  // reading it, so its target's content is not echoed.
  const std::string linked = shared_dir("latest_link");
  if (comm->rank() == 0) {
    fs::create_directories(linked);
    std::ofstream(fs::path(linked) / "outside") << "secret-content\n";
    fs::create_symlink(fs::path(linked) / "outside", fs::path(linked) / "latest");
  }
  comm->barrier()->wait();
  try {
    target.engine->load_checkpoint(linked);
    ADD_FAILURE() << "followed a symbolic link named latest";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("latest' is a symbolic link"), std::string::npos) << message;
    EXPECT_EQ(message.find("secret-content"), std::string::npos) << message;
  }
  // No checkpoint at all.
  try {
    target.engine->load_checkpoint(shared_dir("empty"));
    ADD_FAILURE() << "loaded from an empty directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint to load"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zero::test
