// Every environment variable zero reads is declared here and read in env.cpp, nowhere else.
// Values are parsed strictly: a malformed value is a zero::Error naming the variable.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "zero/export.h"

namespace zero::env {

/// ZERO_RING_SEGMENT_BYTES: largest message of the MPI ring collectives (default 256 KiB: the
/// fastest ring reduce-scatter for 1-64 MiB buffers on the 2-core benchmark machine, where a
/// received segment stays in L2 for the add; see docs/benchmarks.md, "Collectives").
ZERO_INTERNAL_API int64_t ring_segment_bytes();

/// ZERO_COLLECTIVE_TIMEOUT_S: seconds a rank may wait inside one collective before the job is
/// ended (Note [Collective timeout], src/comm/collective_watchdog.h). Default 600; 0 turns the
/// deadline off.
ZERO_INTERNAL_API int64_t collective_timeout_seconds();

/// ZERO_COLLECTIVE_CHECKS: "1" or unset: the ranks compare every collective's signature before
/// it runs (Note [Collective signatures], src/comm/collective_signature.h); "0": they do not.
ZERO_INTERNAL_API bool collective_checks();

/// ZERO_RANKS_PER_NODE: treat the ranks as nodes of this many consecutive ranks (node k named
/// "virtual-node-k") instead of the machines they run on (Note [Topology], zero/comm.h): to try
/// and test the hierarchical collectives on one machine. Must divide the world size (checked
/// by the communicator). Unset or 0: the real topology.
ZERO_INTERNAL_API int64_t ranks_per_node_override();

/// ZERO_HIERARCHICAL_COLLECTIVES: "0" keeps the flat ring across nodes; "1" or unset: the
/// hierarchical schedules where the topology allows them (Note [Hierarchical collectives],
/// src/comm/mpi_communicator.cpp).
ZERO_INTERNAL_API bool hierarchical_collectives();

/// ZERO_FUSED_KERNELS: "0" runs a transformer block's element-wise work as ATen's separate
/// operations; "1" or unset: the fused kernels, the CPU's (Note [Fused element-wise kernels],
/// src/kernels/fused_kernels.h) and a GPU's (Note [Fused element-wise kernels on a GPU]).
ZERO_INTERNAL_API bool fused_kernels();

/// ZERO_SWAP_CHECKSUMS: "0" writes and reads swap records without their CRC-32C (Note [Swap
/// record checksums], src/offload/swap_file.h), for measuring what the checksums cost
/// (bench/offload_step_ratio.sh MODEL ... checksums); zero says so once when it is off. "1" or unset: on.
ZERO_INTERNAL_API bool swap_checksums();

/// This process's rank among the ranks on its machine, from the launcher: OMPI_COMM_WORLD_LOCAL_RANK
/// (mpirun), else SLURM_LOCALID (srun), else LOCAL_RANK (torchrun); -1 when none is set. Picks
/// a rank's GPU (zero/comm_nccl.h).
ZERO_INTERNAL_API int local_rank();

enum class ProgressStyle { kAuto, kBar, kLines };

/// ZERO_PROGRESS: "bar" | "lines" | unset (auto). Set by zero-run; see zero/console.h.
ZERO_INTERNAL_API ProgressStyle progress_style();

/// ZERO_GEMM_RATES: GEMM rates in GFLOP/s that replace measurements (zero/gemm_rates.h), as
/// "DTYPE=RATE" pairs separated by commas, DTYPE one of fp32, bf16, fp16, RATE > 0; e.g.
/// "fp32=80,bf16=8" acts as a CPU without fast bf16 GEMMs. Unset: measure everything.
ZERO_INTERNAL_API const std::map<std::string, double>& gemm_rates_override();

/// ZERO_FP16_GEMM: "native" runs fp16 CPU GEMMs with ATen's fp16 kernels, "fp32" as fp32 GEMMs
/// on converted copies (Note [fp16 GEMMs on CPUs without fp16 arithmetic],
/// src/hardware/half_gemm.h); unset or "auto": by the CPU's flags. Returned as given ("auto"
/// when unset); anything else is an error naming the variable.
ZERO_INTERNAL_API std::string fp16_gemm_path();
/// ZERO_BF16_GEMM: the same for bf16 CPU GEMMs (unset or "auto": by the CPU's bf16 flags).
ZERO_INTERNAL_API std::string bf16_gemm_path();

/// ZERO_EMULATE_DEVICE_OFFLOAD: "1" runs a CPU model's offload_optimizer (stages 1-3) through
/// the pipeline of a device model (Note [Offload of a device model], src/engine/host_offload.h):
/// the engine's tensors play the device, host copies of the state are separate, and a copy
/// thread plays the copy stream. A testing aid, so that CI runs that pipeline without a GPU;
/// unset or "0": off. Read whenever an engine is made (tests switch it per run).
ZERO_INTERNAL_API bool emulate_device_offload();

/// ZERO_MUON_EXCHANGE: "owner" or unset: each split Muon matrix is orthogonalised by one owner;
/// "every-holder": by every rank that holds a piece of it (Note [Muon under partitioning],
/// src/optim/muon.h), for measuring the choice (bench/muon_exchange.sh). Read whenever an
/// engine is made.
ZERO_INTERNAL_API bool muon_exchange_every_holder();

}  // namespace zero::env
