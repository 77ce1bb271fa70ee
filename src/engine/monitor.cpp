#include "engine/monitor.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "zero/error.h"

namespace zero {

EngineMonitor::EngineMonitor(const Config& config, int rank) {
  if (rank != 0) return;
  active_ = true;
  // wall_clock_breakdown without steps_per_print reports every step.
  print_every_ = config.steps_per_print.value_or(config.wall_clock_breakdown ? 1 : 0);
  breakdown_ = config.wall_clock_breakdown;
  fp16_ = config.param_dtype == c10::ScalarType::Half;
  if (config.csv_monitor.enabled) {
    std::filesystem::path dir = std::filesystem::path(config.csv_monitor.output_path) /
                                config.csv_monitor.job_name;
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    ZERO_CHECK(!error, config.source, ": csv_monitor: cannot create directory '", dir.string(),
               "': ", error.message());
    csv_dir_ = dir.string();
    // Every file is opened here, at start-up, so an unwritable path fails initialize (on
    // every rank: Note [Agreeing on a failure]) instead of the first step.
    try {
      open_csv("Train/Samples/train_loss");
      open_csv("Train/Samples/lr");
      if (fp16_) open_csv("Train/Samples/loss_scale");
    } catch (...) {
      for (auto& [name, file] : csv_files_) std::fclose(file);  // no destructor runs
      throw;
    }
  }
  if (config.tensorboard.enabled) {
    const std::filesystem::path base =
        config.tensorboard.output_path.empty() ? "runs" : config.tensorboard.output_path;
    try {
      tensorboard_ =
          std::make_unique<TensorBoardWriter>((base / config.tensorboard.job_name).string());
    } catch (const Error& error) {
      for (auto& [name, file] : csv_files_) std::fclose(file);  // no destructor runs
      throw Error(config.source + ": " + error.what());
    }
  }
}

EngineMonitor::~EngineMonitor() {
  for (auto& [name, file] : csv_files_) std::fclose(file);
}

// One file per event, named like DeepSpeed's CSV monitor ("Train/Samples/train_loss" ->
// Train_Samples_train_loss.csv), rows "step,value" with the step axis in samples. Opened for
// appending, as DeepSpeed does: a resumed run adds its rows after the earlier run's (the
// header is written once, into an empty file).
void EngineMonitor::open_csv(const std::string& event) {
  std::string name = event;
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  const std::string path = csv_dir_ + "/" + name + ".csv";
  std::FILE* file = std::fopen(path.c_str(), "a");
  ZERO_CHECK(file != nullptr, "csv_monitor: cannot write '", path, "': ", std::strerror(errno));
  csv_files_[event] = file;
  if (std::ftell(file) == 0) {
    std::fprintf(file, "step,%s\n", event.substr(event.rfind('/') + 1).c_str());
    std::fflush(file);
  }
}

void EngineMonitor::write_event(const std::string& event, int64_t x, double value) {
  if (!csv_dir_.empty()) {
    if (csv_files_.count(event) == 0) open_csv(event);
    std::FILE* file = csv_files_.at(event);
    std::fprintf(file, "%lld,%.9g\n", static_cast<long long>(x), value);
    std::fflush(file);
  }
  if (tensorboard_) tensorboard_->scalar(event, value, x);
}

void EngineMonitor::write_events(const std::vector<MonitorEvent>& events) {
  if (!active_) return;
  for (const MonitorEvent& e : events) write_event(e.name, e.samples, e.value);
}

void EngineMonitor::record(const BoundaryRecord& r) {
  if (!active_) return;
  backward_ms_ += r.backward_ms;
  step_ms_ += r.step_ms;
  ++timed_steps_;
  write_event("Train/Samples/train_loss", r.global_samples, r.loss);
  write_event("Train/Samples/lr", r.global_samples, r.lr);
  if (fp16_) write_event("Train/Samples/loss_scale", r.global_samples, r.loss_scale);
  // Not among DeepSpeed's CSV events: TensorBoard only.
  if (tensorboard_) tensorboard_->scalar("Train/Samples/grad_norm", r.grad_norm, r.global_samples);
  if (print_every_ > 0 && r.global_steps % print_every_ == 0) {
    std::printf("[zero] step=%lld, skipped=%lld, lr=%.6g, loss_scale=%g, grad_norm=%.4g, loss=%.4f",
                static_cast<long long>(r.global_steps), static_cast<long long>(r.skipped_steps),
                r.lr, r.loss_scale, r.grad_norm, r.loss);
    if (breakdown_) {
      std::printf(" | time (ms, mean of %lld steps): backward %.1f, step %.1f",
                  static_cast<long long>(timed_steps_), backward_ms_ / timed_steps_,
                  step_ms_ / timed_steps_);
    }
    std::printf("\n");
    std::fflush(stdout);
    backward_ms_ = step_ms_ = 0;
    timed_steps_ = 0;
  }
}

}  // namespace zero
