#include "engine/flat_group.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <unordered_map>

#include "zero/error.h"

namespace zero {

ModelParameters collect_trainable_parameters(const torch::nn::Module& model, bool require_some) {
  ModelParameters result;
  for (const auto& item : model.named_modules()) result.modules.emplace_back(item.key(), item.value());
  std::unordered_map<const void*, int> index_of;  // TensorImpl -> parameters index
  result.uses.resize(result.modules.size());
  for (int m = 0; m < static_cast<int>(result.modules.size()); ++m) {
    const auto& [prefix, module] = result.modules[m];
    for (const auto& item : module->named_parameters(/*recurse=*/false)) {
      const at::Tensor& p = item.value();
      if (!p.requires_grad()) continue;
      const void* key = p.unsafeGetTensorImpl();
      auto found = index_of.find(key);
      if (found == index_of.end()) {
        const std::string name = prefix.empty() ? item.key() : prefix + "." + item.key();
        ZERO_CHECK(p.is_floating_point(), "parameter '", name, "' has dtype ", p.scalar_type(),
                   "; only floating-point parameters can be trained");
        TrainableParameter entry;
        entry.name = name;
        entry.tensor = p;
        entry.numel = p.numel();
        entry.module = m;
        found = index_of.emplace(key, static_cast<int>(result.parameters.size())).first;
        result.parameters.push_back(std::move(entry));
      }
      result.uses[m].push_back(found->second);
    }
  }
  ZERO_CHECK(!require_some || !result.parameters.empty(),
             "zero::initialize: the model has no trainable parameters");
  if (result.parameters.empty()) return result;
  const TrainableParameter& first = result.parameters.front();
  for (const TrainableParameter& p : result.parameters) {
    ZERO_CHECK(p.tensor.device() == first.tensor.device(), "parameter '", p.name, "' is on ",
               p.tensor.device(), " but '", first.name, "' is on ", first.tensor.device(),
               "; all trainable parameters must be on one device");
  }
  return result;
}

std::vector<FlatGroup> cut_into_groups(const std::vector<int64_t>& numels, int64_t capacity,
                                       int64_t padded_numel) {
  ZERO_INTERNAL_ASSERT(!numels.empty() && capacity >= 1, "cut_into_groups: ", numels.size(),
                       " parameters, capacity ", capacity);
  std::vector<FlatGroup> groups;
  int64_t offset = 0;
  for (int i = 0; i < static_cast<int>(numels.size()); ++i) {
    const bool fits = !groups.empty() && groups.back().range.size() + numels[i] <= capacity;
    if (!fits) {
      groups.emplace_back();
      groups.back().range = Range{offset, offset};
    }
    offset += numels[i];
    groups.back().range.end = offset;
    groups.back().params.push_back(i);
  }
  ZERO_INTERNAL_ASSERT(padded_numel >= offset, "padded_numel ", padded_numel, " < ", offset);
  groups.back().range.end = padded_numel;  // the padding rides with the last group
  return groups;
}

at::Tensor BufferPool::acquire(int64_t numel, const at::TensorOptions& options) {
  const at::ScalarType dtype = options.dtype().toScalarType();
  const c10::Device device = options.device();
  auto same_kind = [&](const at::Tensor& b) {
    return b.scalar_type() == dtype && b.device() == device;
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest cached buffer that fits without wasting most of itself: a far larger one
    // (stage 3's embedding gradients for a block's) stays for the request it was made for,
    // which would otherwise allocate a second one of its size while it is lent out.
    const auto fits = [&](int64_t cached) {
      return cached >= numel && (cached <= 2 * numel || cached - numel <= kReuseSlack);
    };
    int best = -1;
    for (int i = 0; i < static_cast<int>(free_.size()); ++i) {
      const at::Tensor& b = free_[i].buffer;
      if (fits(b.numel()) && same_kind(b) &&
          (best < 0 || b.numel() < free_[best].buffer.numel())) {
        best = i;
      }
    }
    if (best >= 0) {
      Cached cached = std::move(free_[best]);
      free_.erase(free_.begin() + best);
      if (cached.last_use) {
        const c10::impl::VirtualGuardImpl guard(device.type());
        cached.last_use->block(guard.getStream(device));
      }
      return std::move(cached.buffer);
    }
    // None fits: the new buffer replaces the largest cached one of this kind that is smaller
    // than the request (useless to it), so the pool holds no more buffers than were in use at
    // once, but for the far larger ones kept for their own requests.
    int largest = -1;
    for (int i = 0; i < static_cast<int>(free_.size()); ++i) {
      if (same_kind(free_[i].buffer) && free_[i].buffer.numel() < numel &&
          (largest < 0 || free_[i].buffer.numel() > free_[largest].buffer.numel())) {
        largest = i;
      }
    }
    if (largest >= 0) free_.erase(free_.begin() + largest);
  }
  return at::empty({numel}, options);
}

void BufferPool::put(at::Tensor buffer) {
  if (!buffer.defined()) return;
  Cached cached{std::move(buffer), nullptr};
  const c10::Device device = cached.buffer.device();
  if (!device.is_cpu()) {
    const c10::impl::VirtualGuardImpl guard(device.type());
    cached.last_use = std::make_shared<c10::Event>(device.type());
    cached.last_use->record(guard.getStream(device));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(std::move(cached));
}

void BufferPool::acquire_gradients(FlatGroup& group, int64_t numel,
                                   const at::TensorOptions& options) {
  group.grad_pooled = acquire(numel, options);
  group.grad_buffer = group.grad_pooled.narrow(0, 0, numel).zero_();
}

void BufferPool::release_gradients(FlatGroup& group) {
  group.grad_buffer = at::Tensor();
  put(std::move(group.grad_pooled));
  group.grad_pooled = at::Tensor();
}

}  // namespace zero
