#include "comm/collective_call.h"

#include <algorithm>
#include <cstddef>
#include <sstream>

#include "zero/error.h"

namespace zero::comm {
namespace {

const std::byte* bytes_of(const at::Tensor& t) {
  return static_cast<const std::byte*>(t.data_ptr());
}

bool overlaps(const std::byte* a, int64_t a_bytes, const std::byte* b, int64_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  return a < b + b_bytes && b < a + a_bytes;
}

void describe_tensor(std::ostringstream& out, const char* name, const at::Tensor& t) {
  out << "; " << name << ": ";
  if (!t.defined()) {
    out << "undefined";
    return;
  }
  out << t.numel() << " elements of " << c10::toString(t.scalar_type());
}

}  // namespace

bool Chunks::equal() const {
  return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
}

bool is_reducible_dtype(c10::ScalarType dtype) {
  return dtype == c10::kFloat || dtype == c10::kDouble || dtype == c10::kBFloat16 ||
         dtype == c10::kHalf;
}

bool is_copyable_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kBFloat16:
    case c10::kHalf:
    case c10::kByte:
    case c10::kChar:
    case c10::kShort:
    case c10::kInt:
    case c10::kLong:
    case c10::kBool:
      return true;
    default:
      return false;
  }
}

CallChecker::CallChecker(std::string backend, int rank, int size, c10::Device device,
                         std::string device_rule)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      device_(device),
      device_rule_(std::move(device_rule)) {}

std::string CallChecker::describe(const Call& call) const {
  std::ostringstream out;
  out << call.op << " (" << backend_ << ", rank " << rank_ << " of world size " << size_;
  if (call.input.defined() || call.output.defined()) {
    describe_tensor(out, call.output.defined() ? "input" : "buffer", call.input);
  }
  if (call.output.defined()) describe_tensor(out, "output", call.output);
  if (call.has_counts) {
    out << "; counts ";
    if (call.counts.empty()) {
      out << "{} (equal chunks)";
    } else {
      out << "{";
      const size_t shown = std::min<size_t>(call.counts.size(), 16);
      for (size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << call.counts[i];
      if (shown < call.counts.size()) out << ", ... (" << call.counts.size() << " in all)";
      out << "}";
    }
  }
  if (call.has_root) out << "; root " << call.root;
  out << ")";
  return out.str();
}

void CallChecker::check_tensor(const Call& call, const at::Tensor& t, const char* name,
                               bool reduction) const {
  ZERO_CHECK(t.defined(), describe(call), ": ", name, " is an undefined tensor");
  const bool on_device = t.device().type() == device_.type() &&
                         (!device_.has_index() || t.device().index() == device_.index());
  ZERO_CHECK(on_device, describe(call), ": ", name, " is on device ", t.device(), "; ",
             device_rule_);
  ZERO_CHECK(t.layout() == c10::kStrided, describe(call), ": ", name, " has layout ", t.layout(),
             "; only dense (strided) tensors are supported");
  ZERO_CHECK(t.is_contiguous(), describe(call), ": ", name, " is not contiguous (sizes ",
             t.sizes(), ", strides ", t.strides(),
             "); collectives work on flat contiguous buffers");
  if (reduction) {
    ZERO_CHECK(is_reducible_dtype(t.scalar_type()), describe(call), ": ", name, " has dtype ",
               c10::toString(t.scalar_type()),
               "; reductions support Float, Double, BFloat16 and Half");
  } else {
    ZERO_CHECK(is_copyable_dtype(t.scalar_type()), describe(call), ": ", name, " has dtype ",
               c10::toString(t.scalar_type()),
               "; supported: Float, Double, BFloat16, Half, Byte, Char, Short, Int, Long, Bool");
  }
}

void CallChecker::check_same_dtype(const Call& call, const at::Tensor& a,
                                   const at::Tensor& b) const {
  ZERO_CHECK(a.scalar_type() == b.scalar_type(), describe(call),
             ": input and output dtypes differ (", c10::toString(a.scalar_type()), " vs ",
             c10::toString(b.scalar_type()), ")");
}

Chunks CallChecker::chunks_of(std::vector<int64_t> counts) {
  Chunks chunks;
  chunks.counts = std::move(counts);
  chunks.offsets.resize(chunks.counts.size());
  for (size_t c = 0; c < chunks.counts.size(); ++c) {
    chunks.offsets[c] = chunks.total;
    chunks.total += chunks.counts[c];
  }
  return chunks;
}

Chunks CallChecker::balanced(int64_t numel) const {
  std::vector<int64_t> counts(static_cast<size_t>(size_));
  for (int c = 0; c < size_; ++c) counts[c] = numel / size_ + (c < numel % size_ ? 1 : 0);
  return chunks_of(std::move(counts));
}

int64_t CallChecker::others_bytes(const Chunks& chunks, int64_t element_size) const {
  return size_ > 1 ? (chunks.total - chunks.counts[rank_]) * element_size : 0;
}

Chunks CallChecker::check_chunked(const Call& call, const at::Tensor& whole,
                                  const char* whole_name, const at::Tensor& part,
                                  const char* part_name, bool reduction) const {
  check_tensor(call, whole, whole_name, reduction);
  check_tensor(call, part, part_name, reduction);
  check_same_dtype(call, whole, part);
  if (!call.counts.empty()) {
    ZERO_CHECK(call.counts.size() == static_cast<size_t>(size_), describe(call),
               ": counts must have one entry per rank (", size_, "), got ", call.counts.size());
    for (int c = 0; c < size_; ++c) {
      ZERO_CHECK(call.counts[c] >= 0, describe(call), ": counts[", c, "] = ", call.counts[c],
                 " is negative");
    }
  }
  const Chunks chunks = chunks_of(
      call.counts.empty() ? std::vector<int64_t>(static_cast<size_t>(size_), part.numel())
                          : call.counts);
  ZERO_CHECK(whole.numel() == chunks.total, describe(call), ": ", whole_name,
             " must hold sum(counts) = ", chunks.total, " elements, got ", whole.numel());
  ZERO_CHECK(part.numel() == chunks.counts[rank_], describe(call), ": ", part_name,
             " must hold counts[", rank_, "] = ", chunks.counts[rank_], " elements, got ",
             part.numel());
  const int64_t es = whole.element_size();
  const std::byte* own = bytes_of(whole) + chunks.offsets[rank_] * es;
  const std::byte* part_data = bytes_of(part);
  const int64_t own_bytes = chunks.counts[rank_] * es;
  ZERO_CHECK(own_bytes == 0 || part_data == own ||
                 !overlaps(part_data, own_bytes, bytes_of(whole), chunks.total * es),
             describe(call), ": ", part_name, " overlaps ", whole_name, " but is not ",
             whole_name, "'s own chunk ", rank_, " (elements [", chunks.offsets[rank_], ", ",
             chunks.offsets[rank_] + chunks.counts[rank_], ")); in place, ", part_name,
             " must be exactly that chunk");
  return chunks;
}

}  // namespace zero::comm
