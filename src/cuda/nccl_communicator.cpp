// The NCCL backend of zero::Communicator for CUDA tensors (zero/comm_nccl.h).
//
// Streams and order (no host thread and no device-wide synchronisation in the hot path):
//   - Each communicator owns one communication stream on its device, from c10's pool.
//   - A collective is checked and counted on the calling thread (comm/collective_call.h, the
//     checks and messages every backend shares). The thread records an event on the stream its
//     buffers were made on (CollectiveOptions::stream, else its current stream), makes the
//     communication stream wait for it, enqueues the NCCL call there and records a completion
//     event after it: its Work's. Issue is serialized (a recursive mutex: in_order tasks issue
//     collectives of their own), so the order of issue is the order on the stream.
//   - Work::wait() makes the caller's current stream wait for the completion event: what the
//     caller enqueues next runs after the collective, and the host goes on. wait_for() and
//     completed() query the event; barrier()'s Work blocks the host, as a barrier should.
//   - in_order(task) runs the task at once on the calling thread with the communication
//     stream current: the device work it enqueues follows every collective issued before it
//     and precedes every one issued after it. Its Work is an event recorded after it.
//   - The buffers are recorded on the communication stream with the caching allocator
//     (recordStream): memory the caller frees before the collective is done is not reused.
//   - CPU tensors (host-side exchanges: texts, agreement on failures, summaries) are copied to
//     the device and back on the communication stream, and complete when the call returns.
//
// Schedules: all_reduce, broadcast, and reduce_scatter / all_gather of equal chunks are the
// NCCL collectives of those names; unequal chunks are one NCCL group of N reduces (N
// broadcasts) rooted at each chunk's owner. Copies move bytes (ncclUint8), so every dtype
// gathers and broadcasts bit for bit. NCCL's reductions do not follow Note [Deterministic
// reduction] (their order depends on the topology and the algorithm NCCL picks), so
// capabilities() does not claim it.
//
// Errors: every NCCL and CUDA call's result is checked; a failure is a zero::Error naming the
// op, the rank, the world size, the buffers and NCCL's (or CUDA's) error string. A watchdog
// thread polls ncclCommGetAsyncError and the oldest unfinished collective: an asynchronous
// error, or a collective past the deadline (Note [Collective timeout]), is printed with the op,
// its bytes and sequence number; then the NCCL communicator is aborted (ncclCommAbort, so
// nothing stays blocked in it) and the job is ended with exit status 3 (abort_mpi_job), as the
// MPI backend does.
#include "zero/comm_nccl.h"
#include "zero/cuda_support.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/collective_call.h"
#include "common/env.h"
#include "zero/comm_mpi.h"
#include "zero/error.h"

namespace zero {
namespace {

using comm::Call;
using comm::CallChecker;
using comm::Chunks;
using Clock = std::chrono::steady_clock;

// The job's exit status when a collective passes its deadline (Note [Collective timeout]).
constexpr int kCollectiveTimeoutExitCode = 3;

std::string cuda_error_text(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

ncclDataType_t nccl_reduction_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    default: break;
  }
  ZERO_INTERNAL_ASSERT(false, "no NCCL reduction type for ", c10::toString(dtype));
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

// A CUDA event without timing, destroyed with its owner.
class Event {
 public:
  Event() {
    const cudaError_t rc = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
    ZERO_CHECK(rc == cudaSuccess, "NCCL communicator: cudaEventCreateWithFlags failed: ",
               cuda_error_text(rc));
  }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclCommunicator;

// A collective or task enqueued on the communication stream (zero::Work).
class NcclWork final : public Work {
 public:
  NcclWork(const NcclCommunicator& owner, std::string what, CommStats stats, bool host_blocking)
      : owner_(owner), what_(std::move(what)), stats_(stats), host_blocking_(host_blocking) {}

  void wait() override;
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool completed() const override {
    return finished_ || cudaEventQuery(done_.get()) != cudaErrorNotReady;
  }
  CommStats stats() const override { return stats_; }

  cudaEvent_t event() const { return done_.get(); }
  const std::string& what() const { return what_; }
  // Completed at issue (a CPU exchange, or nothing enqueued).
  void mark_finished() { finished_ = true; }

 private:
  const NcclCommunicator& owner_;
  Event done_;
  std::string what_;
  CommStats stats_;
  bool host_blocking_;
  std::atomic<bool> finished_{false};  // read by the watchdog thread
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, const NcclOptions& options)
      : rank_(bootstrap.rank()), size_(bootstrap.size()), topology_(bootstrap.topology()) {
    // Note [Counting communicated bytes]: counted as under a ring (NCCL picks its own).
    receives_across_nodes_ = topology_.node_of_rank[static_cast<size_t>((rank_ + size_ - 1) % size_)] !=
                             topology_.node_of_rank[static_cast<size_t>(rank_)];
    const int devices = cuda_device_count();
    ZERO_CHECK(devices > 0, "make_nccl_communicator on rank ", rank_,
               ": no CUDA device is visible to this process");
    int device = options.device;
    if (device < 0) device = default_cuda_device();
    ZERO_CHECK(device < devices, "make_nccl_communicator on rank ", rank_, ": device ", device,
               " asked for, but ", devices, " CUDA device(s) are visible");
    device_ = static_cast<c10::DeviceIndex>(device);
    // The rank's device becomes the creating thread's current one, before any call that would
    // make a context (else the runtime's default, GPU 0, gets one on every rank): a program
    // makes its communicator first, and then "cuda" tensors land on the rank's GPU.
    c10::cuda::set_device(device_);
    timeout_seconds_ =
        options.timeout_seconds >= 0 ? options.timeout_seconds : env::collective_timeout_seconds();
    const c10::cuda::CUDAGuard guard(device_);
    stream_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_));
    cuda_checker_.emplace(backend_name(), rank_, size_, c10::Device(c10::kCUDA, device_),
                          "the NCCL communicator handles CUDA tensors on cuda:" +
                              std::to_string(device) + " (and CPU tensors, copied through it)");
    cpu_checker_.emplace(backend_name(), rank_, size_, c10::Device(c10::kCPU),
                         "input and output must both be on cuda:" + std::to_string(device) +
                             " or both on the CPU");

    // Two ranks on one GPU: NCCL would fail or hang later; say so now, on every rank.
    cudaDeviceProp props{};
    ZERO_CHECK(cudaGetDeviceProperties(&props, device) == cudaSuccess,
               "make_nccl_communicator on rank ", rank_, ": cannot read device ", device);
    std::ostringstream where;
    where << props.pciDomainID << ":" << props.pciBusID << ":" << props.pciDeviceID;
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::vector<std::string> all =
        all_gather_texts(bootstrap, std::string(host) + " " + where.str());
    for (int r = 0; r < size_; ++r) {
      for (int q = r + 1; q < size_; ++q) {
        ZERO_CHECK(all[r] != all[q], "make_nccl_communicator: ranks ", r, " and ", q,
                   " are on the same GPU (", all[r], "); NCCL needs one GPU per rank. "
                   "Launch one rank per GPU, or share a GPU through the host-staged "
                   "communicator (make_host_staged_communicator, zero/comm_mpi.h)");
      }
    }

    // The unique id: made by rank 0, broadcast by the bootstrap communicator (host memory).
    ncclUniqueId id{};
    at::Tensor id_bytes = at::zeros({static_cast<int64_t>(sizeof(id))}, at::kByte);
    if (rank_ == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      ZERO_CHECK(rc == ncclSuccess, "make_nccl_communicator: ncclGetUniqueId failed: ",
                 ncclGetErrorString(rc));
      std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
    }
    bootstrap.broadcast(id_bytes, 0)->wait();
    std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
    const ncclResult_t rc = ncclCommInitRank(&comm_, size_, id, rank_);
    ZERO_CHECK(rc == ncclSuccess, "make_nccl_communicator on rank ", rank_, " of ", size_,
               " (cuda:", device, "): ncclCommInitRank failed: ", ncclGetErrorString(rc));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stopping_ = true;
    }
    watch_cv_.notify_all();
    watchdog_.join();
    if (!aborted_) {
      // What was issued finishes first (a communicator destroyed with work in flight would
      // leave the peers waiting in it).
      cudaStreamSynchronize(stream_->stream());
      ncclCommDestroy(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  const Topology& topology() const override { return topology_; }
  CommCapabilities capabilities() const override { return {}; }

  WorkHandle all_reduce(const at::Tensor& buffer, ReduceOp op,
                        const CollectiveOptions& options) override {
    Call call{"all_reduce", buffer};
    const CallChecker& checker = checker_for(buffer);
    checker.check_tensor(call, buffer, "buffer", /*reduction=*/true);
    const Chunks chunks = checker.balanced(buffer.numel());
    const int64_t moved = 2 * checker.others_bytes(chunks, buffer.element_size());
    return run(call, &CommStats::all_reduce, moved, options, {buffer}, [&](void* const* p) {
      return ncclAllReduce(p[0], p[0], static_cast<size_t>(buffer.numel()),
                           nccl_reduction_type(buffer.scalar_type()), nccl_op(op), comm_,
                           stream_->stream());
    });
  }

  WorkHandle reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                            const std::vector<int64_t>& counts,
                            const CollectiveOptions& options) override {
    Call call{"reduce_scatter", input, output, counts, /*has_counts=*/true};
    const CallChecker& checker = checker_for(input);
    const Chunks chunks =
        checker.check_chunked(call, input, "input", output, "output", /*reduction=*/true);
    const int64_t es = input.element_size();
    const ncclDataType_t type = nccl_reduction_type(input.scalar_type());
    return run(call, &CommStats::reduce_scatter, checker.others_bytes(chunks, es), options,
               {input, output}, [&](void* const* p) {
                 char* in = static_cast<char*>(p[0]);
                 if (chunks.equal()) {
                   return ncclReduceScatter(in, p[1], static_cast<size_t>(chunks.counts[0]),
                                            type, nccl_op(op), comm_, stream_->stream());
                 }
                 ncclResult_t rc = ncclGroupStart();
                 for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
                   rc = ncclReduce(in + chunks.offsets[r] * es, r == rank_ ? p[1] : nullptr,
                                   static_cast<size_t>(chunks.counts[r]), type, nccl_op(op), r,
                                   comm_, stream_->stream());
                 }
                 const ncclResult_t end = ncclGroupEnd();
                 return rc != ncclSuccess ? rc : end;
               });
  }

  WorkHandle all_gather(const at::Tensor& input, const at::Tensor& output,
                        const std::vector<int64_t>& counts,
                        const CollectiveOptions& options) override {
    Call call{"all_gather", input, output, counts, /*has_counts=*/true};
    const CallChecker& checker = checker_for(output);
    const Chunks chunks =
        checker.check_chunked(call, output, "output", input, "input", /*reduction=*/false);
    const int64_t es = output.element_size();
    return run(call, &CommStats::all_gather, checker.others_bytes(chunks, es), options,
               {input, output}, [&](void* const* p) {
                 char* out = static_cast<char*>(p[1]);
                 if (chunks.equal()) {
                   return ncclAllGather(p[0], out, static_cast<size_t>(chunks.counts[0] * es),
                                        ncclUint8, comm_, stream_->stream());
                 }
                 ncclResult_t rc = ncclGroupStart();
                 for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
                   rc = ncclBroadcast(r == rank_ ? p[0] : nullptr, out + chunks.offsets[r] * es,
                                      static_cast<size_t>(chunks.counts[r] * es), ncclUint8, r,
                                      comm_, stream_->stream());
                 }
                 const ncclResult_t end = ncclGroupEnd();
                 return rc != ncclSuccess ? rc : end;
               });
  }

  WorkHandle all_to_all(const at::Tensor& input, const at::Tensor& output,
                        const CollectiveOptions& options) override {
    Call call{"all_to_all", input, output};
    const CallChecker& checker = checker_for(input);
    checker.check_tensor(call, input, "input", /*reduction=*/false);
    checker.check_tensor(call, output, "output", /*reduction=*/false);
    checker.check_same_dtype(call, input, output);
    ZERO_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0,
               checker.describe(call), ": input and output must hold the same number of ",
               "elements, a multiple of the ", size_, " ranks");
    const size_t chunk_bytes = static_cast<size_t>(input.nbytes() / size_);
    const int64_t moved = static_cast<int64_t>(chunk_bytes) * (size_ - 1);
    return run(call, &CommStats::all_to_all, moved, options, {input, output}, [&](void* const* p) {
      const char* in = static_cast<const char*>(p[0]);
      char* out = static_cast<char*>(p[1]);
      ncclResult_t rc = ncclGroupStart();
      for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
        rc = ncclSend(in + r * chunk_bytes, chunk_bytes, ncclUint8, r, comm_, stream_->stream());
        if (rc == ncclSuccess) {
          rc = ncclRecv(out + r * chunk_bytes, chunk_bytes, ncclUint8, r, comm_, stream_->stream());
        }
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

  WorkHandle broadcast(const at::Tensor& buffer, int root,
                       const CollectiveOptions& options) override {
    Call call{"broadcast", buffer};
    call.has_root = true;
    call.root = root;
    const CallChecker& checker = checker_for(buffer);
    checker.check_tensor(call, buffer, "buffer", /*reduction=*/false);
    ZERO_CHECK(root >= 0 && root < size_, checker.describe(call), ": root must be in [0, ",
               size_, ")");
    const int64_t moved = size_ > 1 && rank_ != root ? buffer.nbytes() : 0;
    return run(call, &CommStats::broadcast, moved, options, {buffer}, [&](void* const* p) {
      return ncclBroadcast(p[0], p[0], static_cast<size_t>(buffer.nbytes()), ncclUint8, root,
                           comm_, stream_->stream());
    });
  }

  WorkHandle barrier(const CollectiveOptions& options) override {
    const c10::cuda::CUDAGuard guard(device_);
    const at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(
                                                 c10::Device(c10::kCUDA, device_)));
    const Call call{"barrier", token};
    return run(call, nullptr, 0, options, {token}, [&](void* const* p) {
      return ncclAllReduce(p[0], p[0], 1, ncclFloat32, ncclSum, comm_, stream_->stream());
    }, /*host_blocking=*/true);
  }

  WorkHandle in_order(std::function<void()> task) override {
    std::lock_guard<std::recursive_mutex> lock(issue_mutex_);
    check_usable("in_order task");
    // The work's event on this communicator's device, whichever is current on this thread.
    const c10::cuda::CUDAGuard device_guard(device_);
    auto work = std::make_shared<NcclWork>(*this, "in_order task", CommStats{}, false);
    {
      const c10::cuda::CUDAStreamGuard stream_guard(*stream_);
      try {
        task();
      } catch (const std::exception& e) {
        // A task that failed may have issued fewer collectives than its peers: the sequence
        // the ranks share is broken (zero/comm.h, Work).
        broken_ = std::string("an earlier in_order task failed: ") + e.what();
        throw;
      }
    }
    record(work);
    return work;
  }

  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }
  void reset_stats() override {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_ = CommStats{};
  }

  c10::DeviceIndex device() const { return device_; }
  // Throws when the communicator can no longer be used (an asynchronous error or an abort).
  void check_failed(const std::string& what) const {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    ZERO_CHECK(failure_.empty(), what, " on rank ", rank_, ": the NCCL communicator failed: ",
               failure_);
  }

 private:
  const CallChecker& checker_for(const at::Tensor& t) const {
    return t.defined() && t.device().is_cpu() ? *cpu_checker_ : *cuda_checker_;
  }

  void check_usable(const char* op) const {
    ZERO_CHECK(broken_.empty(), op, " on rank ", rank_, " was not run: ", broken_);
    check_failed(op);
  }

  // Counts the collective, then enqueues `nccl` (given the buffers' data pointers) on the
  // communication stream after the buffers' producers, or runs it through device copies of
  // CPU buffers; returns its Work.
  template <typename Nccl>
  WorkHandle run(const Call& call, CollectiveCount CommStats::*which, int64_t moved,
                 const CollectiveOptions& options, std::vector<at::Tensor> buffers,
                 const Nccl& nccl, bool host_blocking = false) {
    std::lock_guard<std::recursive_mutex> lock(issue_mutex_);
    check_usable(call.op);
    const CallChecker& checker = checker_for(buffers.front());
    // No silent downgrade: a collective asked of a node group does not run over every rank.
    ZERO_CHECK(options.group == CollectiveGroup::kAll, checker.describe(call), ": the NCCL ",
               "backend runs collectives over every rank only (CollectiveGroup::kAll); node ",
               "groups (ZeRO++ hpZ and qgZ) need the MPI backend, or host staging over it");
    CommStats counted;
    if (which != nullptr) {
      (counted.*which).calls = 1;
      (counted.*which).bytes = moved;
      counted.inter_node_bytes = receives_across_nodes_ ? moved : 0;
      std::lock_guard<std::mutex> stats_lock(stats_mutex_);
      stats_ += counted;
    }
    // The guard first: the work's event is made on the current device.
    const c10::cuda::CUDAGuard guard(device_);
    auto work = std::make_shared<NcclWork>(*this, checker.describe(call), counted, host_blocking);
    const bool on_host = buffers.front().device().is_cpu();
    std::vector<at::Tensor> device_buffers = buffers;
    {
      const c10::cuda::CUDAStreamGuard stream_guard(*stream_);
      if (on_host) {
        for (at::Tensor& b : device_buffers) {
          b = b.to(c10::Device(c10::kCUDA, device_), /*non_blocking=*/false, /*copy=*/true);
        }
      } else {
        // After the buffers' producers: the given stream, else the caller's current one.
        const cudaStream_t producer =
            options.stream != nullptr ? static_cast<cudaStream_t>(options.stream)
                                      : c10::cuda::getCurrentCUDAStream(device_).stream();
        Event ready;
        check_cuda(call, cudaEventRecord(ready.get(), producer), "cudaEventRecord");
        check_cuda(call, cudaStreamWaitEvent(stream_->stream(), ready.get(), 0),
                   "cudaStreamWaitEvent");
        for (const at::Tensor& b : device_buffers) {
          c10::cuda::CUDACachingAllocator::recordStream(b.storage().data_ptr(), *stream_);
        }
      }
      std::vector<void*> pointers;
      for (const at::Tensor& b : device_buffers) pointers.push_back(b.data_ptr());
      const ncclResult_t rc = nccl(pointers.data());
      ZERO_CHECK(rc == ncclSuccess, work->what(), ": NCCL failed: ", ncclGetErrorString(rc),
                 " (", ncclGetLastError(comm_), ")");
      if (on_host) {
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(device_buffers[i]);
      }
    }
    record(work, timeout_for(options));
    if (on_host) {
      check_cuda(call, cudaEventSynchronize(work->event()), "cudaEventSynchronize");
      work->mark_finished();
    }
    return work;
  }

  int64_t timeout_for(const CollectiveOptions& options) const {
    return options.timeout_seconds > 0 ? options.timeout_seconds : timeout_seconds_;
  }

  void check_cuda(const Call& call, cudaError_t rc, const char* function) const {
    ZERO_CHECK(rc == cudaSuccess, cuda_checker_->describe(call), ": ", function, " failed: ",
               cuda_error_text(rc));
  }

  // Records the Work's completion event on the communication stream and hands it to the
  // watchdog, which ends the job if it is not done within `timeout` seconds (0: never).
  void record(const std::shared_ptr<NcclWork>& work, int64_t timeout = 0) {
    const cudaError_t rc = cudaEventRecord(work->event(), stream_->stream());
    ZERO_CHECK(rc == cudaSuccess, work->what(), ": cudaEventRecord failed: ",
               cuda_error_text(rc));
    std::lock_guard<std::mutex> lock(watch_mutex_);
    ++sequence_;
    if (timeout > 0) {
      watched_.push_back(Watched{work, work->stats().total_bytes(), sequence_,
                                 Clock::now() + std::chrono::seconds(timeout)});
    }
  }

  // Note [Collective timeout] for NCCL: the oldest unfinished collective past its deadline, or
  // an asynchronous NCCL error, ends the job.
  void watch() {
    // This thread's CUDA calls (event queries) on the communicator's device, not GPU 0.
    c10::cuda::set_device(device_);
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stopping_) {
      watch_cv_.wait_for(lock, std::chrono::milliseconds(200));
      while (!watched_.empty() && watched_.front().work->completed()) {
        watched_.pop_front();
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      std::string failure;
      if (async != ncclSuccess && async != ncclInProgress) {
        failure = std::string("asynchronous NCCL error: ") + ncclGetErrorString(async);
      } else if (!watched_.empty() && Clock::now() > watched_.front().deadline) {
        const Watched& late = watched_.front();
        failure = late.work->what() + " (collective " + std::to_string(late.sequence) + ", " +
                  std::to_string(late.bytes) + " bytes moved by this rank) did not finish " +
                  "within its deadline of ZERO_COLLECTIVE_TIMEOUT_S = " +
                  std::to_string(timeout_seconds_) + " s: a peer is stopped, dead or in " +
                  "another collective";
      }
      if (failure.empty()) continue;
      failure_ = failure;
      std::fprintf(stderr, "zero: rank %d: %s; aborting the NCCL communicator and the job\n",
                   rank_, failure.c_str());
      std::fflush(stderr);
      ncclCommAbort(comm_);
      aborted_ = true;
      abort_mpi_job(kCollectiveTimeoutExitCode);
    }
  }

  struct Watched {
    std::shared_ptr<const NcclWork> work;  // kept alive (its event) until it has finished
    int64_t bytes;
    int64_t sequence;
    Clock::time_point deadline;
  };

  int rank_;
  int size_;
  Topology topology_;  // the bootstrap's (Note [Topology])
  bool receives_across_nodes_ = false;
  c10::DeviceIndex device_ = 0;
  int64_t timeout_seconds_ = 0;
  ncclComm_t comm_ = nullptr;
  std::optional<c10::cuda::CUDAStream> stream_;
  std::optional<CallChecker> cuda_checker_;
  std::optional<CallChecker> cpu_checker_;
  std::recursive_mutex issue_mutex_;
  std::string broken_;  // set by a failed in_order task (under issue_mutex_)
  mutable std::mutex stats_mutex_;
  CommStats stats_;
  mutable std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::deque<Watched> watched_;
  int64_t sequence_ = 0;
  std::string failure_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

void NcclWork::wait() {
  owner_.check_failed(what_);
  if (finished_) return;
  if (host_blocking_) {
    const cudaError_t rc = cudaEventSynchronize(done_.get());
    ZERO_CHECK(rc == cudaSuccess, what_, ": cudaEventSynchronize failed: ", cuda_error_text(rc));
    owner_.check_failed(what_);
    return;
  }
  // On the device: the caller's stream continues after the collective; the host goes on.
  const cudaStream_t current = c10::cuda::getCurrentCUDAStream(owner_.device()).stream();
  const cudaError_t rc = cudaStreamWaitEvent(current, done_.get(), 0);
  ZERO_CHECK(rc == cudaSuccess, what_, ": cudaStreamWaitEvent failed: ", cuda_error_text(rc));
}

bool NcclWork::wait_for(std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (!completed()) {
    owner_.check_failed(what_);
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  owner_.check_failed(what_);
  return true;
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it: no driver or no device is an answer, not an error
    return 0;
  }
  return count;
}

int default_cuda_device() {
  const int devices = cuda_device_count();
  if (devices == 0) return -1;
  return cuda_device_for_local_rank(env::local_rank(), devices);
}

std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap,
                                                     const NcclOptions& options) {
  std::shared_ptr<Communicator> made;
  // Every rank fails together (Note [Agreeing on a failure]): a rank without a device must
  // not leave the others in the bootstrap's broadcast of the unique id.
  const int devices = cuda_device_count();
  agree_on_failure(bootstrap, "make_nccl_communicator",
                   devices > 0 ? std::string()
                               : "rank " + std::to_string(bootstrap.rank()) +
                                     " sees no CUDA device");
  made = std::make_shared<NcclCommunicator>(bootstrap, options);
  return made;
}

}  // namespace zero
