// zero-train, phase 7 (Note [zero-train's phases] in trainer.h): the summary table and
// loss.svg, beside report.cpp's formatting.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

#include "trainer.h"
#include "zero/activation_checkpointing.h"
#include "zero/gemm_rates.h"
#include "zero/memory.h"
#include "zero/shard.h"

namespace zero::train {
namespace {

// Bytes per element of the gradients the engine keeps (kept_gradient_dtype).
int64_t grad_bytes_per_element(const Config& c) {
  return c10::elementSize(kept_gradient_dtype(c));
}

// Model-state bytes per parameter the ZeRO paper predicts for this stage, precision and
// optimizer (K = the fp32 master weights and the optimizer's state: 12 with Adam and 16-bit
// parameters, 8 with fp32 ones, which serve as their own master; 8 / 4 with Lion, Adagrad or
// SGD with momentum): 16-bit, 16-bit gradients with Adam: 16 / 4 + 12/N / 2 + 14/N / 16/N for
// stages 0 / 1 / 2 / 3. estimate_state computes them (zero/memory.h), here per parameter of a
// count so large that rounding a shard up to whole elements changes nothing printed.
double zero_formula_bytes_per_param(const Config& c) {
  constexpr int64_t kParameters = int64_t{1} << 40;
  const StateEstimate e = estimate_state(c, kParameters);
  return static_cast<double>(e.params + e.grads + e.master_params + e.optimizer_state) /
         static_cast<double>(kParameters);
}

}  // namespace

void summarise(const Options& o, const Inputs& in, const Planned& planned, Trainee& t,
               const Resumed& resumed, const Trained& result, Communicator& comm) {
  const Config& config = in.config;
  const int world = comm.size();
  const int stage = config.zero_optimization.stage;
  const int64_t seq = in.seq;
  const int gas = static_cast<int>(config.gradient_accumulation_steps);
  const int64_t trained = o.steps - resumed.first_step;  // by this process (after a resume)
  const double seconds = result.seconds;
  const int64_t first_step = resumed.first_step;
  const CudaSupport* cuda = planned.cuda;
  const MemoryPlan& plan = planned.plan;
  // Per-rank figures for the summary, gathered to every rank.
  const ModelStateBytes bytes = t.engine->model_state_bytes();
  constexpr int kFigures = 13;
  const CudaMemory gpu = planned.cuda ? planned.cuda->memory(planned.device.index()) : CudaMemory{};
  at::Tensor mine = at::tensor({static_cast<double>(bytes.total()),
                                static_cast<double>(peak_resident_bytes()),
                                static_cast<double>(bytes.gathered_peak),
                                static_cast<double>(bytes.params - bytes.grads /
                                    grad_bytes_per_element(config) *
                                    static_cast<int64_t>(c10::elementSize(config.param_dtype))),
                                static_cast<double>(bytes.on_nvme),
                                static_cast<double>(bytes.staging),
                                static_cast<double>(bytes.params_on_nvme),
                                static_cast<double>(gpu.peak_allocated_bytes),
                                static_cast<double>(gpu.peak_reserved_bytes),
                                static_cast<double>(result.inter_node_bytes),
                                static_cast<double>(planned.plan.resident_bytes),
                                static_cast<double>(planned.plan_model.process_baseline_bytes),
                                static_cast<double>(host_memory_stats().peak_bytes)},
                               at::kDouble);
  at::Tensor all = at::empty({kFigures * world}, at::kDouble);
  comm.all_gather(mine, all)->wait();
  auto figure = [&](int r, int k) { return all[kFigures * r + k].item<double>(); };
  const CommStats comm_after = t.engine->communication();
  const double moved = static_cast<double>(result.reduce_scatter_bytes + result.all_gather_bytes);
  const double other_moved = static_cast<double>(
      (comm_after.reduce_scatter.bytes - result.before.reduce_scatter.bytes) +
      (comm_after.all_to_all.bytes - result.before.all_to_all.bytes) +
      (comm_after.all_gather.bytes - result.before.all_gather.bytes)) - moved;
  // Collective at stage 3 (a forward gathers), so before the summary that only rank 0 prints.
  const std::string final_sample =
      sample_text(*t.model, in.tokenizer, o.sample_tokens, in.seq, config.seed);
  if (comm.rank() != 0) return;
  const ShardLayout layout = shard_layout(t.engine->num_parameters(), world, kShardAlignment);
  const double p = static_cast<double>(layout.padded_numel);
  const int64_t comm_elem = c10::elementSize(config.communication_dtype);
  const int64_t param_elem = c10::elementSize(config.param_dtype);
  const int64_t compute_elem = c10::elementSize(config.compute_dtype);
  const double other = static_cast<double>(layout.padded_numel - layout.shard_numel);
  // Ring volume per optimizer step (Note [Counting communicated bytes]): stage 0 all-reduces
  // (RS + AG of gradients), stages 1/2 reduce-scatter gradients (stage 2 on every
  // micro-step) and all-gather parameters. Stage 3, per micro-step, all-gathers every
  // partitioned unit for its forward and again for its backward and reduce-scatters its
  // gradients: 3 x (N-1)/N of each element (persistent parameters move 2x: reduce-scatter,
  // then all-gather after the step). Measured all-gathers differ both ways: a unit used
  // again within stage3_max_reuse_distance stays gathered from forward to backward (with
  // the default, every unit), while the first micro-step, before the prefetch trace
  // exists, releases after every use and gathers wte (embedding and tied LM head) again.
  const double rs_theory = stage == 0 ? other * comm_elem
                           : stage == 1 ? other * comm_elem
                                        : other * gas * comm_elem;
  const double ag_theory = stage == 0 ? other * comm_elem
                           : stage == 3 ? other * 2 * gas * param_elem
                                        : other * param_elem;
  const double theory = rs_theory + ag_theory;
  std::vector<SummaryRow> rows;
  rows.push_back({"", "measured", "expected"});
  const double formula = zero_formula_bytes_per_param(config);
  for (int r = 0; r < world; ++r) {
    char expected[96];
    std::snprintf(expected, sizeof(expected), "%s (ZeRO-%d: %.2f B/param x %.2fM)",
                  human_bytes(formula * p).c_str(), stage, formula, p / 1e6);
    rows.push_back({"model state, rank " + std::to_string(r),
                    human_bytes(figure(r, 0)), expected});
    if (figure(r, 4) > 0) {
      // Note [NVMe offload], Note [Parameter offload]: where it lives.
      const bool optimizer_offloaded = figure(r, 4) > figure(r, 6);
      const bool params_offloaded = figure(r, 6) > 0;
      rows.push_back({"  in memory", human_bytes(figure(r, 0) - figure(r, 4)),
                      std::string(params_offloaded ? "params kept in memory, grads"
                                                   : "params, grads") +
                          (optimizer_offloaded ? "" : ", optimizer state") + "; plus " +
                          human_bytes(figure(r, 5)) +
                          " of NVMe staging buffers"});
      std::string what;
      if (params_offloaded) what = "unit param shards";
      if (optimizer_offloaded) {
        what += std::string(params_offloaded ? ", " : "") +
                "fp32 master weights (16-bit params) and optimizer moments";
      }
      rows.push_back({"  on NVMe", human_bytes(figure(r, 4)), what});
    }
  }
  if (stage == 3) {
    // What the formula leaves out: the persistent parameters (whole on every rank, in the
    // model state above) and the partitioned ones gathered for running units (not in it).
    char persistent[128];
    std::snprintf(persistent, sizeof(persistent),
                  "in the model state (stage3_param_persistence_threshold %lld; "
                  "params outside units)",
                  static_cast<long long>(
                      config.zero_optimization.stage3_param_persistence_threshold));
    rows.push_back({"  whole (persistent) params, rank 0",
                    human_bytes(figure(0, 3)), persistent});
    double gathered_peak = 0;
    for (int r = 0; r < world; ++r) gathered_peak = std::max(gathered_peak, figure(r, 2));
    char whole[128];
    std::snprintf(whole, sizeof(whole), "of %s whole (%.0f%%); not in the model state",
                  human_bytes(p * compute_elem).c_str(),
                  100 * gathered_peak / (p * compute_elem));
    rows.push_back({"  gathered params, peak", human_bytes(gathered_peak), whole});
  }
  {
    // What plain data parallelism would hold per rank: 16 bytes per parameter with 16-bit
    // parameters and Adam (params, grads, fp32 master, m, v), 16 with fp32 too.
    const double measured = figure(0, 0);
    const double dp = 16 * p;
    char saved[96];
    std::snprintf(saved, sizeof(saved), "%s per rank without ZeRO (16 B/param): %.0f%% saved",
                  human_bytes(dp).c_str(), 100 * (1 - measured / dp));
    rows.push_back({"vs plain data parallel", "", saved});
  }
  if (stage == 3) {
    rows.push_back({"communicated per step", human_bytes(moved / trained),
                    human_bytes(theory) + " (ring volume, 3 x Psi)"});
    rows.push_back({"  reduce-scatter",
                    human_bytes(static_cast<double>(result.reduce_scatter_bytes) / trained),
                    human_bytes(rs_theory) +
                        " (gradients, once per micro-step)"});
    rows.push_back({"  all-gather",
                    human_bytes(static_cast<double>(result.all_gather_bytes) / trained),
                    human_bytes(ag_theory) +
                        " (forward + backward; less when reused soon, more while tracing)"});
    rows.push_back({"  evaluation and sampling, all steps", human_bytes(other_moved),
                    "(their forwards gather too; not in the per-step figures)"});
  } else {
    rows.push_back({"communicated per step", human_bytes(moved / trained),
                    human_bytes(theory) + " (ring volume)"});
  }
  if (const Topology& topology = comm.topology(); topology.nodes() > 1) {
    // Note [Counting communicated bytes], all ranks together, against the measured volume
    // (stage 3's differs from the formula above, see there): in the flat ring the first
    // rank of each node receives all of its volume from the node before (k x); in the
    // hierarchical schedules every rank receives (k-1)/(k m) of the buffer from other
    // nodes, (k-1)/(N-1) of its volume (N x that).
    double across = 0;
    for (int r = 0; r < world; ++r) across += figure(r, 9);
    const int k = topology.nodes();
    const bool hierarchical = comm.capabilities().hierarchical;
    const double share = hierarchical ? static_cast<double>(world) * (k - 1) / (world - 1) : k;
    char expected[200];
    const ZeroPlusPlusConfig& zeropp = config.zero_optimization.zeropp;
    if (zeropp.enabled()) {
      // Note [ZeRO++]: against what plain stage 3 moves across nodes (the formula's volume).
      std::snprintf(expected, sizeof(expected),
                    "plain stage 3: %s (%s, %.2f x the 3 x Psi volume): %.1f x less",
                    human_bytes(share * theory).c_str(),
                    hierarchical ? "hierarchical" : "flat ring", share,
                    share * theory / std::max(1.0, across / trained));
    } else {
      std::snprintf(expected, sizeof(expected), "%s (%s: %.2f x the volume per rank, all ranks)",
                    human_bytes(share * moved / trained).c_str(),
                    hierarchical ? "hierarchical" : "flat ring", share);
    }
    rows.push_back({"  across nodes", human_bytes(across / trained), expected});
    if (zeropp.enabled()) {
      std::string parts;
      if (zeropp.quantized_weights) parts += "qwZ (weights int8, a scale per 256)";
      if (zeropp.hpz_partition_size > 1) {
        parts += std::string(parts.empty() ? "" : ", ") + "hpZ (secondary over " +
                 std::to_string(zeropp.hpz_partition_size) + " ranks of a node)";
      }
      if (zeropp.quantized_gradients) {
        parts += std::string(parts.empty() ? "" : ", ") +
                 "qgZ (gradients int4 across nodes, a scale per 128)";
      }
      rows.push_back({"  ZeRO++", "", parts});
    }
  }
  {
    // Note [Compute dtype]: what the model computed in, what it stored and communicated,
    // and how fast this CPU's 16-bit GEMMs are (the measurement behind "auto").
    const c10::ScalarType sixteen = config.configured_param_dtype != c10::ScalarType::Float
                                        ? config.configured_param_dtype
                                        : c10::ScalarType::BFloat16;
    std::string stored = "parameters " + dtype_name(config.param_dtype) +
                         ", communication " + dtype_name(config.communication_dtype);
    if (config.compute_dtype_auto) stored += "; compute_data_type \"auto\"";
    rows.push_back({"compute dtype", dtype_name(config.compute_dtype), stored});
    rows.push_back({"  16-bit GEMMs here", "",
                    measured_gemm_rates().describe(sixteen)});
  }
  for (int r = 0; r < world; ++r) {
    // Against the rank's own plan, which includes its baseline (what the OS sees); with
    // the parts, so that a gap can be placed: the baseline (the resident set before the
    // model: libraries, libtorch's and MPI's own) and the peak of what zero's host
    // allocator held (tensors, communication buffers, offload staging).
    char against[96];
    const double planned_bytes = figure(r, 10);
    std::snprintf(against, sizeof(against), "planned %s: %+.1f %%",
                  human_bytes(planned_bytes).c_str(), (figure(r, 1) / planned_bytes - 1) * 100);
    rows.push_back({"peak RSS, rank " + std::to_string(r),
                    human_bytes(figure(r, 1)),
                    std::string(cuda ? "host memory " : "") + against});
    rows.push_back({"  baseline + tracked peak",
                    human_bytes(figure(r, 11)) + " + " +
                        human_bytes(figure(r, 12)),
                    "before the model; zero's host allocator at its peak"});
  }
  if (cuda) {
    for (int r = 0; r < world; ++r) {
      rows.push_back({"GPU memory peak, rank " + std::to_string(r),
                      human_bytes(figure(r, 7)),
                      "allocated (" + human_bytes(figure(r, 8)) +
                          " reserved); planned " +
                          human_bytes(static_cast<double>(plan.device_bytes))});
    }
  }
  char rate[64];
  std::snprintf(rate, sizeof(rate), "%.0f", config.train_batch_size * seq * trained / seconds);
  rows.push_back({"tokens/s", rate, ""});
  if (config.activation_checkpointing.profile && in.shape.checkpointed_blocks > 0) {
    // activation_checkpointing.profile: rank 0's checkpointed calls, all steps (with
    // evaluation's forwards, which run without recompute).
    const ActivationCheckpointProfile profile = activation_checkpoint_profile();
    char forward[96], recompute[128];
    std::snprintf(forward, sizeof(forward), "%.2f s", profile.forward_seconds);
    std::snprintf(recompute, sizeof(recompute), "%.2f s, then %.2f s of their backward",
                  profile.recompute_seconds, profile.backward_seconds);
    rows.push_back({"checkpointed forwards, rank 0", forward,
                    std::to_string(profile.forwards) + " calls"});
    rows.push_back({"  their recomputes", recompute,
                    std::to_string(profile.recomputes) + " calls"});
  }
  char losses[64];
  std::snprintf(losses, sizeof(losses), "%.4f -> %.4f", result.records.front().loss,
                result.records.back().loss);
  rows.push_back({"train loss (first -> last)", losses, ""});
  char val[32];
  std::snprintf(val, sizeof(val), "%.4f", result.last_val);
  rows.push_back({"validation loss", val, ""});
  const std::string resumed_note =
      first_step > 0 ? ", resumed after step " + std::to_string(first_step) : "";
  std::printf("\nsummary (%lld steps in %.1f s%s, %lld skipped)\n%s",
              static_cast<long long>(trained), seconds, resumed_note.c_str(),
              static_cast<long long>(t.engine->skipped_steps()),
              format_summary(rows).c_str());
  write_loss_svg(o.out + "/loss.svg", result.records,
                 "zero-train " + o.model + ", ZeRO stage " + std::to_string(stage) + ", " +
                     std::to_string(world) + " rank(s)");
  std::printf("\nsample: %s\n", final_sample.c_str());
  std::printf("\nrun directory: %s (config.json, metrics.csv, loss.svg)\n", o.out.c_str());
  std::fflush(stdout);
}

}  // namespace zero::train
