// NVMe offload (Note [NVMe offload], src/offload/swap_file.h), run under mpirun at 1-3 ranks:
// optimizer state in swap files trains bit for bit as in memory at stages 1-3, in every
// pipelining and buffer setting; swap directories are made, removed and swept; a swap file
// changed under the run is an error on every rank, also when only its bytes changed (Note [Swap
// record checksums]: an overwrite that restores the modification time); a bad nvme_path is an
// error on every rank.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine_harness.h"
#include "offload/async_io.h"
#include "offload/swap_directory.h"
#include "offload/swap_file.h"
#include "state/param_store.h"
#include "test_util.h"
#include "zero/error.h"
#include "zero/gathered_parameters.h"
#include "zero/memory.h"

namespace zero::test {
namespace {

namespace fs = std::filesystem;

// The zero_optimization keys that put the optimizer state on NVMe under `dir`, in tiles of
// `tile` elements (several tiles even for the tiny models).
std::string nvme_optimizer_json(const std::string& dir, int64_t tile, int buffers = 4,
                                bool pipeline = true) {
  const std::string flag = pipeline ? "true" : "false";
  return "\"sub_group_size\": " + std::to_string(tile) +
         ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" + dir +
         "\", \"buffer_count\": " + std::to_string(buffers) + ", \"pipeline_read\": " + flag +
         ", \"pipeline_write\": " + flag + "}";
}

// The offload_param keys that put every unit's parameter shard on NVMe under `dir` (but
// `max_in_cpu` elements), read through `buffers` slots.
std::string nvme_param_json(const std::string& dir, int buffers = 5, int64_t max_in_cpu = 0) {
  return "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" + dir +
         "\", \"buffer_count\": " + std::to_string(buffers) +
         ", \"max_in_cpu\": " + std::to_string(max_in_cpu) + "}";
}

// The swap files under `dir`: every rank's, or those of rank `rank` only.
std::vector<fs::path> swap_files_under(const std::string& dir, int rank = -1) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".swp") continue;
    if (rank >= 0 && entry.path().parent_path().filename() != "rank" + std::to_string(rank)) {
      continue;
    }
    files.push_back(entry.path());
  }
  return files;
}

// Writes `text` at `offset` of `path` through the page cache and puts back the modification
// time the file had: what a disk's silent corruption or a careful intruder leaves, which the
// seal (inode, size, time) cannot see.
void overwrite_keeping_time(const fs::path& path, int64_t offset, const std::string& text) {
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

// The equivalence of the issue: gpt2-tiny at stages 1-3, fp32 and bf16 parameters (bf16: the
// master weights are on NVMe too), offload none vs nvme: the same bits.
TEST(NvmeOffload, OptimizerStateOnNvmeChangesNoBit) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-equivalence");
  const ModelSpec spec = tiny_gpt2_spec();
  for (int stage : {1, 2, 3}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " " + dtype);
      RunOptions options;
      options.stage = stage;
      options.dtype = dtype;
      options.steps = 3;
      options.gradient_clipping = 0.5;
      const std::string base = stage == 3 ? "\"stage3_param_persistence_threshold\": 0, " : "";
      options.extra_zero_json = base + "\"sub_group_size\": 1000";
      const RunResult plain = run_engine(spec, options, comm);
      options.extra_zero_json = base + nvme_optimizer_json(dir, 1000);
      const RunResult offloaded = run_engine(spec, options, comm);
      EXPECT_EQ(plain.losses, offloaded.losses);
      EXPECT_TRUE(at::equal(plain.parameters, offloaded.parameters));
      // The same categories and bytes; the fp32 parts are on NVMe, staged in 4 tiles.
      const ModelStateBytes& bytes = offloaded.state_bytes;
      EXPECT_EQ(bytes.total(), plain.state_bytes.total());
      EXPECT_EQ(bytes.on_nvme, bytes.master_params + bytes.optimizer_state);
      EXPECT_GT(bytes.on_nvme, 0);
      EXPECT_EQ(plain.state_bytes.on_nvme, 0);
      EXPECT_EQ(bytes.staging, 4 * (std::string(dtype) == "fp32" ? 2 : 3) * 4096);
    }
  }
  // Engines gone (on every rank): their swap files and directories too.
  comm->barrier()->wait();
  EXPECT_TRUE(swap_files_under(dir).empty());
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

// Every pipelining choice and buffer count steps the same bits: tiles of 7 elements (hundreds
// of tiles), 1-5 buffers, reads and writes pipelined or not, aio in small blocks on 2 threads.
TEST(NvmeOffload, PipeliningAndBuffersChangeNoBit) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-pipeline");
  RunOptions options;
  options.stage = 2;
  options.dtype = "bf16";
  options.steps = 2;
  options.extra_zero_json = "\"sub_group_size\": 7";
  const RunResult plain = run_engine(mlp_spec(), options, comm);
  for (int buffers : {1, 2, 3, 5}) {
    for (bool pipeline : {true, false}) {
      SCOPED_TRACE(std::to_string(buffers) + " buffers, pipeline " + std::to_string(pipeline));
      options.extra_zero_json = nvme_optimizer_json(dir, 7, buffers, pipeline);
      options.extra_top_json = "\"aio\": {\"block_size\": 4096, \"queue_depth\": 2, "
                               "\"intra_op_parallelism\": 2, \"single_submit\": " +
                               std::string(pipeline ? "true" : "false") +
                               ", \"overlap_events\": " + (pipeline ? "false" : "true") + "}";
      const RunResult offloaded = run_engine(mlp_spec(), options, comm);
      EXPECT_EQ(plain.losses, offloaded.losses);
      EXPECT_TRUE(at::equal(plain.parameters, offloaded.parameters));
    }
  }
}

// Note [NVMe offload]: a swap file truncated, or written by something else, between steps is
// an error naming the file, on every rank (here it happens on the last rank only).
TEST(NvmeOffload, SwapFileChangedUnderTheRunIsAnErrorOnEveryRank) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-tamper");
  for (const std::string tamper : {"truncate", "write", "overwrite keeping the time"}) {
    SCOPED_TRACE(tamper);
    RunOptions options;
    options.stage = 1;
    options.extra_zero_json = nvme_optimizer_json(dir, 64);
    auto model = mlp_spec().build();
    auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"),
                             comm);
    const ModelSpec spec = mlp_spec();
    auto step = [&](int s) {
      auto [x, y] = spec.batch(s, 2);
      engine->backward(spec.loss(*model, x, y));
      engine->step();
    };
    step(0);
    std::string victim;
    if (comm->rank() == comm->size() - 1) {
      const std::vector<fs::path> files = swap_files_under(dir, comm->rank());
      EXPECT_EQ(files.size(), 1u);  // not ASSERT: the other ranks go on to the step
      victim = files.at(0).string();
      if (tamper == "truncate") {
        fs::resize_file(files[0], 4096);
      } else if (tamper == "write") {
        std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(8);
        f.write("tamper", 6);
      } else {
        overwrite_keeping_time(files[0], 8, "tamper");
      }
    }
    comm->barrier()->wait();
    try {
      step(1);
      ADD_FAILURE() << "a step read a swap file changed under the run";
    } catch (const Error& error) {
      const std::string message = error.what();
      if (!victim.empty()) {
        EXPECT_NE(message.find(victim), std::string::npos) << message;
        const char* expected = tamper == "truncate" ? "truncated"
                               : tamper == "write"  ? "written by"
                                                    : "the record of optimizer tile 0 (elements [0, 64)";
        EXPECT_NE(message.find(expected), std::string::npos) << message;
        if (tamper == "overwrite keeping the time") {
          EXPECT_NE(message.find("CRC-32C"), std::string::npos) << message;
          EXPECT_NE(message.find("at offset 0"), std::string::npos) << message;
        }
      }
    }
  }
}

// nvme_path that does not exist, is a file, or cannot be written: every rank throws at
// initialize, naming the key and the path.
TEST(NvmeOffload, BadNvmePathIsAnErrorOnEveryRank) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-bad-path");
  const std::string file = dir + "/a-file";
  if (comm->rank() == 0) std::ofstream(file) << "x";
  comm->barrier()->wait();
  std::vector<std::pair<std::string, std::string>> cases = {
      {dir + "/missing", "does not exist"}, {file, "is not a directory"}};
  if (::geteuid() != 0) {  // root writes anywhere
    const std::string locked = dir + "/locked";
    if (comm->rank() == 0) {
      fs::create_directory(locked);
      fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    }
    comm->barrier()->wait();
    cases.emplace_back(locked, "is not writable");
  }
  for (const auto& [path, expected] : cases) {
    SCOPED_TRACE(path);
    RunOptions options;
    options.stage = 2;
    options.extra_zero_json = nvme_optimizer_json(path, 64);
    try {
      initialize(mlp_spec().build(), parse_config(make_config_json(options), comm->size(), "t"),
                 comm);
      ADD_FAILURE() << "initialize accepted nvme_path " << path;
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("offload_optimizer.nvme_path"), std::string::npos) << message;
      EXPECT_NE(message.find(expected), std::string::npos) << message;
    }
  }
}

// Note [Stale swap directories]: a job with a rank directory of a process of this host that no
// longer runs is removed at start-up, its live ranks' directories too; a job whose processes
// all run, one of another host, or a directory without an owner stays.
TEST(NvmeOffload, StaleSwapDirectoriesOfKilledRunsAreRemovedAtStart) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-stale");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  auto make = [&](const std::string& name, const std::string& owner, const char* rank = "rank0") {
    const fs::path rank_dir = fs::path(dir) / name / rank;
    fs::create_directories(rank_dir);
    if (!owner.empty()) std::ofstream(rank_dir / "owner") << owner << "\n";
    std::ofstream(rank_dir / "optimizer.swp") << std::string(8192, 'x');
  };
  if (comm->rank() == 0) {
    // pid 4194303 is the largest Linux allows; whatever runs there did not start at tick 1.
    make("zero-dead", std::string(host) + " 4194303 1");
    make("zero-live", swap_owner_text());
    make("zero-elsewhere", "some-other-host 4194303 1");
    make("zero-unowned", "");
    // A killed rank's job whose other rank still exits: both go.
    make("zero-half-dead", std::string(host) + " 4194303 1", "rank0");
    make("zero-half-dead", swap_owner_text(), "rank1");
  }
  comm->barrier()->wait();
  RunOptions options;
  options.stage = 1;
  options.extra_zero_json = nvme_optimizer_json(dir, 64);
  {
    auto engine = initialize(mlp_spec().build(),
                             parse_config(make_config_json(options), comm->size(), "t"), comm);
    comm->barrier()->wait();
    EXPECT_FALSE(fs::exists(fs::path(dir) / "zero-dead"));
    EXPECT_FALSE(fs::exists(fs::path(dir) / "zero-half-dead"));
    for (const char* kept : {"zero-live", "zero-elsewhere", "zero-unowned"}) {
      EXPECT_TRUE(fs::exists(fs::path(dir) / kept / "rank0" / "optimizer.swp")) << kept;
    }
    // This run's own directory, one per rank, with its owner.
    int own = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      for (const auto& rank : fs::directory_iterator(entry.path())) {
        std::ifstream in(rank.path() / "owner");
        std::string owner_host;
        in >> owner_host;
        if (owner_host == host && fs::exists(rank.path() / "optimizer.swp") &&
            entry.path().filename() != "zero-live" && entry.path().filename() != "zero-dead") {
          ++own;
        }
      }
    }
    EXPECT_EQ(own, comm->size()) << [&] {
      std::string tree;
      for (const auto& e : fs::recursive_directory_iterator(dir)) tree += e.path().string() + "\n";
      return tree;
    }();
    comm->barrier()->wait();  // every rank has looked before any engine (and its files) goes
  }
  comm->barrier()->wait();
}

// Note [NVMe offload]: the blocks of a swap file are reserved when it is made, so a disk that
// cannot hold it is an error then, naming the file and the bytes (here a file-size limit plays
// the full disk; single process, no MPI collective involved).
TEST(NvmeOffload, SwapFileThatDoesNotFitIsAnErrorAtCreation) {
  if (world()->rank() != 0) return;
  const std::string dir = testing::TempDir() + "/zero-offload-full-" + std::to_string(::getpid());
  fs::create_directories(dir);
  AsyncIo io(AioConfig{});
  struct rlimit old_limit {};
  ::getrlimit(RLIMIT_FSIZE, &old_limit);
  struct rlimit small = old_limit;
  small.rlim_cur = 1 << 20;
  std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    SwapFile file(dir + "/big.swp", 64 << 20, io);
  } catch (const Error& error) {
    message = error.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  EXPECT_NE(message.find("cannot reserve 67108864 bytes for swap file '" + dir + "/big.swp'"),
            std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir + "/big.swp"));
  // One that fits round-trips its bytes, through io_uring and through the blocking fallback
  // (Note [Asynchronous file I/O]); a read past a truncation is an error naming the file.
  AioConfig small_blocks;
  small_blocks.block_size = kSwapAlignment;
  for (AsyncIo::Engine engine : {AsyncIo::Engine::kAuto, AsyncIo::Engine::kBlocking}) {
    AsyncIo engine_io(small_blocks, engine);
    if (engine == AsyncIo::Engine::kBlocking) {
      EXPECT_FALSE(engine_io.uses_io_uring());
    }
    const std::string path = dir + "/small.swp";
    {
      SwapFile file(path, 3 * kSwapAlignment, engine_io);
      AlignedBuffer out(3 * kSwapAlignment), in(3 * kSwapAlignment);
      for (int64_t i = 0; i < out.bytes(); ++i) out.data()[i] = static_cast<char>(i * 7);
      AsyncIo::wait(file.write(out.data(), out.bytes(), 0));
      file.seal();
      file.check_unchanged();
      AsyncIo::wait(file.read(in.data(), in.bytes(), 0, "record A"));
      EXPECT_EQ(std::memcmp(in.data(), out.data(), static_cast<size_t>(in.bytes())), 0);
      fs::resize_file(path, kSwapAlignment);
      std::string error;
      try {
        AsyncIo::wait(file.read(in.data(), in.bytes(), 0, "record A"));
      } catch (const Error& e) {
        error = e.what();
      }
      EXPECT_NE(error.find("reading 12288 bytes at offset 0 of '" + path + "'"),
                std::string::npos) << error;
      EXPECT_NE(error.find("truncated"), std::string::npos) << error;
    }
    EXPECT_FALSE(fs::exists(path));
  }
  fs::remove_all(dir);
}

// Note [Swap record checksums]: a record whose bytes changed while the file's size and time
// stayed is a read error naming the file, the record, the offset and both checksums, through
// io_uring and through the blocking fallback, for a written record and for one never written
// (zeros); the records beside it still read back.
TEST(NvmeOffload, SwapRecordWhoseBytesChangedFailsItsChecksum) {
  if (world()->rank() != 0) return;  // single process: no collective
  const std::string dir = testing::TempDir() + "/zero-swap-checksum-" + std::to_string(::getpid());
  fs::create_directories(dir);
  AioConfig small_blocks;
  small_blocks.block_size = kSwapAlignment;  // a record in several requests, on several threads
  small_blocks.intra_op_parallelism = 2;
  for (AsyncIo::Engine engine : {AsyncIo::Engine::kAuto, AsyncIo::Engine::kBlocking}) {
    AsyncIo io(small_blocks, engine);
    const std::string path = dir + "/records.swp";
    SwapFile file(path, 6 * kSwapAlignment, io);
    const int64_t record = 2 * kSwapAlignment;
    AlignedBuffer out(record), in(record);
    for (int64_t i = 0; i < record; ++i) out.data()[i] = static_cast<char>(i * 13 + 1);
    AsyncIo::wait(file.write(out.data(), record, 0));  // record 0; records 1, 2 never written
    file.seal();
    auto read_error = [&](int64_t offset) {
      file.check_unchanged();  // the seal sees nothing
      try {
        AsyncIo::wait(file.read(in.data(), record, offset, "test record at " + std::to_string(offset)));
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    EXPECT_EQ(read_error(0), "");
    EXPECT_EQ(read_error(record), "");  // never written: zeros
    EXPECT_EQ(in.data()[100], 0);
    overwrite_keeping_time(path, 5000, "x");  // inside record 0, in its second block
    std::string error = read_error(0);
    EXPECT_NE(error.find("reading 8192 bytes at offset 0 of '" + path + "'"), std::string::npos) << error;
    EXPECT_NE(error.find("test record at 0 does not hold what this run wrote there (CRC-32C 0x"),
              std::string::npos) << error;
    EXPECT_NE(error.find("last checkpoint"), std::string::npos) << error;
    overwrite_keeping_time(path, 2 * record + 7, "y");  // inside record 2, never written
    error = read_error(2 * record);
    EXPECT_NE(error.find("expected of a record never written (zeros)"), std::string::npos) << error;
    EXPECT_EQ(read_error(record), "");  // the record between them is intact
    // Written again, the record reads back again.
    AsyncIo::wait(file.write(out.data(), record, 0));
    file.seal();
    EXPECT_EQ(read_error(0), "");
    EXPECT_EQ(std::memcmp(in.data(), out.data(), static_cast<size_t>(record)), 0);
  }
  fs::remove_all(dir);
}

// The start-up estimate (zero::check_state_fits): the ZeRO formulas per category, with the
// offloaded ones on NVMe; a model that cannot fit this machine's memory is refused on every rank
// with the bytes needed and available, and the same model fits with its optimizer state on NVMe.
TEST(NvmeOffload, StartUpEstimateRefusesWhatDoesNotFit) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-estimate");
  const int n = comm->size();
  auto config_for = [&](const std::string& zero_json) {
    RunOptions options;
    options.stage = 3;
    options.extra_zero_json = zero_json;
    return parse_config(make_config_json(options), n, "estimate.json");
  };
  const Config in_memory = config_for("\"sub_group_size\": 1000000");
  const Config offloaded = config_for(nvme_optimizer_json(dir, 1000000));
  // fp32 stage 3: 4 + 4 + 8 bytes per parameter over n ranks; offloaded, the 8 of Adam's
  // moments go to NVMe (records of 2 x 4 MB) and 4 staging records stay in memory.
  const int64_t psi = int64_t{3} << 30;
  const int64_t shard = (psi + n - 1) / n;
  const StateEstimate plain = estimate_state(in_memory, psi);
  EXPECT_EQ(plain.in_memory, 16 * shard);
  EXPECT_EQ(plain.on_nvme, 0);
  const StateEstimate nvme = estimate_state(offloaded, psi);
  const int64_t record = 2 * align_up(1000000 * 4);
  EXPECT_EQ(nvme.on_nvme, (shard + 999999) / 1000000 * record);
  EXPECT_EQ(nvme.staging, 4 * record);
  EXPECT_EQ(nvme.in_memory, 8 * shard + 4 * record);
  // A model whose state needs 16 TB: refused on every rank, naming the bytes.
  try {
    check_state_fits(in_memory, int64_t{1} << 40, *comm);
    ADD_FAILURE() << "a 16 TB model state was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("estimate.json: model state per rank"), std::string::npos) << message;
    EXPECT_NE(message.find("is available (MemAvailable)"), std::string::npos) << message;
    EXPECT_NE(message.find("offload_optimizer.device \"nvme\""), std::string::npos) << message;
  }
  // With the parameter shards on NVMe too (stage 3): their 4 bytes per parameter go to disk,
  // and five slots of at most buffer_size elements stay, with the step's bounce tile of
  // sub_group_size elements.
  const Config params_too = config_for(nvme_optimizer_json(dir, 1000000) + ", " +
                                       "\"offload_param\": {\"device\": \"nvme\", "
                                       "\"nvme_path\": \"" + dir + "\", \"buffer_size\": 1e6}");
  const StateEstimate both = estimate_state(params_too, psi);
  EXPECT_EQ(both.params_on_nvme, 4 * shard);
  EXPECT_EQ(both.on_nvme, nvme.on_nvme + 4 * shard);
  EXPECT_EQ(both.staging, nvme.staging + 5 * align_up(4000000) + 4 * 1000000);
  EXPECT_EQ(both.in_memory, 4 * shard + 4 * record + 5 * align_up(4000000) + 4 * 1000000);
  // A small one fits either way, and the account says where it lives.
  EXPECT_NE(check_state_fits(offloaded, 1000000, *comm).find("on NVMe"), std::string::npos);
  EXPECT_EQ(check_state_fits(in_memory, 1000000, *comm).find("on NVMe"), std::string::npos);
}

// Whether elements [begin, begin + n) include any of a swapped segment's.
bool touches_swapped(const std::vector<ParamStore::Segment>& segments, int64_t begin, int64_t n) {
  for (const ParamStore::Segment& segment : segments) {
    if (segment.swapped && segment.numel > 0 && segment.offset < begin + n &&
        begin < segment.offset + segment.numel) {
      return true;
    }
  }
  return false;
}

// Note [Parameter offload], the store alone (each rank its own): segments in memory and
// swapped, written whole and in part, read back at random, passed over in tiles that cut
// across segments (reading and writing, writing only), leased with and without reading ahead,
// with 2 and 4 slots: every value is the one an in-memory copy holds. A file truncated under
// it fails the lease's read, naming the file.
TEST(ParamStore, KeepsEveryValueThroughSlotsPassesAndLeases) {
  auto comm = world();
  const std::string dir = shared_temp_dir("param-store");
  SwapDirectory directory(dir, "nvme_path", *comm);
  AsyncIo io(AioConfig{});
  const std::vector<int64_t> sizes = {100, 3000, 0, 1, 4097, 2500, 64};
  const std::vector<bool> in_memory = {true, false, false, true, false, false, false};
  for (const auto& [buffers, dtype_of_case] :
       {std::pair{2, at::kBFloat16}, {4, at::kBFloat16}, {2, at::kFloat}}) {
    const at::ScalarType dtype = dtype_of_case;  // lambdas below capture it (clang 14: no bindings)
    SCOPED_TRACE(std::to_string(buffers) + " slots, " + std::string(c10::toString(dtype)));
    OffloadConfig offload;
    offload.device = OffloadDevice::kNvme;
    offload.buffer_count = buffers;
    std::vector<ParamStore::Segment> segments = param_segments(sizes, in_memory, 0);
    const std::string name = "params" + std::to_string(buffers) + c10::toString(dtype);
    const int64_t size = static_cast<int64_t>(c10::elementSize(dtype));
    ParamStore store(dtype, segments, offload, io, directory, name);
    ASSERT_TRUE(store.offloaded());
    const int64_t numel = store.numel();
    EXPECT_EQ(store.swapped_bytes(), (numel - 101) * size);
    EXPECT_EQ(store.staging_bytes(), buffers * align_up(4097 * size));
    at::Tensor expected = at::randn({numel}).to(dtype);
    store.write(0, expected);
    auto all = [&] {
      at::Tensor out = at::empty({numel}, dtype);
      store.read(0, out);
      return out;
    };
    EXPECT_TRUE(at::equal(all(), expected));
    // A write inside one segment, and one across three.
    for (auto [offset, n] : {std::pair<int64_t, int64_t>{150, 10}, {3050, 1200}}) {
      at::Tensor values = at::randn({n}).to(dtype);
      store.write(offset, values);
      expected.narrow(0, offset, n).copy_(values);
    }
    for (int64_t offset : std::vector<int64_t>{0, 99, 3100, 3101, 7000, numel - 64}) {
      at::Tensor out = at::empty({std::min<int64_t>(500, numel - offset)}, dtype);
      store.read(offset, out);
      EXPECT_TRUE(at::equal(out, expected.narrow(0, offset, out.numel()))) << offset;
    }
    // Passes: reading and writing (the fp32-master step), writing only (rounding the master),
    // each starting with slots holding what leases left there (as after a backward).
    // The tiles that touch a swapped segment are copies in the store's one bounce buffer, the
    // others views of the resident shards; the buffer stays at the largest tile so far, which
    // staging_bytes reports (the memory plan counts largest_bounced_tile). Tiles in no order.
    const int64_t slot_bytes = buffers * align_up(4097 * size);
    int64_t largest_bounced = 0;
    for (int64_t tile : std::vector<int64_t>{1000, 7, numel, 5000}) {
      SCOPED_TRACE("tile " + std::to_string(tile));
      for (int s : {6, 4, 5}) store.release(store.lease(s));
      ParamStore::Pass pass = store.pass(/*read=*/true, /*write=*/true);
      std::set<const void*> bounced_storage, viewed_storage;
      for (int64_t begin = 0; begin < numel; begin += tile) {
        const int64_t n = std::min(tile, numel - begin);
        at::Tensor t = pass.tile(begin, n);
        ASSERT_TRUE(at::equal(t, expected.narrow(0, begin, n))) << begin;
        (touches_swapped(segments, begin, n) ? bounced_storage : viewed_storage)
            .insert(t.storage().data());
        t.add_(1);
      }
      EXPECT_EQ(bounced_storage.size(), 1u);
      for (const void* storage : viewed_storage) EXPECT_EQ(bounced_storage.count(storage), 0u);
      largest_bounced = std::max(largest_bounced, largest_bounced_tile(segments, numel, tile));
      EXPECT_EQ(store.staging_bytes(), slot_bytes + largest_bounced * size);
      pass.finish();
      expected.add_(1);
      EXPECT_TRUE(at::equal(all(), expected));
      ParamStore::Pass writing = store.pass(/*read=*/false, /*write=*/true);
      const at::Tensor fresh = at::randn({numel}).to(dtype);
      for (int64_t begin = 0; begin < numel; begin += tile) {
        const int64_t n = std::min(tile, numel - begin);
        writing.tile(begin, n).copy_(fresh.narrow(0, begin, n));
      }
      writing.finish();
      expected.copy_(fresh);
      EXPECT_TRUE(at::equal(all(), expected));
    }
    // Leases in trace order, reading ahead the next ones as the engine does.
    const std::vector<int> trace = {1, 2, 4, 5, 6, 0, 6, 5, 4, 1, 3};
    for (size_t i = 0; i < trace.size(); ++i) {
      const int s = trace[i];
      ASSERT_TRUE(store.can_lease(s));
      ParamStore::Lease lease = store.lease(s);
      store.read_ahead(std::vector<int>(trace.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                        trace.end()));
      AsyncIo::wait(lease.ready);
      EXPECT_TRUE(at::equal(lease.shard, expected.narrow(0, segments[s].offset, segments[s].numel)))
          << "segment " << s;
      store.release(lease);
    }
    // A truncated file: the read of a segment not in a slot (of 2) fails when waited for.
    if (buffers != 2) continue;
    fs::resize_file(directory.file(name + ".swp"), 4096);
    std::string error;
    for (int s : {1, 4, 5, 6}) {  // one of them is not in a slot
      ParamStore::Lease lease = store.lease(s);
      try {
        AsyncIo::wait(lease.ready);
      } catch (const Error& e) {
        error = e.what();
      }
      store.release(lease);
    }
    EXPECT_NE(error.find("truncated"), std::string::npos) << error;
    // A failed read is not kept: once the file is whole again (every segment written), each
    // lease reads its segment anew and finds the values.
    store.write(0, expected);
    for (int s : {1, 4, 5, 6}) {
      ParamStore::Lease lease = store.lease(s);
      AsyncIo::wait(lease.ready);
      EXPECT_TRUE(at::equal(lease.shard, expected.narrow(0, segments[s].offset, segments[s].numel)))
          << "segment " << s;
      store.release(lease);
    }
  }
}

// largest_bounced_tile against a tile-by-tile count, on layouts where the swapped segments lie
// in whole tiles, only in the last (short) tile, nowhere, or are empty.
TEST(ParamStore, LargestBouncedTileIsTheLargestTileTouchingASwappedSegment) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<bool>>> layouts = {
      {{100, 3000, 0, 1, 4097}, {true, false, false, true, false}},
      {{5000, 10}, {true, false}},  // swapped only at the end
      {{5000, 10}, {true, true}},  // nothing swapped
      {{1, 1, 1}, {false, false, false}}};
  std::vector<std::vector<ParamStore::Segment>> cases;
  for (const auto& [sizes, resident] : layouts) cases.push_back(param_segments(sizes, resident, 0));
  // An empty swapped segment between resident ones (param_segments keeps empty ones in
  // memory; Pass::tile passes over them either way).
  cases.push_back({{0, 5000, false}, {5000, 0, true}, {5000, 10, false}});
  for (const std::vector<ParamStore::Segment>& segments : cases) {
    const int64_t numel = segments.back().offset + segments.back().numel;
    for (int64_t tile : std::vector<int64_t>{1, 3, 7, 1000, 4999, 5000, 5001, numel, numel * 2}) {
      int64_t expected = 0;
      for (int64_t begin = 0; begin < numel; begin += tile) {
        const int64_t n = std::min(tile, numel - begin);
        if (touches_swapped(segments, begin, n)) expected = std::max(expected, n);
      }
      EXPECT_EQ(largest_bounced_tile(segments, numel, tile), expected)
          << "tile " << tile << " over " << numel;
    }
  }
}

// Note [Parameter offload]: stage 3 with the parameter shards on NVMe, alone and beside the
// optimizer state, fp32 and bf16 parameters, 2 to 5 slots, every unit or some of them
// (max_in_cpu) on disk, with and without persistent parameters: the same bits as in memory.
// Tiles of 1000 elements cut across unit shards; from the second step the trace reads ahead.
TEST(NvmeOffload, ParametersOnNvmeChangeNoBit) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-params");
  const ModelSpec spec = tiny_gpt2_spec();
  struct Variant {
    bool optimizer;
    int buffers;
    int64_t max_in_cpu;
    int64_t persistence;
  };
  for (const char* dtype : {"fp32", "bf16"}) {
    for (const Variant& v : {Variant{false, 2, 0, 0}, Variant{true, 5, 0, 100},
                             Variant{true, 3, 3000, 0}}) {
      SCOPED_TRACE(std::string(dtype) + (v.optimizer ? " with optimizer" : "") + ", " +
                   std::to_string(v.buffers) + " buffers, max_in_cpu " +
                   std::to_string(v.max_in_cpu) + ", persistence " +
                   std::to_string(v.persistence));
      RunOptions options;
      options.stage = 3;
      options.dtype = dtype;
      options.steps = 3;
      options.gradient_clipping = 0.5;
      const std::string base =
          "\"stage3_param_persistence_threshold\": " + std::to_string(v.persistence) + ", ";
      options.extra_zero_json = base + "\"sub_group_size\": 1000";
      const RunResult plain = run_engine(spec, options, comm);
      options.extra_zero_json = base + (v.optimizer ? nvme_optimizer_json(dir, 1000)
                                                    : std::string("\"sub_group_size\": 1000")) +
                                ", " + nvme_param_json(dir, v.buffers, v.max_in_cpu);
      const RunResult offloaded = run_engine(spec, options, comm);
      EXPECT_EQ(plain.losses, offloaded.losses);
      EXPECT_TRUE(at::equal(plain.parameters, offloaded.parameters));
      const ModelStateBytes& bytes = offloaded.state_bytes;
      EXPECT_EQ(bytes.total(), plain.state_bytes.total());
      const int64_t optimizer_on_nvme =
          v.optimizer ? bytes.master_params + bytes.optimizer_state : 0;
      const int64_t params_on_nvme = bytes.on_nvme - optimizer_on_nvme;
      // Every unit's shard on NVMe (the persistent parameters, those outside every unit
      // included, stay), less max_in_cpu elements.
      EXPECT_GT(params_on_nvme, 0);
      EXPECT_LT(params_on_nvme, bytes.params);
      if (v.max_in_cpu > 0) {
        options.extra_zero_json = base + nvme_optimizer_json(dir, 1000) + ", " +
                                  nvme_param_json(dir, v.buffers, 0);
        const RunResult none_kept = run_engine(spec, options, comm);
        EXPECT_LT(params_on_nvme, none_kept.state_bytes.on_nvme - optimizer_on_nvme);
        EXPECT_EQ(plain.losses, none_kept.losses);
      }
      EXPECT_GT(bytes.staging, 0);
    }
  }
  comm->barrier()->wait();
  EXPECT_TRUE(swap_files_under(dir).empty());
}

// Gathers issued ahead and never used hold parameter slots (Note [Parameter offload]): a
// forward with autograd on and no backward (a validation loss computed with gradients enabled)
// ends by prefetching backward's first units. A checkpoint save, a GatheredParameters
// modifier and the next steps then need every slot of the two: they are given back first
// (Stage3Engine::quiesce), and training goes on bit for bit as in memory.
TEST(NvmeOffload, GathersLeftInFlightGiveBackTheirSlots) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-in-flight");
  const ModelSpec spec = tiny_gpt2_spec();
  std::vector<std::vector<double>> losses;
  std::vector<at::Tensor> parameters;
  for (bool offloaded : {false, true}) {
    SCOPED_TRACE(offloaded ? "parameters on NVMe" : "in memory");
    RunOptions options;
    options.stage = 3;
    // Units released after each use (reuse distance 0), so backward gathers them again and
    // the last forward fetch prefetches them; prefetch unbounded.
    options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0, "
                              "\"stage3_max_reuse_distance\": 0, "
                              "\"stage3_prefetch_bucket_size\": 1000000000";
    if (offloaded) options.extra_zero_json += ", " + nvme_param_json(dir, 2);
    auto model = spec.build();
    auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"),
                             comm);
    std::vector<double> seen;
    auto step = [&](int s) {
      auto [x, y] = spec.batch(s, 2);
      at::Tensor loss = spec.loss(*model, x, y);
      seen.push_back(loss.item<double>());
      engine->backward(loss);
      engine->step();
    };
    auto forward_only = [&](int s) {
      auto [x, y] = spec.batch(s, 2);
      seen.push_back(spec.loss(*model, x, y).item<double>());
    };
    step(0);
    step(1);
    forward_only(2);
    engine->save_checkpoint(dir + "/checkpoints", offloaded ? "offloaded" : "in-memory");
    forward_only(3);
    {
      std::vector<at::Tensor> all = model->parameters();
      GatheredParameters whole(*engine, {all.front(), all.back()}, /*modifier_rank=*/0);
      if (comm->rank() == 0) {
        at::NoGradGuard no_grad;
        all.front().mul_(0.5);
      }
    }
    forward_only(4);
    step(5);
    step(6);
    losses.push_back(seen);
    {
      GatheredParameters whole(*engine, model->parameters());
      parameters.push_back(flatten_parameters(*model));
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(at::equal(parameters[0], parameters[1]));
}

// A parameter swap file truncated between steps: the next forward's read fails on that rank,
// and every rank throws (they agree before the all-gather, so none waits in it forever).
TEST(NvmeOffload, ParameterSwapFileChangedUnderTheRunIsAnErrorOnEveryRank) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-param-tamper");
  // Truncated (the seal sees it), or zeroed with its modification time put back (only the
  // records' checksums see it: Note [Swap record checksums]).
  for (const std::string tamper : {"truncate", "zero keeping the time"}) {
    SCOPED_TRACE(tamper);
    RunOptions options;
    options.stage = 3;
    options.extra_zero_json =
        "\"stage3_param_persistence_threshold\": 0, " + nvme_param_json(dir, 2);
    const ModelSpec spec = tiny_gpt2_spec();
    auto model = spec.build();
    auto engine = initialize(model, parse_config(make_config_json(options), comm->size(), "t"),
                             comm);
    auto step = [&](int s) {
      auto [x, y] = spec.batch(s, 2);
      engine->backward(spec.loss(*model, x, y));
      engine->step();
    };
    step(0);
    std::string victim;
    if (comm->rank() == comm->size() - 1) {
      const std::vector<fs::path> files = swap_files_under(dir, comm->rank());
      EXPECT_EQ(files.size(), 1u);
      victim = files.at(0).string();
      if (tamper == "truncate") {
        fs::resize_file(files[0], 4096);
      } else {
        overwrite_keeping_time(files[0], 0, std::string(fs::file_size(files[0]), '\0'));
      }
    }
    comm->barrier()->wait();
    try {
      step(1);
      ADD_FAILURE() << "a forward read a parameter swap file changed under the run";
    } catch (const Error& error) {
      const std::string message = error.what();
      if (victim.empty()) {
        EXPECT_NE(message.find("reading the parameter shard of unit '"), std::string::npos)
            << message;
        EXPECT_NE(message.find("failed on rank " + std::to_string(comm->size() - 1)),
                  std::string::npos) << message;
      } else {
        EXPECT_NE(message.find(victim), std::string::npos) << message;
        EXPECT_NE(message.find(tamper == "truncate" ? "truncated" : "the record of parameter segment "),
                  std::string::npos) << message;
      }
    }
    comm->barrier()->wait();
  }
}

// A unit's shard larger than offload_param.buffer_size is refused at initialize, naming the
// unit and the size it needs.
TEST(NvmeOffload, UnitShardLargerThanBufferSizeIsAnError) {
  auto comm = world();
  const std::string dir = shared_temp_dir("offload-param-buffer");
  RunOptions options;
  options.stage = 3;
  options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0, \"offload_param\": "
                            "{\"device\": \"nvme\", \"nvme_path\": \"" + dir +
                            "\", \"buffer_size\": 10}";
  try {
    initialize(tiny_gpt2_spec().build(),
               parse_config(make_config_json(options), comm->size(), "t.json"), comm);
    ADD_FAILURE() << "a 10-element buffer_size was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("t.json: zero_optimization.offload_param.buffer_size = 10 elements "
                           "is smaller than this rank's shard of unit '"),
              std::string::npos) << message;
  }
}

}  // namespace
}  // namespace zero::test
