// zero-train, phases 3 and 5 (Note [zero-train's phases] in trainer.h): where the run writes
// and resumes from, and then what it resumes (Note [Resuming zero-train] in main.cpp).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

#include "trainer.h"
#include "zero/checkpoint.h"
#include "zero/error.h"
#include "zero/files.h"

namespace zero::train {
namespace {

// The tag DIR/latest names (Note [Checkpoint format]).
std::string latest_tag(const std::filesystem::path& dir) {
  return zero::latest_checkpoint_tag(dir.string());
}

// --resume auto: the checkpoint directory when it has a `latest`, else a fresh start.
// --resume DIR: a checkpoint directory (with `latest`) or one checkpoint in it (with
// metadata.json); anything else is an error.
ResumeFrom find_resume(const Options& o) {
  namespace fs = std::filesystem;
  ResumeFrom from;
  if (o.resume.empty()) return from;
  if (o.resume == "auto") {
    const std::string dir = checkpoint_dir(o);
    if (fs::exists(fs::path(dir) / "latest")) {
      from.dir = dir;
      from.tag = latest_tag(dir);
    } else {
      from.note = "--resume auto: no checkpoint in " + dir + " (no " + dir +
                  "/latest), starting from step 1";
    }
    return from;
  }
  fs::path path = fs::path(o.resume).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "DIR/"
  if (fs::exists(path / "latest")) {
    from.dir = path.string();
    from.tag = latest_tag(path);
  } else if (fs::exists(path / "metadata.json")) {
    from.dir = path.parent_path().empty() ? "." : path.parent_path().string();
    from.tag = path.filename().string();
  } else if (fs::exists(path / "checkpoints" / "latest")) {
    // A run directory (--out of an earlier run): its checkpoints are in RUN_DIR/checkpoints.
    from.dir = (path / "checkpoints").string();
    from.tag = latest_tag(from.dir);
    from.note = "--resume " + o.resume + ": a run directory; resuming from its checkpoints in " +
                from.dir;
  } else {
    ZERO_CHECK(false, "--resume ", o.resume, ": no checkpoint there (none of ",
               (path / "latest").string(), ", ", (path / "metadata.json").string(), " or ",
               (path / "checkpoints" / "latest").string(), " exists)");
  }
  return from;
}

// Where checkpoints go must not already hold another position of a run: saving there would
// mix with it, and fail at the step that `latest` names (a save never replaces the latest
// checkpoint). So with --save-every, the checkpoint directory has no `latest`, or it is where
// the run resumes from, at its latest checkpoint.
void check_checkpoint_dir(const Options& o, const ResumeFrom& from) {
  namespace fs = std::filesystem;
  const fs::path dir = checkpoint_dir(o);
  if (o.save_every == 0 || !fs::exists(dir / "latest")) return;
  const std::string latest = latest_tag(dir);
  std::error_code ignored;
  if (!from.dir.empty() && fs::equivalent(dir, from.dir, ignored) && from.tag == latest) return;
  ZERO_CHECK(false, "checkpoint directory ", dir.string(), " already holds checkpoints (latest: ",
             latest, ")", from.dir.empty() ? "" : ", and this run resumes from " +
             (fs::path(from.dir) / from.tag).string(),
             ": saving there would mix with them; pass --resume auto to continue from ", latest,
             ", or --checkpoint-dir (or --out) to save elsewhere");
}

// Where to resume from (find_resume), checked against where checkpoints go
// (check_checkpoint_dir).
ResumeFrom resume_from(const Options& o) {
  ResumeFrom from = find_resume(o);
  check_checkpoint_dir(o, from);
  return from;
}

// The checkpoint's state into the engine, and the step it continues after from its client
// state (zero-train's fields checked against the engine's counters).
void load_resumed_state(const Options& o, const Inputs& in, Trainee& t, const ResumeFrom& from,
                        int world, Resumed& r) {
  const Config& config = in.config;
  const std::string text = t.engine->load_checkpoint(from.dir, from.tag);
  const nlohmann::json client = nlohmann::json::parse(text);
  const std::string where = from.dir + "/" + from.tag;
  const int64_t boundary = t.engine->global_steps() + t.engine->skipped_steps();
  if (client.contains("next_step")) {
    // zero-train's own fields, checked against the engine's counters (which the
    // checkpoint's reader has checked): one step per accumulation boundary.
    const nlohmann::json& next = client.at("next_step");
    ZERO_CHECK(next.is_number_integer() && next.get<int64_t>() == boundary,
               "checkpoint metadata '", where, "/metadata.json': client_state.next_step = ",
               next.dump(),
               " contradicts its counters, which say it was saved after boundary ",
               boundary, " (zero-train saves the boundary it is at: one step per boundary)");
    r.first_step = boundary;
    if (client.contains("model")) {
      const nlohmann::json& saved_model = client.at("model");
      ZERO_CHECK(saved_model.is_string() && saved_model.get<std::string>() == o.model,
                 "checkpoint metadata '", where, "/metadata.json': client_state.model = ",
                 saved_model.dump(),
                 ", but this run trains --model ", o.model,
                 "; resume with the model it was saved from");
    }
    auto differs = [&](const char* key, const nlohmann::json& here) {
      if (client.contains(key) && client.at(key) != here) {
        r.notes.push_back(std::string("note: the checkpoint's run had ") + key + " " +
                          client.at(key).dump() + ", this one " + here.dump() +
                          ": the data order differs from an uninterrupted run");
      }
    };
    differs("data", o.data);
    differs("seq_len", in.seq);
    differs("train_batch_size", config.train_batch_size);
    differs("seed", config.seed);
    if (o.dropout > 0 && client.value("world_size", world) != world) {
      r.notes.push_back("note: saved at " + client.at("world_size").dump() +
                        " ranks, resumed at " + std::to_string(world) +
                        ": the random generators start afresh, so dropout draws "
                        "differ from an uninterrupted run");
    }
  } else {
    // Not saved by zero-train: one optimizer step per accumulation boundary.
    r.first_step = boundary;
    r.notes.push_back("note: " + where + " has no next_step in its client state " +
                      "(not saved by zero-train); continuing after its boundary " +
                      std::to_string(r.first_step));
  }
  ZERO_CHECK(r.first_step <= o.steps, "--steps ", o.steps, ": the checkpoint ", where,
             " was saved after step ", r.first_step, "; pass --steps above it to train on");
}

// tokenizer.json and the tokenizer_config.json beside it (if any) into `dir`.
void copy_tokenizer_files(const std::string& tokenizer_json, const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path source = tokenizer_json;
  for (const fs::path& file : {source, source.parent_path() / "tokenizer_config.json"}) {
    if (!fs::exists(file)) continue;
    const fs::path target = fs::path(dir) / file.filename();
    std::error_code same;
    if (fs::equivalent(file, target, same)) continue;
    fs::copy_file(file, target, fs::copy_options::overwrite_existing);
  }
}

}  // namespace

std::string checkpoint_dir(const Options& o) {
  return o.checkpoint_dir.empty() ? o.out + "/checkpoints" : o.checkpoint_dir;
}

std::unique_ptr<RunDirectory> claim_run_directory(const Options& o, Communicator& comm) {
  auto claimed = std::make_unique<RunDirectory>();
  run_and_agree(comm, "claiming the run directory", [&] {
    // Rank 0 takes the locks before anything is written there and holds them until the run
    // ends (Note [Directory lock] in directory_lock.h).
    if (comm.rank() == 0) {
      claimed->run_lock.emplace(o.out, "run directory");
      const std::string checkpoints = checkpoint_dir(o);
      std::error_code different;
      if (o.save_every > 0 && !std::filesystem::equivalent(checkpoints, o.out, different)) {
        claimed->checkpoint_lock.emplace(checkpoints, "checkpoint directory");
      }
    }
    claimed->from = resume_from(o);
  });
  return claimed;
}

Resumed resume(const Options& o, const Inputs& in, Trainee& t, const ResumeFrom& from,
               Communicator& comm) {
  const Config& config = in.config;
  Resumed r;
  r.from = from;
  if (!from.dir.empty()) {
    run_and_agree(comm, "resuming", [&] {
      try {
        load_resumed_state(o, in, t, from, comm.size(), r);
      } catch (const std::exception& e) {
        throw Error(std::string("cannot resume: ") + e.what());
      }
    });
    if (r.first_step == o.steps) return r;  // nothing left to train
  }
  // Rank 0 continues metrics.csv from the checkpoint's step (or starts it afresh).
  run_and_agree(comm, "opening metrics.csv", [&] {
    if (comm.rank() != 0) return;
    std::filesystem::create_directories(o.out);
    write_file_atomically(o.out + "/config.json", config.effective_json + "\n");
    // The run's Hugging Face tokenizer beside its checkpoints, where zero-generate finds it.
    if (in.tokenizer.hf) copy_tokenizer_files(in.tokenizer.hf->path(), o.out);
    MetricsRows kept;
    if (r.first_step > 0) {
      kept = read_metrics(o.out + "/metrics.csv", r.first_step);
      r.records = kept.records;
    }
    r.csv = std::make_unique<CsvLog>(o.out + "/metrics.csv", kept.lines);
    if (r.first_step > 0) {
      std::ostringstream line;
      if (kept.lines.empty()) {
        line << o.out << "/metrics.csv starts at step " << r.first_step + 1
             << " (no rows of earlier steps there)";
      } else {
        line << "continuing " << o.out << "/metrics.csv: " << kept.lines.size()
             << " row(s) up to step " << r.first_step << " kept";
      }
      if (kept.dropped > 0) line << ", " << kept.dropped << " row(s) after it dropped";
      if (kept.torn > 0) line << ", a last row cut short (the run was killed) dropped";
      r.notes.push_back(line.str());
    }
  });
  return r;
}

}  // namespace zero::train
