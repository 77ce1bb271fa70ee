// Note [Checkpoint metadata] (src/checkpoint/metadata.h), property-tested: metadata made the
// way a save makes it (random world size, stage, dtype, optimizer, parameters, pieces and
// counters) is accepted and read back as written; every consistent-but-wrong edit of it (a
// counter that contradicts the others, a dtype the config did not train, a piece moved, a
// value of the wrong type or range...), re-signed as a forger would, is refused with one
// zero::Error naming the file and the key; and any value at any leaf is either accepted or
// refused that way, never with another exception.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/metadata.h"
#include "zero/error.h"

namespace zero::test {
namespace {

using Json = nlohmann::json;
using namespace checkpoint_format;

const std::string kPath = "/ckpt/global_step7/metadata.json";

int64_t pick(std::mt19937_64& rng, int64_t least, int64_t most) {
  return std::uniform_int_distribution<int64_t>(least, most)(rng);
}

void sign(Json& metadata) {
  metadata.erase("crc32");
  metadata["crc32"] = metadata_checksum(metadata);
}

// A checkpoint's metadata as a save writes it, and the tag it is saved under.
struct Saved {
  Json metadata;
  std::string tag;
};

Saved random_metadata(std::mt19937_64& rng) {
  Json m;
  m["format"] = kFormat;
  m["version"] = kVersion;
  const int world = static_cast<int>(pick(rng, 1, 4));
  const int stage = static_cast<int>(pick(rng, 0, 3));
  const char* dtypes[] = {"fp32", "bf16", "fp16"};
  const std::string dtype = dtypes[pick(rng, 0, 2)];
  m["world_size"] = world;
  m["stage"] = stage;
  m["param_dtype"] = dtype;
  m["master_dtype"] = "fp32";
  // AdamW, Adam, SGD with and without momentum, Adagrad, Lion: each with its state.
  const std::vector<std::pair<const char*, Json>> optimizers = {
      {"AdamW", Json{"exp_avg", "exp_avg_sq"}}, {"Adam", Json{"exp_avg", "exp_avg_sq"}},
      {"SGD", Json{"exp_avg"}},                 {"SGD", Json::array()},
      {"Adagrad", Json{"exp_avg_sq"}},          {"Lion", Json{"exp_avg"}},
      {"Lamb", Json{"exp_avg", "exp_avg_sq"}}};
  const auto& optimizer = optimizers[static_cast<size_t>(pick(rng, 0, 6))];
  m["optimizer"] = {{"type", optimizer.first}, {"state", optimizer.second}};
  const int64_t global = pick(rng, 0, 1000);
  const int64_t skipped = dtype == "fp16" ? pick(rng, 0, 20) : 0;
  const int64_t gas = pick(rng, 1, 8);
  const int64_t iteration = dtype == "fp16" ? pick(rng, 0, global + skipped) : 0;
  const int64_t last_overflow = iteration > 0 && dtype == "fp16" ? pick(rng, -1, iteration - 1) : -1;
  m["counters"] = {{"global_steps", global},
                   {"skipped_steps", skipped},
                   {"micro_steps", (global + skipped) * gas},
                   {"optimizer_steps", global},
                   {"gradient_accumulation_steps", gas},
                   {"lr", 1e-3 * static_cast<double>(pick(rng, 0, 5))},
                   {"loss_scaler",
                    {{"scale", dtype == "fp16" ? 65536.0 / static_cast<double>(1 << pick(rng, 0, 8)) : 1.0},
                     {"current_hysteresis", pick(rng, 1, 2)},
                     {"iteration", iteration},
                     {"last_overflow_iteration", last_overflow}}}};
  const bool scheduler = pick(rng, 0, 1) == 1;
  m["scheduler"] = scheduler;
  m["config"] = {{"zero_optimization", {{"stage", stage}}},
                 {"gradient_accumulation_steps", gas},
                 {"fp16", {{"enabled", dtype == "fp16"}}},
                 {"bf16", {{"enabled", dtype == "bf16"}}},
                 {"scheduler", scheduler ? Json{{"type", "WarmupLR"}} : Json()}};
  m["client_state"] = {{"next_step", global + skipped}};
  // Parameters, each cut into pieces over the files.
  Json parameters = Json::array();
  std::vector<Json> pieces(static_cast<size_t>(world), Json::array());
  const int count = static_cast<int>(pick(rng, 1, 6));
  for (int p = 0; p < count; ++p) {
    const std::string name = "layer" + std::to_string(p) + ".weight";
    Json shape = Json::array();
    int64_t numel = 1;
    for (int d = 0, dims = static_cast<int>(pick(rng, 1, 3)); d < dims; ++d) {
      shape.push_back(pick(rng, 1, 9));
      numel *= shape.back().get<int64_t>();
    }
    parameters.push_back({{"name", name}, {"shape", shape}});
    for (int64_t begin = 0; begin < numel;) {
      const int64_t end = std::min(numel, begin + pick(rng, 1, numel));
      pieces[static_cast<size_t>(pick(rng, 0, world - 1))].push_back({name, begin, end});
      begin = end;
    }
  }
  m["parameters"] = parameters;
  Json files = Json::array();
  for (int r = 0; r < world; ++r) {
    files.push_back({{"file", rank_file_name(r)},
                     {"bytes", pick(rng, 100, 1 << 20)},
                     {"crc32", static_cast<uint32_t>(rng())},
                     {"pieces", pieces[static_cast<size_t>(r)]}});
  }
  m["files"] = files;
  sign(m);
  const std::string tag = pick(rng, 0, 1) == 1 ? "global_step" + std::to_string(global + skipped) : "run-a";
  return {m, tag};
}

// One consistent-but-wrong edit: what it does and the key its message must name. `applies`
// says whether the edit can be made to this metadata (e.g. a skipped step needs a non-fp16 one).
struct Edit {
  std::string name;
  std::string key;
  std::function<bool(Saved&, std::mt19937_64&)> apply;  // false: not applicable here
};

std::vector<Edit> edits() {
  auto counters = [](Saved& s) -> Json& { return s.metadata["counters"]; };
  auto boundaries = [counters](Saved& s) {
    return counters(s)["global_steps"].get<int64_t>() + counters(s)["skipped_steps"].get<int64_t>();
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  (void)nan;
  return {
      {"optimizer steps reset", "counters.optimizer_steps",
       [counters](Saved& s, std::mt19937_64& rng) {
         Json& c = counters(s);
         c["optimizer_steps"] = c["global_steps"].get<int64_t>() + pick(rng, 1, 5) * (pick(rng, 0, 1) ? 1 : -1);
         return c["optimizer_steps"].get<int64_t>() >= 0;
       }},
      {"optimizer steps at the int64 limit", "counters.optimizer_steps",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s)["optimizer_steps"] = std::numeric_limits<int64_t>::max();
         return true;
       }},
      {"global steps moved (schedule shifted)", "counters.micro_steps",
       [counters](Saved& s, std::mt19937_64& rng) {
         Json& c = counters(s);
         const int64_t moved = c["global_steps"].get<int64_t>() + pick(rng, 1, 5);
         c["global_steps"] = moved;
         c["optimizer_steps"] = moved;  // consistent with it: the micro-steps are not
         return true;
       }},
      {"micro steps inside a window", "counters.micro_steps",
       [counters](Saved& s, std::mt19937_64& rng) {
         counters(s)["micro_steps"] = counters(s)["micro_steps"].get<int64_t>() + pick(rng, 1, 3);
         return true;
       }},
      {"accumulation changed with the micro-steps", "counters.gradient_accumulation_steps",
       [counters, boundaries](Saved& s, std::mt19937_64&) {
         Json& c = counters(s);
         const int64_t gas = c["gradient_accumulation_steps"].get<int64_t>() + 1;
         c["gradient_accumulation_steps"] = gas;
         c["micro_steps"] = boundaries(s) * gas;  // consistent but for the config
         return true;
       }},
      {"tag names another boundary", "the tag",
       [boundaries](Saved& s, std::mt19937_64& rng) {
         s.tag = "global_step" + std::to_string(boundaries(s) + pick(rng, 1, 9));
         return true;
       }},
      {"a skipped step without fp16", "counters.skipped_steps",
       [counters](Saved& s, std::mt19937_64&) {
         if (s.metadata["param_dtype"] == "fp16") return false;
         Json& c = counters(s);
         c["skipped_steps"] = 1;
         c["micro_steps"] = (c["global_steps"].get<int64_t>() + 1) * c["gradient_accumulation_steps"].get<int64_t>();
         return true;
       }},
      {"a loss scale without fp16", "counters.loss_scaler",
       [counters](Saved& s, std::mt19937_64&) {
         if (s.metadata["param_dtype"] == "fp16") return false;
         counters(s)["loss_scaler"]["scale"] = 1024.0;
         return true;
       }},
      {"a negative loss scale", "counters.loss_scaler.scale",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s)["loss_scaler"]["scale"] = -8.0;
         return true;
       }},
      {"scaler iterations beyond the boundaries", "counters.loss_scaler.iteration",
       [counters, boundaries](Saved& s, std::mt19937_64&) {
         if (s.metadata["param_dtype"] != "fp16") return false;
         counters(s)["loss_scaler"]["iteration"] = boundaries(s) + 1;
         return true;
       }},
      {"an overflow after the scaler's iteration", "counters.loss_scaler.last_overflow_iteration",
       [counters](Saved& s, std::mt19937_64&) {
         if (s.metadata["param_dtype"] != "fp16") return false;
         Json& scaler = counters(s)["loss_scaler"];
         scaler["last_overflow_iteration"] = scaler["iteration"].get<int64_t>();
         return true;
       }},
      {"a negative learning rate", "counters.lr",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s)["lr"] = -0.1;
         return true;
       }},
      {"an impossible parameter dtype", "param_dtype",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["param_dtype"] = "int8";
         return true;
       }},
      {"a parameter dtype the config did not train", "param_dtype",
       [](Saved& s, std::mt19937_64&) {
         // bf16 <-> fp32 keeps the loss-scaler rules; fp16 has its own.
         const std::string d = s.metadata["param_dtype"];
         if (d == "fp16") return false;
         s.metadata["param_dtype"] = d == "fp32" ? "bf16" : "fp32";
         return true;
       }},
      {"16-bit master weights", "master_dtype",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["master_dtype"] = "bf16";
         return true;
       }},
      {"another stage than the config's", "stage",
       [](Saved& s, std::mt19937_64& rng) {
         s.metadata["stage"] = (s.metadata["stage"].get<int>() + pick(rng, 1, 3)) % 4;
         return true;
       }},
      {"stage 4", "stage",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["stage"] = 4;
         return true;
       }},
      {"a rank more than the files", "files",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["world_size"] = s.metadata["world_size"].get<int>() + 1;
         return true;
       }},
      {"no ranks", "world_size",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["world_size"] = 0;
         return true;
       }},
      {"a file under another rank's name", ".file",
       [](Saved& s, std::mt19937_64&) {
         Json& files = s.metadata["files"];
         files[0]["file"] = rank_file_name(static_cast<int>(files.size()));
         return true;
       }},
      {"a piece moved past its parameter's end", "parameter '",
       [](Saved& s, std::mt19937_64&) {
         for (Json& file : s.metadata["files"]) {
           for (Json& piece : file["pieces"]) {
             piece[1] = piece[1].get<int64_t>() + 1;
             return true;
           }
         }
         return false;
       }},
      {"a parameter reshaped", "parameter '",
       [](Saved& s, std::mt19937_64&) {
         Json& shape = s.metadata["parameters"][0]["shape"];
         shape[0] = shape[0].get<int64_t>() + 1;
         return true;
       }},
      {"a parameter listed twice", "parameters[",
       [](Saved& s, std::mt19937_64&) {
         Json& parameters = s.metadata["parameters"];
         parameters.push_back(parameters[0]);
         return true;
       }},
      {"SGD with Adam's moments", "optimizer.state",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["optimizer"] = {{"type", "SGD"}, {"state", {"exp_avg", "exp_avg_sq"}}};
         return true;
       }},
      {"Lion with Adam's moments", "optimizer.state",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["optimizer"] = {{"type", "Lion"}, {"state", {"exp_avg", "exp_avg_sq"}}};
         return true;
       }},
      {"Adagrad with a momentum", "optimizer.state",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["optimizer"] = {{"type", "Adagrad"}, {"state", {"exp_avg"}}};
         return true;
       }},
      {"an unknown optimizer", "optimizer.type",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["optimizer"]["type"] = "MuAdam";
         return true;
       }},
      {"the version as a string", "version",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["version"] = "2";
         return true;
       }},
      {"a counter as a string", "counters.global_steps",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s)["global_steps"] = std::to_string(counters(s)["global_steps"].get<int64_t>());
         return true;
       }},
      {"a counter as a float", "counters.skipped_steps",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s)["skipped_steps"] = static_cast<double>(counters(s)["skipped_steps"].get<int64_t>());
         return true;
       }},
      {"a counter beyond int64", "counters.micro_steps",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s)["micro_steps"] = std::numeric_limits<uint64_t>::max();
         return true;
       }},
      {"the scheduler flag flipped", "scheduler",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["scheduler"] = !s.metadata["scheduler"].get<bool>();
         return true;
       }},
      {"the scheduler flag as a number", "scheduler",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["scheduler"] = s.metadata["scheduler"].get<bool>() ? 1 : 0;
         return true;
       }},
      {"an unknown key", "unknown key",
       [](Saved& s, std::mt19937_64&) {
         s.metadata["counters"]["epoch"] = 3;
         return true;
       }},
      {"a key removed", "counters.lr",
       [counters](Saved& s, std::mt19937_64&) {
         counters(s).erase("lr");
         return true;
       }},
  };
}

std::string refusal(const Saved& s) {
  try {
    (void)parse_metadata(s.metadata, kPath, s.tag);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointMetadata, WhatASaveWritesIsAcceptedAndReadBack) {
  std::mt19937_64 rng(20261126);
  for (int trial = 0; trial < 300; ++trial) {
    const Saved s = random_metadata(rng);
    Metadata m;
    ASSERT_NO_THROW(m = parse_metadata(s.metadata, kPath, s.tag)) << refusal(s) << "\n" << s.metadata.dump();
    const Json& c = s.metadata["counters"];
    EXPECT_EQ(m.world_size, s.metadata["world_size"].get<int>());
    EXPECT_EQ(m.stage, s.metadata["stage"].get<int>());
    EXPECT_EQ(dtype_name(m.param_dtype), s.metadata["param_dtype"].get<std::string>());
    EXPECT_EQ(m.counters.training.global_steps, c["global_steps"].get<int64_t>());
    EXPECT_EQ(m.counters.training.optimizer_steps, c["optimizer_steps"].get<int64_t>());
    EXPECT_EQ(m.counters.gradient_accumulation_steps, c["gradient_accumulation_steps"].get<int>());
    EXPECT_EQ(m.counters.training.scaler.scale, c["loss_scaler"]["scale"].get<double>());
    EXPECT_EQ(m.files.size(), s.metadata["files"].size());
    EXPECT_EQ(m.parameters.size(), s.metadata["parameters"].size());
    int64_t elements = 0;
    for (const SavedFile& f : m.files) elements += f.elements;
    int64_t numel = 0;
    for (const auto& p : m.parameters) numel += p.numel;
    EXPECT_EQ(elements, numel);
    EXPECT_EQ(m.saves_param16(), m.stage == 3 && m.param_dtype != c10::ScalarType::Float);
  }
}

TEST(CheckpointMetadata, EveryConsistentButWrongEditIsRefusedByKey) {
  std::mt19937_64 rng(7);
  const std::vector<Edit> all = edits();
  std::vector<int> applied(all.size(), 0);
  for (int trial = 0; trial < 60; ++trial) {
    for (size_t e = 0; e < all.size(); ++e) {
      Saved s = random_metadata(rng);
      if (!all[e].apply(s, rng)) continue;
      sign(s.metadata);  // the forger re-signs: only the checks behind the checksum remain
      ++applied[e];
      const std::string message = refusal(s);
      ASSERT_FALSE(message.empty()) << all[e].name << " was accepted:\n" << s.metadata.dump();
      EXPECT_NE(message.find(kPath), std::string::npos) << all[e].name << ": " << message;
      EXPECT_NE(message.find(all[e].key), std::string::npos)
          << all[e].name << ": the message does not name " << all[e].key << ": " << message;
    }
  }
  for (size_t e = 0; e < all.size(); ++e) EXPECT_GT(applied[e], 0) << all[e].name << " never applied";
}

// Any value (of any JSON type) at any leaf or object of the metadata: accepted, or refused with
// a zero::Error that names the file; never another exception (nlohmann's type errors, a bad
// cast, an internal assertion).
TEST(CheckpointMetadata, AnyValueAnywhereIsAcceptedOrRefusedCleanly) {
  std::mt19937_64 rng(11);
  const Json values[] = {Json(),          Json(true),       Json(-1),         Json(0),
                         Json(1),         Json(7),          Json(1.5),        Json(-2.5e300),
                         Json("2"),       Json(""),         Json::array(),    Json::object(),
                         Json{1, 2, 3},   Json{{"a", 1}},   Json(std::numeric_limits<int64_t>::max()),
                         Json(std::numeric_limits<uint64_t>::max()), Json("rank_00000.safetensors")};
  int refused = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Saved s = random_metadata(rng);
    // A random node, reached by a random walk from the root.
    Json* node = &s.metadata;
    for (int depth = 0; depth < 6 && (node->is_object() || node->is_array()) && !node->empty(); ++depth) {
      if (pick(rng, 0, 3) == 0 && depth > 0) break;
      auto it = node->begin();
      std::advance(it, pick(rng, 0, static_cast<int64_t>(node->size()) - 1));
      node = &*it;
    }
    *node = values[pick(rng, 0, static_cast<int64_t>(std::size(values)) - 1)];
    if (pick(rng, 0, 9) != 0) sign(s.metadata);
    try {
      (void)parse_metadata(s.metadata, kPath, s.tag);
      ++accepted;
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(kPath), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("this is a bug in zero"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a zero::Error: " << e.what() << "\n" << s.metadata.dump();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);  // edits of client_state, config leaves, lr... are legitimate
}

}  // namespace
}  // namespace zero::test
