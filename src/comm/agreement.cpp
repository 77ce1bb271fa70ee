// all_gather_varying, all_gather_texts and agree_on_failure (zero/comm.h): collectives over
// pieces of any length and over text, built on the Communicator's all_gather alone, so every
// backend has them.
#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/error.h"

namespace zero {

std::vector<at::Tensor> all_gather_varying(Communicator& comm, const at::Tensor& local) {
  const int world = comm.size();
  if (world == 1) return {local};
  // Exchange lengths, then the tensors themselves.
  at::Tensor length = at::full({1}, local.numel(), at::kLong);
  at::Tensor lengths = at::empty({world}, at::kLong);
  comm.all_gather(length, lengths)->wait();
  std::vector<int64_t> counts(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + world);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  at::Tensor all = at::empty({total}, local.options());
  if (total > 0) comm.all_gather(local, all, counts)->wait();
  std::vector<at::Tensor> pieces;
  int64_t offset = 0;
  for (int64_t c : counts) {
    pieces.push_back(all.narrow(0, offset, c));
    offset += c;
  }
  return pieces;
}

std::vector<std::string> all_gather_texts(Communicator& comm, const std::string& text) {
  at::Tensor mine = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(mine.data_ptr(), text.data(), text.size());
  std::vector<std::string> texts;
  for (const at::Tensor& piece : all_gather_varying(comm, mine)) {
    if (piece.numel() == 0) {
      texts.emplace_back();
      continue;
    }
    const char* base = reinterpret_cast<const char*>(piece.data_ptr());
    texts.emplace_back(base, base + piece.numel());
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
