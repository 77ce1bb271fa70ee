// Note [Gradient scaling]
// ~~~~~~~~~~~~~~~~~~~~~~~
// backward() scales the loss by loss_scale / gradient_accumulation_steps and the reduction
// sums over ranks without dividing. The step folds the rest into one multiplier applied
// inside the fused optimizer loop: grad * clip_coefficient / (world_size * loss_scale). The
// global norm is computed from the owned, summed gradients (fp64 squares, padding excluded,
// summed over ranks by a deterministic all-reduce), so every stage computes it identically.
#include "engine/engine_core.h"

#include "offload/async_io.h"
#include "offload/swap_directory.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "common/capture_error.h"
#include "common/parallel.h"
#include "engine/fingerprint.h"
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
  global_grad_norm_ = -1.0;
  window_ = BoundaryRecord{};
  reload_parameters();
}

std::string EngineCore::save_checkpoint(const std::string& dir, const std::string& tag,
                                        const std::string& client_state) {
  ZERO_CHECK(!in_backward_, "save_checkpoint during backward");
  quiesce();
  return zero::save_checkpoint(*this, dir, tag, client_state);
}

void EngineCore::check_checkpoint_destination(const std::string& dir) {
  zero::check_checkpoint_destination(*this, dir);
}

std::string EngineCore::load_checkpoint(const std::string& dir, const std::string& tag) {
  ZERO_CHECK(!in_backward_, "load_checkpoint during backward");
  quiesce();
  return zero::load_checkpoint(*this, dir, tag);
}

void EngineCore::set_learning_rate(double lr) {
  ZERO_CHECK(scheduler_ == nullptr, "set_learning_rate(", lr, "): the config's scheduler (",
             config_.source, ") sets the learning rate; remove it to set the rate by hand");
  ZERO_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got ", lr);
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

void EngineCore::step_shard_state(double grad_multiplier, const at::Tensor& lent) {
  if (state_->placement() != Placement::kNvme && !state_->params().offloaded()) {
    state_->step(grad_multiplier, lr_, lent);
    return;
  }
  agree_on_failure(*comm_, "optimizer step",
                   capture_error([&] { state_->step(grad_multiplier, lr_, lent); }));
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
  std::fill(gradient_arrived_.begin(), gradient_arrived_.end(), 0);
  begin_backward();
  const double factor = scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps);
  in_backward_ = true;
  try {
    (loss.to(at::kFloat) * factor).backward();
  } catch (...) {
    in_backward_ = false;
    abandon_backward();
    throw;
  }
  in_backward_ = false;
  finish_backward();
  window_.backward_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

void EngineCore::step() {
  ZERO_CHECK(!in_backward_, "engine.step() called during backward");
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
  window_.grad_norm = global_grad_norm_;
  monitor_->record(window_);
  window_ = BoundaryRecord{};
}

// Note [Gradient scaling].
void EngineCore::boundary_step() {
  quiesce();
  // On the gradients' device; the step's one read back to the host is its global sum.
  at::Tensor total = local_sum_of_squares();
  counted(comm_->all_reduce(total, ReduceOp::kSum))->wait();
  const double sum_squares = total.item<double>();
  const double divisor = static_cast<double>(world_) * scaler_.scale();
  global_grad_norm_ = std::sqrt(sum_squares) / divisor;

  const bool overflow = param_dtype_ == at::kHalf && !std::isfinite(sum_squares);
  scaler_.update(overflow);
  if (overflow) {
    ++skipped_steps_;
    zero_gradients();
    ++micro_steps_;
    return;
  }
  double clip = 1.0;
  if (config_.gradient_clipping > 0) {
    const double coefficient = config_.gradient_clipping / (global_grad_norm_ + 1e-6);
    if (coefficient < 1.0) clip = coefficient;
  }
  // The scheduler advances with applied steps only: a skipped (overflowing) step keeps its rate,
  // as DeepSpeed's engine does.
  if (scheduler_) lr_ = scheduler_->lr_at(global_steps_);
  apply_update(clip / divisor);
  zero_gradients();
  ++global_steps_;
  ++micro_steps_;
}

}  // namespace zero
