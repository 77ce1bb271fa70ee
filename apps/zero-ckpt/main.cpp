// zero-ckpt: look into a checkpoint of Engine::save_checkpoint, and export its weights.
//
//   zero-ckpt inspect DIR [--tag T] [--verify] [--config]
//   zero-ckpt export DIR --out OUT_DIR/model.safetensors [--tag T] [--dtype fp32|bf16|fp16]
//
// export also writes OUT_DIR/config.json (Hugging Face's, of the model's family) when the checkpoint
// records the model's shape (zero-train does), so transformers' from_pretrained(OUT_DIR)
// loads the pair.
//
// One process, no MPI (zero/checkpoint.h). Exit status: 0 done; 1 --verify found a problem;
// 2 a user error (bad arguments, no or damaged checkpoint), with one line
// "zero-ckpt: error: ..." on stderr.
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cinttypes>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "zero/checkpoint.h"
#include "zero/error.h"
#include "zero/files.h"

namespace {

std::string bytes_text(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << c10::IntArrayRef(shape);  // "[97, 32]"
  return out.str();
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

int inspect(const std::string& dir, const std::string& tag, bool verify, bool print_config) {
  const zero::CheckpointSummary s = zero::inspect_checkpoint(dir, tag, verify);
  const nlohmann::json config = nlohmann::json::parse(s.config);
  std::printf("checkpoint   %s (tag %s; %s version %d)\n", s.path.c_str(), s.tag.c_str(),
              s.format.c_str(), s.version);
  std::printf("saved by     %d rank%s at ZeRO stage %d; parameters %s, master weights %s\n",
              s.world_size, s.world_size == 1 ? "" : "s", s.stage, s.param_dtype.c_str(),
              s.master_dtype.c_str());
  std::printf("optimizer    %s (state: %s); lr %.6g%s\n", s.optimizer.c_str(),
              s.optimizer_state.empty() ? "none" : join(s.optimizer_state).c_str(), s.lr,
              s.scheduler ? " from a scheduler" : "");
  std::printf("progress     %" PRId64 " global steps, %" PRId64 " skipped, %" PRId64
              " micro-steps, %" PRId64 " optimizer steps, gradient accumulation %d\n",
              s.global_steps, s.skipped_steps, s.micro_steps, s.optimizer_steps,
              s.gradient_accumulation_steps);
  std::printf("loss scale   %.6g (hysteresis %d, iteration %" PRId64 ", last overflow %" PRId64
              ")\n",
              s.loss_scaler.scale, s.loss_scaler.current_hysteresis, s.loss_scaler.iteration,
              s.loss_scaler.last_overflow_iteration);
  if (config.contains("train_batch_size")) {
    std::printf("config       train_batch_size %s, micro-batch %s per rank, gradient clipping %s%s\n",
                config["train_batch_size"].dump().c_str(),
                config.value("train_micro_batch_size_per_gpu", nlohmann::json()).dump().c_str(),
                config.value("gradient_clipping", nlohmann::json()).dump().c_str(),
                print_config ? "" : " (--config prints all of it)");
  }
  std::printf("client state %s\n", s.client_state.c_str());
  std::printf("parameters   %zu tensors, %" PRId64 " elements (%s as fp32)\n",
              s.parameters.size(), s.num_parameters, bytes_text(4 * s.num_parameters).c_str());
  size_t width = 0;
  for (const auto& p : s.parameters) width = std::max(width, p.name.size());
  for (const auto& p : s.parameters) {
    std::printf("  %-*s  %-14s %12" PRId64 "\n", static_cast<int>(width), p.name.c_str(),
                shape_text(p.shape).c_str(), p.numel);
  }
  int64_t total = 0;
  for (const auto& f : s.files) total += f.bytes;
  std::printf("files        %zu, %s\n", s.files.size(), bytes_text(total).c_str());
  for (const auto& f : s.files) {
    // The CRC-32 in decimal, as metadata.json and the error messages give it.
    std::printf("  %s  %12" PRId64 " bytes  crc32 %10" PRIu32 "  %5" PRId64 " pieces  %12" PRId64
                " elements%s\n",
                f.name.c_str(), f.bytes, f.crc32, f.pieces, f.elements,
                !s.verified ? "" : f.problem.empty() ? "  ok" : "  BAD");
  }
  if (print_config) std::printf("effective config:\n%s\n", config.dump(2).c_str());
  if (s.ok()) {
    std::printf("check        pieces cover every element once%s\n",
                s.verified ? "; every file's size and CRC-32 match" :
                             " (files not read; --verify checks their size and CRC-32)");
    return 0;
  }
  std::printf("check        %zu problem%s:\n", s.problems.size(), s.problems.size() == 1 ? "" : "s");
  for (const auto& problem : s.problems) std::printf("  %s\n", problem.c_str());
  return 1;
}

// The checkpoint's client state may carry "model_config": the model's whole shape as Hugging
// Face's config.json (zero-train records CausalLMConfig::hf_config_json()). It is written beside
// the exported weights, with torch_dtype set to the export's dtype, so that
// transformers' from_pretrained(dir) reads the pair with no hand-written file. Returns the
// path written, or "" (with the reason in `why`) when there is nothing to write.
std::string write_hf_config(const zero::CheckpointSummary& s, const std::string& out,
                            const std::string& torch_dtype, std::string* why) {
  namespace fs = std::filesystem;
  nlohmann::json client;
  try {
    client = nlohmann::json::parse(s.client_state);
  } catch (const std::exception&) {
    *why = "its client state is not JSON";
    return "";
  }
  if (!client.is_object() || !client.contains("model_config") ||
      !client.at("model_config").is_object()) {
    *why = "its client state has no \"model_config\" (zero-train records one; see "
           "docs/checkpoints.md)";
    return "";
  }
  nlohmann::json config = client.at("model_config");
  config["torch_dtype"] = torch_dtype;
  const fs::path parent = fs::path(out).parent_path();
  const fs::path path = (parent.empty() ? fs::path(".") : parent) / "config.json";
  zero::write_file_atomically(path.string(), config.dump(2) + "\n");
  return path.string();
}

int export_weights(const std::string& dir, const std::string& tag, const std::string& out,
                   const std::string& dtype_name) {
  const std::map<std::string, at::ScalarType> dtypes = {
      {"fp32", at::kFloat}, {"bf16", at::kBFloat16}, {"fp16", at::kHalf}};
  const std::map<std::string, std::string> torch_dtypes = {
      {"fp32", "float32"}, {"bf16", "bfloat16"}, {"fp16", "float16"}};
  const zero::CheckpointSummary s = zero::inspect_checkpoint(dir, tag);
  // --out DIR/model.safetensors: DIR is made if missing (from_pretrained reads a directory).
  const std::filesystem::path parent = std::filesystem::path(out).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  const int64_t bytes = zero::export_checkpoint_weights(dir, s.tag, out, dtypes.at(dtype_name));
  std::printf("wrote %s: %zu tensors, %" PRId64 " parameters as %s, %s (from %s)\n",
              out.c_str(), s.parameters.size(), s.num_parameters, dtype_name.c_str(),
              bytes_text(bytes).c_str(), s.path.c_str());
  std::string why;
  const std::string config = write_hf_config(s, out, torch_dtypes.at(dtype_name), &why);
  if (config.empty()) {
    std::printf("no config.json written: %s\n", why.c_str());
  } else {
    std::printf("wrote %s (Hugging Face config.json)%s\n", config.c_str(),
                std::filesystem::path(out).filename() == "model.safetensors"
                    ? ""
                    : "; from_pretrained(dir) expects the weights in dir/model.safetensors");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zero-ckpt: inspect a zero checkpoint (engine.save_checkpoint) and export its "
               "weights as one safetensors file"};
  app.require_subcommand(1);
  std::string dir, tag, out, dtype = "fp32";
  bool verify = false;
  bool print_config = false;

  CLI::App* inspect_cmd = app.add_subcommand("inspect", "summarize what a checkpoint holds");
  inspect_cmd->add_option("dir", dir, "checkpoint directory (the one holding 'latest')")
      ->required();
  inspect_cmd->add_option("--tag", tag, "checkpoint tag (default: the one DIR/latest names)");
  inspect_cmd->add_flag("--verify", verify,
                        "read every rank file and check its size and CRC-32 (exit 1 on a problem)");
  inspect_cmd->add_flag("--config", print_config,
                        "also print the effective config the checkpoint was saved with");

  CLI::App* export_cmd = app.add_subcommand(
      "export", "write the whole weights (fp32 master, converted) to one safetensors file with "
                "Hugging Face names");
  export_cmd->add_option("dir", dir, "checkpoint directory (the one holding 'latest')")
      ->required();
  export_cmd->add_option("--out", out, "output .safetensors file")->required();
  export_cmd->add_option("--tag", tag, "checkpoint tag (default: the one DIR/latest names)");
  export_cmd->add_option("--dtype", dtype, "dtype of the exported weights")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();

  // CLI11 reports an unknown first word only as "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-' && std::string(argv[1]) != "inspect" &&
      std::string(argv[1]) != "export") {
    std::fprintf(stderr, "zero-ckpt: error: unknown command '%s'; expected inspect or export "
                 "(see zero-ckpt --help)\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "zero-ckpt: error: %s (see zero-ckpt --help)\n", e.what());
    return 2;
  }
  try {
    if (inspect_cmd->parsed()) return inspect(dir, tag, verify, print_config);
    return export_weights(dir, tag, out, dtype);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-ckpt: error: %s\n", e.what());
    return 2;
  }
}
