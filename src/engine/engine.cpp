// The ZeRO stage 0/1/2 engine (FlatEngine). See zero/engine.h for the API and engine_core.h
// for what every stage shares (Note [Gradient scaling] is there).
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
#include "zero/engine.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "engine/engine_core.h"
#include "engine/parameter_access.h"
#include "zero/error.h"
#include "zero/shard.h"

namespace zero {
namespace {

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

class FlatEngine final : public EngineCore, public ParameterAccess {
 public:
  FlatEngine(std::shared_ptr<torch::nn::Module> model, const Config& config,
             std::shared_ptr<Communicator> comm);
  ~FlatEngine() override { shutdown(); }

  ModelStateBytes model_state_bytes() const override;
  int64_t num_parameters() const override { return layout_.numel; }
  void on_gradient_ready(int slot) override;

  std::vector<CheckpointParameter> checkpoint_parameters() const override;
  bool saves_param_shard() const override { return false; }

  // Parameters are always whole here: pinning is free and only write-back communicates.
  void pin(const std::vector<at::Tensor>& /*params*/) override {}
  void unpin(const std::vector<at::Tensor>& params, int modifier_rank) override;
  void visit_full_parameters(
      const std::function<void(const std::string&, const at::Tensor&)>& visit) override {
    for (const auto& slot : slots_) visit(slot.name, slot.param);
  }

 private:
  void begin_backward() override;
  void finish_backward() override;
  void abandon_backward() override {}
  double local_sum_of_squares() override;
  void apply_update(double grad_multiplier) override;
  void zero_gradients() override;
  void reload_parameters() override;

  void collect_parameters();
  std::string describe_parameters() const;
  // The parts of the parameters inside `range` of the flat buffer, as offsets into the shard
  // space (update_range_).
  std::vector<StateSegment> segments_within(Range range) const;
  void build_buckets();
  void allocate_state();
  void launch_ready_buckets();
  void launch_bucket(int index);
  void reduce_bucket(Bucket& bucket);
  void all_gather_parameters();
  at::Tensor owned_gradient() const;  // this rank's reduced gradient, owned range
  void acquire_bucket_buffer(Bucket& bucket);
  void release_bucket_buffer(Bucket& bucket);

  std::vector<ParamSlot> slots_;
  ShardLayout layout_;
  Range update_range_;  // elements this rank's optimizer updates: all (stage 0) or owned
  std::vector<Bucket> buckets_;
  int next_bucket_ = 0;
  bool communicate_this_backward_ = false;

  at::Tensor params_flat_;   // param dtype, padded_numel
  at::Tensor grads_flat_;    // stages 0/1: param dtype, padded_numel
  // The shard space (Note [Shard state]) is update_range_ of the flat buffer; at stage 2 the
  // state owns the gradient shard (grad_shard_dtype_), at stages 0/1 grads_flat_ lends it.
  std::mutex pool_mutex_;
  std::vector<at::Tensor> bucket_pool_;
};

FlatEngine::FlatEngine(std::shared_ptr<torch::nn::Module> model, const Config& config,
                       std::shared_ptr<Communicator> comm)
    : EngineCore(std::move(model), config, std::move(comm)) {
  ZERO_INTERNAL_ASSERT(stage_ <= 2, "FlatEngine runs stages 0-2, got ", stage_);
  collect_parameters();
  check_ranks_agree(describe_parameters());
  build_buckets();
  allocate_state();
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& slot : slots_) {
    params.push_back(slot.param);
    names.push_back(slot.name);
  }
  register_gradient_hooks(params, names);
}

void FlatEngine::collect_parameters() {
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

std::string FlatEngine::describe_parameters() const {
  std::ostringstream description;
  for (const auto& slot : slots_) {
    description << "parameter " << slot.name << " " << slot.param.sizes() << " "
                << dtype_name(slot.param.scalar_type()) << "\n";
  }
  return description.str();
}

void FlatEngine::build_buckets() {
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

void FlatEngine::allocate_state() {
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
  }
  // Every rank starts from rank 0's parameters; the master weights are made from them.
  counted(comm_->broadcast(params_flat_, 0))->wait();
  state_ = std::make_unique<ShardState>(
      config_.optimizer, params_flat_.narrow(0, update_range_.begin, update_range_.size()),
      stage_ == 2 ? std::optional<at::ScalarType>(grad_shard_dtype_) : std::nullopt,
      config_.zero_optimization.sub_group_size, Placement::kDevice,
      segments_within(layout_.owned(rank_)),  // saved: stage 0 too, each rank writes 1/N
      segments_within(update_range_));        // loaded: what the state covers
}

ModelStateBytes FlatEngine::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.params = params_flat_.nbytes();
  bytes.grads = stage_ < 2 ? grads_flat_.nbytes() : state_->gradient_bytes();
  bytes.master_params = state_->master_bytes();
  bytes.optimizer_state = state_->moment_bytes();
  return bytes;
}

// Stage 2 bucket buffers come from a small pool reused within one backward (buckets are
// reduced in order, so few are alive at once) and emptied when backward ends. The buffer is
// zeroed: parameters without a gradient in this backward, and the padding, contribute zeros.
void FlatEngine::acquire_bucket_buffer(Bucket& bucket) {
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

void FlatEngine::release_bucket_buffer(Bucket& bucket) {
  bucket.buffer = at::Tensor();
  if (!bucket.pooled.defined()) return;
  std::lock_guard<std::mutex> lock(pool_mutex_);
  bucket_pool_.push_back(std::move(bucket.pooled));
  bucket.pooled = at::Tensor();
}

void FlatEngine::begin_backward() {
  communicate_this_backward_ = stage_ == 2 || is_gradient_accumulation_boundary();
  for (auto& bucket : buckets_) bucket.pending = static_cast<int>(bucket.slots.size());
  next_bucket_ = 0;
}

void FlatEngine::finish_backward() {
  if (communicate_this_backward_) {
    // Parameters that received no gradient in this backward: launch what is left, in order.
    for (auto& bucket : buckets_) bucket.pending = 0;
    launch_ready_buckets();
  }
  wait_submitted();
  if (stage_ == 2) {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    bucket_pool_.clear();  // no gradient-sized memory stays resident after backward
  }
}

void FlatEngine::on_gradient_ready(int index) {
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

void FlatEngine::launch_ready_buckets() {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && buckets_[next_bucket_].pending == 0) {
    launch_bucket(next_bucket_++);
  }
}

void FlatEngine::launch_bucket(int index) {
  Bucket& bucket = buckets_[index];
  if (stage_ == 2 && !bucket.buffer.defined()) acquire_bucket_buffer(bucket);
  submit([this, index] { reduce_bucket(buckets_[index]); });
}

// Reduces one bucket, in the communicator's order (submit); see Note [Bucket order] and Note
// [Deterministic reduction] in zero/comm.h.
void FlatEngine::reduce_bucket(Bucket& bucket) {
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
  // In order on the communicator (submit), so these run at once.
  counted(comm_->reduce_scatter(work, own, ReduceOp::kSum, counts))->wait();
  if (all_reduce) counted(comm_->all_gather(own, work, counts))->wait();

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
        state_->gradient().narrow(0, owned.begin - layout_.owned(rank_).begin, owned.size());
    if (config_.gradient_accumulation_steps > 1) {
      target.add_(own);
    } else {
      target.copy_(own);
    }
  }
  release_bucket_buffer(bucket);
}

at::Tensor FlatEngine::owned_gradient() const {
  const Range owned = layout_.owned(rank_);
  if (stage_ == 2) return state_->gradient();
  return grads_flat_.narrow(0, owned.begin, owned.size());
}

double FlatEngine::local_sum_of_squares() {
  // Owned real elements only (Note [Gradient scaling]); stage 0 also owns a 1/N range here.
  const Range valid = layout_.valid(rank_);
  return sum_of_squares(owned_gradient().narrow(0, 0, valid.size()));
}

void FlatEngine::apply_update(double grad_multiplier) {
  // Stage 0 updates the whole buffer on every rank, from the all-reduced gradients; stage 1
  // lends the owned range of the gradient buffer; stage 2's state owns its gradient shard.
  state_->step(grad_multiplier, lr_,
               stage_ == 0 ? grads_flat_ : stage_ == 1 ? owned_gradient() : at::Tensor());
  if (stage_ > 0) all_gather_parameters();
}

// Checkpoints list the parameters in model (registration) order, the reverse of the slots'
// buffer order, so what `zero-ckpt inspect` prints reads like the model's definition.
std::vector<CheckpointParameter> FlatEngine::checkpoint_parameters() const {
  std::vector<CheckpointParameter> result;
  for (auto slot = slots_.rbegin(); slot != slots_.rend(); ++slot) {
    result.push_back({slot->name, slot->param.sizes().vec(), slot->numel});
  }
  return result;
}

std::vector<StateSegment> FlatEngine::segments_within(Range range) const {
  std::vector<StateSegment> segments;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const ParamSlot& slot = slots_[i];
    const Range part = intersect(Range{slot.offset, slot.offset + slot.numel}, range);
    if (part.empty()) continue;
    const int checkpoint_index = static_cast<int>(slots_.size()) - 1 - i;  // model order
    segments.push_back({checkpoint_index, part.begin - slot.offset, part.end - slot.offset,
                        part.begin - update_range_.begin});
  }
  return segments;
}

void FlatEngine::reload_parameters() {
  at::NoGradGuard no_grad;
  // The 16-bit copy is the master weights rounded, exactly as the optimizer writes it.
  state_->round_params_from_master();
  if (stage_ > 0) all_gather_parameters();
  zero_gradients();
}

void FlatEngine::unpin(const std::vector<at::Tensor>& params, int modifier_rank) {
  if (modifier_rank < 0) return;
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : params) {
    const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const ParamSlot& slot) {
      return slot.param.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    });
    ZERO_CHECK(it != slots_.end(), "zero::GatheredParameters: a tensor of shape ", p.sizes(),
               " is not a trainable parameter of this engine's model");
    const Range range{it->offset, it->offset + it->numel};
    counted(comm_->broadcast(params_flat_.narrow(0, range.begin, range.size()), modifier_rank))
        ->wait();
    // The fp32 master copy of the part this rank updates takes the new values too.
    const Range updated = intersect(range, update_range_);
    if (param_dtype_ != at::kFloat && !updated.empty()) {
      state_->master()
          .narrow(0, updated.begin - update_range_.begin, updated.size())
          .copy_(params_flat_.narrow(0, updated.begin, updated.size()));
    }
  }
}

void FlatEngine::all_gather_parameters() {
  const int64_t chunk = std::max<int64_t>(1, config_.zero_optimization.allgather_bucket_size);
  WorkHandle last;
  for (int64_t begin = 0; begin < layout_.padded_numel; begin += chunk) {
    const Range range{begin, std::min(layout_.padded_numel, begin + chunk)};
    const std::vector<int64_t> counts = layout_.owner_counts(range);
    const Range owned = intersect(range, layout_.owned(rank_));
    at::Tensor output = params_flat_.narrow(0, range.begin, range.size());
    at::Tensor input = output.narrow(0, owned.empty() ? 0 : owned.begin - range.begin,
                                     counts[rank_]);
    last = counted(comm_->all_gather(input, output, counts));
  }
  if (last) last->wait();  // collectives complete in order
}

void FlatEngine::zero_gradients() {
  if (stage_ < 2) {
    grads_flat_.zero_();
  } else {
    state_->gradient().zero_();
  }
}

}  // namespace

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Config& config,
                                   std::shared_ptr<Communicator> communicator) {
  const bool report = communicator != nullptr && communicator->rank() == 0;
  std::unique_ptr<Engine> engine =
      config.zero_optimization.stage == 3
          ? make_stage3_engine(std::move(model), config, std::move(communicator))
          : std::make_unique<FlatEngine>(std::move(model), config, std::move(communicator));
  if (report) {
    const std::string notice = compute_dtype_notice(config);
    if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
  }
  return engine;
}

}  // namespace zero
