#include "comm/collective_signature.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace zero::comm {
namespace {

// FNV-1a, 64 bits: a cheap, stable hash (the same on every rank and build).
uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// "0", "0, 2", "0-3, 5": ranks in ascending order.
std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out << (i ? ", " : "") << ranks[i];
    if (j > i) out << (j == i + 1 ? ", " : "-") << ranks[j];
    i = j + 1;
  }
  return out.str();
}

}  // namespace

CollectiveSignature signature_of(const Call& call, const std::string& label) {
  // Only what is the same on every rank: a chunked collective's own part (all_gather's input,
  // reduce_scatter's output) is counts[rank] long, so the whole buffer is described instead.
  std::ostringstream out;
  out << call.op << " (";
  const char* separator = "";
  if (call.input.defined()) {
    const at::Tensor& whole =
        call.has_counts && call.output.defined() && call.output.numel() > call.input.numel()
            ? call.output
            : call.input;
    out << whole.numel() << " elements of " << c10::toString(whole.scalar_type());
    separator = "; ";
  }
  if (call.has_counts && !call.counts.empty()) {
    out << separator << "counts {";
    const size_t shown = std::min<size_t>(call.counts.size(), 8);
    for (size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << call.counts[i];
    if (shown < call.counts.size()) {
      // The rest by a digest, so that counts differing past the shown ones differ in the text.
      std::string all;
      for (const int64_t count : call.counts) all += std::to_string(count) + ",";
      char digest[17];
      std::snprintf(digest, sizeof(digest), "%016llx",
                    static_cast<unsigned long long>(fnv1a(all)));
      out << ", ... (" << call.counts.size() << " in all, digest " << digest << ")";
    }
    out << "}";
    separator = "; ";
  }
  if (call.has_root) {
    out << separator << "root " << call.root;
    separator = "; ";
  }
  if (!label.empty()) out << separator << label;
  out << ")";
  CollectiveSignature signature;
  signature.text = out.str();
  signature.hash = fnv1a(signature.text);
  return signature;
}

std::string mismatch_message(const std::string& backend, int64_t number,
                             const std::vector<std::string>& texts) {
  std::vector<std::string> distinct;
  std::vector<std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(texts.size()); ++r) {
    size_t k = 0;
    while (k < distinct.size() && distinct[k] != texts[static_cast<size_t>(r)]) ++k;
    if (k == distinct.size()) {
      distinct.push_back(texts[static_cast<size_t>(r)]);
      ranks_of.emplace_back();
    }
    ranks_of[k].push_back(r);
  }
  std::ostringstream out;
  out << "the ranks issued different collectives as collective #" << number << " of the "
      << backend << " communicator:";
  for (size_t k = 0; k < distinct.size(); ++k) {
    out << (k ? ";" : "") << " rank" << (ranks_of[k].size() > 1 ? "s " : " ")
        << rank_list(ranks_of[k]) << " issued " << distinct[k];
  }
  out << ". Every rank must issue the same collectives in the same order: look for a module "
         "called a different number of times on some rank, a branch on rank-local data, or a "
         "backward (or step) skipped on some rank (Note [Collective signatures])";
  return out.str();
}

}  // namespace zero::comm
