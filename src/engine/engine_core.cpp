// Note [Gradient scaling]
// ~~~~~~~~~~~~~~~~~~~~~~~
// backward() scales the loss by loss_scale / gradient_accumulation_steps and the reduction
// sums over ranks without dividing. The step folds the rest into one multiplier applied
// inside the fused optimizer loop: grad * clip_coefficient / (world_size * loss_scale). With
// DeepSpeed's prescale_gradients (or gradient_predivide_factor) a group's gradients are first
// multiplied by pre_reduction_multiplier (1 / world_size, or 1 / the factor) just before they
// are summed, and the step's divisor is world_size * loss_scale * that multiplier
// (gradient_divisor): the same average, summed in a smaller range (fp16's reason for it). The
// global norm is computed from the owned, summed gradients (fp64 squares, padding excluded,
// summed over ranks by a deterministic all-reduce), so every stage computes it identically.
//
// Note [A step without a device read]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Read on the host, the global norm stops the host at every step until the GPU has finished
// backward: the optimizer's kernels and the next forward's wait to be launched behind that
// read, and a CUDA graph cannot hold the step at all. So the norm, the clip coefficient and
// the multiplier are fp64 tensor operations, one implementation wherever they run: on the
// device where nothing on the host needs them (the fused device update then multiplies by
// the tensor, optim/device_update.h), else on a host copy of the sum, read once. The host
// needs it in three kinds of step: fp16 (the loss scaler must know of an overflow before the
// step: skipped steps and scale changes are host decisions), a device model's optimizer
// offloaded to the host (the CPU loops take a host value; the transfer synchronises anyway),
// and LAMB and Muon (host-side passes); on CPU ranks the host is the device. The norm itself
// is read only when asked for (global_grad_norm()) or when the monitor reports it.
#include "engine/engine_core.h"

#include "offload/async_io.h"
#include "offload/swap_directory.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "common/env.h"
#include "common/parallel.h"
#include "engine/fingerprint.h"
#include "optim/muon.h"
#include "zero/error.h"

namespace zero {
namespace {

// Elements per block of the deterministic sum of squares.
constexpr int64_t kNormBlock = 16384;

template <typename T>
double block_sum_of_squares(const T* data, int64_t begin, int64_t end) {
  double acc = 0.0;
  for (int64_t i = begin; i < end; ++i) {
    const double x = static_cast<double>(data[i]);
    acc += x * x;
  }
  return acc;
}

}  // namespace

at::Tensor sum_of_squares(const at::Tensor& tensor) {
  if (!tensor.device().is_cpu()) {
    return at::linalg_vector_norm(tensor, 2, c10::nullopt, false, at::kDouble).square().reshape({1});
  }
  const int64_t n = tensor.numel();
  if (n == 0) return at::zeros({1}, at::kDouble);
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  // One partial sum per fixed block, added in block order: the same bits for any thread count.
  const at::Tensor partial = at::zeros({blocks}, at::kDouble);
  double* sums = partial.data_ptr<double>();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, tensor.scalar_type(), "sum_of_squares", [&] {
        const scalar_t* data = tensor.data_ptr<scalar_t>();
        parallel_ranges(partial, 1, [&](int64_t first, int64_t last) {
          for (int64_t b = first; b < last; ++b) {
            sums[b] = block_sum_of_squares(data, b * kNormBlock, std::min(n, (b + 1) * kNormBlock));
          }
        });
      });
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += sums[b];
  return at::full({1}, total, at::kDouble);
}

EngineCore::EngineCore(std::shared_ptr<torch::nn::Module> model, const Config& config,
                       std::shared_ptr<Communicator> comm)
    : model_(std::move(model)),
      config_(config),
      comm_(std::move(comm)),
      scaler_(config.loss_scale, config.param_dtype == at::kHalf) {
  ZERO_CHECK(model_ != nullptr, "zero::initialize: model is null");
  ZERO_CHECK(comm_ != nullptr, "zero::initialize: communicator is null");
  // A config built or changed in code meets the parser's rules and messages too.
  validate_config(config_);
  rank_ = comm_->rank();
  world_ = comm_->size();
  ZERO_CHECK(config_.world_size == world_, config_.source, ": the config was solved for world size ",
             config_.world_size, " but the communicator has ", world_,
             " ranks; pass comm->size() to parse_config/load_config");
  // validate_config has checked the stage and the dtypes (Note [Compute dtype]).
  stage_ = config_.zero_optimization.stage;
  policy_ = stage_policy(config_.zero_optimization);
  param_dtype_ = config_.param_dtype;
  compute_dtype_ = config_.compute_dtype;
  comm_dtype_ = config_.communication_dtype;
  pre_reduction_multiplier_ = pre_reduction_multiplier(config_);
  grad_shard_dtype_ = kept_gradient_dtype(config_);
  scheduler_ = make_scheduler(config_);
  lr_ = scheduler_ ? scheduler_->lr_at(0) : config_.optimizer.lr;
  // An unwritable csv_monitor path fails on rank 0 alone: the error waits for
  // check_ranks_agree, where every rank fails together (Note [Agreeing on a failure]).
  startup_error_ =
      capture_error([&] { monitor_ = std::make_unique<EngineMonitor>(config_, rank_); });
  if (!monitor_) monitor_ = std::make_unique<EngineMonitor>(config_, /*rank=*/-1);  // silent
  hook_target_ = std::make_shared<HookTarget>();
  hook_target_->engine = this;
}

EngineCore::~EngineCore() { shutdown(); }

void EngineCore::shutdown() noexcept {
  try {
    wait_submitted();
  } catch (...) {
    // A failed collective was already reported by the call that waited on it, or is lost
    // with the engine; a destructor must not throw.
  }
  if (hook_target_) {
    std::lock_guard<std::mutex> lock(hook_target_->mutex);
    hook_target_->engine = nullptr;
  }
}

TrainingCounters EngineCore::counters() const {
  TrainingCounters c;
  c.global_steps = global_steps_;
  c.skipped_steps = skipped_steps_;
  c.micro_steps = micro_steps_;
  c.optimizer_steps = state_->optimizer_steps();
  c.lr = lr_;
  c.scaler = scaler_.state();
  return c;
}

void EngineCore::finish_load(const TrainingCounters& c) {
  global_steps_ = c.global_steps;
  skipped_steps_ = c.skipped_steps;
  micro_steps_ = c.micro_steps;
  state_->set_optimizer_steps(c.optimizer_steps);
  lr_ = c.lr;
  scaler_.restore(c.scaler);
  grad_norm_ = at::Tensor();
  window_ = BoundaryRecord{};
  reload_parameters();
}

std::string EngineCore::save_checkpoint(const std::string& dir, const std::string& tag,
                                        const std::string& client_state) {
  ZERO_CHECK(!in_backward_, "save_checkpoint during backward");
  ZERO_CHECK(half_updated_.empty(), "save_checkpoint: ", half_updated_);
  ZERO_CHECK(!overlapped_.done, "save_checkpoint between the backward and the step of an "
             "accumulation boundary: the offloaded optimizer has already stepped during that "
             "backward (Note [Offload of a device model]) and the step's counters follow in "
             "engine.step(); save after step()");
  quiesce();
  return zero::save_checkpoint(*this, dir, tag, client_state);
}

void EngineCore::check_checkpoint_destination(const std::string& dir) {
  zero::check_checkpoint_destination(*this, dir);
}

std::string EngineCore::load_checkpoint(const std::string& dir, const std::string& tag) {
  ZERO_CHECK(!in_backward_, "load_checkpoint during backward");
  quiesce();
  std::string client_state = zero::load_checkpoint(*this, dir, tag);
  half_updated_.clear();  // the whole state was replaced
  overlapped_.done = false;
  return client_state;
}

void EngineCore::set_learning_rate(double lr) {
  ZERO_CHECK(scheduler_ == nullptr, "set_learning_rate(", lr, "): the config's scheduler (",
             config_.source, ") sets the learning rate; remove it to set the rate by hand");
  ZERO_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got ", lr);
  ZERO_CHECK(!overlapped_.done, "set_learning_rate(", lr, ") between the backward and the step "
             "of an accumulation boundary: the offloaded optimizer has already stepped during "
             "that backward with rate ", overlapped_.lr, " (it overlaps the step with backward "
             "when the update needs no gradient norm); set the rate before backward");
  lr_ = lr;
}

void EngineCore::check_ranks_agree(const std::string& parameters_description) {
  agree_on_failure(*comm_, "initialize", startup_error_);
  std::ostringstream description;
  description << "world size " << world_ << "\n";
  for (const std::string& line : effective_config_lines(config_)) {
    description << "config " << line << "\n";
  }
  description << parameters_description;
  check_ranks_agree_on(*comm_, description.str());
}

void EngineCore::register_gradient_hooks(const std::vector<at::Tensor>& params,
                                         const std::vector<std::string>& names) {
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    // Autograd keeps only a weak reference to a parameter's AccumulateGrad node: hold it, or
    // a new node (without our hook) is created at the next backward.
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    ZERO_INTERNAL_ASSERT(accumulator != nullptr, "no grad accumulator for ", names[i]);
    std::shared_ptr<HookTarget> target = hook_target_;
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [target, i](const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list& /*inputs*/) {
          std::lock_guard<std::mutex> lock(target->mutex);
          if (target->engine != nullptr) target->engine->deliver_gradient(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
    hooked_names_.push_back(names[i]);
  }
  gradient_arrived_.assign(hooked_names_.size(), 0);
}

// Autograd sums every contribution to a parameter's gradient before its AccumulateGrad runs,
// once per backward; the engines count on that (a bucket's or group's pending count, the copy
// into its buffer). A checkpointed call's recompute runs a backward of its own (Note
// [Activation checkpointing]), so a parameter used inside one and also elsewhere gets a second
// AccumulateGrad in the same engine.backward: refused by name rather than reduced wrong.
void EngineCore::deliver_gradient(int index) {
  if (in_backward_) {
    ZERO_CHECK(!gradient_arrived_[index], "parameter '", hooked_names_[index],
               "' received its gradient twice in one engine.backward: it is used inside a ",
               "zero::checkpoint call and again outside it (or in two checkpointed calls), and ",
               "each checkpointed call's recompute runs a backward of its own; zero reduces a ",
               "parameter's gradient once per backward. Checkpoint every use of it together ",
               "in one call, or none of them");
    gradient_arrived_[index] = 1;
  }
  on_gradient_ready(index);
}

WorkHandle EngineCore::counted(WorkHandle collective) {
  count_moved(collective->stats());
  return collective;
}

void EngineCore::count_moved(const CommStats& moved) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  engine_stats_ += moved;
}

Placement EngineCore::optimizer_placement() const {
  switch (config_.zero_optimization.offload_optimizer.device) {
    case OffloadDevice::kCpu: return Placement::kHost;
    case OffloadDevice::kNvme: return Placement::kNvme;
    case OffloadDevice::kNone: return Placement::kDevice;
  }
  return Placement::kDevice;
}

// ---- a device model's offloaded optimizer (Note [Offload of a device model]) -------------

void EngineCore::prepare_device_offload(at::Device device) {
  if (config_.zero_optimization.offload_optimizer.device == OffloadDevice::kNone) return;
  offload_emulated_ = device.is_cpu() && env::emulate_device_offload();
  if (!device.is_cpu() || offload_emulated_) transfer_ = make_transfer_queue(device);
}

at::Device EngineCore::state_device(at::Device device) const {
  return device_offload() ? at::Device(at::kCPU) : device;
}

at::Tensor EngineCore::make_gradient_shard(int64_t numel, at::Device device) {
  if (!device_offload()) {
    return at::zeros({numel}, at::TensorOptions().dtype(grad_shard_dtype_).device(device));
  }
  return transfer_->host_buffer(numel, grad_shard_dtype_,
                                config_.zero_optimization.offload_optimizer.pin_memory);
}

std::shared_ptr<ParamStore> EngineCore::make_param_store_over(const at::Tensor& params,
                                                         std::vector<ParamStore::Segment> segments) {
  if (!device_offload()) return std::make_shared<ParamStore>(params, std::move(segments));
  // The host copy is what the optimizer writes; it is copied up as it is written.
  at::Tensor host = transfer_->host_buffer(params.numel(), params.scalar_type(),
                                           config_.zero_optimization.offload_optimizer.pin_memory);
  host.copy_(params);
  return std::make_shared<ParamStore>(std::move(host), std::move(segments), params, transfer_);
}

std::string EngineCore::device_offload_notice() const {
  if (!device_offload()) return "";
  const OffloadConfig& offload = config_.zero_optimization.offload_optimizer;
  std::string when;
  if (config_.gradient_clipping > 0) {
    when = "after backward (gradient_clipping needs the global gradient norm first)";
  } else if (param_dtype_ == at::kHalf) {
    when = "after backward (fp16's overflow check needs the global gradient norm first)";
  } else if (!state_->supports_ranges()) {
    when = "after backward (its state is in swap files, stepped a whole tile at a time)";
  } else {
    when = "as each bucket's gradients arrive, overlapped with the rest of backward";
  }
  return std::string("zero: zero_optimization.offload_optimizer.device \"") +
         (offload.device == OffloadDevice::kNvme ? "nvme" : "cpu") +
         "\": the fp32 master weights and optimizer moments" +
         (offload.device == OffloadDevice::kNvme ? " are in swap files, " : " are in host memory, ") +
         "the gradient shard and a copy of the parameter shard in " +
         (offload.pin_memory ? "pinned"
                             : "pageable (pin_memory false; true makes the copies asynchronous)") +
         " host memory" +
         (stage_ == 3 && config_.zero_optimization.offload_param.device != OffloadDevice::kNone
              ? std::string(" (with offload_param, the only copy of the parameter shards: each "
                            "gather copies its shard up)")
              : std::string()) +
         "; gradients go down on a copy stream as backward produces them and updated "
         "parameters go up tile by tile; the optimizer steps on " +
         std::to_string(at::get_num_threads()) + " host thread(s) " + when +
         (offload_emulated_ ? " [emulated on CPU ranks: ZERO_EMULATE_DEVICE_OFFLOAD]" : "");
}

EngineCore::OffloadStats EngineCore::offload_stats() const {
  OffloadStats stats = offload_times_;
  if (pipeline_) {
    const HostGradientPipeline::Times times = pipeline_->times();
    stats.add_seconds = times.add_seconds;
    stats.overlapped_step_seconds = times.hook_seconds;
  }
  if (transfer_) stats.transfers = transfer_->stats();
  return stats;
}

void EngineCore::start_gradient_pipeline(int64_t largest_piece) {
  if (!device_offload()) return;
  pipeline_ = std::make_unique<HostGradientPipeline>(
      transfer_, state_->gradient(), largest_piece, comm_dtype_,
      config_.zero_optimization.offload_optimizer.pin_memory);
}

void EngineCore::deliver_reduced(const at::Tensor& piece, int64_t shard_offset, bool accumulate) {
  if (pipeline_) {
    pipeline_->gradient(piece, shard_offset, accumulate);
    return;
  }
  at::Tensor target = state_->gradient().narrow(0, shard_offset, piece.numel());
  if (accumulate) {
    target.add_(piece);
  } else {
    target.copy_(piece);
  }
}

// The overlapped step needs an update that does not depend on the global gradient norm: no
// clipping, no fp16 (its overflow check skips the step), and a state whose ranges can be
// stepped apart (in memory, not in swap files).
bool EngineCore::overlaps_step_with_backward() const {
  return pipeline_ && is_gradient_accumulation_boundary() && config_.gradient_clipping <= 0 &&
         param_dtype_ != at::kHalf && state_->supports_ranges();
}

void EngineCore::begin_offloaded_backward() {
  if (!pipeline_) return;
  overlapped_.active = overlaps_step_with_backward();
  overlapped_.done = false;
  overlapped_.stepped = 0;
  if (!overlapped_.active) {
    pipeline_->set_arrival_hook(nullptr);
    return;
  }
  // What boundary_step would apply: clip 1, the loss scale's divisor, the schedule's rate.
  overlapped_.grad_multiplier = 1.0 / gradient_divisor();
  overlapped_.lr = scheduler_ ? scheduler_->lr_at(global_steps_) : lr_;
  state_->begin_step();
  pipeline_->set_arrival_hook([this](int64_t begin, int64_t end) {
    state_->step_range(begin, end, overlapped_.grad_multiplier, overlapped_.lr);
    overlapped_.stepped += end - begin;
  });
}

void EngineCore::finish_offloaded_backward(bool failed) {
  if (!pipeline_) return;
  const auto started = std::chrono::steady_clock::now();
  if (failed) {
    try {
      pipeline_->drain();
    } catch (...) {
      // The backward's own failure is what the caller sees.
    }
  } else {
    pipeline_->drain();
  }
  offload_times_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  pipeline_->set_arrival_hook(nullptr);
  if (!overlapped_.active) return;
  overlapped_.active = false;
  if (failed) {
    // Whether any rank stepped some elements before the failure is not known here (the
    // ranks' shares arrive at different times), so every rank takes the state as half-updated.
    half_updated_ = "the backward of an accumulation boundary failed while the offloaded "
                    "optimizer was stepping the parameters as their gradients arrived (Note "
                    "[Offload of a device model]; this rank stepped " +
                    std::to_string(overlapped_.stepped.load()) + " of " +
                    std::to_string(state_->numel()) + " elements): the model and optimizer "
                    "state may be half-updated on some ranks; load a checkpoint to continue";
    return;
  }
  ZERO_INTERNAL_ASSERT(overlapped_.stepped == state_->numel(), "the overlapped step covered ",
                       overlapped_.stepped.load(), " of ", state_->numel(), " elements");
  overlapped_.done = true;
}

void EngineCore::step_shard_state(const GradMultiplier& grad_multiplier, const at::Tensor& lent) {
  if (overlapped_.done) {
    // Stepped during backward with the same multiplier and rate (Note [Offload of a device
    // model]); only the device's ordering after the last parameters sent up is left.
    overlapped_.done = false;
    ++overlapped_steps_;
    // Offloaded: the multiplier is a host value (multiplier_stays_on_device).
    ZERO_INTERNAL_ASSERT(
        grad_multiplier.value() == overlapped_.grad_multiplier && lr_ == overlapped_.lr,
        "overlapped step with multiplier ", overlapped_.grad_multiplier, " and lr ",
        overlapped_.lr, ", the boundary's ", grad_multiplier.value(), " and ", lr_);
    state_->params().order_device_after_publish();
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  // LAMB's per-parameter sums, gathered from every rank (Note [LAMB's norms across shards]).
  StepCollectives exchange;
  if (config_.optimizer.type == OptimizerType::kLamb) {
    exchange.parameters = static_cast<int>(checkpoint_parameters().size());
    exchange.gather = [this](const at::Tensor& local) {
      at::Tensor all = at::empty({comm_->size() * local.numel()}, local.options());
      comm_->all_gather(local, all)->wait();
      return all;
    };
  }
  if (config_.optimizer.type == OptimizerType::kMuon) add_muon_collectives(exchange);
  if (state_->placement() != Placement::kNvme && !state_->params().offloaded()) {
    state_->step(grad_multiplier, lr_, lent, &exchange);
  } else {
    agree_on_failure(*comm_, "optimizer step", capture_error([&] {
                       state_->step(grad_multiplier, lr_, lent, &exchange);
                     }));
  }
  if (device_offload()) {
    offload_times_.step_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
}

namespace {

std::vector<MuonMatrix> muon_matrices_of(const std::vector<CheckpointParameter>& params) {
  std::vector<MuonMatrix> matrices;
  for (const CheckpointParameter& p : params) matrices.push_back(muon_matrix_of(p.name, p.shape));
  return matrices;
}

}  // namespace

std::string EngineCore::muon_notice() const {
  if (config_.optimizer.type != OptimizerType::kMuon) return "";
  const std::vector<CheckpointParameter> params = checkpoint_parameters();
  std::vector<std::string> names;
  for (const CheckpointParameter& p : params) names.push_back(p.name);
  return muon_assignment_notice(names, muon_matrices_of(params));
}

void EngineCore::add_muon_collectives(StepCollectives& exchange) {
  if (muon_matrices_.empty()) muon_matrices_ = muon_matrices_of(checkpoint_parameters());
  exchange.matrices = muon_matrices_;
  exchange.rank = rank_;
  exchange.world = world_;
  exchange.mode = env::muon_exchange_every_holder() ? MuonExchangeMode::kEveryHolder
                                                    : MuonExchangeMode::kOwner;
  // Once, at the first step: a few bytes per matrix piece, not counted in the engine's bytes.
  exchange.gather_varying = [this](const at::Tensor& local) {
    return all_gather_varying(*comm_, local);
  };
  exchange.all_to_all = [this](const at::Tensor& input, const at::Tensor& output) {
    CollectiveOptions labelled;
    labelled.label = "Muon's exchange of whole matrices";  // Note [Collective signatures]
    counted(comm_->all_to_all(input, output, labelled))->wait();
  };
}

StateStoreMaker EngineCore::state_store_maker(at::Device device) {
  const OffloadConfig& offload = config_.zero_optimization.offload_optimizer;
  if (offload.device != OffloadDevice::kNvme) {
    return [device](int parts, int64_t numel, int64_t tile, const std::string&) {
      return make_memory_store(parts, numel, tile, device);
    };
  }
  ZERO_CHECK(device.is_cpu(), config_.source, ": zero_optimization.offload_optimizer.device = ",
             "\"nvme\" with parameters on ", device, " is not supported yet; allowed here: ",
             "\"none\"");
  AsyncIo& io = async_io();
  const SwapDirectory& directory = swap_directory(
      offload.nvme_path, config_.source + ": zero_optimization.offload_optimizer.nvme_path");
  return [this, offload, &io, &directory](int parts, int64_t numel, int64_t tile,
                                          const std::string& name) {
    std::unique_ptr<StateStore> store;
    agree_on_failure(*comm_, "NVMe offload", capture_error([&] {
      store = make_swap_store(parts, numel, tile, offload, io, directory, name);
    }));
    return store;
  };
}

AsyncIo& EngineCore::async_io() {
  if (!aio_) {
    agree_on_failure(*comm_, "NVMe offload set-up",
                     capture_error([&] { aio_ = std::make_shared<AsyncIo>(config_.aio); }));
  }
  return *aio_;
}

const SwapDirectory& EngineCore::swap_directory(const std::string& nvme_path,
                                                const std::string& key) {
  // One directory per file system path, however it is spelled ("/x" and "/x/").
  auto canonical = [](const std::string& path) {
    std::error_code error;
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, error);
    return error ? path : resolved.string();
  };
  for (const auto& directory : swap_directories_) {
    if (canonical(directory->nvme_path()) == canonical(nvme_path)) return *directory;
  }
  swap_directories_.push_back(std::make_shared<SwapDirectory>(nvme_path, key, *comm_));
  return *swap_directories_.back();
}

WorkHandle EngineCore::submit(std::function<void()> task) {
  WorkHandle work = comm_->in_order(std::move(task));
  last_submitted_ = work;
  if (!config_.zero_optimization.overlap_comm_enabled()) wait_submitted();
  return work;
}

void EngineCore::wait_submitted() {
  if (!last_submitted_) return;
  const WorkHandle last = std::move(last_submitted_);
  last_submitted_ = nullptr;
  last->wait();
}

CommStats EngineCore::communication() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return engine_stats_;
}

void EngineCore::backward(const at::Tensor& loss) {
  ZERO_CHECK(loss.defined() && loss.numel() == 1, "engine.backward: expected a scalar loss, got ",
             loss.defined() ? loss.sizes() : c10::IntArrayRef{}, " with ",
             loss.defined() ? loss.numel() : 0, " elements");
  ZERO_CHECK(loss.requires_grad(), "engine.backward: the loss does not require grad (was it ",
             "computed under NoGradGuard, or from a model with no trainable parameters?)");
  const auto started = std::chrono::steady_clock::now();
  if (monitor_->reporting()) {
    window_.loss += loss.detach().to(at::kDouble).item<double>() /
                    static_cast<double>(config_.gradient_accumulation_steps);
  }
  ZERO_CHECK(half_updated_.empty(), "engine.backward: ", half_updated_);
  std::fill(gradient_arrived_.begin(), gradient_arrived_.end(), 0);
  begin_backward();
  begin_offloaded_backward();
  const double factor = scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps);
  in_backward_ = true;
  const auto autograd_started = std::chrono::steady_clock::now();
  try {
    (loss.to(at::kFloat) * factor).backward();
  } catch (...) {
    in_backward_ = false;
    abandon_backward();
    finish_offloaded_backward(/*failed=*/true);
    throw;
  }
  in_backward_ = false;
  if (device_offload()) {
    offload_times_.backward_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - autograd_started).count();
  }
  try {
    finish_backward();
  } catch (...) {
    finish_offloaded_backward(/*failed=*/true);
    throw;
  }
  finish_offloaded_backward(/*failed=*/false);
  window_.backward_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

void EngineCore::step() {
  ZERO_CHECK(!in_backward_, "engine.step() called during backward");
  ZERO_CHECK(half_updated_.empty(), "engine.step: ", half_updated_);
  if (!is_gradient_accumulation_boundary()) {
    ++micro_steps_;
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  boundary_step();
  window_.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  window_.global_steps = global_steps_ + skipped_steps_;
  window_.skipped_steps = skipped_steps_;
  window_.global_samples = window_.global_steps * config_.train_batch_size;
  window_.lr = lr_;
  window_.loss_scale = scaler_.scale();
  // Read from the device only for a report (Note [A step without a device read]).
  window_.grad_norm = monitor_->reporting() ? global_grad_norm() : -1.0;
  monitor_->record(window_);
  window_ = BoundaryRecord{};
}

double EngineCore::global_grad_norm() const {
  return grad_norm_.defined() ? grad_norm_.item<double>() : -1.0;
}

bool EngineCore::multiplier_stays_on_device(const at::Tensor& total) const {
  const OptimizerType type = config_.optimizer.type;
  if (param_dtype_ == at::kHalf || device_offload() || type == OptimizerType::kLamb ||
      type == OptimizerType::kMuon) {
    return false;
  }
  return !total.device().is_cpu() || multiplier_on_tensors_;
}

double EngineCore::gradient_divisor() const {
  return static_cast<double>(world_) * scaler_.scale() * pre_reduction_multiplier_;
}

void EngineCore::scale_before_reduction(const at::Tensor& gradients) const {
  if (pre_reduction_multiplier_ != 1.0) gradients.mul_(pre_reduction_multiplier_);
}

// Note [Gradient scaling].
void EngineCore::boundary_step() {
  quiesce();
  // On the gradients' device. Read back to the host (the step's one read) only where the host
  // needs it: Note [A step without a device read].
  at::Tensor total = local_sum_of_squares();
  CollectiveOptions labelled;
  labelled.label = "the step's gradient norm";  // Note [Collective signatures]
  counted(comm_->all_reduce(total, ReduceOp::kSum, labelled))->wait();
  const bool read_on_host = !multiplier_stays_on_device(total);
  if (read_on_host) total = total.cpu();
  // fp64 tensor operations, on the host or the device alike. Divisions by tensors: ATen
  // multiplies by the reciprocal of a scalar divisor on a GPU, a bit away from a division.
  const auto constant = [&](double value) { return at::full_like(total, value); };
  const at::Tensor divisor = constant(gradient_divisor());
  grad_norm_ = total.sqrt().div_(divisor);
  if (read_on_host) {
    const bool overflow = param_dtype_ == at::kHalf && !std::isfinite(total.item<double>());
    scaler_.update(overflow);
    if (overflow) {
      ++skipped_steps_;
      zero_gradients();
      ++micro_steps_;
      return;
    }
  } else {
    scaler_.update(/*overflow=*/false);  // only fp16 checks for one, and it reads
  }
  // clip = gradient_clipping / (norm + 1e-6) where that is below 1, else 1.
  at::Tensor clip = constant(1.0);
  if (config_.gradient_clipping > 0) {
    const at::Tensor coefficient =
        constant(config_.gradient_clipping).div_(grad_norm_.add(1e-6));
    clip = at::where(coefficient.lt(1.0), coefficient, clip);
  }
  // Read on the host: a plain value, read once here rather than by every tile of the step.
  const at::Tensor scaled = clip.div_(divisor);
  const GradMultiplier multiplier =
      read_on_host ? GradMultiplier(scaled.item<double>()) : GradMultiplier(scaled);
  // The scheduler advances with applied steps only: a skipped (overflowing) step keeps its rate,
  // as DeepSpeed's engine does.
  if (scheduler_) lr_ = scheduler_->lr_at(global_steps_);
  apply_update(multiplier);
  zero_gradients();
  ++global_steps_;
  ++micro_steps_;
}

}  // namespace zero
