// The MPI backend of zero::Communicator for CPU tensors.
//
// Schedules (see docs/benchmarks.md, "Collectives", for the measurements behind them):
//   reduce_scatter  ring of MPI_Sendrecv + our own add (Note [MPI ring order]).
//                   MPI_Reduce_scatter(_block) is several times slower on OpenMPI 4.1 and
//                   has no bf16/fp16 sum; MPI_Allreduce/MPI_Reduce_scatter do not promise a
//                   rank order either. When the input is a buffer from allocate_buffer and
//                   all ranks share a node, each rank sums its chunk straight from the
//                   peers' shared memory instead (Note [Shared-memory reduce-scatter]).
//   all_gather      MPI_Allgatherv in place (a segmented Sendrecv ring once the output
//                   exceeds MpiOptions::max_message_bytes, since MPI counts and displacements
//                   are int).
//   all_reduce      the ring reduce-scatter over a balanced split, then all_gather: bitwise
//                   identical results on every rank, same summation order as reduce_scatter.
//   broadcast       MPI_Bcast, in pieces of at most max_message_bytes.
// Across nodes (Note [Topology] in zero/comm.h) with the same number of consecutive ranks on
// each, reduce_scatter, all_gather and all_reduce run hierarchically (Note [Hierarchical
// collectives]).
//
// Progress: a collective is validated and counted on the thread that issues it, then runs on
// the communicator's progress thread, in issue order; the returned Work completes when it has
// run. That thread is the only one that calls MPI after construction (MPI_THREAD_SERIALIZED
// suffices; MPI_THREAD_MULTIPLE is asked for), and it is what lets communication overlap
// compute: OpenMPI 4.1's non-blocking collectives progress only inside MPI calls, so a
// thread that sits in the blocking call is how a collective advances while backward runs.
// in_order tasks run there too; a collective issued from inside one runs at once. Once a task
// fails, the later collectives and tasks fail without running (Task::breaks_sequence).
// stats() and reset_stats() may be called from any thread at any time.
//
// Errors: the communicator runs on its own duplicate of MPI_COMM_WORLD with
// MPI_ERRORS_RETURN, so an MPI failure becomes a zero::Error naming the op, the rank, the
// world size, the element counts, the dtype and MPI's error string. Argument errors are
// detected before any communication; they are zero::Errors too. When only some ranks fail,
// the others may be left waiting inside the collective: all ranks must make the same calls.
#include "comm/mpi_communicator.h"

#include <mpi.h>
#include <unistd.h>

#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <thread>
#include <functional>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <utility>

#include "comm/collective_call.h"
#include "comm/collective_signature.h"
#include "comm/collective_watchdog.h"
#include "comm/reduce_kernels.h"
#include "comm/shared_segments.h"
#include "common/env.h"
#include "common/host_accounting.h"
#include "zero/error.h"

namespace zero {
namespace comm {
namespace {

constexpr int kRingTag = 0x2e70;
// The job's exit status when a collective passes its deadline (Note [Collective timeout]).
constexpr int kCollectiveTimeoutExitCode = 3;
// How long a timed-out rank waits for MPI_Abort before it exits by itself.
constexpr int kAbortGraceSeconds = 5;

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "error code " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(length));
}

// Initializes MPI on first use unless the program did, and finalizes it at exit in that case.
// A function-local static: constructed before the first communicator finishes construction,
// hence destroyed after every communicator that lives in a static. Communicators destroyed
// later than this skip MPI_Comm_free (see ~MpiCommunicator).
class MpiRuntime {
 public:
  static void ensure_initialized() { static MpiRuntime runtime; }

  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  ~MpiRuntime() {
    if (!initialized_here_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

 private:
  MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    ZERO_CHECK(!finalized,
               "make_mpi_communicator: MPI has already been finalized by the program; create "
               "communicators before MPI_Finalize");
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      ZERO_CHECK(rc == MPI_SUCCESS, "make_mpi_communicator: MPI_Init_thread failed: ",
                 mpi_error_string(rc));
      initialized_here_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      if (initialized_here_) MPI_Finalize();
      ZERO_CHECK(false, "make_mpi_communicator: MPI provides thread level ", provided,
                 " but zero needs at least MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
                 "; MPI_THREAD_MULTIPLE is ", MPI_THREAD_MULTIPLE,
                 "): the engine may call MPI from its communication thread. ",
                 initialized ? "Initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)."
                             : "Use an MPI library built with thread support.");
    }
  }

  bool initialized_here_ = false;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::byte* bytes_of(const at::Tensor& t) {
  return static_cast<std::byte*>(t.data_ptr());
}

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

// A grow-only buffer of the progress thread, touched once when grown so that no schedule
// page-faults in it.
class GrowOnlyBuffer {
 public:
  explicit GrowOnlyBuffer(const char* what) : what_(what) {}
  std::byte* at_least(int64_t bytes, int rank) {
    if (bytes > capacity_) {
      const int64_t rounded = ceil_div(bytes, 4096) * 4096;
      void* p = std::aligned_alloc(4096, static_cast<size_t>(rounded));
      ZERO_CHECK(p != nullptr, "communicator: cannot allocate ", rounded, " bytes of ", what_,
                 " on rank ", rank);
      std::memset(p, 0, static_cast<size_t>(rounded));
      data_.reset(static_cast<std::byte*>(p));
      capacity_ = rounded;
    }
    return data_.get();
  }

 private:
  const char* what_;
  std::unique_ptr<std::byte, FreeDeleter> data_;
  int64_t capacity_ = 0;
};

// The ranks one ring schedule runs over: the whole communicator, or (hierarchical) the ranks
// of one node, or the ranks of the same local index on every node.
struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  int first = 0;   // the communicator's rank of ring member j is first + j * stride
  int stride = 1;
  int mod(int64_t x) const { return static_cast<int>(((x % size) + size) % size); }
};

// Note [Hierarchical collectives]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On k nodes of m consecutive ranks each (Topology::blocked, k > 1, m > 1), rank r = n*m + l
// is local rank l of node n. Its chunks are regrouped ("packed") by local index: super-chunk
// l holds chunks l, m + l, ..., (k-1)*m + l (the chunks of local rank l on every node), in
// node order. Then
//   reduce_scatter = a ring reduce-scatter of the super-chunks inside each node (rank (n, l)
//                    gets node n's sums of super-chunk l), then a ring reduce-scatter of
//                    super-chunk l between the k ranks of local index l, one per node
//                    (rank (n, l) gets chunk n*m + l summed over every node);
//   all_gather     = the reverse: a ring all-gather of super-chunk l between the nodes, then
//                    of the super-chunks inside each node, then unpacked;
//   all_reduce     = both, on the packed buffer (packed once, unpacked once).
// The packed buffer lives in shared memory of the node's ranks where /dev/shm allows, so the
// node's reduce-scatter reads the peers' packed inputs in place (Note [Shared-memory
// reduce-scatter], the same order as the ring) once the buffer is 64 KiB or more.
// Each rank sends (m-1)/m of the buffer inside its node and (k-1)/(k*m) across nodes; a node's
// link carries (k-1)/k of the buffer each way instead of the flat ring's (N-1)/N, in k-1
// steps instead of N-1. The sum is deterministic (Note [Deterministic reduction]): element
// of chunk (n, l) = inter-node ring order over the nodes' partial sums, each of which is the
// intra-node ring order (Note [MPI ring order]) over its m ranks; it depends on the topology
// (k, m), so a flat run and a hierarchical run differ in the last bits, and two runs of the
// same (k, m) are bitwise equal wherever their ranks run (ZERO_RANKS_PER_NODE makes one
// machine's ranks act as k nodes). Collectives with an uneven topology, or at one rank per
// node, run the flat ring.
struct PackedLayout {
  Chunks super;                 // super-chunk l: the chunks of local rank l, node by node
  std::vector<Chunks> inner;    // inner[l]: those chunks inside super-chunk l (offsets from it)
  std::vector<int64_t> packed;  // packed[c]: chunk c's offset in the packed buffer
};

// A collective or task in flight on the progress thread (zero::Work).
class MpiWork final : public Work {
 public:
  explicit MpiWork(CommStats stats) : stats_(stats) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  bool completed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  CommStats stats() const override { return stats_; }

  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    done_cv_.notify_all();
  }

 private:
  const CommStats stats_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const MpiOptions& options) {
    ZERO_CHECK(options.ring_segment_bytes > 0, "make_mpi_communicator: ring_segment_bytes must "
               "be positive, got ", options.ring_segment_bytes);
    ZERO_CHECK(options.max_message_bytes > 0 && options.max_message_bytes <= INT_MAX,
               "make_mpi_communicator: max_message_bytes must be in [1, ", INT_MAX, "], got ",
               options.max_message_bytes);
    // Ring messages are also bounded by max_message_bytes: their byte count is an int.
    segment_bytes_ = std::min(options.ring_segment_bytes, options.max_message_bytes);
    max_message_bytes_ = options.max_message_bytes;
    ring_all_gather_ = options.ring_all_gather;
    check_signatures_ = options.check_signatures;

    MpiRuntime::ensure_initialized();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    ZERO_CHECK(rc == MPI_SUCCESS, "make_mpi_communicator: MPI_Comm_dup(MPI_COMM_WORLD) failed: ",
               mpi_error_string(rc));
    rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm_, &rank_);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm_, &size_);
    if (rc != MPI_SUCCESS) {
      MPI_Comm_free(&comm_);
      ZERO_CHECK(false, "make_mpi_communicator: setting up the communicator failed: ",
                 mpi_error_string(rc));
    }
    checker_ = CallChecker(backend_name(), rank_, size_, c10::Device(c10::kCPU),
                           "the MPI communicator handles CPU tensors only");
    flat_ = Ring{comm_, rank_, size_};
    topology_ = discover_topology();
    if (options.ranks_per_node > 0) {
      ZERO_CHECK(size_ % options.ranks_per_node == 0, "make_mpi_communicator: ranks per node ",
                 options.ranks_per_node, " (ZERO_RANKS_PER_NODE) does not divide the world size ",
                 size_);
      std::vector<int64_t> keys;
      std::vector<std::string> names;
      for (int r = 0; r < size_; ++r) {
        keys.push_back(r / options.ranks_per_node);
        names.push_back("virtual-node-" + std::to_string(r / options.ranks_per_node));
      }
      topology_ = Topology::from_node_keys(keys, names);
    }
    receives_across_nodes_ =
        topology_.node_of_rank[static_cast<size_t>(flat_.mod(rank_ - 1))] !=
        topology_.node_of_rank[static_cast<size_t>(rank_)];
    if (topology_.blocked()) {
      // The node groups (CollectiveGroup), which the hierarchical schedules run on too.
      const int m = topology_.ranks_per_node();
      const Call call{"node group communicators"};
      MPI_Comm intra = MPI_COMM_NULL, inter = MPI_COMM_NULL;
      check_mpi(call, MPI_Comm_split(comm_, rank_ / m, rank_, &intra), "MPI_Comm_split (node)");
      check_mpi(call, MPI_Comm_split(comm_, rank_ % m, rank_, &inter), "MPI_Comm_split (local index)");
      intra_ = Ring{intra, rank_ % m, m, rank_ - rank_ % m, 1};
      inter_ = Ring{inter, rank_ / m, topology_.nodes(), rank_ % m, m};
      node_groups_ = true;
      intra_checker_ = CallChecker(backend_name() + " node group", intra_.rank, intra_.size,
                                   c10::Device(c10::kCPU), "the MPI communicator handles CPU tensors only");
      inter_checker_ = CallChecker(backend_name() + " group across nodes", inter_.rank, inter_.size,
                                   c10::Device(c10::kCPU), "the MPI communicator handles CPU tensors only");
      if (options.hierarchical && topology_.nodes() > 1 && m > 1) {
        hierarchical_ = true;
        // The ranks of a node share its /dev/shm (virtual nodes share the machine's).
        node_shared_ = std::make_unique<SharedSegments>(intra, intra_.rank, m, /*single_node=*/true);
      }
    }
    shared_ = std::make_unique<SharedSegments>(comm_, rank_, size_, topology_.nodes() == 1);
    shared_->map_progress_board();
    // Note [Collective timeout]. The deadline comes from the environment, the same on every
    // rank; the board above is mapped either way, so its collective cannot depend on it.
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        backend_name(), rank_, size_, options.collective_timeout_seconds,
        [this](int64_t entered) { shared_->publish_entered(entered); },
        [this](int64_t now_ns) { shared_->publish_heartbeat(now_ns); },
        [this] { return shared_->peer_progress(); },
        [this] {
          // MPI_Abort reaches the other ranks through mpirun; a rank cut off from it (a link
          // down) would wait there forever, so the process ends on its own shortly after.
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
            std::_Exit(kCollectiveTimeoutExitCode);
          }).detach();
          MPI_Abort(comm_, kCollectiveTimeoutExitCode);
        });
    std::vector<std::string> node_of_rank;
    for (int r = 0; r < size_; ++r) {
      node_of_rank.push_back(topology_.node_names[static_cast<size_t>(
          topology_.node_of_rank[static_cast<size_t>(r)])]);
    }
    watchdog_->set_node_names(std::move(node_of_rank));
    progress_ = std::thread([this] { progress(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    progress_.join();   // runs what was issued first
    watchdog_.reset();  // its callbacks use shared_
    node_packed_.reset();
    node_shared_.reset();
    shared_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (node_groups_) {
        MPI_Comm_free(&intra_.comm);
        MPI_Comm_free(&inter_.comm);
      }
      MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }
  CommCapabilities capabilities() const override {
    CommCapabilities capabilities;
    capabilities.deterministic_reduction = true;  // Note [MPI ring order]
    capabilities.shared_buffers = shared_->enabled();
    capabilities.hierarchical = hierarchical_;
    capabilities.node_groups = node_groups_;
    return capabilities;
  }
  const Topology& topology() const override { return topology_; }

  WorkHandle all_reduce(const at::Tensor& buffer, ReduceOp op,
                        const CollectiveOptions& options) override {
    check_group_is_all("all_reduce", options);
    Call call{"all_reduce", buffer};
    checker_.check_tensor(call, buffer, "buffer", /*reduction=*/true);
    const int64_t numel = buffer.numel();
    const int64_t es = buffer.element_size();
    // Ownership: a balanced split, the first numel % N ranks own one element more.
    Chunks chunks = checker_.balanced(numel);
    const int64_t moved = 2 * checker_.others_bytes(chunks, es);
    const int64_t across = 2 * across_nodes(CollectiveGroup::kAll, chunks, es, moved / 2);
    return issue(call, &CommStats::all_reduce, moved, across, buffer.nbytes(), options,
                 [this, call, chunks = std::move(chunks), op] {
      if (size_ == 1 || call.input.numel() == 0) return;
      const int64_t es = call.input.element_size();
      std::byte* data = bytes_of(call.input);
      if (hierarchical_) return hierarchical_all_reduce(call, chunks, data, es, op);
      ring_reduce_scatter(flat_, call, chunks, data, call.input.scalar_type(), es, op,
                          data + chunks.offsets[rank_] * es);
      all_gather_in_place(flat_, call, chunks, data, es);
    });
  }

  WorkHandle reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                            const std::vector<int64_t>& counts,
                            const CollectiveOptions& options) override {
    const CollectiveGroup group = options.group;
    const Ring& ring = ring_of(group);
    const CallChecker& checker = checker_of(group);
    Call call{op_name(kReduceScatterNames, group), input, output, counts, /*has_counts=*/true};
    Chunks chunks = checker.check_chunked(call, input, "input", output, "output", /*reduction=*/true);
    const int64_t es = input.element_size();
    const int64_t moved = checker.others_bytes(chunks, es);
    const int64_t across = across_nodes(group, chunks, es, moved);  // before `chunks` moves below
    return issue(call, &CommStats::reduce_scatter, moved, across, input.nbytes(), options,
                 [this, call, &ring, group, chunks = std::move(chunks), op] {
      const int64_t es = call.input.element_size();
      std::byte* in = bytes_of(call.input);
      std::byte* own = in + chunks.offsets[ring.rank] * es;
      std::byte* out = bytes_of(call.output);
      const int64_t own_bytes = chunks.counts[ring.rank] * es;
      const c10::ScalarType dtype = call.input.scalar_type();
      if (ring.size == 1) {
        if (own_bytes > 0 && out != own) std::memcpy(out, own, static_cast<size_t>(own_bytes));
        return;
      }
      if (group != CollectiveGroup::kAll) {
        return ring_reduce_scatter(ring, call, chunks, in, dtype, es, op, out);
      }
      // The total is the same on every rank, so this choice (and the collective inside
      // locate_inputs) is taken by all ranks alike.
      std::vector<const std::byte*> inputs;
      if (chunks.total * es >= kSharedMinBytes) inputs = shared_->locate_inputs(in, chunks.total * es);
      if (!inputs.empty()) {
        shared_reduce_scatter(flat_, call, chunks, inputs, dtype, es, op, out);
      } else if (hierarchical_) {
        hierarchical_reduce_scatter(call, chunks, in, es, op, out);
      } else {
        ring_reduce_scatter(flat_, call, chunks, in, dtype, es, op, out);
      }
    });
  }

  at::Tensor allocate_buffer(int64_t numel, at::ScalarType dtype) override {
    ZERO_CHECK(numel >= 0, "allocate_buffer on rank ", rank_, ": numel must be >= 0, got ", numel);
    const auto options = at::TensorOptions().dtype(dtype);
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
    at::Tensor buffer;
    // Collective (shared segments are made by every rank together): in order, like the others.
    issue(Call{"allocate_buffer"}, nullptr, 0, 0, bytes, {}, [&] {
      std::function<void(void*)> deleter;
      std::byte* data = shared_->allocate(bytes, &deleter);
      if (data == nullptr) {
        buffer = at::zeros({numel}, options);
        return;
      }
      // Host memory libtorch's allocator does not see (common/host_accounting.h).
      const bool counted = count_unallocated_host_bytes(bytes);
      buffer = at::from_blob(
          data, {numel},
          [deleter, bytes, counted](void* p) {
            count_unallocated_host_bytes(-bytes, counted);
            deleter(p);
          },
          options);
    })->wait();
    return buffer;
  }

  WorkHandle all_gather(const at::Tensor& input, const at::Tensor& output,
                        const std::vector<int64_t>& counts,
                        const CollectiveOptions& options) override {
    const CollectiveGroup group = options.group;
    const Ring& ring = ring_of(group);
    const CallChecker& checker = checker_of(group);
    Call call{op_name(kAllGatherNames, group), input, output, counts, /*has_counts=*/true};
    Chunks chunks = checker.check_chunked(call, output, "output", input, "input", /*reduction=*/false);
    const int64_t es = output.element_size();
    const int64_t moved = checker.others_bytes(chunks, es);
    const int64_t across = across_nodes(group, chunks, es, moved);  // before `chunks` moves below
    return issue(call, &CommStats::all_gather, moved, across, output.nbytes(), options,
                 [this, call, &ring, group, chunks = std::move(chunks)] {
      const int64_t es = call.output.element_size();
      std::byte* out = bytes_of(call.output);
      std::byte* own = out + chunks.offsets[ring.rank] * es;
      const std::byte* in = bytes_of(call.input);
      const int64_t own_bytes = chunks.counts[ring.rank] * es;
      if (own_bytes > 0 && in != own) std::memcpy(own, in, static_cast<size_t>(own_bytes));
      if (ring.size == 1) return;
      if (group == CollectiveGroup::kAll && hierarchical_) {
        return hierarchical_all_gather(call, chunks, out, es);
      }
      all_gather_in_place(ring, call, chunks, out, es);
    });
  }

  WorkHandle all_to_all(const at::Tensor& input, const at::Tensor& output,
                        const CollectiveOptions& options) override {
    const Ring& ring = ring_of(options.group);
    const CallChecker& checker = checker_of(options.group);
    Call call{op_name(kAllToAllNames, options.group), input, output};
    checker.check_tensor(call, input, "input", /*reduction=*/false);
    checker.check_tensor(call, output, "output", /*reduction=*/false);
    checker.check_same_dtype(call, input, output);
    const int64_t es = input.element_size();
    ZERO_CHECK(input.numel() == output.numel() && input.numel() % ring.size == 0,
               checker.describe(call), ": input and output must hold the same number of ",
               "elements, a multiple of the group's ", ring.size, " ranks");
    const std::byte* in_begin = bytes_of(input);
    const std::byte* out_begin = bytes_of(output);
    ZERO_CHECK(input.numel() == 0 || in_begin + input.nbytes() <= out_begin ||
                   out_begin + output.nbytes() <= in_begin,
               checker.describe(call), ": input and output overlap");
    const int64_t chunk_bytes = input.numel() / ring.size * es;
    const int64_t moved = (ring.size - 1) * chunk_bytes;
    // Over every rank, a chunk comes from each rank of another node.
    const int64_t others_off_node =
        size_ - static_cast<int64_t>(
                    topology_.ranks_of(topology_.node_of_rank[static_cast<size_t>(rank_)]).size());
    const int64_t across = options.group == CollectiveGroup::kAll
                               ? others_off_node * chunk_bytes
                               : across_nodes(options.group, {}, es, moved);
    return issue(call, &CommStats::all_to_all, moved, across, input.nbytes(), options,
                 [this, call, &ring, chunk_bytes] {
      const std::byte* in = bytes_of(call.input);
      std::byte* out = bytes_of(call.output);
      if (chunk_bytes == 0) return;
      const int64_t own = static_cast<int64_t>(ring.rank) * chunk_bytes;
      std::memcpy(out + own, in + own, static_cast<size_t>(chunk_bytes));
      // Pairwise exchange: at step s, send to rank + s and receive from rank - s, in pieces of
      // at most max_message_bytes (MPI counts are int).
      for (int s = 1; s < ring.size; ++s) {
        const int to = ring.mod(ring.rank + s);
        const int from = ring.mod(ring.rank - s);
        watchdog_->waiting_on(ring.first + from * ring.stride);
        for (int64_t done = 0; done < chunk_bytes; done += max_message_bytes_) {
          const int piece = static_cast<int>(std::min(max_message_bytes_, chunk_bytes - done));
          check_mpi(call,
                    MPI_Sendrecv(in + to * chunk_bytes + done, piece, MPI_BYTE, to, kRingTag,
                                 out + from * chunk_bytes + done, piece, MPI_BYTE, from, kRingTag,
                                 ring.comm, MPI_STATUS_IGNORE),
                    "MPI_Sendrecv (all_to_all)");
        }
      }
    });
  }

  WorkHandle broadcast(const at::Tensor& buffer, int root,
                       const CollectiveOptions& options) override {
    check_group_is_all("broadcast", options);
    Call call{"broadcast", buffer};
    call.has_root = true;
    call.root = root;
    checker_.check_tensor(call, buffer, "buffer", /*reduction=*/false);
    ZERO_CHECK(root >= 0 && root < size_, describe(call), ": root must be in [0, ", size_,
               "), got ", root);
    const int64_t bytes = buffer.numel() * buffer.element_size();
    const int64_t received = size_ > 1 && rank_ != root ? bytes : 0;
    return issue(call, &CommStats::broadcast, received, receives_across_nodes_ ? received : 0,
                 bytes, options, [this, call, bytes] {
      if (size_ == 1) return;
      std::byte* data = bytes_of(call.input);
      for (int64_t done = 0; done < bytes; done += max_message_bytes_) {
        const int piece = static_cast<int>(std::min(max_message_bytes_, bytes - done));
        check_mpi(call, MPI_Bcast(data + done, piece, MPI_BYTE, call.root, comm_), "MPI_Bcast");
      }
    });
  }

  WorkHandle barrier(const CollectiveOptions& options) override {
    check_group_is_all("barrier", options);
    const Call call{"barrier"};
    return issue(call, nullptr, 0, 0, 0, options,
                 [this, call] { check_mpi(call, MPI_Barrier(comm_), "MPI_Barrier"); });
  }

  WorkHandle in_order(std::function<void()> task) override {
    return issue(Call{"in_order task"}, nullptr, 0, 0, 0, {}, std::move(task), /*watched=*/false);
  }

  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }

  void reset_stats() override {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_ = CommStats{};
  }

 private:
  // ---- the progress thread ---------------------------------------------------------------

  struct Task {
    const char* op;
    std::function<void()> run;
    std::shared_ptr<MpiWork> work;
    // An in_order task that fails may have issued fewer collectives than its peers' did: the
    // sequence the ranks share is broken, so everything after it fails too. A failed
    // collective was issued by every rank alike: the sequence holds.
    bool breaks_sequence = false;
  };

  // Counts the collective (`which` null: not a collective) and runs `body` on the progress
  // thread in issue order (at once when issued from that thread, inside a task), under the
  // collective deadline unless `watched` is false (a task's own collectives are watched).
  // `moved` and `across` are its counts (Note [Counting communicated bytes]), `bytes` its
  // buffer's size for the watchdog's message.
  WorkHandle issue(const Call& call, CollectiveCount CommStats::*which, int64_t moved,
                   int64_t across, int64_t bytes, const CollectiveOptions& options,
                   std::function<void()> body, bool watched = true) {
    CommStats counted;
    if (which != nullptr) {
      (counted.*which).calls = 1;
      (counted.*which).bytes = moved;
      counted.inter_node_bytes = across;
      std::lock_guard<std::mutex> lock(stats_mutex_);
      stats_ += counted;
    }
    auto work = std::make_shared<MpiWork>(counted);
    const bool compared = watched && check_signatures_ && size_ > 1;
    CollectiveSignature signature;
    if (compared) signature = signature_of(call, options.label);
    std::function<void()> run = [this, op = call.op, bytes, watched, compared,
                                 body = std::move(body), timeout = options.timeout_seconds,
                                 signature = std::move(signature)] {
      if (!watched) return body();
      const CollectiveWatchdog::Scope scope(*watchdog_, op, bytes, timeout);
      if (compared) agree_on_signature(signature);
      body();
    };
    if (std::this_thread::get_id() == progress_id_) {
      run();  // inside a task: the task is itself in order (errors propagate to it)
      work->finish(nullptr);
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      ZERO_INTERNAL_ASSERT(!stopping_, call.op, " issued to a communicator being destroyed");
      queue_.push_back(Task{call.op, std::move(run), work, /*breaks_sequence=*/!watched});
    }
    queue_cv_.notify_one();
    return work;
  }

  void progress() {
    progress_id_ = std::this_thread::get_id();
    std::string broken;  // the first failure; later tasks fail with it
    std::unique_lock<std::mutex> lock(queue_mutex_);
    while (true) {
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything issued has run
      Task task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr error;
      if (!broken.empty()) {
        error = std::make_exception_ptr(Error(std::string(task.op) + " on rank " +
                                              std::to_string(rank_) + " was not run: " + broken));
      } else {
        try {
          task.run();
        } catch (const std::exception& e) {
          error = std::current_exception();
          if (task.breaks_sequence) broken = "an earlier " + std::string(task.op) + " failed: " + e.what();
        } catch (...) {
          error = std::current_exception();
          if (task.breaks_sequence) broken = "an earlier " + std::string(task.op) + " failed";
        }
        // Ranks whose collectives parted (Note [Collective signatures]) run nothing more, even
        // where the task that found it caught the error itself.
        if (broken.empty() && !diverged_.empty()) broken = diverged_;
      }
      task.work->finish(error);
      lock.lock();
    }
  }

 private:
  // ---- node groups (CollectiveGroup) ------------------------------------------------------

  // The names of a collective over each CollectiveGroup, for messages (Call::op).
  static constexpr const char* kReduceScatterNames[3] = {
      "reduce_scatter", "reduce_scatter (node group)", "reduce_scatter (group across nodes)"};
  static constexpr const char* kAllGatherNames[3] = {
      "all_gather", "all_gather (node group)", "all_gather (group across nodes)"};
  static constexpr const char* kAllToAllNames[3] = {
      "all_to_all", "all_to_all (node group)", "all_to_all (group across nodes)"};
  static const char* op_name(const char* const (&names)[3], CollectiveGroup group) {
    return names[static_cast<int>(group)];
  }

  void check_group_is_all(const char* op, const CollectiveOptions& options) const {
    ZERO_CHECK(options.group == CollectiveGroup::kAll, op, " (mpi, rank ", rank_,
               " of world size ", size_, "): runs over every rank only (CollectiveGroup::kAll)");
  }

  // The ring of a group; its rank and size are the group's.
  const Ring& ring_of(CollectiveGroup group) const {
    if (group == CollectiveGroup::kAll) return flat_;
    ZERO_CHECK(node_groups_, "collective over ",
               group == CollectiveGroup::kNode ? "the node group" : "the group across nodes",
               " (mpi, rank ", rank_, " of world size ", size_, "): node groups need every node ",
               "to hold the same number of consecutive ranks, but the ranks run on ",
               topology_.describe());
    return group == CollectiveGroup::kNode ? intra_ : inter_;
  }
  const CallChecker& checker_of(CollectiveGroup group) const {
    if (group == CollectiveGroup::kAll) return checker_;
    ring_of(group);  // checks that the groups exist
    return group == CollectiveGroup::kNode ? intra_checker_ : inter_checker_;
  }
  // ---- topology --------------------------------------------------------------------------

  // Note [Topology]: collective, once, in the constructor.
  Topology discover_topology() {
    const Call call{"topology discovery"};
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(call, MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    // The node's key: its lowest rank (rank 0 of `node`, which is ordered by rank).
    int lowest = rank_;
    const int rc = MPI_Allreduce(&rank_, &lowest, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
    check_mpi(call, rc, "MPI_Allreduce (lowest rank of the node)");
    std::vector<int> keys(static_cast<size_t>(size_));
    check_mpi(call, MPI_Allgather(&lowest, 1, MPI_INT, keys.data(), 1, MPI_INT, comm_),
              "MPI_Allgather (node keys)");
    constexpr int kNameBytes = 256;
    char host[kNameBytes] = {};
    if (gethostname(host, kNameBytes - 1) != 0) std::snprintf(host, kNameBytes, "host-of-rank-%d", rank_);
    std::vector<char> hosts(static_cast<size_t>(size_) * kNameBytes);
    check_mpi(call, MPI_Allgather(host, kNameBytes, MPI_CHAR, hosts.data(), kNameBytes, MPI_CHAR, comm_),
              "MPI_Allgather (hostnames)");
    std::vector<int64_t> key_of_rank(keys.begin(), keys.end());
    std::vector<std::string> hostname_of_rank;
    for (int r = 0; r < size_; ++r) {
      const char* name = hosts.data() + static_cast<size_t>(r) * kNameBytes;
      hostname_of_rank.emplace_back(name, strnlen(name, kNameBytes));
    }
    return Topology::from_node_keys(key_of_rank, hostname_of_rank);
  }

  // ---- validation ----------------------------------------------------------------------

  // Note: one set of argument checks and messages for every backend (comm/collective_call.h).
  std::string describe(const Call& call) const { return checker_.describe(call); }

  // Note [Collective signatures]: on the progress thread, before the collective's data moves.
  // Every rank takes part whatever its signature, so every rank learns of a difference in the
  // same exchange and throws the same message.
  void agree_on_signature(const CollectiveSignature& signature) {
    if (!diverged_.empty()) throw Error("not run: " + diverged_);
    const int64_t number = ++signatures_compared_;
    const Call call{"collective signature check"};
    // MIN of the hash and of its complement: the least and (complemented) the greatest hash.
    int64_t extremes[2] = {static_cast<int64_t>(signature.hash),
                           static_cast<int64_t>(~signature.hash)};
    check_mpi(call, MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT64_T, MPI_MIN, comm_),
              "MPI_Allreduce (signature hashes)");
    if (extremes[0] == ~extremes[1]) return;
    constexpr int kTextBytes = 1024;  // a signature's text, cut to fit
    std::vector<char> mine(kTextBytes, '\0');
    signature.text.copy(mine.data(), kTextBytes - 1);
    std::vector<char> all(static_cast<size_t>(kTextBytes) * static_cast<size_t>(size_));
    check_mpi(call, MPI_Allgather(mine.data(), kTextBytes, MPI_CHAR, all.data(), kTextBytes,
                                  MPI_CHAR, comm_),
              "MPI_Allgather (signature texts)");
    std::vector<std::string> texts;
    for (int r = 0; r < size_; ++r) {
      texts.emplace_back(all.data() + static_cast<size_t>(r) * kTextBytes);
    }
    diverged_ = mismatch_message(backend_name(), number, texts);  // nothing runs after it
    throw Error(diverged_);
  }

  void check_mpi(const Call& call, int rc, const char* function) const {
    if (rc == MPI_SUCCESS) return;
    ZERO_CHECK(false, describe(call), ": ", function, " failed: ", mpi_error_string(rc));
  }

  // ---- schedules ---------------------------------------------------------------------------

  std::byte* scratch(int64_t bytes) { return scratch_.at_least(bytes, rank_); }

  // Note [MPI ring order]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // The order Note [Deterministic reduction] in zero/comm.h asks of a deterministic
  // backend: at step s = 0..N-2 rank r sends its working copy of
  // chunk (r-s-1) mod N to rank r+1 and receives chunk (r-s-2) mod N from rank r-1, reducing
  // the received partial into its own copy of that chunk. Chunk c therefore starts on rank
  // c+1 and picks up the ranks' contributions in the order c+2, ..., c: element-wise, the
  // result is ((x[c+1] + x[c+2]) + ...) + x[c] (each + is commutative, so it does not matter
  // which operand is the received one). The last step (s = N-2) receives chunk r itself and
  // writes the final sums straight to `result` (the output, or chunk r in place), which
  // saves copying the result afterwards.
  //
  // Segmentation: every chunk is cut into messages of at most seg elements; segment k of
  // step s is one MPI_Sendrecv, with MPI_PROC_NULL on the side that has run out of segments
  // (chunks differ in size). Each element is still reduced exactly once per step, in the
  // same step as without segmentation, so the order above is unchanged. Messages between two
  // neighbours are matched in posting order; each rank's (step, segment) position only waits
  // on neighbours at an earlier or equal position, so the schedule cannot deadlock.
  void ring_reduce_scatter(const Ring& ring, const Call& call, const Chunks& chunks, std::byte* base,
                           c10::ScalarType dtype, int64_t es, ReduceOp op, std::byte* result) {
    const int64_t seg = std::max<int64_t>(1, segment_bytes_ / es);
    const int64_t largest = *std::max_element(chunks.counts.begin(), chunks.counts.end());
    std::byte* recv = scratch(std::min(seg, largest) * es);
    ring_schedule(ring, call, chunks, base, es, seg, /*shift=*/1, "MPI_Sendrecv (ring reduce-scatter)",
                  [&](int, int64_t, std::byte*) {
                    return recv;  // segments land in the scratch buffer, then get reduced
                  },
                  [&](int step, int64_t offset, std::byte* recv_base, int64_t n) {
                    std::byte* reduced = step + 2 == ring.size ? result : recv_base;
                    reduce_to(op, dtype, reduced + offset, recv_base + offset, recv, n);
                  });
  }

  // The segmented ring both collectives share: at step s (0..N-2) rank r sends chunk
  // (r - s - shift) mod N to rank r+1 and receives chunk (r - s - shift - 1) mod N from rank
  // r-1, segment by segment (see the segmentation note above). `destination(step, offset,
  // recv_chunk_base)` says where a received segment lands; `received(step, offset,
  // recv_chunk_base, n)` runs after each Sendrecv with the n elements received.
  template <typename Destination, typename Received>
  void ring_schedule(const Ring& ring, const Call& call, const Chunks& chunks, std::byte* base, int64_t es,
                     int64_t seg, int shift, const char* what, Destination&& destination,
                     Received&& received) {
    const int next = ring.mod(ring.rank + 1);
    const int prev = ring.mod(ring.rank - 1);
    // Note [Collective timeout]: whom a rank stuck here waits for.
    watchdog_->waiting_on(ring.first + prev * ring.stride);
    for (int s = 0; s + 1 < ring.size; ++s) {
      const int send_chunk = ring.mod(ring.rank - s - shift);
      const int recv_chunk = ring.mod(ring.rank - s - shift - 1);
      const int64_t send_n = chunks.counts[send_chunk];
      const int64_t recv_n = chunks.counts[recv_chunk];
      const int64_t send_segs = ceil_div(send_n, seg);
      const int64_t recv_segs = ceil_div(recv_n, seg);
      std::byte* send_base = base + chunks.offsets[send_chunk] * es;
      std::byte* recv_base = base + chunks.offsets[recv_chunk] * es;
      for (int64_t k = 0; k < std::max(send_segs, recv_segs); ++k) {
        // A side that has run out of segments passes no pointer: its chunk may be empty (a
        // null base), and an offset past its end is not a pointer into it.
        const bool sending = k < send_segs;
        const bool receiving = k < recv_segs;
        const int64_t sn = sending ? std::min(seg, send_n - k * seg) : 0;
        const int64_t rn = receiving ? std::min(seg, recv_n - k * seg) : 0;
        const int64_t offset = k * seg * es;
        check_mpi(call,
                  MPI_Sendrecv(sending ? send_base + offset : nullptr, static_cast<int>(sn * es),
                               MPI_BYTE, sending ? next : MPI_PROC_NULL, kRingTag,
                               receiving ? destination(s, offset, recv_base) : nullptr,
                               static_cast<int>(rn * es), MPI_BYTE,
                               receiving ? prev : MPI_PROC_NULL, kRingTag, ring.comm,
                               MPI_STATUS_IGNORE),
                  what);
        if (receiving) received(s, offset, recv_base, rn);
      }
    }
  }

  // Note [Shared-memory reduce-scatter]: every rank's input is mapped here; rank c sums chunk
  // c of all of them in the ring's order, block by block (a block of partial sums stays in
  // cache while the N inputs stream through it).
  void shared_reduce_scatter(const Ring& ring, const Call& call, const Chunks& chunks,
                             const std::vector<const std::byte*>& inputs, c10::ScalarType dtype,
                             int64_t es, ReduceOp op, std::byte* out) {
    const int c = ring.rank;
    const int64_t n = chunks.counts[c];
    const int64_t chunk_offset = chunks.offsets[c] * es;
    constexpr int64_t kBlock = 16384;  // elements
    std::byte* partial = ring.size > 2 ? scratch(std::min(kBlock, std::max<int64_t>(n, 1)) * es)
                                       : nullptr;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t len = std::min(kBlock, n - b);
      auto source = [&](int r) { return inputs[ring.mod(r)] + chunk_offset + b * es; };
      std::byte* target = out + b * es;
      if (ring.size == 2) {
        reduce_to(op, dtype, target, source(c + 1), source(c), len);
      } else {
        reduce_to(op, dtype, partial, source(c + 1), source(c + 2), len);
        for (int k = 3; k < ring.size; ++k) reduce_into(op, dtype, partial, source(c + k), len);
        reduce_to(op, dtype, target, partial, source(c), len);
      }
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // Peers may still be reading this rank's input: nobody returns before everyone is done.
    check_mpi(call, MPI_Barrier(ring.comm), "MPI_Barrier (shared-memory reduce-scatter)");
  }

  // Chunk c of `base` (laid out by `chunks`) is valid on rank c; afterwards every chunk is
  // valid everywhere.
  void all_gather_in_place(const Ring& ring, const Call& call, const Chunks& chunks,
                           std::byte* base, int64_t es) {
    if (chunks.total == 0) return;
    if (!ring_all_gather_ && chunks.total * es <= max_message_bytes_) {
      mpi_counts_.resize(static_cast<size_t>(ring.size));
      mpi_displs_.resize(static_cast<size_t>(ring.size));
      for (int c = 0; c < ring.size; ++c) {
        mpi_counts_[c] = static_cast<int>(chunks.counts[c] * es);
        mpi_displs_[c] = static_cast<int>(chunks.offsets[c] * es);
      }
      check_mpi(call,
                MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, mpi_counts_.data(),
                               mpi_displs_.data(), MPI_BYTE, ring.comm),
                "MPI_Allgatherv");
      return;
    }
    // Ring: at step s rank r forwards chunk (r-s) mod N to r+1 and receives chunk (r-s-1)
    // mod N from r-1 straight into place; segmented like the reduce-scatter.
    const int64_t seg = std::max<int64_t>(1, segment_bytes_ / es);
    ring_schedule(ring, call, chunks, base, es, seg, /*shift=*/0, "MPI_Sendrecv (ring all-gather)",
                  [](int, int64_t offset, std::byte* recv_base) { return recv_base + offset; },
                  [](int, int64_t, std::byte*, int64_t) {});
  }

  // ---- Note [Hierarchical collectives] ----------------------------------------------------

  PackedLayout packed_layout(const Chunks& chunks) const {
    const int m = intra_.size, k = inter_.size;
    PackedLayout layout;
    std::vector<int64_t> super_counts(static_cast<size_t>(m), 0);
    for (int l = 0; l < m; ++l) {
      std::vector<int64_t> inner;
      for (int n = 0; n < k; ++n) inner.push_back(chunks.counts[n * m + l]);
      layout.inner.push_back(CallChecker::chunks_of(inner));
      super_counts[l] = layout.inner.back().total;
    }
    layout.super = CallChecker::chunks_of(super_counts);
    layout.packed.resize(static_cast<size_t>(m * k));
    for (int l = 0; l < m; ++l) {
      for (int n = 0; n < k; ++n) {
        layout.packed[n * m + l] = layout.super.offsets[l] + layout.inner[l].offsets[n];
      }
    }
    return layout;
  }

  // Copies every chunk between its place in `chunks` and its place in the packed layout.
  static void repack(const Chunks& chunks, const PackedLayout& layout, int64_t es,
                     const std::byte* from, std::byte* to, bool to_packed) {
    for (size_t c = 0; c < chunks.counts.size(); ++c) {
      const int64_t natural = chunks.offsets[c] * es, packed = layout.packed[c] * es;
      const size_t bytes = static_cast<size_t>(chunks.counts[c] * es);
      if (bytes == 0) continue;
      std::memcpy(to + (to_packed ? packed : natural), from + (to_packed ? natural : packed), bytes);
    }
  }

  // The packed layout's buffer: in shared memory of the node's ranks where it can be (the
  // node's reduce-scatter then reads the peers' packed inputs in place, Note [Shared-memory
  // reduce-scatter]), else private. Every rank of a node grows it in the same collective (the
  // sizes are the same on every rank), so the allocation, collective over the node, lines up.
  std::byte* packed_buffer(int64_t bytes) {
    if (node_shared_ != nullptr && node_shared_->enabled()) {
      if (bytes > node_packed_bytes_) {
        node_packed_.reset();  // unmaps the smaller one first
        const int64_t rounded = ceil_div(bytes, 4096) * 4096;
        std::function<void(void*)> deleter;
        std::byte* data = node_shared_->allocate(rounded, &deleter);
        if (data != nullptr) {
          // Host memory libtorch's allocator does not see (common/host_accounting.h).
          const bool counted = count_unallocated_host_bytes(rounded);
          node_packed_ = std::shared_ptr<std::byte>(data, [deleter, rounded, counted](std::byte* p) {
            count_unallocated_host_bytes(-rounded, counted);
            deleter(p);
          });
          node_packed_bytes_ = rounded;
        } else {
          node_packed_bytes_ = 0;
          node_shared_.reset();  // unanimous on the node: private from now on
        }
      }
      if (node_packed_ != nullptr) return node_packed_.get();
    }
    return packed_.at_least(bytes, rank_);
  }

  // The node's reduce-scatter of the packed super-chunks into `mine`: from the peers' packed
  // buffers in place when they are shared and large enough to gain, else the ring. Bitwise the
  // same either way (Note [Shared-memory reduce-scatter]).
  void node_reduce_scatter(const Call& call, const PackedLayout& layout, std::byte* packed,
                           c10::ScalarType dtype, int64_t es, ReduceOp op, std::byte* mine) {
    std::vector<const std::byte*> inputs;
    const int64_t bytes = layout.super.total * es;
    if (node_packed_ != nullptr && packed == node_packed_.get() && bytes >= kSharedMinBytes) {
      inputs = node_shared_->locate_inputs(packed, bytes);
    }
    if (!inputs.empty()) {
      shared_reduce_scatter(intra_, call, layout.super, inputs, dtype, es, op, mine);
    } else {
      ring_reduce_scatter(intra_, call, layout.super, packed, dtype, es, op, mine);
    }
  }

  void hierarchical_reduce_scatter(const Call& call, const Chunks& chunks, const std::byte* in,
                                   int64_t es, ReduceOp op, std::byte* out) {
    if (chunks.total == 0) return;
    const PackedLayout layout = packed_layout(chunks);
    std::byte* packed = packed_buffer(chunks.total * es);
    repack(chunks, layout, es, in, packed, /*to_packed=*/true);
    const c10::ScalarType dtype = call.input.scalar_type();
    std::byte* mine = packed + layout.super.offsets[intra_.rank] * es;
    node_reduce_scatter(call, layout, packed, dtype, es, op, mine);
    ring_reduce_scatter(inter_, call, layout.inner[intra_.rank], mine, dtype, es, op, out);
  }

  // Chunk rank_ of `out` is valid; afterwards every chunk is.
  void hierarchical_all_gather(const Call& call, const Chunks& chunks, std::byte* out, int64_t es) {
    if (chunks.total == 0) return;
    const PackedLayout layout = packed_layout(chunks);
    std::byte* packed = packed_buffer(chunks.total * es);
    const int64_t own = chunks.counts[rank_] * es;
    if (own > 0) {
      std::memcpy(packed + layout.packed[rank_] * es, out + chunks.offsets[rank_] * es,
                  static_cast<size_t>(own));
    }
    all_gather_in_place(inter_, call, layout.inner[intra_.rank],
                        packed + layout.super.offsets[intra_.rank] * es, es);
    all_gather_in_place(intra_, call, layout.super, packed, es);
    repack(chunks, layout, es, packed, out, /*to_packed=*/false);
  }

  void hierarchical_all_reduce(const Call& call, const Chunks& chunks, std::byte* data,
                               int64_t es, ReduceOp op) {
    const PackedLayout layout = packed_layout(chunks);
    std::byte* packed = packed_buffer(chunks.total * es);
    repack(chunks, layout, es, data, packed, /*to_packed=*/true);
    const c10::ScalarType dtype = call.input.scalar_type();
    const Chunks& inner = layout.inner[intra_.rank];
    std::byte* mine = packed + layout.super.offsets[intra_.rank] * es;
    node_reduce_scatter(call, layout, packed, dtype, es, op, mine);
    ring_reduce_scatter(inter_, call, inner, mine, dtype, es, op,
                        mine + inner.offsets[inter_.rank] * es);
    all_gather_in_place(inter_, call, inner, mine, es);
    all_gather_in_place(intra_, call, layout.super, packed, es);
    repack(chunks, layout, es, packed, data, /*to_packed=*/false);
  }

  // Note [Counting communicated bytes]: what this rank receives from another node in one
  // reduce-scatter or all-gather of `chunks` over `group`, which moves `moved` bytes in all.
  // Inside a node: nothing; one rank per node: everything. Over every rank, flat ring:
  // everything when rank r-1 is on another node; hierarchical: the other nodes' chunks of its
  // super-chunk (the inter-node ring).
  int64_t across_nodes(CollectiveGroup group, const Chunks& chunks, int64_t es,
                       int64_t moved) const {
    if (group == CollectiveGroup::kNode) return 0;
    if (group == CollectiveGroup::kAcrossNodes) return moved;
    if (!hierarchical_) return receives_across_nodes_ ? moved : 0;
    int64_t bytes = 0;
    for (int n = 0; n < inter_.size; ++n) {
      if (n != inter_.rank) bytes += chunks.counts[n * intra_.size + intra_.rank] * es;
    }
    return bytes;
  }

  // Below this many input bytes the ring's latency wins over the shared path's three syncs.
  static constexpr int64_t kSharedMinBytes = int64_t{64} << 10;

  MPI_Comm comm_ = MPI_COMM_NULL;
  Ring flat_;              // every rank
  bool node_groups_ = false;   // the topology is blocked: intra_ and inter_ exist
  bool hierarchical_ = false;  // the hierarchical schedules run (on intra_ and inter_)
  Ring intra_;             // this node's ranks (CollectiveGroup::kNode)
  Ring inter_;             // the ranks of this local index, one per node (kAcrossNodes)
  CallChecker intra_checker_{"mpi", 0, 1, c10::Device(c10::kCPU), ""};
  CallChecker inter_checker_{"mpi", 0, 1, c10::Device(c10::kCPU), ""};
  Topology topology_;
  bool receives_across_nodes_ = false;  // rank r-1, the ring's sender, is on another node
  std::unique_ptr<SharedSegments> shared_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // Note [Collective timeout]
  // Note [Collective signatures]; the counter and the message belong to the progress thread.
  bool check_signatures_ = true;
  int64_t signatures_compared_ = 0;
  std::string diverged_;  // the mismatch, once found: every later task fails with it
  int rank_ = 0;
  int size_ = 1;
  CallChecker checker_{"mpi", 0, 1, c10::Device(c10::kCPU), ""};  // set once rank_ is known
  int64_t segment_bytes_ = 0;
  int64_t max_message_bytes_ = 0;
  bool ring_all_gather_ = false;

  // Used by the progress thread only (so are scratch_ and the schedules).
  std::vector<int> mpi_counts_;
  std::vector<int> mpi_displs_;

  GrowOnlyBuffer scratch_{"receive scratch"};
  GrowOnlyBuffer packed_{"the hierarchical collectives' packed buffer"};
  std::unique_ptr<SharedSegments> node_shared_;  // hierarchical: the node's ranks
  std::shared_ptr<std::byte> node_packed_;       // packed_buffer in node_shared_
  int64_t node_packed_bytes_ = 0;

  mutable std::mutex stats_mutex_;
  CommStats stats_;

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread progress_;
  std::atomic<std::thread::id> progress_id_{};
};

}  // namespace

MpiOptions MpiOptions::from_env() {
  MpiOptions options;
  options.ring_segment_bytes = env::ring_segment_bytes();
  options.collective_timeout_seconds = env::collective_timeout_seconds();
  options.ranks_per_node = env::ranks_per_node_override();
  options.hierarchical = env::hierarchical_collectives();
  options.check_signatures = env::collective_checks();
  return options;
}

std::shared_ptr<Communicator> make_mpi_communicator(const MpiOptions& options) {
  return std::make_shared<MpiCommunicator>(options);
}

}  // namespace comm

std::shared_ptr<Communicator> make_mpi_communicator() {
  return comm::make_mpi_communicator(comm::MpiOptions::from_env());
}

void abort_mpi_job(int exit_code) {
  comm::MpiRuntime::ensure_initialized();
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this satisfies [[noreturn]]
}

}  // namespace zero
