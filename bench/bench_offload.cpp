// NVMe offload benchmarks (docs/benchmarks.md, "NVMe offload"):
//   swapper    sequential write then read of a swap file through AsyncIo in records of
//              --record-mib, --buffers in flight: the swapper's bandwidth, to set beside the
//              disk's own limit (bench/disk_limit.sh, fio at the same block size), with and
//              without the records' checksums (Note [Swap record checksums]), interleaved;
//   optimizer  ShardOptimizer (--optimizer adamw | adagrad | lion) on --numel elements with
//              --threads: elements/s, to set beside DeepSpeed's CPU op on the same sizes
//              (bench/deepspeed_cpu_adam.py);
//              --grad-dtype fp32|bf16|fp16 and --param-dtype none|bf16|fp16 (the rounded copy);
//              run it with --bind-to none (mpirun binds one rank to one core by default);
//   step       ShardState::step of --numel fp32 parameters with the moments in memory and on
//              NVMe (tiles of --tile), interleaved --rounds times: seconds per step and ratio.
// Usage: bench_offload MODE [--dir DIR] [--numel N] [--tile N] [--buffers N] [--threads N]
//        [--record-mib N] [--size-mib N] [--rounds N] [--grad-dtype D] [--param-dtype D]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "offload/async_io.h"
#include "offload/swap_directory.h"
#include "offload/swap_file.h"
#include "optim/shard_optimizer.h"
#include "state/shard_state.h"
#include "state/state_store.h"
#include "zero/comm_mpi.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  std::string mode;
  std::string dir = "/tmp";
  int64_t numel = 50000000;
  int64_t tile = 10000000;
  int64_t buffers = 4;
  int threads = 0;
  int64_t record_mib = 64;
  int64_t size_mib = 2048;
  int rounds = 3;
  int64_t block_size = 1 << 20;
  int64_t queue_depth = 8;
  std::string grad_dtype = "fp32";
  std::string optimizer = "adamw";  // optimizer: adamw | adagrad | lion
  std::string param_dtype = "none";
};

// CRC-32C bytes per second over `bytes` of `data` (in cache after the first pass).
double crc32c_rate(const char* data, int64_t bytes) {
  volatile uint32_t sink = zero::crc32c(data, static_cast<size_t>(bytes));
  const auto t0 = Clock::now();
  int passes = 0;
  do {
    sink = zero::crc32c(data, static_cast<size_t>(bytes), sink);
    ++passes;
  } while (since(t0) < 0.2);
  return static_cast<double>(bytes) * passes / since(t0);
}

void swapper(const Options& o) {
  zero::AioConfig aio;
  aio.block_size = o.block_size;
  aio.queue_depth = o.queue_depth;
  zero::AsyncIo io(aio);
  const int64_t record = o.record_mib << 20;
  const int64_t records = (o.size_mib << 20) / record;
  const std::string path = o.dir + "/zero-bench-swapper-" + std::to_string(::getpid()) + ".swp";
  zero::SwapFile file(path, records * record, io);
  std::vector<std::unique_ptr<zero::AlignedBuffer>> buffers;
  for (int64_t b = 0; b < o.buffers; ++b) {
    buffers.push_back(std::make_unique<zero::AlignedBuffer>(record));
    std::memset(buffers.back()->data(), static_cast<int>(b + 1), static_cast<size_t>(record));
  }
  // The unchecked swapper (Note [Swap record checksums]: no CRC-32C at write, no check at
  // read): the same AsyncIo on a second descriptor of the same file, interleaved round by round
  // with SwapFile's checked transfers. Both write the same bytes, so the sums stay right.
  const int raw = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (file.direct() ? O_DIRECT : 0));
  if (raw < 0) throw std::runtime_error("cannot open " + path + " again");
  std::map<std::string, std::vector<double>> seconds_of;
  for (int round = 0; round < o.rounds; ++round) {
    for (bool checked : {true, false}) {
      for (bool write : {true, false}) {
        std::vector<zero::AsyncIo::Ticket> in_flight(buffers.size());
        const auto t0 = Clock::now();
        for (int64_t r = 0; r < records; ++r) {
          const size_t b = static_cast<size_t>(r) % buffers.size();
          zero::AsyncIo::wait(in_flight[b]);
          char* data = buffers[b]->data();
          if (checked) {
            in_flight[b] = write ? file.write(data, record, r * record)
                                 : file.read(data, record, r * record, "record " + std::to_string(r));
          } else {
            in_flight[b] = write ? io.write(raw, data, record, r * record, path)
                                 : io.read(raw, data, record, r * record, path);
          }
        }
        for (auto& t : in_flight) zero::AsyncIo::wait(t);
        const double seconds = since(t0);
        if (write) file.seal();
        const std::string what = std::string(write ? "write" : "read") + (checked ? "" : "_unchecked");
        seconds_of[what].push_back(seconds);
        std::printf("swapper %s_GBps=%.3f record=%lldMiB buffers=%lld block=%lld qd=%lld "
                    "direct=%d size=%lldMiB round=%d\n",
                    what.c_str(), static_cast<double>(records * record) / seconds / 1e9,
                    static_cast<long long>(o.record_mib), static_cast<long long>(o.buffers),
                    static_cast<long long>(o.block_size), static_cast<long long>(o.queue_depth),
                    file.direct() ? 1 : 0, static_cast<long long>(records * record >> 20), round);
        std::fflush(stdout);
      }
    }
  }
  ::close(raw);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (const char* what : {"write", "read"}) {
    const double checked = median(seconds_of[what]);
    const double unchecked = median(seconds_of[std::string(what) + "_unchecked"]);
    std::printf("swapper %s checksum_cost=%+.1f%% (median of %d rounds: %.3f s checked, %.3f s "
                "unchecked; CRC-32C alone %.2f GB/s)\n",
                what, (checked / unchecked - 1) * 100, o.rounds, checked, unchecked,
                crc32c_rate(buffers[0]->data(), record) / 1e9);
  }
}

at::ScalarType dtype_of(const std::string& name) {
  if (name == "fp32") return at::kFloat;
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  throw std::invalid_argument("unknown dtype " + name + " (fp32, bf16, fp16)");
}

void optimizer(const Options& o) {
  // As bench/deepspeed_cpu_adam.py steps them: lr 1e-3, weight decay 0.01 (Adagrad: lr 1e-2,
  // eps 1e-10, no decay, DeepSpeedCPUAdagrad's defaults).
  zero::OptimizerConfig config;
  config.lr = 1e-3;
  config.weight_decay = 0.01;
  if (o.optimizer == "adamw") {
    config.type = zero::OptimizerType::kAdamW;
  } else if (o.optimizer == "adagrad") {
    config.type = zero::OptimizerType::kAdagrad;
    config.lr = 1e-2;
    config.eps = 1e-10;
    config.weight_decay = 0.0;
  } else if (o.optimizer == "lion") {
    config.type = zero::OptimizerType::kLion;
  } else {
    throw std::invalid_argument("--optimizer " + o.optimizer + ": adamw, adagrad or lion");
  }
  zero::ShardOptimizer opt(config);
  cpu_set_t allowed;
  const int cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 0;
  if (cores > 0 && at::get_num_threads() > cores) {
    std::fprintf(stderr, "optimizer: %d threads on %d allowed core(s) (mpirun binds a rank to "
                 "one core unless given --bind-to none)\n", at::get_num_threads(), cores);
  }
  at::manual_seed(0);
  at::Tensor param = at::randn({o.numel}) * 0.01;
  at::Tensor grad = (at::randn({o.numel}) * 0.01).to(dtype_of(o.grad_dtype));
  at::Tensor param_out;
  if (o.param_dtype != "none") param_out = at::empty({o.numel}, dtype_of(o.param_dtype));
  std::vector<at::Tensor> moments;
  for (size_t k = 0; k < opt.moment_names().size(); ++k) moments.push_back(at::zeros({o.numel}));
  opt.begin_step();
  opt.update(param, grad, param_out, moments, 1.0, config.lr);  // warm-up
  const auto t0 = Clock::now();
  for (int s = 0; s < o.rounds; ++s) {
    opt.begin_step();
    opt.update(param, grad, param_out, moments, 1.0, config.lr);
  }
  const double per_step = since(t0) / o.rounds;
  std::printf("zero_shard_optimizer elements_per_s=%.4g numel=%lld steps=%d threads=%d "
              "allowed_cores=%d seconds_per_step=%.4f mode=%s grad=%s param_out=%s\n",
              static_cast<double>(o.numel) / per_step, static_cast<long long>(o.numel), o.rounds,
              at::get_num_threads(), cores, per_step, o.optimizer.c_str(), o.grad_dtype.c_str(),
              o.param_dtype.c_str());
}

void step(const Options& o, zero::Communicator& comm) {
  zero::OptimizerConfig config;
  config.type = zero::OptimizerType::kAdamW;
  zero::OffloadConfig offload;
  offload.device = zero::OffloadDevice::kNvme;
  offload.nvme_path = o.dir;
  offload.buffer_count = o.buffers;
  zero::AioConfig aio;
  aio.block_size = o.block_size;
  aio.queue_depth = o.queue_depth;
  zero::AsyncIo io(aio);
  zero::SwapDirectory directory(o.dir, "--dir", comm);
  at::manual_seed(0);
  at::Tensor grad = at::randn({o.numel}) * 0.01;
  auto memory_maker = [](int parts, int64_t numel, int64_t tile, const std::string&) {
    return zero::make_memory_store(parts, numel, tile, at::kCPU);
  };
  auto nvme_maker = [&](int parts, int64_t numel, int64_t tile, const std::string& name) {
    return zero::make_swap_store(parts, numel, tile, offload, io, directory, name);
  };
  auto params = [&] { return std::make_shared<zero::ParamStore>(at::randn({o.numel}) * 0.01); };
  zero::ShardState in_memory(config, params(), at::Tensor(), o.tile,
                             zero::Placement::kHost, memory_maker, {}, {});
  zero::ShardState on_nvme(config, params(), at::Tensor(), o.tile,
                           zero::Placement::kNvme, nvme_maker, {}, {});
  const double crc_rate = crc32c_rate(static_cast<const char*>(grad.data_ptr()),
                                     std::min<int64_t>(grad.numel() * 4, 64 << 20));
  in_memory.step(1.0, 1e-3, grad);  // warm-up: first touch of the moments
  on_nvme.step(1.0, 1e-3, grad);
  double memory_total = 0, nvme_total = 0;
  for (int r = 0; r < o.rounds; ++r) {
    auto t0 = Clock::now();
    in_memory.step(1.0, 1e-3, grad);
    const double m = since(t0);
    t0 = Clock::now();
    on_nvme.step(1.0, 1e-3, grad);
    const double n = since(t0);
    memory_total += m;
    nvme_total += n;
    const double moved = 2.0 * static_cast<double>(on_nvme.file_bytes());  // read + write
    // Note [Swap record checksums]: every byte moved is checksummed once; the reads' sums run
    // on the I/O threads beside the step, so this is an upper bound of their cost.
    std::printf("step round=%d in_memory_s=%.3f nvme_s=%.3f ratio=%.2f swap_GBps=%.3f "
                "checksum_bound=%.1f%% numel=%lld tile=%lld buffers=%lld file=%lldMiB\n",
                r, m, n, n / m, moved / n / 1e9, moved / crc_rate / n * 100,
                static_cast<long long>(o.numel),
                static_cast<long long>(o.tile), static_cast<long long>(o.buffers),
                static_cast<long long>(on_nvme.file_bytes() >> 20));
    std::fflush(stdout);
  }
  std::printf("step mean in_memory_s=%.3f nvme_s=%.3f ratio=%.2f\n", memory_total / o.rounds,
              nvme_total / o.rounds, nvme_total / memory_total);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NVMe offload benchmarks"};
  Options o;
  app.add_option("mode", o.mode, "swapper | optimizer | step")->required();
  app.add_option("--dir", o.dir, "directory of the swap files");
  app.add_option("--numel", o.numel, "elements (optimizer, step)");
  app.add_option("--tile", o.tile, "sub_group_size (step)");
  app.add_option("--buffers", o.buffers, "buffers in flight / buffer_count");
  app.add_option("--threads", o.threads, "libtorch threads (0: all cores)");
  app.add_option("--record-mib", o.record_mib, "swapper: MiB per transfer");
  app.add_option("--size-mib", o.size_mib, "swapper: file size in MiB");
  app.add_option("--rounds", o.rounds, "rounds / timed steps");
  app.add_option("--block-size", o.block_size, "aio.block_size");
  app.add_option("--queue-depth", o.queue_depth, "aio.queue_depth");
  app.add_option("--grad-dtype", o.grad_dtype, "optimizer: gradient dtype, fp32 | bf16 | fp16");
  app.add_option("--optimizer", o.optimizer, "optimizer: adamw | adagrad | lion");
  app.add_option("--param-dtype", o.param_dtype,
                 "optimizer: parameter copy dtype, none | bf16 | fp16");
  CLI11_PARSE(app, argc, argv);
  if (o.threads > 0) at::set_num_threads(o.threads);
  auto comm = zero::make_mpi_communicator();
  if (o.mode == "swapper") {
    swapper(o);
  } else if (o.mode == "optimizer") {
    optimizer(o);
  } else if (o.mode == "step") {
    step(o, *comm);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", o.mode.c_str());
    return 1;
  }
  return 0;
}
