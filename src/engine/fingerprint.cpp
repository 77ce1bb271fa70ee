#include "engine/fingerprint.h"

#include <ATen/ATen.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "zero/error.h"

namespace zero {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string clip(const std::string& line) {
  constexpr size_t kMax = 300;
  return line.size() <= kMax ? line : line.substr(0, kMax) + "...";
}

}  // namespace

void check_ranks_agree_on(Communicator& comm, const std::string& description) {
  const int world = comm.size();
  if (world == 1) return;
  // Every rank gets every description, so every rank can build the same message and fail
  // together.
  const std::vector<std::string> texts = all_gather_texts(comm, description);
  for (int r = 1; r < world; ++r) {
    if (texts[r] == texts[0]) continue;
    const auto reference = split_lines(texts[0]);
    const auto other = split_lines(texts[r]);
    size_t i = 0;
    while (i < reference.size() && i < other.size() && reference[i] == other[i]) ++i;
    std::ostringstream message;
    message << "ranks disagree on what to train: rank " << r << " differs from rank 0 at line "
            << i + 1 << ":\n  rank 0: "
            << (i < reference.size() ? clip(reference[i]) : "<end>") << "\n  rank " << r << ": "
            << (i < other.size() ? clip(other[i]) : "<end>")
            << "\n(every rank must build the same model and load the same config)";
    // Every rank builds this same message: rank r's CollectiveError is printed once.
    throw CollectiveError(message.str(), r);
  }
}

}  // namespace zero
