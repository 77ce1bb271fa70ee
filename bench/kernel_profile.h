// Where a training step's time goes, kernel by kernel (issue 25: "measure first"): libtorch's
// own profiler (kineto, the engine behind torch.profiler) around a few steps, its events of one
// device type summed by name. For the CUDA benchmarks; on the CPU it sums operators, which is
// how it is checked without a GPU (bench_engine --profile).
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace zero::bench {

struct KernelTime {
  std::string name;
  double seconds = 0.0;
  int64_t calls = 0;
};

struct KernelBreakdown {
  std::vector<KernelTime> kernels;  // by total time, largest first
  double busy_seconds = 0.0;        // the union of the events' intervals (overlap counted once)
  double wall_seconds = 0.0;        // of the profiled steps, `finish` included
};

/// Runs `step` `steps` times under the profiler, then `finish` (a device synchronisation, so
/// the device's events are complete), and sums the events of `device` by name.
inline KernelBreakdown profile_kernels(int steps, const std::function<void()>& step,
                                       const std::function<void()>& finish,
                                       c10::DeviceType device) {
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  const ProfilerConfig config(ProfilerState::KINETO);
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device == c10::DeviceType::CUDA) activities.insert(ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  finish();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto result = torch::autograd::profiler::disableProfiler();
  std::map<std::string, KernelTime> by_name;
  std::vector<std::pair<uint64_t, uint64_t>> intervals;
  for (const auto& event : result->events()) {
    if (event.deviceType() != device || event.durationNs() == 0) continue;
    KernelTime& k = by_name[event.name()];
    k.name = event.name();
    k.seconds += static_cast<double>(event.durationNs()) / 1e9;
    ++k.calls;
    intervals.emplace_back(event.startNs(), event.startNs() + event.durationNs());
  }
  KernelBreakdown breakdown;
  breakdown.wall_seconds = wall;
  std::sort(intervals.begin(), intervals.end());
  uint64_t covered_until = 0;
  for (const auto& [begin, end] : intervals) {
    const uint64_t from = std::max(begin, covered_until);
    if (end > from) breakdown.busy_seconds += static_cast<double>(end - from) / 1e9;
    covered_until = std::max(covered_until, end);
  }
  for (auto& [name, k] : by_name) breakdown.kernels.push_back(std::move(k));
  std::sort(breakdown.kernels.begin(), breakdown.kernels.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return breakdown;
}

/// One line per kernel ("TAG profile ms_per_step=... pct=... calls_per_step=... name=..."),
/// the `top` largest, then the busy share: parseable from gpu-check's results file.
inline void print_kernel_breakdown(const char* tag, const KernelBreakdown& b, int steps,
                                   int top = 25) {
  std::printf("%s profile busy_ms_per_step=%.2f wall_ms_per_step=%.2f busy_pct=%.1f kernels=%zu\n",
              tag, b.busy_seconds / steps * 1e3, b.wall_seconds / steps * 1e3,
              b.wall_seconds > 0 ? 100 * b.busy_seconds / b.wall_seconds : 0.0, b.kernels.size());
  double total = 0;
  for (const KernelTime& k : b.kernels) total += k.seconds;
  for (int i = 0; i < std::min<int>(top, static_cast<int>(b.kernels.size())); ++i) {
    const KernelTime& k = b.kernels[i];
    std::printf("%s profile ms_per_step=%.3f pct=%.1f calls_per_step=%.1f name=%.150s\n", tag,
                k.seconds / steps * 1e3, total > 0 ? 100 * k.seconds / total : 0.0,
                static_cast<double>(k.calls) / steps, k.name.c_str());
  }
}

}  // namespace zero::bench
