// The ZeRO stage 0/1/2 engine. See zero/engine.h for the API.
//
// Note [Flat buffers]
// ~~~~~~~~~~~~~~~~~~~
// All trainable parameters (shared ones once) live in one flat buffer of the parameter dtype,
// in reverse registration order (roughly the order backward produces their gradients), with
// no gaps; the buffer is padded at the end per Note [Shard layout]. Each parameter's data is a
// view into it. Stages 0 and 1 keep a flat gradient buffer of the same layout and preset every
// parameter's .grad as a view into it, so autograd accumulates in place. Stage 2 keeps no
// full-size gradient: each gradient is copied into a bucket buffer when ready and dropped,
// and the reduced result lands in the owned gradient shard.
//
// Note [Bucket order]
// ~~~~~~~~~~~~~~~~~~~
// The flat buffer is cut into buckets of at most reduce_bucket_size elements at parameter
// boundaries (the last bucket also covers the padding), identically on every rank. A bucket
// is ready when every parameter in it has its gradient (post hook on the parameter's
// AccumulateGrad node). Buckets are launched strictly in index order: a bucket that becomes
// ready early waits for the earlier ones; buckets still pending when backward returns
// (parameters unused in this forward) are launched then. Every rank therefore issues the same
// collectives in the same order, whatever order its gradients arrive in.
//
// Note [Gradient scaling]
// ~~~~~~~~~~~~~~~~~~~~~~~
// backward() scales the loss by loss_scale / gradient_accumulation_steps and the reduction
// sums over ranks without dividing. The step folds the rest into one multiplier applied
// inside the fused optimizer loop: grad * clip_coefficient / (world_size * loss_scale). The
// global norm is computed from the owned, summed gradients (fp64 squares, padding excluded,
// summed over ranks by a deterministic all-reduce), so every stage computes it identically.
#include "zero/engine.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "engine/comm_queue.h"
#include "engine/fingerprint.h"
#include "engine/loss_scaler.h"
#include "engine/monitor.h"
#include "optim/shard_optimizer.h"
#include "zero/error.h"
#include "zero/scheduler.h"
#include "zero/shard.h"

namespace zero {
namespace {

// Elements every shard starts on a multiple of (Note [Shard layout]): 64 elements keeps
// shards cache-line and SIMD aligned for every dtype.
constexpr int64_t kShardAlignment = 64;
// Elements per block of the deterministic sum of squares.
constexpr int64_t kNormBlock = 16384;

bool is_16bit(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    default: return c10::toString(t);
  }
}

template <typename T>
double block_sum_of_squares(const T* data, int64_t begin, int64_t end) {
  double acc = 0.0;
  for (int64_t i = begin; i < end; ++i) {
    const double x = static_cast<double>(data[i]);
    acc += x * x;
  }
  return acc;
}

// Sum of squares in fp64 with a fixed blocking, so the result does not depend on the thread
// count (bitwise reproducible across runs and stages).
double sum_of_squares(const at::Tensor& tensor) {
  const int64_t n = tensor.numel();
  if (n == 0) return 0.0;
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(blocks, 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, tensor.scalar_type(), "sum_of_squares", [&] {
        const scalar_t* data = tensor.data_ptr<scalar_t>();
        at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
          for (int64_t b = first; b < last; ++b) {
            partial[b] = block_sum_of_squares(data, b * kNormBlock, std::min(n, (b + 1) * kNormBlock));
          }
        });
      });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

struct ParamSlot {
  std::string name;
  at::Tensor param;
  int64_t offset = 0;
  int64_t numel = 0;
  int bucket = -1;
};

struct Bucket {
  Range range;
  std::vector<int> slots;
  int pending = 0;      // parameters whose gradient has not arrived in this backward
  // Stage 2, while in flight: the bucket's gradients in the communication dtype. `pooled` is
  // the pool allocation it views (undefined when `buffer` is a parameter's own gradient).
  at::Tensor buffer;
  at::Tensor pooled;
};

class EngineImpl;

// Hooks outlive nothing: they hold this and test `engine` under the mutex, so a hook that
// fires after the engine is gone is a no-op rather than a use-after-free.
struct HookTarget {
  std::mutex mutex;
  EngineImpl* engine = nullptr;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::shared_ptr<torch::nn::Module> model, const Config& config,
             std::shared_ptr<Communicator> comm);
  ~EngineImpl() override;

  void backward(const at::Tensor& loss) override;
  void step() override;
  bool is_gradient_accumulation_boundary() const override {
    return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
  }
  double loss_scale() const override { return scaler_.scale(); }
  double global_grad_norm() const override { return global_grad_norm_; }
  int64_t global_steps() const override { return global_steps_; }
  int64_t skipped_steps() const override { return skipped_steps_; }
  int64_t micro_steps() const override { return micro_steps_; }
  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override {
    ZERO_CHECK(scheduler_ == nullptr, "set_learning_rate(", lr, "): the config's scheduler (",
               config_.source, ") sets the learning rate; remove it to set the rate by hand");
    ZERO_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got ", lr);
    lr_ = lr;
  }
  ModelStateBytes model_state_bytes() const override;
  CommStats communication() const override;
  const Config& config() const override { return config_; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int64_t num_parameters() const override { return layout_.numel; }

  void on_gradient_ready(int slot);

 private:
  void collect_parameters();
  void check_ranks_agree();
  void build_buckets();
  void allocate_state();
  void register_hooks();
  void launch_ready_buckets();
  void launch_bucket(int index);
  void reduce_bucket(Bucket& bucket);
  void boundary_step();  // step() at an accumulation boundary
  void all_gather_parameters();
  void zero_gradients();
  at::Tensor owned_gradient() const;  // this rank's reduced gradient, owned range
  // Runs a collective and adds what it moved to this engine's counters.
  template <typename Fn>
  void counted(Fn&& collective);
  void acquire_bucket_buffer(Bucket& bucket);
  void release_bucket_buffer(Bucket& bucket);

  std::shared_ptr<torch::nn::Module> model_;
  Config config_;
  std::shared_ptr<Communicator> comm_;
  int rank_ = 0;
  int world_ = 1;
  int stage_ = 0;
  at::ScalarType param_dtype_;
  at::ScalarType comm_dtype_;
  at::ScalarType grad_shard_dtype_;

  std::vector<ParamSlot> slots_;
  ShardLayout layout_;
  Range update_range_;  // elements this rank's optimizer updates: all (stage 0) or owned
  std::vector<Bucket> buckets_;
  int next_bucket_ = 0;
  bool in_backward_ = false;
  bool communicate_this_backward_ = false;

  at::Tensor params_flat_;   // param dtype, padded_numel
  at::Tensor grads_flat_;    // stages 0/1: param dtype, padded_numel
  at::Tensor grad_shard_;    // stage 2: grad_shard_dtype_, shard_numel
  at::Tensor master_;        // fp32 over update_range_ (a view of params_flat_ when fp32)
  std::unique_ptr<ShardOptimizer> optimizer_;
  std::unique_ptr<LRScheduler> scheduler_;  // null: constant (or hand-set) learning rate
  LossScaler scaler_;

  // shared_ptr or intrusive_ptr depending on the libtorch version.
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<at::Tensor>()));
  std::vector<AccumulatorPtr> accumulators_;
  std::shared_ptr<HookTarget> hook_target_;
  std::unique_ptr<CommQueue> queue_;
  std::unique_ptr<EngineMonitor> monitor_;
  BoundaryRecord window_;  // what the monitor gets at the next boundary
  std::mutex pool_mutex_;
  std::vector<at::Tensor> bucket_pool_;

  mutable std::mutex stats_mutex_;
  CommStats engine_stats_;

  double lr_ = 0.0;
  double global_grad_norm_ = -1.0;
  int64_t global_steps_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t micro_steps_ = 0;
};

EngineImpl::EngineImpl(std::shared_ptr<torch::nn::Module> model, const Config& config,
                       std::shared_ptr<Communicator> comm)
    : model_(std::move(model)),
      config_(config),
      comm_(std::move(comm)),
      scaler_(config.loss_scale, config.param_dtype == at::kHalf) {
  ZERO_CHECK(model_ != nullptr, "zero::initialize: model is null");
  ZERO_CHECK(comm_ != nullptr, "zero::initialize: communicator is null");
  rank_ = comm_->rank();
  world_ = comm_->size();
  ZERO_CHECK(config_.world_size == world_, config_.source, ": the config was solved for world size ",
             config_.world_size, " but the communicator has ", world_,
             " ranks; pass comm->size() to parse_config/load_config");
  stage_ = config_.zero_optimization.stage;
  ZERO_CHECK(stage_ >= 0 && stage_ <= 2, config_.source, ": zero_optimization.stage = ", stage_,
             " is not supported by this engine; allowed: 0, 1, 2");
  param_dtype_ = config_.param_dtype;
  comm_dtype_ = config_.communication_dtype;
  ZERO_CHECK(param_dtype_ == at::kFloat || is_16bit(param_dtype_),
             "unsupported parameter dtype ", dtype_name(param_dtype_));
  ZERO_CHECK(comm_dtype_ == at::kFloat || is_16bit(comm_dtype_),
             "unsupported communication_data_type ", dtype_name(comm_dtype_));
  // Stage 2's owned gradient shard accumulates over micro-steps in fp32; with a single
  // micro-step and 16-bit communication it keeps the reduced 16-bit result as is (2/N bytes
  // per parameter, the ZeRO paper's accounting).
  grad_shard_dtype_ =
      (config_.gradient_accumulation_steps > 1 || comm_dtype_ == at::kFloat) ? at::kFloat
                                                                              : comm_dtype_;
  scheduler_ = make_scheduler(config_);
  lr_ = scheduler_ ? scheduler_->lr_at(0) : config_.optimizer.lr;

  collect_parameters();
  check_ranks_agree();
  build_buckets();
  allocate_state();
  register_hooks();
  queue_ = std::make_unique<CommQueue>(config_.zero_optimization.overlap_comm);
  monitor_ = std::make_unique<EngineMonitor>(config_, rank_);
}

EngineImpl::~EngineImpl() {
  try {
    if (queue_) queue_->wait();
  } catch (...) {
    // A failed collective was already reported by the call that waited on it, or will be
    // lost with the engine; a destructor must not throw.
  }
  std::lock_guard<std::mutex> lock(hook_target_->mutex);
  hook_target_->engine = nullptr;
}

void EngineImpl::collect_parameters() {
  // DeepSpeed converts the whole module to the training dtype (module.half()/bfloat16()).
  model_->to(param_dtype_);
  std::unordered_set<const void*> seen;
  std::vector<ParamSlot> in_registration_order;
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // shared parameter: once
    ZERO_CHECK(p.is_floating_point(), "parameter '", item.key(), "' has dtype ", p.scalar_type(),
               "; only floating-point parameters can be trained");
    ParamSlot slot;
    slot.name = item.key();
    slot.param = p;
    slot.numel = p.numel();
    in_registration_order.push_back(std::move(slot));
  }
  ZERO_CHECK(!in_registration_order.empty(),
             "zero::initialize: the model has no trainable parameters");
  const c10::Device device = in_registration_order.front().param.device();
  for (const auto& slot : in_registration_order) {
    ZERO_CHECK(slot.param.device() == device, "parameter '", slot.name, "' is on ",
               slot.param.device(), " but '", in_registration_order.front().name, "' is on ",
               device, "; all trainable parameters must be on one device");
  }
  // Reverse registration order approximates the order backward produces gradients.
  slots_.assign(in_registration_order.rbegin(), in_registration_order.rend());
  int64_t offset = 0;
  for (auto& slot : slots_) {
    slot.offset = offset;
    offset += slot.numel;
  }
  layout_ = shard_layout(offset, world_, kShardAlignment);
  update_range_ = stage_ == 0 ? Range{0, layout_.padded_numel} : layout_.owned(rank_);

  // Move the parameters into the flat buffer and make each one a view of it.
  params_flat_ = at::zeros({layout_.padded_numel},
                           at::TensorOptions().dtype(param_dtype_).device(device));
  at::NoGradGuard no_grad;
  for (auto& slot : slots_) {
    at::Tensor view = params_flat_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
    view.copy_(slot.param.detach());
    slot.param.set_data(view);
  }
}

void EngineImpl::check_ranks_agree() {
  std::ostringstream description;
  description << "world size " << world_ << "\n";
  for (const std::string& line : effective_config_lines(config_)) {
    description << "config " << line << "\n";
  }
  for (const auto& slot : slots_) {
    description << "parameter " << slot.name << " " << slot.param.sizes() << " "
                << dtype_name(slot.param.scalar_type()) << "\n";
  }
  check_ranks_agree_on(*comm_, description.str());
}

void EngineImpl::build_buckets() {
  const auto& zc = config_.zero_optimization;
  // Stage 2 without contiguous_gradients reduces each gradient on its own, in place.
  const int64_t capacity =
      (stage_ == 2 && !zc.contiguous_gradients) ? 1 : std::max<int64_t>(1, zc.reduce_bucket_size);
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    ParamSlot& slot = slots_[i];
    const bool fits = !buckets_.empty() &&
                      buckets_.back().range.size() + slot.numel <= capacity;
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().range = Range{slot.offset, slot.offset};
    }
    Bucket& bucket = buckets_.back();
    bucket.range.end = slot.offset + slot.numel;
    bucket.slots.push_back(i);
    slot.bucket = static_cast<int>(buckets_.size()) - 1;
  }
  buckets_.back().range.end = layout_.padded_numel;  // the padding rides with the last bucket
}

void EngineImpl::allocate_state() {
  const auto device = params_flat_.device();
  const auto options = at::TensorOptions().device(device);
  if (stage_ < 2) {
    // Reduced in place bucket by bucket: from the communicator when it can place it where
    // peers read it directly (Note [Shared-memory reduce-scatter]; collective, every rank).
    grads_flat_ = device.is_cpu()
                      ? comm_->allocate_buffer(layout_.padded_numel, param_dtype_)
                      : at::zeros({layout_.padded_numel}, options.dtype(param_dtype_));
    for (auto& slot : slots_) {
      slot.param.mutable_grad() =
          grads_flat_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
    }
  } else {
    grad_shard_ = at::zeros({layout_.shard_numel}, options.dtype(grad_shard_dtype_));
  }
  at::Tensor update_params = params_flat_.narrow(0, update_range_.begin, update_range_.size());
  master_ = param_dtype_ == at::kFloat ? update_params : update_params.to(at::kFloat);
  optimizer_ = std::make_unique<ShardOptimizer>(config_.optimizer, update_range_.size());
  // Every rank starts from rank 0's parameters.
  counted([&] { comm_->broadcast(params_flat_, 0); });
  if (param_dtype_ != at::kFloat) {
    master_.copy_(params_flat_.narrow(0, update_range_.begin, update_range_.size()));
  }
}

void EngineImpl::register_hooks() {
  hook_target_ = std::make_shared<HookTarget>();
  hook_target_->engine = this;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    // Autograd keeps only a weak reference to a parameter's AccumulateGrad node: hold it, or
    // a new node (without our hook) is created at the next backward.
    auto accumulator = torch::autograd::impl::grad_accumulator(slots_[i].param);
    ZERO_INTERNAL_ASSERT(accumulator != nullptr, "no grad accumulator for ", slots_[i].name);
    std::shared_ptr<HookTarget> target = hook_target_;
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [target, i](const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list& /*inputs*/) {
          std::lock_guard<std::mutex> lock(target->mutex);
          if (target->engine != nullptr) target->engine->on_gradient_ready(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

template <typename Fn>
void EngineImpl::counted(Fn&& collective) {
  const CommStats before = comm_->stats();
  collective();
  const CommStats after = comm_->stats();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  auto add = [](CollectiveCount& total, const CollectiveCount& a, const CollectiveCount& b) {
    total.calls += b.calls - a.calls;
    total.bytes += b.bytes - a.bytes;
  };
  add(engine_stats_.all_reduce, before.all_reduce, after.all_reduce);
  add(engine_stats_.reduce_scatter, before.reduce_scatter, after.reduce_scatter);
  add(engine_stats_.all_gather, before.all_gather, after.all_gather);
  add(engine_stats_.broadcast, before.broadcast, after.broadcast);
}

CommStats EngineImpl::communication() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return engine_stats_;
}

ModelStateBytes EngineImpl::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.params = params_flat_.nbytes();
  bytes.grads = stage_ < 2 ? grads_flat_.nbytes() : grad_shard_.nbytes();
  bytes.master_params = param_dtype_ == at::kFloat ? 0 : master_.nbytes();
  bytes.optimizer_state = optimizer_->state_bytes();
  return bytes;
}

// Stage 2 bucket buffers come from a small pool reused within one backward (buckets are
// reduced in order, so few are alive at once) and emptied when backward ends. The buffer is
// zeroed: parameters without a gradient in this backward, and the padding, contribute zeros.
void EngineImpl::acquire_bucket_buffer(Bucket& bucket) {
  const int64_t numel = bucket.range.size();
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    for (size_t i = 0; i < bucket_pool_.size(); ++i) {
      if (bucket_pool_[i].numel() >= numel) {
        bucket.pooled = bucket_pool_[i];
        bucket_pool_.erase(bucket_pool_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  if (!bucket.pooled.defined()) {
    bucket.pooled = at::empty({numel}, params_flat_.options().dtype(comm_dtype_));
  }
  bucket.buffer = bucket.pooled.narrow(0, 0, numel).zero_();
}

void EngineImpl::release_bucket_buffer(Bucket& bucket) {
  bucket.buffer = at::Tensor();
  if (!bucket.pooled.defined()) return;
  std::lock_guard<std::mutex> lock(pool_mutex_);
  bucket_pool_.push_back(std::move(bucket.pooled));
  bucket.pooled = at::Tensor();
}

void EngineImpl::backward(const at::Tensor& loss) {
  ZERO_CHECK(loss.defined() && loss.numel() == 1, "engine.backward: expected a scalar loss, got ",
             loss.defined() ? loss.sizes() : c10::IntArrayRef{}, " with ",
             loss.defined() ? loss.numel() : 0, " elements");
  ZERO_CHECK(loss.requires_grad(), "engine.backward: the loss does not require grad (was it ",
             "computed under NoGradGuard, or from a model with no trainable parameters?)");
  communicate_this_backward_ = stage_ == 2 || is_gradient_accumulation_boundary();
  for (auto& bucket : buckets_) bucket.pending = static_cast<int>(bucket.slots.size());
  next_bucket_ = 0;
  const double factor = scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps);
  const auto started = std::chrono::steady_clock::now();
  if (monitor_->reporting()) {
    window_.loss += loss.detach().to(at::kDouble).item<double>() /
                    static_cast<double>(config_.gradient_accumulation_steps);
  }
  in_backward_ = true;
  try {
    (loss.to(at::kFloat) * factor).backward();
  } catch (...) {
    in_backward_ = false;
    throw;
  }
  in_backward_ = false;
  if (communicate_this_backward_) {
    // Parameters that received no gradient in this backward: launch what is left, in order.
    for (auto& bucket : buckets_) bucket.pending = 0;
    launch_ready_buckets();
  }
  queue_->wait();
  if (stage_ == 2) {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    bucket_pool_.clear();  // no gradient-sized memory stays resident after backward
  }
  window_.backward_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

void EngineImpl::on_gradient_ready(int index) {
  ZERO_CHECK(in_backward_, "a gradient of '", slots_[index].name,
             "' was computed outside engine.backward(loss): call engine.backward(loss) instead ",
             "of loss.backward() so loss scaling and gradient reduction happen");
  if (!communicate_this_backward_) return;  // stages 0/1 accumulate locally until the boundary
  ParamSlot& slot = slots_[index];
  Bucket& bucket = buckets_[slot.bucket];
  if (stage_ == 2) {
    at::Tensor grad = slot.param.grad();
    if (grad.defined()) {
      const bool sole_owner_of_bucket = bucket.slots.size() == 1 &&
                                        bucket.range.size() == slot.numel &&
                                        grad.scalar_type() == comm_dtype_ && grad.is_contiguous();
      if (!config_.zero_optimization.contiguous_gradients && sole_owner_of_bucket) {
        bucket.buffer = grad.view({-1});  // reduce the gradient in place, no bucket copy
      } else {
        if (!bucket.buffer.defined()) acquire_bucket_buffer(bucket);
        bucket.buffer.narrow(0, slot.offset - bucket.range.begin, slot.numel)
            .copy_(grad.reshape({-1}));
      }
      slot.param.mutable_grad().reset();  // the full-size gradient is not kept
    }
  }
  --bucket.pending;
  launch_ready_buckets();
}

void EngineImpl::launch_ready_buckets() {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && buckets_[next_bucket_].pending == 0) {
    launch_bucket(next_bucket_++);
  }
}

void EngineImpl::launch_bucket(int index) {
  Bucket& bucket = buckets_[index];
  if (stage_ == 2 && !bucket.buffer.defined()) acquire_bucket_buffer(bucket);
  queue_->submit([this, index] { reduce_bucket(buckets_[index]); });
}

// Reduces one bucket; see Note [Bucket order] and Note [Deterministic ring reduction].
void EngineImpl::reduce_bucket(Bucket& bucket) {
  const std::vector<int64_t> counts = layout_.owner_counts(bucket.range);
  const Range owned = intersect(bucket.range, layout_.owned(rank_));
  const int64_t own_offset = owned.empty() ? 0 : owned.begin - bucket.range.begin;
  const bool all_reduce = stage_ == 0 || !config_.zero_optimization.reduce_scatter;

  at::Tensor work;
  at::Tensor grads_view;  // stages 0/1: where the result goes back
  if (stage_ < 2) {
    grads_view = grads_flat_.narrow(0, bucket.range.begin, bucket.range.size());
    work = comm_dtype_ == param_dtype_ ? grads_view : grads_view.to(comm_dtype_);
  } else {
    work = bucket.buffer;
  }
  at::Tensor own = work.narrow(0, own_offset, counts[rank_]);
  counted([&] { comm_->reduce_scatter(work, own, ReduceOp::kSum, counts); });
  if (all_reduce) counted([&] { comm_->all_gather(own, work, counts); });

  if (stage_ < 2) {
    if (!work.is_same(grads_view)) {
      if (all_reduce) {
        grads_view.copy_(work);
      } else {
        grads_view.narrow(0, own_offset, counts[rank_]).copy_(own);
      }
    }
    return;
  }
  if (!owned.empty()) {
    at::Tensor target =
        grad_shard_.narrow(0, owned.begin - layout_.owned(rank_).begin, owned.size());
    if (config_.gradient_accumulation_steps > 1) {
      target.add_(own);
    } else {
      target.copy_(own);
    }
  }
  release_bucket_buffer(bucket);
}

at::Tensor EngineImpl::owned_gradient() const {
  const Range owned = layout_.owned(rank_);
  if (stage_ == 2) return grad_shard_;
  return grads_flat_.narrow(0, owned.begin, owned.size());
}

void EngineImpl::step() {
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

void EngineImpl::boundary_step() {
  queue_->wait();
  // Global norm (Note [Gradient scaling]): owned real elements only, summed over ranks.
  const Range valid = layout_.valid(rank_);
  const at::Tensor owned_grad = owned_gradient();
  const double local = sum_of_squares(owned_grad.narrow(0, 0, valid.size()));
  at::Tensor total = at::full({1}, local, at::TensorOptions().dtype(at::kDouble));
  counted([&] { comm_->all_reduce(total, ReduceOp::kSum); });
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
  // Stage 0 updates the whole buffer on every rank, from the all-reduced gradients.
  at::Tensor grad = stage_ == 0 ? grads_flat_ : owned_grad;
  at::Tensor param_out;
  if (param_dtype_ != at::kFloat) {
    param_out = params_flat_.narrow(0, update_range_.begin, update_range_.size());
  }
  // The scheduler advances with applied steps only: a skipped (overflowing) step keeps its rate,
  // as DeepSpeed's engine does.
  if (scheduler_) lr_ = scheduler_->lr_at(global_steps_);
  optimizer_->step(master_, grad, clip / divisor, param_out, lr_);
  if (stage_ > 0) all_gather_parameters();
  zero_gradients();
  ++global_steps_;
  ++micro_steps_;
}

void EngineImpl::all_gather_parameters() {
  const int64_t chunk = std::max<int64_t>(1, config_.zero_optimization.allgather_bucket_size);
  for (int64_t begin = 0; begin < layout_.padded_numel; begin += chunk) {
    const Range range{begin, std::min(layout_.padded_numel, begin + chunk)};
    const std::vector<int64_t> counts = layout_.owner_counts(range);
    const Range owned = intersect(range, layout_.owned(rank_));
    at::Tensor output = params_flat_.narrow(0, range.begin, range.size());
    at::Tensor input = output.narrow(0, owned.empty() ? 0 : owned.begin - range.begin,
                                     counts[rank_]);
    counted([&] { comm_->all_gather(input, output, counts); });
  }
}

void EngineImpl::zero_gradients() {
  if (stage_ < 2) {
    grads_flat_.zero_();
  } else {
    grad_shard_.zero_();
  }
}

}  // namespace

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Config& config,
                                   std::shared_ptr<Communicator> communicator) {
  return std::make_unique<EngineImpl>(std::move(model), config, std::move(communicator));
}

}  // namespace zero
