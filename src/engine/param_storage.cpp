#include "engine/param_storage.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>

#include <optional>
#include <string>
#include <type_traits>

#include "zero/error.h"

namespace zero {
namespace {

// libtorch can make a storage throw (with our message) on any data access instead of handing
// out a null pointer, through two private-by-convention members of c10::StorageImpl: one sets
// the message, the other clears it when the storage gets its data back. A released parameter is
// made to throw only where both exist: libtorch 2.11 has the first but not the second, and a
// storage that could not be cleared would throw on every later access. Without them (1.x,
// 2.11) a released parameter's storage is a null pointer of zero bytes, and reading it is an
// error from ATen rather than our message. Each member is detected on its own, so a libtorch
// that renames either one compiles and only loses the message.
template <typename S, typename = void>
struct HasSetAccessError : std::false_type {};
template <typename S>
struct HasSetAccessError<S, std::void_t<decltype(std::declval<S&>()
                                                     .release_data_and_set_meta_custom_data_ptr_error_msg_(
                                                         std::optional<std::string>()))>>
    : std::true_type {};
template <typename S, typename = void>
struct HasClearAccessError : std::false_type {};
template <typename S>
struct HasClearAccessError<
    S, std::void_t<decltype(std::declval<S&>().clear_data_ptr_access_error_msg_())>>
    : std::true_type {};
template <typename S>
constexpr bool kCanThrowOnAccess = HasSetAccessError<S>::value && HasClearAccessError<S>::value;

template <typename S>
void throw_on_access(S& storage, const std::string& message) {
  if constexpr (kCanThrowOnAccess<S>) {
    storage.release_data_and_set_meta_custom_data_ptr_error_msg_(message);
  }
}

template <typename S>
void allow_access(S& storage) {
  if constexpr (kCanThrowOnAccess<S>) storage.clear_data_ptr_access_error_msg_();
}

}  // namespace

void attach_storage(const at::Tensor& full, const at::Tensor& buffer) {
  ZERO_INTERNAL_ASSERT(buffer.numel() >= full.numel() && buffer.scalar_type() == full.scalar_type(),
                       "attach_storage: buffer of ", buffer.numel(), " ", buffer.scalar_type(),
                       " for ", full.numel(), " ", full.scalar_type());
  c10::StorageImpl* storage = full.storage().unsafeGetStorageImpl();
  allow_access(*storage);
  auto* keep_alive = new at::Tensor(buffer);
  storage->set_data_ptr_noswap(c10::DataPtr(
      buffer.data_ptr(), keep_alive, [](void* ctx) { delete static_cast<at::Tensor*>(ctx); },
      buffer.device()));
  storage->set_nbytes(static_cast<size_t>(full.numel()) * full.element_size());
}

void detach_storage(const at::Tensor& full, const std::string& owner) {
  c10::StorageImpl* storage = full.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, full.device()));
  storage->set_nbytes(0);
  throw_on_access(*storage, "zero: the parameters of stage-3 unit '" + owner +
                                "' are partitioned and released outside the unit; use them " +
                                "inside zero::run / zero::run_with of the unit, or hold a " +
                                "zero::GatheredParameters (zero/unit.h)");
}

PartitionedGroup partition_parameters(const std::vector<at::Tensor>& params,
                                      at::ScalarType stored_dtype, at::ScalarType compute_dtype,
                                      Communicator& comm, bool keep_whole,
                                      const std::string& owner,
                                      std::optional<at::Device> device) {
  ZERO_INTERNAL_ASSERT(!params.empty(), "partition_parameters: no parameters");
  PartitionedGroup group;
  int64_t numel = 0;
  for (const at::Tensor& p : params) {
    group.offsets.push_back(numel);
    numel += p.numel();
  }
  group.layout = shard_layout(numel, comm.size(), kShardAlignment);
  at::NoGradGuard no_grad;
  group.full = at::zeros({group.layout.padded_numel},
                         at::TensorOptions().dtype(compute_dtype).device(
                             device.value_or(params.front().device())));
  for (size_t i = 0; i < params.size(); ++i) {
    group.full.narrow(0, group.offsets[i], params[i].numel())
        .copy_(params[i].detach().reshape({-1}));
  }
  const WorkHandle broadcast = comm.broadcast(group.full, 0);  // rank 0's values everywhere
  broadcast->wait();
  group.moved = broadcast->stats();
  if (stored_dtype != compute_dtype) group.full.copy_(group.full.to(stored_dtype));  // rounded
  const Range owned = group.layout.owned(comm.rank());
  group.shard = group.full.narrow(0, owned.begin, owned.size()).to(stored_dtype, false, true);
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor param = params[i];  // shares the TensorImpl: set_data changes the parameter
    param.set_data(group.full.narrow(0, group.offsets[i], param.numel()).view(param.sizes()));
  }
  if (!keep_whole) detach_storage(group.full, owner);
  return group;
}

}  // namespace zero
