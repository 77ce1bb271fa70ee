// What zero::Communicator (zero/comm.h) defines for every backend.
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "zero/comm.h"
#include "zero/error.h"

namespace zero {

CommStats& CommStats::operator+=(const CommStats& other) {
  for (auto which : {&CommStats::all_reduce, &CommStats::reduce_scatter, &CommStats::all_gather,
                     &CommStats::broadcast, &CommStats::all_to_all}) {
    (this->*which).calls += (other.*which).calls;
    (this->*which).bytes += (other.*which).bytes;
  }
  inter_node_bytes += other.inter_node_bytes;
  return *this;
}

std::vector<int> Topology::ranks_of(int node) const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size(); ++r) {
    if (node_of_rank[static_cast<size_t>(r)] == node) ranks.push_back(r);
  }
  return ranks;
}

int Topology::ranks_per_node() const {
  int most = 0;
  for (int n = 0; n < nodes(); ++n) most = std::max(most, static_cast<int>(ranks_of(n).size()));
  return most;
}

bool Topology::blocked() const {
  const int per_node = ranks_per_node();
  if (per_node == 0 || world_size() != per_node * nodes()) return false;
  for (int r = 0; r < world_size(); ++r) {
    if (node_of_rank[static_cast<size_t>(r)] != r / per_node) return false;
  }
  return true;
}

std::string Topology::describe() const {
  std::ostringstream out;
  const auto write_ranges = [&](int node) {
    // Runs of consecutive ranks: "0-1, 4".
    const std::vector<int> ranks = ranks_of(node);
    for (size_t i = 0; i < ranks.size();) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      out << (i == 0 ? "" : ", ") << ranks[i];
      if (j > i) out << "-" << ranks[j];
      i = j + 1;
    }
  };
  if (nodes() == 1) {
    out << "1 node (" << node_names[0] << "), " << world_size()
        << (world_size() == 1 ? " rank" : " ranks");
    return out.str();
  }
  out << nodes() << " nodes";
  if (blocked()) out << " x " << ranks_per_node() << (ranks_per_node() == 1 ? " rank" : " ranks");
  out << ":";
  for (int n = 0; n < nodes(); ++n) {
    const size_t count = ranks_of(n).size();
    out << (n == 0 ? " " : ", ") << node_names[static_cast<size_t>(n)]
        << (count == 1 ? " (rank " : " (ranks ");
    write_ranges(n);
    out << ")";
  }
  return out.str();
}

Topology Topology::from_node_keys(const std::vector<int64_t>& key_of_rank,
                                  const std::vector<std::string>& hostname_of_rank) {
  ZERO_INTERNAL_ASSERT(key_of_rank.size() == hostname_of_rank.size() && !key_of_rank.empty(),
                       "topology of ", key_of_rank.size(), " keys and ",
                       hostname_of_rank.size(), " hostnames");
  Topology topology;
  std::map<int64_t, int> node_of_key;
  for (size_t r = 0; r < key_of_rank.size(); ++r) {
    const auto [it, added] =
        node_of_key.emplace(key_of_rank[r], static_cast<int>(topology.node_names.size()));
    if (added) topology.node_names.push_back(hostname_of_rank[r]);
    topology.node_of_rank.push_back(it->second);
  }
  return topology;
}

Topology Topology::single_node(int world_size, const std::string& name) {
  Topology topology;
  topology.node_of_rank.assign(static_cast<size_t>(world_size), 0);
  topology.node_names = {name};
  return topology;
}

at::Tensor Communicator::allocate_buffer(int64_t numel, at::ScalarType dtype) {
  return at::zeros({numel}, at::TensorOptions().dtype(dtype));
}

}  // namespace zero
