// Reduce-scatter on a buffer from Communicator::allocate_buffer (shared memory when all ranks
// share a node; Note [Shared-memory reduce-scatter]) vs the same op on an ordinary tensor (the
// MPI ring) vs all_gather, fp32, in one run with the three interleaved per iteration.
//
//   mpirun -np 2 --bind-to core bench_shared_reduce_scatter
//
// Each sample: every rank rewrites its buffers (as backward or the optimizer would), barrier,
// the op, barrier. Median of 20 samples after 5 warm-up ones. Prints a markdown table.
#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include <ATen/ATen.h>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <vector>
int main() {
  auto comm = zero::make_mpi_communicator();
  const int n = comm->size();
  if (comm->rank() == 0) {
    std::printf("| buffer | RS, shared buffer | RS, ordinary tensor (ring) | all_gather | "
                "RS/AG bandwidth, shared | RS/AG bandwidth, ring |\n|---|---|---|---|---|---|\n");
  }
  for (int64_t mib : {1, 4, 16, 64}) {
    const int64_t numel = mib * 262144;
    at::Tensor shared = comm->allocate_buffer(numel, at::kFloat);
    at::Tensor plain = at::zeros({numel});
    at::Tensor gathered = at::zeros({numel});
    auto own = [&](const at::Tensor& t) { return t.narrow(0, comm->rank() * (numel / n), numel / n); };
    std::vector<double> rs_s, rs_p, ag;
    for (int it = 0; it < 25; ++it) {
      auto time = [&](auto&& f) { shared.add_(1e-7); plain.add_(1e-7); gathered.add_(1e-7); comm->barrier()->wait(); auto t0 = std::chrono::steady_clock::now(); f(); comm->barrier()->wait(); return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
      const double a = time([&] { comm->reduce_scatter(shared, own(shared), zero::ReduceOp::kSum)->wait(); });
      const double b = time([&] { comm->reduce_scatter(plain, own(plain), zero::ReduceOp::kSum)->wait(); });
      const double c = time([&] { comm->all_gather(own(gathered), gathered)->wait(); });
      if (it >= 5) { rs_s.push_back(a); rs_p.push_back(b); ag.push_back(c); }
    }
    auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    if (comm->rank() == 0) std::printf("| %lld MiB | %.3f ms | %.3f ms | %.3f ms | %.2f | %.2f |\n", (long long)mib, med(rs_s), med(rs_p), med(ag), med(ag) / med(rs_s), med(ag) / med(rs_p));
  }
}
