// Host staging: a Communicator for tensors on a device (CUDA) whose collectives run on a host
// communicator (the MPI one), through host copies. It lets several ranks share one GPU (NCCL
// cannot) and GPUs train without NCCL, at the cost of copying every buffer to the host and
// back; with the MPI backend the reductions keep Note [Deterministic reduction], so CUDA runs
// are bitwise reproducible across world sizes the way CPU runs are.
//
// Order: a collective is checked at issue, on the calling thread (comm/collective_call.h), which
// records an event on its current stream, where the device buffers were made (given a
// CollectiveOptions::stream instead, it waits for the whole device). The copies and the host collective then run as one in_order task
// of the host communicator: on its thread, in issue order, the task waits for the event, copies
// the buffers to the host, runs the collective there and copies the results back, blocking
// until they have landed. Its Work is the task's, so wait() returns with the results on the
// device. Byte counts are the host communicator's (the same collectives).
#include "comm/host_staged_communicator.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <optional>
#include <utility>

#include "comm/collective_call.h"
#include "zero/comm_mpi.h"
#include "zero/error.h"

namespace zero {
namespace comm {
namespace {

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(std::shared_ptr<Communicator> host, const HostStagedOptions& options)
      : host_(std::move(host)), options_(options) {
    ZERO_CHECK(host_ != nullptr, "make_host_staged_communicator: the host communicator is null");
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string backend_name() const override { return host_->backend_name() + "+host-staged"; }
  CommCapabilities capabilities() const override { return host_->capabilities(); }
  const Topology& topology() const override { return host_->topology(); }

  WorkHandle all_reduce(const at::Tensor& buffer, ReduceOp op,
                        const CollectiveOptions& options) override {
    Call call{"all_reduce", buffer};
    checker(buffer).check_tensor(call, buffer, "buffer", /*reduction=*/true);
    if (!staged(buffer)) return host_->all_reduce(buffer, op, options);
    return stage(options, {buffer}, [this, op, options](const std::vector<at::Tensor>& h) {
      host_->all_reduce(h[0], op, options)->wait();
    });
  }

  WorkHandle reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                            const std::vector<int64_t>& counts,
                            const CollectiveOptions& options) override {
    Call call{"reduce_scatter", input, output, counts, /*has_counts=*/true};
    if (options.group == CollectiveGroup::kAll) {  // a node group's chunks: the host checks
      checker(input).check_chunked(call, input, "input", output, "output", /*reduction=*/true);
    }
    if (!staged(input)) return host_->reduce_scatter(input, output, op, counts, options);
    return stage(options, {input, output},
                 [this, op, counts, options](const std::vector<at::Tensor>& h) {
                   host_->reduce_scatter(h[0], h[1], op, counts, options)->wait();
                 });
  }

  WorkHandle all_gather(const at::Tensor& input, const at::Tensor& output,
                        const std::vector<int64_t>& counts,
                        const CollectiveOptions& options) override {
    Call call{"all_gather", input, output, counts, /*has_counts=*/true};
    // A node group's chunks are the group's: the host checks them (CollectiveGroup).
    if (options.group == CollectiveGroup::kAll) {
      checker(output).check_chunked(call, output, "output", input, "input", /*reduction=*/false);
    }
    if (!staged(output)) return host_->all_gather(input, output, counts, options);
    return stage(options, {input, output},
                 [this, counts, options](const std::vector<at::Tensor>& h) {
                   host_->all_gather(h[0], h[1], counts, options)->wait();
                 });
  }

  WorkHandle all_to_all(const at::Tensor& input, const at::Tensor& output,
                        const CollectiveOptions& options) override {
    if (!staged(input) && !staged(output)) return host_->all_to_all(input, output, options);
    return stage(options, {input, output}, [this, options](const std::vector<at::Tensor>& h) {
      host_->all_to_all(h[0], h[1], options)->wait();
    });
  }

  WorkHandle broadcast(const at::Tensor& buffer, int root,
                       const CollectiveOptions& options) override {
    Call call{"broadcast", buffer};
    call.has_root = true;
    call.root = root;
    const CallChecker check = checker(buffer);
    check.check_tensor(call, buffer, "buffer", /*reduction=*/false);
    ZERO_CHECK(root >= 0 && root < size(), check.describe(call), ": root must be in [0, ", size(),
               ")");
    if (!staged(buffer)) return host_->broadcast(buffer, root, options);
    return stage(options, {buffer}, [this, root, options](const std::vector<at::Tensor>& h) {
      host_->broadcast(h[0], root, options)->wait();
    });
  }

  WorkHandle barrier(const CollectiveOptions& options) override { return host_->barrier(options); }
  WorkHandle in_order(std::function<void()> task) override {
    return host_->in_order(std::move(task));
  }
  at::Tensor allocate_buffer(int64_t numel, at::ScalarType dtype) override {
    return host_->allocate_buffer(numel, dtype);
  }
  CommStats stats() const override { return host_->stats(); }
  void reset_stats() override { host_->reset_stats(); }

 private:
  // The checks of one call: its buffers on the first buffer's device, whichever it is.
  CallChecker checker(const at::Tensor& first) const {
    const c10::Device device = first.defined() ? first.device() : c10::Device(c10::kCPU);
    return CallChecker(backend_name(), rank(), size(), device,
                       "a host-staged collective's buffers must all be on one device");
  }

  bool staged(const at::Tensor& t) const {
    return !t.device().is_cpu() || options_.stage_cpu_tensors;
  }

  // Runs `collective` on host copies of `buffers` in the host communicator's order, after the
  // buffers' producers, and copies every buffer back (in place collectives and scratch inputs
  // alike: what the host collective leaves is what the device buffers hold).
  template <typename Collective>
  WorkHandle stage(const CollectiveOptions& options, std::vector<at::Tensor> buffers,
                   Collective collective) {
    const c10::Device device = buffers.front().device();
    std::shared_ptr<c10::Event> ready;
    if (!device.is_cpu()) {
      const c10::impl::VirtualGuardImpl guard(device.type());
      if (options.stream != nullptr) {
        // A raw stream handle has no device-independent form here: wait for the whole device
        // (this path is the slow one anyway: every buffer goes through the host).
        guard.synchronizeDevice(device.index());
      } else {
        ready = std::make_shared<c10::Event>(device.type());
        ready->record(guard.getStream(device));
      }
    }
    return host_->in_order([buffers = std::move(buffers), ready, device,
                            collective = std::move(collective)] {
      // The host communicator's thread: its CUDA calls on the buffers' device (a fresh
      // thread's current device is GPU 0, where its first call would make a context).
      std::optional<c10::DeviceGuard> on_device;
      if (!device.is_cpu()) on_device.emplace(device);
      if (ready) ready->synchronize();
      std::vector<at::Tensor> host;
      for (const at::Tensor& b : buffers) {
        host.push_back(b.to(c10::Device(c10::kCPU), /*non_blocking=*/false, /*copy=*/true));
      }
      collective(host);
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(host[i]);
    });
  }

  std::shared_ptr<Communicator> host_;
  HostStagedOptions options_;
};

}  // namespace

std::shared_ptr<Communicator> make_host_staged_communicator(std::shared_ptr<Communicator> host,
                                                            const HostStagedOptions& options) {
  return std::make_shared<HostStagedCommunicator>(std::move(host), options);
}

}  // namespace comm

std::shared_ptr<Communicator> make_host_staged_communicator(std::shared_ptr<Communicator> host) {
  return comm::make_host_staged_communicator(std::move(host), comm::HostStagedOptions{});
}

}  // namespace zero
