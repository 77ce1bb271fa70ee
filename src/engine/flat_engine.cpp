// The ZeRO stage 0/1/2 engine (FlatEngine): parameters replicated in one flat buffer, cut into
// flat groups (buckets) for gradient reduction (Note [Flat groups] in flat_group.h). See
// zero/engine.h for the API and engine_core.h for what every stage shares (Note [Gradient
// scaling] is there).
//
// Note [Flat buffers]
// ~~~~~~~~~~~~~~~~~~~
// All trainable parameters (shared ones once) live in one flat buffer of the parameter dtype,
// in reverse registration order (roughly the order backward produces their gradients), with
// no gaps; the buffer is padded at the end per Note [Shard layout]. Each parameter's data is a
// view into it. Stages 0 and 1 keep a flat gradient buffer of the same layout and preset every
// parameter's .grad as a view into it, so autograd accumulates in place; with
// data_types.grad_accum_dtype "fp32" and 16-bit parameters the buffer is fp32, and each
// micro-step's 16-bit gradient is added into it as it arrives (then dropped). Stage 2 keeps no
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
#include "engine/flat_group.h"
#include "engine/parameter_access.h"
#include "zero/error.h"
#include "zero/shard.h"

namespace zero {
namespace {

class FlatEngine final : public EngineCore, public ParameterAccess {
 public:
  FlatEngine(std::shared_ptr<torch::nn::Module> model, const Config& config,
             std::shared_ptr<Communicator> comm);
  ~FlatEngine() override { shutdown(); }

  ModelStateBytes model_state_bytes() const override;
  int64_t num_parameters() const override { return layout_.numel; }
  void on_gradient_ready(int index) override;

  std::vector<CheckpointParameter> checkpoint_parameters() const override;
  bool saves_param_shard() const override { return false; }

  // Parameters are always whole here: pinning is free and only write-back communicates.
  void pin(const std::vector<at::Tensor>& /*params*/) override {}
  void unpin(const std::vector<at::Tensor>& params, int modifier_rank) override;
  void visit_full_parameters(
      const std::function<void(const std::string&, const at::Tensor&)>& visit) override {
    for (const auto& p : params_) visit(p.name, p.tensor);
  }

 private:
  void begin_backward() override;
  void finish_backward() override;
  void abandon_backward() override {}
  at::Tensor local_sum_of_squares() override;
  void apply_update(const GradMultiplier& grad_multiplier) override;
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
  void reduce_bucket(FlatGroup& bucket);
  void all_gather_parameters();
  at::Tensor owned_gradient() const;  // this rank's reduced gradient, owned range

  // In buffer order: reverse registration order (roughly the order backward produces
  // gradients); each one's `group` is its bucket, `offset` its place in the flat buffer.
  std::vector<TrainableParameter> params_;
  ShardLayout layout_;
  Range update_range_;  // elements this rank's optimizer updates: all (stage 0) or owned
  std::vector<FlatGroup> buckets_;
  int next_bucket_ = 0;
  bool communicate_this_backward_ = false;

  at::Tensor params_flat_;   // param dtype, padded_numel
  at::Tensor grads_flat_;    // Gradients::kFullBuffer (stages 0/1): kept dtype, padded_numel
  // grads_flat_ is fp32 under 16-bit parameters (grad_accum_dtype): gradients are added into it
  // by the hook instead of accumulating in .grad views.
  bool accumulate_by_hook_ = false;
  // The shard space (Note [Shard state]) is update_range_ of the flat buffer; with
  // Gradients::kOwnedShard (stage 2) the state owns the gradient shard (grad_shard_dtype_),
  // with kFullBuffer grads_flat_ lends it.
  BufferPool pool_;  // the bucket buffers of Gradients::kOwnedShard
};

FlatEngine::FlatEngine(std::shared_ptr<torch::nn::Module> model, const Config& config,
                       std::shared_ptr<Communicator> comm)
    : EngineCore(std::move(model), config, std::move(comm)) {
  ZERO_INTERNAL_ASSERT(policy_.parameters == StagePolicy::Parameters::kReplicated,
                       "FlatEngine runs stages 0-2, got ", stage_);
  collect_parameters();
  check_ranks_agree(describe_parameters());
  build_buckets();
  allocate_state();
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& p : params_) {
    params.push_back(p.tensor);
    names.push_back(p.name);
  }
  register_gradient_hooks(params, names);
}

void FlatEngine::collect_parameters() {
  // DeepSpeed converts the whole module to the training dtype (module.half()/bfloat16()).
  model_->to(param_dtype_);
  std::vector<TrainableParameter> in_registration_order =
      collect_trainable_parameters(*model_).parameters;
  params_.assign(in_registration_order.rbegin(), in_registration_order.rend());
  int64_t offset = 0;
  for (auto& p : params_) {
    p.offset = offset;
    offset += p.numel;
  }
  layout_ = shard_layout(offset, world_, kShardAlignment);
  update_range_ = policy_.updates_owned_shard ? layout_.owned(rank_) : Range{0, layout_.padded_numel};

  // Move the parameters into the flat buffer and make each one a view of it.
  params_flat_ = at::zeros({layout_.padded_numel},
                           at::TensorOptions().dtype(param_dtype_).device(params_.front().tensor.device()));
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    at::Tensor view = params_flat_.narrow(0, p.offset, p.numel).view(p.tensor.sizes());
    view.copy_(p.tensor.detach());
    p.tensor.set_data(view);
  }
}

std::string FlatEngine::describe_parameters() const {
  std::ostringstream description;
  for (const auto& p : params_) {
    description << "parameter " << p.name << " " << p.tensor.sizes() << " "
                << dtype_name(p.tensor.scalar_type()) << "\n";
  }
  return description.str();
}

void FlatEngine::build_buckets() {
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel);
  buckets_ = cut_into_groups(numels, policy_.group_capacity, layout_.padded_numel);
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    for (int i : buckets_[b].params) params_[i].group = b;
  }
}

void FlatEngine::allocate_state() {
  const auto device = params_flat_.device();
  const auto options = at::TensorOptions().device(device);
  const bool full_gradients = policy_.gradients == StagePolicy::Gradients::kFullBuffer;
  if (full_gradients) {
    // Reduced in place bucket by bucket: from the communicator when it can place it where
    // peers read it directly (Note [Shared-memory reduce-scatter]; collective, every rank).
    const at::ScalarType kept = kept_gradient_dtype(config_);
    grads_flat_ = device.is_cpu()
                      ? comm_->allocate_buffer(layout_.padded_numel, kept)
                      : at::zeros({layout_.padded_numel}, options.dtype(kept));
    accumulate_by_hook_ = kept != param_dtype_;
    if (!accumulate_by_hook_) {
      for (auto& p : params_) {
        p.tensor.mutable_grad() = grads_flat_.narrow(0, p.offset, p.numel).view(p.tensor.sizes());
      }
    }
  }
  // Every rank starts from rank 0's parameters; the master weights are made from them.
  counted(comm_->broadcast(params_flat_, 0))->wait();
  // Offloaded from a device (Note [Offload of a device model]) the state owns a host gradient
  // at every stage: stage 1's reduced range is copied down into it.
  prepare_device_offload(device);
  const bool owns_gradient = !full_gradients || device_offload();
  state_ = std::make_unique<ShardState>(
      config_.optimizer,
      make_param_store_over(params_flat_.narrow(0, update_range_.begin, update_range_.size())),
      owns_gradient ? make_gradient_shard(update_range_.size(), device) : at::Tensor(),
      config_.zero_optimization.sub_group_size, optimizer_placement(),
      state_store_maker(state_device(device)),
      segments_within(layout_.owned(rank_)),  // saved: stage 0 too, each rank writes 1/N
      segments_within(update_range_));        // loaded: what the state covers
  int64_t largest_piece = 0;  // this rank's part of a bucket, the most the pipeline gets
  for (const FlatGroup& bucket : buckets_) {
    largest_piece = std::max(largest_piece, layout_.owner_counts(bucket.range)[rank_]);
  }
  start_gradient_pipeline(largest_piece);
}

ModelStateBytes FlatEngine::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.params = params_flat_.nbytes();
  bytes.grads = grads_flat_.defined() ? grads_flat_.nbytes() : state_->gradient_bytes();
  bytes.master_params = state_->master_bytes();
  bytes.optimizer_state = state_->moment_bytes();
  bytes.on_nvme = state_->file_bytes() > 0 ? bytes.master_params + bytes.optimizer_state : 0;
  bytes.staging = state_->staging_bytes();
  return bytes;
}

void FlatEngine::begin_backward() {
  communicate_this_backward_ = policy_.reduce_when == StagePolicy::ReduceWhen::kEveryMicroStep ||
                               is_gradient_accumulation_boundary();
  for (auto& bucket : buckets_) bucket.pending = static_cast<int>(bucket.params.size());
  next_bucket_ = 0;
}

void FlatEngine::finish_backward() {
  if (communicate_this_backward_) {
    // Parameters that received no gradient in this backward: launch what is left, in order.
    for (auto& bucket : buckets_) bucket.pending = 0;
    launch_ready_buckets();
  }
  wait_submitted();
}

void FlatEngine::on_gradient_ready(int index) {
  ZERO_CHECK(in_backward_, "a gradient of '", params_[index].name,
             "' was computed outside engine.backward(loss): call engine.backward(loss) instead ",
             "of loss.backward() so loss scaling and gradient reduction happen");
  TrainableParameter& p = params_[index];
  if (accumulate_by_hook_) {
    // Note [Flat buffers]: the 16-bit gradient is added into the fp32 buffer and dropped.
    at::Tensor grad = p.tensor.grad();
    if (grad.defined()) {
      grads_flat_.narrow(0, p.offset, p.numel).add_(grad.reshape({-1}));
      p.tensor.mutable_grad().reset();
    }
  }
  if (!communicate_this_backward_) return;  // accumulated in grads_flat_ until the boundary
  FlatGroup& bucket = buckets_[p.group];
  if (policy_.gradients == StagePolicy::Gradients::kOwnedShard) {
    at::Tensor grad = p.tensor.grad();
    if (grad.defined()) {
      const bool sole_owner_of_bucket = bucket.params.size() == 1 &&
                                        bucket.range.size() == p.numel &&
                                        grad.scalar_type() == comm_dtype_ && grad.is_contiguous();
      if (policy_.reduce_lone_gradient_in_place && sole_owner_of_bucket) {
        bucket.grad_buffer = grad.view({-1});  // reduce the gradient in place, no bucket copy
      } else {
        if (!bucket.grad_buffer.defined()) {
          pool_.acquire_gradients(bucket, bucket.range.size(),
                                  params_flat_.options().dtype(comm_dtype_));
        }
        bucket.grad_buffer.narrow(0, p.offset - bucket.range.begin, p.numel)
            .copy_(grad.reshape({-1}));
      }
      p.tensor.mutable_grad().reset();  // the full-size gradient is not kept
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
  FlatGroup& bucket = buckets_[index];
  if (policy_.gradients == StagePolicy::Gradients::kOwnedShard && !bucket.grad_buffer.defined()) {
    pool_.acquire_gradients(bucket, bucket.range.size(), params_flat_.options().dtype(comm_dtype_));
  }
  submit([this, index] { reduce_bucket(buckets_[index]); });
}

// Reduces one bucket, in the communicator's order (submit); see Note [Bucket order] and Note
// [Deterministic reduction] in zero/comm.h.
void FlatEngine::reduce_bucket(FlatGroup& bucket) {
  const std::vector<int64_t> counts = layout_.owner_counts(bucket.range);
  const Range owned = intersect(bucket.range, layout_.owned(rank_));
  const int64_t own_offset = owned.empty() ? 0 : owned.begin - bucket.range.begin;
  const bool all_reduce = policy_.reduction == StagePolicy::Reduction::kAllReduce;
  const bool full_gradients = policy_.gradients == StagePolicy::Gradients::kFullBuffer;

  at::Tensor work;
  at::Tensor grads_view;  // full_gradients: where the result goes back
  if (full_gradients) {
    grads_view = grads_flat_.narrow(0, bucket.range.begin, bucket.range.size());
    work = comm_dtype_ == grads_view.scalar_type() ? grads_view : grads_view.to(comm_dtype_);
  } else {
    work = bucket.grad_buffer;
  }
  at::Tensor own = work.narrow(0, own_offset, counts[rank_]);
  scale_before_reduction(work);  // Note [Gradient scaling]
  // In order on the communicator (submit), so these run at once.
  counted(comm_->reduce_scatter(work, own, ReduceOp::kSum, counts))->wait();
  if (all_reduce) counted(comm_->all_gather(own, work, counts))->wait();

  if (full_gradients) {
    if (!work.is_same(grads_view)) {
      if (all_reduce) {
        grads_view.copy_(work);
      } else {
        grads_view.narrow(0, own_offset, counts[rank_]).copy_(own);
      }
    }
    // Offloaded: the reduced range goes down to the state's host gradient (the step reads it
    // there), replacing it: stage 1 reduces the accumulated gradient once, on the boundary.
    if (device_offload() && !owned.empty()) {
      deliver_reduced(grads_view.narrow(0, own_offset, owned.size()),
                      owned.begin - update_range_.begin, /*accumulate=*/false);
    }
    return;
  }
  if (!owned.empty()) {
    deliver_reduced(own, owned.begin - layout_.owned(rank_).begin,
                    config_.gradient_accumulation_steps > 1);
  }
  pool_.release_gradients(bucket);
}

at::Tensor FlatEngine::owned_gradient() const {
  const Range owned = layout_.owned(rank_);
  if (!grads_flat_.defined() || device_offload()) return state_->gradient();
  return grads_flat_.narrow(0, owned.begin, owned.size());
}

at::Tensor FlatEngine::local_sum_of_squares() {
  // Owned real elements only (Note [Gradient scaling]); stage 0 also owns a 1/N range here.
  const Range valid = layout_.valid(rank_);
  return sum_of_squares(owned_gradient().narrow(0, 0, valid.size()));
}

void FlatEngine::apply_update(const GradMultiplier& grad_multiplier) {
  // Stage 0 updates the whole buffer on every rank, from the all-reduced gradients; stage 1
  // lends the owned range of the gradient buffer; stage 2's state owns its gradient shard.
  const at::Tensor lent = !policy_.updates_owned_shard              ? grads_flat_
                          : grads_flat_.defined() && !device_offload() ? owned_gradient()
                                                                        : at::Tensor();
  step_shard_state(grad_multiplier, lent);
  if (policy_.updates_owned_shard) all_gather_parameters();
}

// Checkpoints list the parameters in model (registration) order, the reverse of the
// buffer order, so what `zero-ckpt inspect` prints reads like the model's definition.
std::vector<CheckpointParameter> FlatEngine::checkpoint_parameters() const {
  std::vector<CheckpointParameter> result;
  for (auto p = params_.rbegin(); p != params_.rend(); ++p) {
    result.push_back({p->name, p->tensor.sizes().vec(), p->numel});
  }
  return result;
}

std::vector<StateSegment> FlatEngine::segments_within(Range range) const {
  std::vector<StateSegment> segments;
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    const TrainableParameter& p = params_[i];
    const Range part = intersect(Range{p.offset, p.offset + p.numel}, range);
    if (part.empty()) continue;
    const int checkpoint_index = static_cast<int>(params_.size()) - 1 - i;  // model order
    segments.push_back({checkpoint_index, part.begin - p.offset, part.end - p.offset,
                        part.begin - update_range_.begin});
  }
  return segments;
}

void FlatEngine::reload_parameters() {
  at::NoGradGuard no_grad;
  // The 16-bit copy is the master weights rounded, exactly as the optimizer writes it.
  state_->round_params_from_master();
  if (policy_.updates_owned_shard) all_gather_parameters();
  zero_gradients();
}

void FlatEngine::unpin(const std::vector<at::Tensor>& params, int modifier_rank) {
  if (modifier_rank < 0) return;
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : params) {
    const auto it = std::find_if(params_.begin(), params_.end(), [&](const TrainableParameter& q) {
      return q.tensor.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    });
    ZERO_CHECK(it != params_.end(), "zero::GatheredParameters: a tensor of shape ", p.sizes(),
               " is not a trainable parameter of this engine's model");
    const Range range{it->offset, it->offset + it->numel};
    counted(comm_->broadcast(params_flat_.narrow(0, range.begin, range.size()), modifier_rank))
        ->wait();
    // The fp32 master copy of the part this rank updates takes the new values too, and
    // offloaded from a device, the host copy of the parameters the optimizer steps.
    const Range updated = intersect(range, update_range_);
    if (!updated.empty()) {
      const at::Tensor values = params_flat_.narrow(0, updated.begin, updated.size());
      if (device_offload()) state_->params().write(updated.begin - update_range_.begin, values);
      if (param_dtype_ != at::kFloat) {
        state_->write_master(updated.begin - update_range_.begin, values);
      }
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
  if (grads_flat_.defined()) grads_flat_.zero_();
  // The owned shard (stage 2's; offloaded, every stage's host copy) is zeroed for the next
  // boundary to add into it; offloaded with nothing to add (stage 1, or no accumulation) the
  // next boundary's reduction replaces all of it, and no pass over it is needed.
  const at::Tensor& owned = state_->gradient();
  if (!owned.defined()) return;
  const bool replaced =
      device_offload() && (grads_flat_.defined() || config_.gradient_accumulation_steps == 1);
  if (!replaced) owned.zero_();
}

}  // namespace

std::unique_ptr<Engine> make_flat_engine(std::shared_ptr<torch::nn::Module> model,
                                         const Config& config,
                                         std::shared_ptr<Communicator> comm) {
  return std::make_unique<FlatEngine>(std::move(model), config, std::move(comm));
}

}  // namespace zero
