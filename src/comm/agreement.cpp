// all_gather_texts and agree_on_failure (zero/comm.h): collectives over text, built on the
// Communicator's all_gather alone, so every backend has them.
#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/error.h"

namespace zero {

std::vector<std::string> all_gather_texts(Communicator& comm, const std::string& text) {
  const int world = comm.size();
  if (world == 1) return {text};
  // Exchange lengths, then the texts themselves.
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  at::Tensor lengths = at::empty({world}, at::kLong);
  comm.all_gather(length, lengths)->wait();
  std::vector<int64_t> counts(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + world);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  at::Tensor mine = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = at::empty({total}, at::kByte);
  comm.all_gather(mine, all, counts)->wait();
  const char* base = reinterpret_cast<const char*>(all.data_ptr());
  std::vector<std::string> texts;
  int64_t offset = 0;
  for (int64_t c : counts) {
    texts.emplace_back(base + offset, base + offset + c);
    offset += c;
  }
  return texts;
}

void agree_on_failure(Communicator& comm, const std::string& operation, const std::string& error) {
  const std::vector<std::string> errors = all_gather_texts(comm, error);
  for (int r = 0; r < static_cast<int>(errors.size()); ++r) {
    if (errors[r].empty()) continue;
    if (r == comm.rank()) throw CollectiveError(errors[r], r);
    throw CollectiveError(operation + " failed on rank " + std::to_string(r) + ": " + errors[r], r);
  }
}

}  // namespace zero
