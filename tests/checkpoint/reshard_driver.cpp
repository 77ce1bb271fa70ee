// One training job of the reshard matrix (tests/checkpoint/check_reshard.sh), run under mpirun
// at 1, 2 or 4 ranks: the harness's tiny GPT-2 in fp32 with AdamW, clipping and a warmup
// schedule, on a global batch of 4 samples per step that is the same at every world size
// (micro-batch 4 / world, no accumulation), so runs at different world sizes and stages train
// alike up to the summation order.
//
//   reshard_driver straight --stage S --steps N --out LOSSES [--save-at K --dir D]
//   reshard_driver save     --stage S --steps K --dir D
//   reshard_driver resume   --stage T --steps N --dir D --out LOSSES
//
// straight trains steps 0..N-1 (and, with --save-at, saves to D after step K-1); save trains
// steps 0..K-1 and saves; resume loads D's latest checkpoint, saved at any world size and
// stage, and trains the remaining steps up to N-1. LOSSES gets one line per trained step,
// "STEP LOSS" with the loss (the global batch's mean) at full precision. Exit status 2 for a
// bad command line, 1 for any failure.
#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine_harness.h"
#include "zero/comm_mpi.h"
#include "zero/error.h"

namespace {

using zero::test::ModelSpec;
using zero::test::RunOptions;

constexpr int64_t kGlobalBatch = 4;

struct Args {
  std::string mode;
  int stage = -1;
  int steps = -1;
  int save_at = -1;
  std::string dir;
  std::string out;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "reshard_driver: %s\nusage: reshard_driver straight|save|resume --stage S "
               "--steps N [--out LOSSES] [--dir D] [--save-at K]\n",
               problem.c_str());
  std::exit(2);
}

int parse_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 0) {
    usage(flag + " expects a non-negative integer, got '" + text + "'");
  }
  return static_cast<int>(value);
}

Args parse(int argc, char** argv) {
  if (argc < 2) usage("no mode given");
  Args a;
  a.mode = argv[1];
  if (a.mode != "straight" && a.mode != "save" && a.mode != "resume") {
    usage("unknown mode '" + a.mode + "'");
  }
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--stage") {
      a.stage = parse_int(flag, value);
    } else if (flag == "--steps") {
      a.steps = parse_int(flag, value);
    } else if (flag == "--save-at") {
      a.save_at = parse_int(flag, value);
    } else if (flag == "--dir") {
      a.dir = value;
    } else if (flag == "--out") {
      a.out = value;
    } else {
      usage("unknown option '" + flag + "'");
    }
  }
  if (a.stage < 0 || a.stage > 3) usage("--stage must be 0, 1, 2 or 3");
  if (a.steps < 1) usage("--steps must be at least 1");
  if ((a.mode != "straight" || a.save_at >= 0) && a.dir.empty()) usage("--dir is required");
  if (a.mode != "save" && a.out.empty()) usage("--out is required");
  if (a.save_at > a.steps) usage("--save-at must be at most --steps");
  return a;
}

RunOptions options_for(int stage, int world) {
  if (kGlobalBatch % world != 0) {
    usage("the world size must divide " + std::to_string(kGlobalBatch) + ", got " +
          std::to_string(world));
  }
  RunOptions o;
  o.stage = stage;
  o.micro_batch = static_cast<int>(kGlobalBatch / world);
  o.gradient_accumulation_steps = 1;
  o.gradient_clipping = 1.0;
  o.lr = 3e-3;
  o.extra_top_json =
      "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
      "\"warmup_max_lr\": 0.003, \"warmup_num_steps\": 4}}";
  // Stage 3: partition every parameter, so the blocks are really sharded and gathered.
  if (stage == 3) o.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
  return o;
}

// Step `step` of the schedule on every rank (collective); returns the global mean loss.
double train_step(const ModelSpec& spec, torch::nn::Module& model, zero::Engine& engine,
                  zero::Communicator& comm, int64_t mbs, int step) {
  auto [x, y] = spec.batch(step, kGlobalBatch);
  const int64_t row = comm.rank() * mbs;
  at::Tensor loss = spec.loss(model, x.narrow(0, row, mbs), y.narrow(0, row, mbs));
  const double mine = loss.item<double>();
  engine.backward(loss);
  engine.step();
  at::Tensor total = at::full({1}, mine, at::kDouble);
  comm.all_reduce(total, zero::ReduceOp::kSum)->wait();
  return total.item<double>() / comm.size();
}

int run(const Args& a, const std::shared_ptr<zero::Communicator>& comm) {
  const ModelSpec spec = zero::test::tiny_gpt2_spec();
  const RunOptions options = options_for(a.stage, comm->size());
  auto model = spec.build();
  const zero::Config config =
      zero::parse_config(zero::test::make_config_json(options), comm->size(), "reshard config");
  auto engine = zero::initialize(model, config, comm);

  int first = 0;
  if (a.mode == "resume") {
    const std::string client = engine->load_checkpoint(a.dir);
    const std::string prefix = "{\"next_step\":";
    ZERO_CHECK(client.rfind(prefix, 0) == 0, "unexpected client state ", client);
    first = std::atoi(client.c_str() + prefix.size());
    ZERO_CHECK(engine->global_steps() == first, "the loaded engine has taken ",
               engine->global_steps(), " steps, the client state says ", first);
  }
  std::map<int, double> losses;
  for (int step = first; step < a.steps; ++step) {
    losses[step] = train_step(spec, *model, *engine, *comm, options.micro_batch, step);
    const bool save_here = (a.mode == "save" && step + 1 == a.steps) ||
                           (a.mode == "straight" && step + 1 == a.save_at);
    if (save_here) {
      engine->save_checkpoint(a.dir, "", "{\"next_step\": " + std::to_string(step + 1) + "}");
    }
  }
  if (comm->rank() == 0 && !a.out.empty()) {
    std::FILE* out = std::fopen(a.out.c_str(), "w");
    ZERO_CHECK(out != nullptr, "cannot write ", a.out, ": ", std::strerror(errno));
    for (const auto& [step, loss] : losses) std::fprintf(out, "%d %.17g\n", step, loss);
    std::fclose(out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  std::shared_ptr<zero::Communicator> comm;
  try {
    comm = zero::make_mpi_communicator();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reshard_driver: %s\n", e.what());
    return 1;
  }
  try {
    return run(args, comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reshard_driver: rank %d: %s\n", comm->rank(), e.what());
    std::fflush(stderr);
    zero::abort_mpi_job(1);
  }
  return 1;
}
