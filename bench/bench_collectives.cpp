// Collective benchmark: zero's MPI communicator against OpenMPI's own collectives.
//
//   mpirun --allow-run-as-root -np 2 --bind-to core build/bench/bench_collectives [--sweep]
//
// For each buffer size it times, in blocks rotated round by round so that machine noise hits
// all of them alike: zero's reduce_scatter, all_gather (in place) and all_reduce, and as
// baselines MPI_Reduce_scatter_block, MPI_Allreduce (in place) and MPI_Allgather (in place).
// One sample = the slowest rank's time for one call, after a barrier; the table shows the
// median of the samples (warm-up calls excluded). Algorithm bandwidth (algbw) = input bytes / time for
// reduce-scatter, output bytes / time for all-gather, buffer bytes / time for all-reduce.
// Rank 0 prints markdown tables.
//
// --sweep runs the tuning measurements instead: the ring reduce-scatter at several segment sizes
// (ZERO_RING_SEGMENT_BYTES), the reduction kernel alone, and all_gather over
// MPI_Allgatherv vs the Sendrecv ring.
#include <mpi.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/reduce_kernels.h"
#include "common/env.h"
#include "zero/comm.h"
#include "zero/comm_mpi.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

int g_rank = 0;
int g_size = 1;

struct Op {
  Op(std::string n, std::function<void()> r, std::function<void()> p = {})
      : name(std::move(n)), run(std::move(r)), prepare(std::move(p)) {}
  std::string name;
  std::function<void()> run;
  std::function<void()> prepare;  // untimed, before each call (if set)
  std::vector<double> samples;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double timed(const std::function<void()>& run) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  run();
  double elapsed = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return elapsed;
}

// Runs each op in blocks of consecutive calls (its buffers stay as warm as in a loop of that
// op alone) and rotates through the ops block by block, 5 rounds, so that slow phases of a
// noisy machine hit every op alike. The first `warmup` calls of each block are not kept.
void measure(std::vector<Op>& ops, int warmup, int iters) {
  const int rounds = 5;
  const int per_round = std::max(1, iters / rounds);
  for (int round = 0; round < rounds; ++round) {
    for (auto& op : ops) {
      for (int i = 0; i < warmup + per_round; ++i) {
        if (op.prepare) op.prepare();
        const double t = timed(op.run);
        if (i >= warmup) op.samples.push_back(t);
      }
    }
  }
}

int iterations_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>(512 * kMiB / bytes, 15, 100));
}

std::string cell(double seconds, int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f ms, %.1f GB/s", seconds * 1e3, bytes / seconds / 1e9);
  return text;
}

MPI_Datatype mpi_type(c10::ScalarType dtype) {
  return dtype == c10::kFloat ? MPI_FLOAT : MPI_DATATYPE_NULL;
}

// fresh = false: each op in a loop on the same buffers (the usual benchmark loop; the data a
// rank sends was last written long ago). fresh = true: before every call, untimed, each rank
// rewrites the data it contributes, as backward does with gradients before a reduce-scatter
// and the optimizer step with the shard before an all-gather; the peer then reads lines that
// are dirty in the other core's cache.
void main_table(zero::Communicator& comm, bool fresh) {
  struct Case {
    int64_t bytes;
    c10::ScalarType dtype;
  };
  const std::vector<Case> cases = {{1 * kMiB, c10::kFloat},  {4 * kMiB, c10::kFloat},
                                   {16 * kMiB, c10::kFloat}, {64 * kMiB, c10::kFloat},
                                   {4 * kMiB, c10::kBFloat16}, {16 * kMiB, c10::kBFloat16},
                                   {64 * kMiB, c10::kBFloat16}};
  if (g_rank == 0) {
    std::printf(fresh ? "\nInputs rewritten before every call (untimed):\n\n"
                      : "\nEach op in a loop on the same buffers:\n\n");
    std::printf(
        "| buffer | dtype | zero reduce_scatter (in place) | zero reduce_scatter (out of "
        "place) | zero all_gather (in place) | zero all_reduce | MPI_Reduce_scatter_block | "
        "MPI_Allreduce (in place) | MPI_Allgather (in place) | RS/AG algbw: in place, out of "
        "place |\n|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const auto& c : cases) {
    const auto options = at::TensorOptions().dtype(c.dtype);
    const int64_t numel = c.bytes / c10::elementSize(c.dtype);
    const int64_t chunk = numel / g_size;
    at::Tensor rs_in = at::full({chunk * g_size}, 1e-3, options);
    at::Tensor rs_out = at::zeros({chunk}, options);
    at::Tensor rs_ip = at::full({chunk * g_size}, 1e-3, options);
    at::Tensor rs_ip_own = rs_ip.narrow(0, g_rank * chunk, chunk);
    at::Tensor ag = at::full({chunk * g_size}, 1.0, options);
    at::Tensor ar = at::full({numel}, 1e-3, options);
    at::Tensor mpi_rs_in = at::full({chunk * g_size}, 1e-3, options);
    at::Tensor mpi_rs_out = at::zeros({chunk}, options);
    at::Tensor mpi_ar = at::full({numel}, 1e-3, options);
    at::Tensor mpi_ag = at::full({chunk * g_size}, 1.0, options);
    const int64_t chunk_bytes = chunk * c10::elementSize(c.dtype);
    at::Tensor ag_own = ag.narrow(0, g_rank * chunk, chunk);

    at::Tensor mpi_ag_own = mpi_ag.narrow(0, g_rank * chunk, chunk);
    // What each rank contributes, rewritten before each call in fresh mode.
    auto rewrite = [fresh](at::Tensor t, double v) -> std::function<void()> {
      if (!fresh) return {};
      return [t, v]() mutable { t.fill_(v); };
    };

    std::vector<Op> ops;
    ops.emplace_back(Op{"zero RS in place",
                        [&] { comm.reduce_scatter(rs_ip, rs_ip_own, zero::ReduceOp::kSum)->wait(); },
                        rewrite(rs_ip, 1e-3)});
    ops.emplace_back(Op{"zero RS",
                        [&] { comm.reduce_scatter(rs_in, rs_out, zero::ReduceOp::kSum)->wait(); },
                        rewrite(rs_in, 1e-3)});
    ops.emplace_back(
        Op{"zero AG", [&] { comm.all_gather(ag_own, ag)->wait(); }, rewrite(ag_own, 1.0)});
    ops.emplace_back(Op{"zero AR", [&] { comm.all_reduce(ar, zero::ReduceOp::kSum)->wait(); },
                        rewrite(ar, 1e-3)});
    const bool fp32 = c.dtype == c10::kFloat;
    if (fp32) {
      ops.emplace_back(Op{"MPI RS",
                          [&] {
                            MPI_Reduce_scatter_block(mpi_rs_in.data_ptr(),
                                                     mpi_rs_out.data_ptr(),
                                                     static_cast<int>(chunk), mpi_type(c.dtype),
                                                     MPI_SUM, MPI_COMM_WORLD);
                          },
                          rewrite(mpi_rs_in, 1e-3)});
      ops.emplace_back(Op{"MPI AR",
                          [&] {
                            MPI_Allreduce(MPI_IN_PLACE, mpi_ar.data_ptr(),
                                          static_cast<int>(numel), mpi_type(c.dtype), MPI_SUM,
                                          MPI_COMM_WORLD);
                          },
                          rewrite(mpi_ar, 1e-3)});
    }
    ops.emplace_back(Op{"MPI AG",
                        [&] {
                          MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, mpi_ag.data_ptr(),
                                        static_cast<int>(chunk_bytes), MPI_BYTE,
                                        MPI_COMM_WORLD);
                        },
                        rewrite(mpi_ag_own, 1.0)});
    measure(ops, 2, iterations_for(c.bytes));
    if (g_rank != 0) continue;
    auto med = [&](const std::string& name) {
      for (auto& op : ops) {
        if (op.name == name) return median(op.samples);
      }
      return -1.0;
    };
    const int64_t total = chunk * g_size * c10::elementSize(c.dtype);
    const double rs_ip_t = med("zero RS in place"), rs = med("zero RS"), ag_t = med("zero AG");
    std::printf("| %lld MiB | %s | %s | %s | %s | %s | %s | %s | %s | %.2f, %.2f |\n",
                static_cast<long long>(c.bytes / kMiB), fp32 ? "fp32" : "bf16",
                cell(rs_ip_t, total).c_str(), cell(rs, total).c_str(), cell(ag_t, total).c_str(),
                cell(med("zero AR"), total).c_str(),
                fp32 ? cell(med("MPI RS"), total).c_str() : "n/a (no bf16 in MPI)",
                fp32 ? cell(med("MPI AR"), total).c_str() : "n/a (no bf16 in MPI)",
                cell(med("MPI AG"), total).c_str(), ag_t / rs_ip_t, ag_t / rs);
    std::fflush(stdout);
  }
}

void sweep() {
  const std::vector<int64_t> segments = {32 * 1024, 64 * 1024, 128 * 1024, 256 * 1024,
                                         512 * 1024, 1 * kMiB,  4 * kMiB,   64 * kMiB};
  const std::vector<int64_t> sizes = {1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB};
  for (auto dtype : {c10::kFloat, c10::kBFloat16}) {
    const auto options = at::TensorOptions().dtype(dtype);
    // One communicator per segment size, all_gather over the Sendrecv ring; plus the default
    // schedule (MPI_Allgatherv) for comparison.
    std::vector<std::shared_ptr<zero::Communicator>> comms;
    for (auto seg : segments) {
      zero::comm::MpiOptions o;
      o.ring_segment_bytes = seg;
      o.ring_all_gather = true;
      comms.push_back(zero::comm::make_mpi_communicator(o));
    }
    auto allgatherv = zero::comm::make_mpi_communicator(zero::comm::MpiOptions{});

    std::vector<std::vector<double>> rs(segments.size()), ag(segments.size() + 1);
    for (auto bytes : sizes) {
      const int64_t numel = bytes / c10::elementSize(dtype);
      const int64_t chunk = numel / g_size;
      at::Tensor in = at::full({chunk * g_size}, 1e-3, options);
      at::Tensor out = at::zeros({chunk}, options);
      at::Tensor gathered = at::full({chunk * g_size}, 1.0, options);
      at::Tensor own = gathered.narrow(0, g_rank * chunk, chunk);
      std::vector<Op> ops;
      for (auto& comm : comms) {
        auto* c = comm.get();
        ops.emplace_back(Op{"rs", [&, c] { c->reduce_scatter(in, out, zero::ReduceOp::kSum)->wait(); }});
        ops.emplace_back(Op{"ag", [&, c] { c->all_gather(own, gathered)->wait(); }});
      }
      ops.emplace_back(Op{"agv", [&] { allgatherv->all_gather(own, gathered)->wait(); }});
      measure(ops, 2, iterations_for(bytes));
      for (size_t i = 0; i < segments.size(); ++i) {
        rs[i].push_back(median(ops[2 * i].samples));
        ag[i].push_back(median(ops[2 * i + 1].samples));
      }
      ag[segments.size()].push_back(median(ops.back().samples));
    }
    if (g_rank != 0) continue;
    std::printf("\n%s, ms (algbw GB/s) by ZERO_RING_SEGMENT_BYTES: reduce_scatter | all_gather "
                "over the Sendrecv ring\n\n| segment |",
                dtype == c10::kFloat ? "fp32" : "bf16");
    for (auto b : sizes) std::printf(" %lld MiB RS | AG |", static_cast<long long>(b / kMiB));
    std::printf("\n|---|");
    for (size_t i = 0; i < sizes.size(); ++i) std::printf("---|---|");
    std::printf("\n");
    for (size_t i = 0; i <= segments.size(); ++i) {
      if (i < segments.size()) {
        std::printf("| %lld KiB |", static_cast<long long>(segments[i] / 1024));
      } else {
        std::printf("| AG: MPI_Allgatherv |");
      }
      for (size_t j = 0; j < sizes.size(); ++j) {
        if (i < segments.size()) {
          std::printf(" %.3f (%.1f) |", rs[i][j] * 1e3, sizes[j] / rs[i][j] / 1e9);
        } else {
          std::printf(" |");
        }
        std::printf(" %.3f (%.1f) |", ag[i][j] * 1e3, sizes[j] / ag[i][j] / 1e9);
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }

  // The reduction kernel alone on one rank: destination and source both in cache (256 KiB)
  // and both out of L2 (32 MiB).
  if (g_rank == 0) {
    std::printf("\nReduction kernel alone (rank 0), GB/s of destination bytes\n\n"
                "| dtype | kernels | 256 KiB | 32 MiB |\n|---|---|---|---|\n");
    for (auto dtype : {c10::kFloat, c10::kBFloat16, c10::kHalf}) {
      for (int f = static_cast<int>(zero::comm::best_kernel_family()); f >= 0; --f) {
        const auto family = static_cast<zero::comm::KernelFamily>(f);
        std::printf("| %s | %s |", c10::toString(dtype), zero::comm::kernel_family_name(family));
        for (int64_t bytes : {256 * int64_t{1024}, 32 * kMiB}) {
          const int64_t n = bytes / c10::elementSize(dtype);
          at::Tensor d = at::full({n}, 1e-3, at::TensorOptions().dtype(dtype));
          at::Tensor s = at::full({n}, 1e-3, at::TensorOptions().dtype(dtype));
          std::vector<double> samples;
          const int reps = static_cast<int>(std::max<int64_t>(5, 256 * kMiB / bytes));
          for (int i = 0; i < reps; ++i) {
            const double start = MPI_Wtime();
            zero::comm::reduce_to(family, zero::ReduceOp::kSum, dtype, d.data_ptr(),
                                  d.data_ptr(), s.data_ptr(), n);
            samples.push_back(MPI_Wtime() - start);
          }
          std::printf(" %.1f |", bytes / median(samples) / 1e9);
        }
        std::printf("\n");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto comm = zero::make_mpi_communicator();  // initializes MPI
  g_rank = comm->rank();
  g_size = comm->size();
  const bool do_sweep = argc > 1 && std::strcmp(argv[1], "--sweep") == 0;
  if (g_rank == 0) {
    std::printf("bench_collectives: %d ranks, ring segment %lld bytes, reduction kernel %s, "
                "torch threads %d\n\n",
                g_size, static_cast<long long>(zero::env::ring_segment_bytes()),
                zero::comm::kernel_family_name(zero::comm::best_kernel_family()),
                at::get_num_threads());
  }
  if (do_sweep) {
    sweep();
  } else {
    main_table(*comm, /*fresh=*/false);
    main_table(*comm, /*fresh=*/true);
  }
  return 0;
}
