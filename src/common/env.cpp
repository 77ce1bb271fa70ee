// The one place zero reads environment variables. See env.h for the list.
#include "common/env.h"

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <string>

#include "zero/error.h"

namespace zero::env {
namespace {

int64_t read_int_at_least(const char* name, int64_t least, int64_t default_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return default_value;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  ZERO_CHECK(errno == 0 && end != text && *end == '\0' && value >= least, "environment variable ",
             name, "='", text, "' is invalid: expected an integer >= ", least);
  return value;
}

// "0" or "1"; unset or empty: `unset`.
bool flag(const char* name, bool unset) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return unset;
  const std::string value = text;
  ZERO_CHECK(value == "0" || value == "1", "environment variable ", name, "='", value,
             "' is invalid: expected 0 or 1");
  return value == "1";
}

}  // namespace

int64_t ring_segment_bytes() {
  static const int64_t value = read_int_at_least("ZERO_RING_SEGMENT_BYTES", 1, int64_t{256} << 10);
  return value;
}

int64_t collective_timeout_seconds() {
  // At most ten years: the deadline is added to a steady_clock time in nanoseconds.
  static const int64_t value = std::min<int64_t>(
      read_int_at_least("ZERO_COLLECTIVE_TIMEOUT_S", 0, 600), int64_t{315360000});
  return value;
}

bool collective_checks() {
  static const bool value = flag("ZERO_COLLECTIVE_CHECKS", true);
  return value;
}

namespace {
std::string gemm_path(const char* name) {
  const char* text = std::getenv(name);
  const std::string chosen = text == nullptr || *text == '\0' ? "auto" : text;
  ZERO_CHECK(chosen == "auto" || chosen == "native" || chosen == "fp32", "environment variable ",
             name, "='", chosen, "' is invalid: expected native, fp32 or auto");
  return chosen;
}
}  // namespace

std::string fp16_gemm_path() {
  static const std::string value = gemm_path("ZERO_FP16_GEMM");
  return value;
}

std::string bf16_gemm_path() {
  static const std::string value = gemm_path("ZERO_BF16_GEMM");
  return value;
}

int64_t ranks_per_node_override() {
  static const int64_t value = read_int_at_least("ZERO_RANKS_PER_NODE", 0, 0);
  return value;
}

bool hierarchical_collectives() {
  static const bool value = flag("ZERO_HIERARCHICAL_COLLECTIVES", true);
  return value;
}

bool fused_kernels() {
  static const bool value = flag("ZERO_FUSED_KERNELS", true);
  return value;
}

bool swap_checksums() {
  static const bool value = flag("ZERO_SWAP_CHECKSUMS", true);
  return value;
}

int local_rank() {
  static const int value = [] {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
      const int64_t rank = read_int_at_least(name, 0, -1);
      if (rank >= 0) return static_cast<int>(std::min<int64_t>(rank, 1 << 20));
    }
    return -1;
  }();
  return value;
}

const std::map<std::string, double>& gemm_rates_override() {
  static const std::map<std::string, double> value = [] {
    std::map<std::string, double> rates;
    const char* text = std::getenv("ZERO_GEMM_RATES");
    if (text == nullptr || *text == '\0') return rates;
    const std::string all = text;
    size_t begin = 0;
    while (begin <= all.size()) {
      const size_t end = std::min(all.find(',', begin), all.size());
      const std::string item = all.substr(begin, end - begin);
      const size_t equals = item.find('=');
      const std::string dtype = item.substr(0, equals);
      double rate = 0;
      bool ok = equals != std::string::npos &&
                (dtype == "fp32" || dtype == "bf16" || dtype == "fp16") &&
                rates.count(dtype) == 0;
      if (ok) {
        const std::string number = item.substr(equals + 1);
        errno = 0;
        char* stop = nullptr;
        rate = std::strtod(number.c_str(), &stop);
        ok = errno == 0 && !number.empty() && *stop == '\0' && rate > 0;
      }
      ZERO_CHECK(ok, "environment variable ZERO_GEMM_RATES='", all, "' is invalid at '", item,
                 "': expected DTYPE=GFLOPS pairs separated by commas, DTYPE one of fp32, bf16, ",
                 "fp16 (each at most once), GFLOPS a number > 0, e.g. 'fp32=80,bf16=8'");
      rates[dtype] = rate;
      begin = end + 1;
    }
    return rates;
  }();
  return value;
}

ProgressStyle progress_style() {
  static const ProgressStyle value = [] {
    const char* text = std::getenv("ZERO_PROGRESS");
    if (text == nullptr || *text == '\0') return ProgressStyle::kAuto;
    const std::string style = text;
    if (style == "bar") return ProgressStyle::kBar;
    if (style == "lines") return ProgressStyle::kLines;
    ZERO_CHECK(false, "environment variable ZERO_PROGRESS='", style,
               "' is invalid: expected 'bar' or 'lines'");
    return ProgressStyle::kAuto;
  }();
  return value;
}

bool emulate_device_offload() { return flag("ZERO_EMULATE_DEVICE_OFFLOAD", false); }

bool muon_exchange_every_holder() {
  const char* text = std::getenv("ZERO_MUON_EXCHANGE");
  const std::string chosen = text == nullptr || *text == '\0' ? "owner" : text;
  ZERO_CHECK(chosen == "owner" || chosen == "every-holder", "environment variable ",
             "ZERO_MUON_EXCHANGE='", chosen, "' is invalid: expected owner or every-holder");
  return chosen == "every-holder";
}

}  // namespace zero::env
