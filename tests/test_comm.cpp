// Tests of the MPI communicator, run on 1 to 4 ranks (tests/comm.cmake).
//
// Every rank runs every test and every collective in the same order. Inputs are generated
// from (seed, rank, index), so each rank can compute what any other rank contributed and
// hence the exact expected result of a reduction in the order of
// Note [MPI ring order] (src/comm/mpi_communicator.cpp); results are compared bit for bit.
// Checks around collectives use EXPECT_* only, so that no rank skips a collective that the
// others enter.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/collective_watchdog.h"
#include "comm/mpi_communicator.h"
#include "comm/reduce_kernels.h"
#include "test_util.h"
#include "zero/error.h"

namespace zero::test {
namespace {

// ---- communicators ------------------------------------------------------------------------

std::shared_ptr<Communicator> make_with(int64_t segment_bytes, int64_t max_message_bytes,
                                        bool ring_all_gather) {
  comm::MpiOptions options;
  options.ring_segment_bytes = segment_bytes;
  options.max_message_bytes = max_message_bytes;
  options.ring_all_gather = ring_all_gather;
  return comm::make_mpi_communicator(options);
}

/// Segments of 1000 bytes (250 fp32, 125 fp64, 500 bf16 elements: not a divisor of the chunk
/// sizes), all_gather over the ring once the output exceeds 1000 bytes, broadcast in
/// 1000-byte pieces.
std::shared_ptr<Communicator> small_messages() {
  static auto communicator = make_with(1000, 1000, false);
  return communicator;
}

/// One-element segments for 4- and 8-byte types, three for 16-bit ones.
std::shared_ptr<Communicator> tiny_messages() {
  static auto communicator = make_with(6, 6, false);
  return communicator;
}

/// Default segments, all_gather always over the Sendrecv ring.
std::shared_ptr<Communicator> ring_gather() {
  static auto communicator = make_with(int64_t{4} << 20, int64_t{1} << 30, true);
  return communicator;
}

/// The ranks as nodes of `ranks_per_node` consecutive ranks (Note [Topology]), with the
/// hierarchical schedules (Note [Hierarchical collectives]) or without; small segments and
/// messages, so the inner rings segment too.
std::shared_ptr<Communicator> virtual_nodes(int ranks_per_node, bool hierarchical) {
  static std::map<std::pair<int, bool>, std::shared_ptr<Communicator>> made;
  auto& communicator = made[{ranks_per_node, hierarchical}];
  if (!communicator) {
    comm::MpiOptions options;
    options.ring_segment_bytes = 1000;
    options.max_message_bytes = 1000;
    options.ranks_per_node = ranks_per_node;
    options.hierarchical = hierarchical;
    communicator = comm::make_mpi_communicator(options);
  }
  return communicator;
}

struct NamedComm {
  std::string name;
  std::shared_ptr<Communicator> comm;
  int64_t max_size;  // largest test size this communicator is used for
  int ranks_per_node = 0;  // > 0: hierarchical over nodes of this many ranks
};

/// Every communicator is made on every rank in the same order (construction is collective).
std::vector<NamedComm> communicators(bool with_ring_gather) {
  std::vector<NamedComm> all = {{"world", world(), INT64_MAX},
                                {"small_messages", small_messages(), 100003},
                                {"tiny_messages", tiny_messages(), 64}};
  if (with_ring_gather) all.push_back({"ring_gather", ring_gather(), INT64_MAX});
  // Every way to cut the ranks into two or more nodes of two or more ranks.
  const int n = world()->size();
  for (int m = 2; m < n; ++m) {
    if (n % m != 0) continue;
    all.push_back({"hierarchical " + std::to_string(n / m) + "x" + std::to_string(m),
                   virtual_nodes(m, true), 100003, m});
  }
  return all;
}

// ---- inputs -------------------------------------------------------------------------------

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t seed, int rank, int64_t i) {
  return mix(mix(seed) ^ mix((static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(i)));
}

/// Element i of rank `rank`'s input: +-m * 2^e with magnitudes spread wide enough that float
/// sums depend on their order. fp16 gets a narrower range so that sums of 4 stay finite.
double draw(uint64_t seed, int rank, int64_t i, c10::ScalarType dtype) {
  const uint64_t h = hash(seed, rank, i);
  const bool half = dtype == c10::kHalf;
  const uint64_t mant_mask = half ? 0x1F : 0x7FF;
  const double mant = static_cast<double>((h & mant_mask) + 1);
  const int exponent = half ? static_cast<int>((h >> 16) % 13) - 8
                            : static_cast<int>((h >> 16) % 25) - 12;
  return ((h >> 32) & 1 ? -mant : mant) * std::ldexp(1.0, exponent);
}

template <typename T>
T to_type(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return T(static_cast<float>(v));  // exact in fp32; one rounding to 16 bits
  }
}

template <typename T>
T element(uint64_t seed, int rank, int64_t i, c10::ScalarType dtype) {
  return to_type<T>(draw(seed, rank, i, dtype));
}

/// Rank `rank`'s reduction input of `numel` elements.
at::Tensor reduction_input(c10::ScalarType dtype, int rank, int64_t numel, uint64_t seed) {
  at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "reduction_input", [&] {
    auto* p = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < numel; ++i) p[i] = element<scalar_t>(seed, rank, i, dtype);
  });
  return t;
}

/// Bytes of element `i` of chunk data owned by `rank`, for the copy-only collectives.
void fill_copy_data(const at::Tensor& t, int rank, int64_t first_index, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  const int64_t es = t.element_size();
  const bool is_bool = t.scalar_type() == c10::kBool;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t h = hash(seed, rank, first_index + i);
    for (int64_t b = 0; b < es; ++b) {
      const auto byte = static_cast<uint8_t>(h >> (8 * b));
      p[i * es + b] = is_bool ? (byte & 1) : byte;
    }
  }
}

// ---- expected reductions ------------------------------------------------------------------

template <typename T>
T apply(ReduceOp op, T acc, T x) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (op == ReduceOp::kSum) return acc + x;
    return (x > acc || std::isnan(x)) ? x : acc;
  } else {
    const float a = static_cast<float>(acc);
    const float b = static_cast<float>(x);
    if (op == ReduceOp::kSum) return T(a + b);
    return (b > a || std::isnan(b)) ? x : acc;
  }
}

/// Elements [offset, offset + n) of the reduction of all ranks' inputs, where they belong to
/// chunk `owner`: ((x[c+1] + x[c+2]) + ...) + x[c]. With owner_first, the rotation that
/// starts at the owner instead: ((x[c] + x[c+1]) + ...) + x[c-1]. With ranks_per_node m (k =
/// world_size / m nodes, both > 1), Note [Hierarchical collectives]'s order for owner (n, l):
/// node n' sums ((x[n', l+1] + x[n', l+2]) + ...) + x[n', l] over its ranks, then the nodes'
/// sums S are combined as ((S[n+1] + S[n+2]) + ...) + S[n].
at::Tensor expected_reduction(c10::ScalarType dtype, ReduceOp op, int world_size, int owner,
                              int64_t offset, int64_t n, uint64_t seed,
                              bool owner_first = false, int ranks_per_node = 0) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(dtype));
  const int m = ranks_per_node;
  const bool hierarchical = m > 1 && world_size / m > 1;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "expected_reduction", [&] {
    auto* p = t.data_ptr<scalar_t>();
    // Ring order over `size` members starting after `own` (or at it), member j's value x(j).
    const auto ring_sum = [&](int size, int own, const auto& x) {
      const int first = owner_first ? own : (own + 1) % size;
      scalar_t acc = x(first);
      for (int j = 1; j < size; ++j) acc = apply(op, acc, x((first + j) % size));
      return acc;
    };
    for (int64_t i = 0; i < n; ++i) {
      const int64_t index = offset + i;
      const auto value = [&](int rank) { return element<scalar_t>(seed, rank, index, dtype); };
      if (!hierarchical) {
        p[i] = ring_sum(world_size, owner, value);
        continue;
      }
      const int local = owner % m;
      p[i] = ring_sum(world_size / m, owner / m, [&](int node) {
        return ring_sum(m, local, [&](int j) { return value(node * m + j); });
      });
    }
  });
  return t;
}

// ---- layouts ------------------------------------------------------------------------------

std::vector<int64_t> test_sizes(int world_size) {
  std::set<int64_t> sizes = {0, 1, world_size - 1, world_size + 1, 100003, int64_t{1} << 20};
  return {sizes.begin(), sizes.end()};
}

struct Layout {
  std::string name;
  std::vector<int64_t> counts;  // what the test passes: empty = equal chunks
  std::vector<int64_t> chunks;  // the resulting chunk sizes
};

std::vector<int64_t> balanced(int64_t total, int world_size) {
  std::vector<int64_t> counts(world_size, total / world_size);
  for (int c = 0; c < total % world_size; ++c) ++counts[c];
  return counts;
}

/// Equal chunks (empty counts) of total / N, explicit balanced counts over `total`, and
/// skewed counts with zero-sized chunks on odd ranks (the rest weighted 1, 3, ...).
std::vector<Layout> layouts(int64_t total, int world_size) {
  std::vector<Layout> all;
  all.push_back({"equal", {}, std::vector<int64_t>(world_size, total / world_size)});
  const auto b = balanced(total, world_size);
  all.push_back({"balanced", b, b});
  std::vector<int64_t> skewed(world_size, 0);
  int64_t weight_sum = 0;
  for (int c = 0; c < world_size; c += 2) weight_sum += c + 1;
  int64_t assigned = 0;
  int last = 0;
  for (int c = 0; c < world_size; c += 2) {
    skewed[c] = total * (c + 1) / weight_sum;
    assigned += skewed[c];
    last = c;
  }
  skewed[last] += total - assigned;
  all.push_back({"skewed", skewed, skewed});
  return all;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& chunks) {
  std::vector<int64_t> offsets(chunks.size(), 0);
  for (size_t c = 1; c < chunks.size(); ++c) offsets[c] = offsets[c - 1] + chunks[c - 1];
  return offsets;
}

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// ---- checks -------------------------------------------------------------------------------

/// Bitwise equality; on a mismatch reports the first differing element.
void expect_bitwise_equal(const at::Tensor& got, const at::Tensor& want,
                          const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  const int64_t es = got.element_size();
  const auto* g = static_cast<const uint8_t*>(got.data_ptr());
  const auto* w = static_cast<const uint8_t*>(want.data_ptr());
  if (got.numel() == 0 || std::memcmp(g, w, got.numel() * es) == 0) return;
  int64_t bad = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  std::ostringstream out;
  out << what << ": " << bad << " of " << got.numel() << " elements differ; first at " << first;
  if (at::isFloatingType(got.scalar_type())) {
    out << std::setprecision(17) << ": got " << got[first].item<double>() << ", want "
        << want[first].item<double>();
  }
  ADD_FAILURE() << out.str();
}

/// Runs `bad_call` (made identically on every rank) and checks that it throws zero::Error (not
/// an internal error) whose message contains every needle.
void expect_error(const std::function<void()>& bad_call, const std::vector<std::string>& needles,
                  const std::string& what) {
  try {
    bad_call();
    ADD_FAILURE() << what << ": no exception";
  } catch (const InternalError& e) {
    ADD_FAILURE() << what << ": internal error instead of a user error: " << e.what();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << what << ": message lacks '" << needle << "': " << message;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}

std::string case_name(const char* comm, c10::ScalarType dtype, int64_t size,
                      const std::string& layout, bool in_place, ReduceOp op) {
  std::ostringstream out;
  out << comm << " " << c10::toString(dtype) << " size " << size << " " << layout
      << (in_place ? " in-place" : " out-of-place") << (op == ReduceOp::kSum ? " sum" : " max");
  return out.str();
}

const std::vector<c10::ScalarType> kReduceTypes = {c10::kFloat, c10::kDouble, c10::kBFloat16,
                                                   c10::kHalf};
const std::vector<c10::ScalarType> kCopyTypes = {
    c10::kFloat, c10::kDouble, c10::kBFloat16, c10::kHalf, c10::kByte,
    c10::kChar,  c10::kShort,  c10::kInt,      c10::kLong, c10::kBool};

// ---- kernels (local) ----------------------------------------------------------------------

TEST(CommKernels, EveryFamilyMatchesTheReferenceBitwise) {
  const auto best = comm::best_kernel_family();
  std::cout << "reduction kernels: " << comm::kernel_family_name(best) << std::endl;
  for (auto dtype : kReduceTypes) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kMax}) {
      const int64_t n = 1 << 18;
      const int64_t es = c10::elementSize(dtype);
      at::Tensor a = at::empty({n}, at::TensorOptions().dtype(dtype));
      at::Tensor b = at::empty({n}, at::TensorOptions().dtype(dtype));
      // Random bit patterns (NaNs, infinities, subnormals, ties included), then a stretch of
      // ordinary values, and hand-picked bf16/fp16 rounding cases at the start.
      fill_copy_data(a, 0, 0, 11);
      fill_copy_data(b, 1, 0, 12);
      for (int64_t i = n / 2; i < n; ++i) {
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "fill", [&] {
          a.data_ptr<scalar_t>()[i] = element<scalar_t>(21, 0, i, dtype);
          b.data_ptr<scalar_t>()[i] = element<scalar_t>(21, 1, i, dtype);
        });
      }
      auto* ua = static_cast<uint16_t*>(a.data_ptr());
      auto* ub = static_cast<uint16_t*>(b.data_ptr());
      if (dtype == c10::kBFloat16) {
        ua[0] = 0x3F80, ub[0] = 0x3B80;  // 1 + 2^-8: a tie, rounds down to even 1.0
        ua[1] = 0x3F81, ub[1] = 0x3B80;  // a tie, rounds up to even 0x3F82
        ua[2] = 0x7F80, ub[2] = 0xFF80;  // inf + -inf = NaN
        ua[3] = 0x0001, ub[3] = 0x0001;  // subnormals
        ua[4] = 0x7F7F, ub[4] = 0x7F7F;  // overflow to inf
      }
      if (dtype == c10::kHalf) {
        ua[0] = 0x3C00, ub[0] = 0x1000;  // 1 + 2^-11: a tie, rounds down to even 1.0
        ua[1] = 0x3C01, ub[1] = 0x1000;  // a tie, rounds up to even
        ua[2] = 0x7BFF, ub[2] = 0x7BFF;  // overflow to inf
        ua[3] = 0x0001, ub[3] = 0x0001;  // subnormals
      }
      for (int f = 1; f <= static_cast<int>(best); ++f) {
        const auto family = static_cast<comm::KernelFamily>(f);
        // Lengths around the vector widths (tails) at odd offsets, then nearly everything;
        // two-operand (out = a) and three-operand forms.
        for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{15},
                            int64_t{16}, int64_t{17}, int64_t{31}, int64_t{32}, int64_t{33},
                            int64_t{67}, n - 3}) {
          for (int64_t start : {int64_t{0}, int64_t{1}, int64_t{3}}) {
            for (bool in_place : {true, false}) {
              const auto* pa = static_cast<const uint8_t*>(a.data_ptr()) + start * es;
              const auto* pb = static_cast<const uint8_t*>(b.data_ptr()) + start * es;
              at::Tensor got = a.narrow(0, start, len).clone();
              at::Tensor want = at::empty_like(got);
              if (in_place) {
                comm::reduce_to(family, op, dtype, got.data_ptr(), got.data_ptr(), pb, len);
              } else {
                comm::reduce_to(family, op, dtype, got.data_ptr(), pa, pb, len);
              }
              comm::reduce_to(comm::KernelFamily::kScalar, op, dtype, want.data_ptr(), pa, pb,
                              len);
              // NaN payloads of fp16 sums may differ between F16C and c10's conversion.
              const at::Tensor got_nan = at::isnan(got.to(at::kFloat));
              const at::Tensor want_nan = at::isnan(want.to(at::kFloat));
              EXPECT_TRUE(at::equal(got_nan, want_nan));
              got.masked_fill_(got_nan & want_nan, 0);
              want.masked_fill_(got_nan & want_nan, 0);
              std::ostringstream what;
              what << comm::kernel_family_name(family) << " " << c10::toString(dtype)
                   << (op == ReduceOp::kSum ? " sum" : " max") << " start " << start << " len "
                   << len << (in_place ? " in place" : "");
              expect_bitwise_equal(got, want, what.str());
            }
          }
        }
      }
      if (dtype == c10::kBFloat16 && op == ReduceOp::kSum) {
        at::Tensor got = a.narrow(0, 0, 5).clone();
        comm::reduce_into(op, dtype, got.data_ptr(), b.data_ptr(), 5);
        const auto* g = static_cast<const uint16_t*>(got.data_ptr());
        EXPECT_EQ(g[0], 0x3F80);
        EXPECT_EQ(g[1], 0x3F82);
        EXPECT_EQ(g[2], 0x7FC0);
        EXPECT_EQ(g[3], 0x0002);
        EXPECT_EQ(g[4], 0x7F80);
      }
    }
  }
}

// ---- collectives --------------------------------------------------------------------------

// Note [Collective timeout], in one process: a collective in flight past the deadline calls
// the abort once, after printing the message; one that ends in time does not. The message
// names the op, the bytes, the sequence number, the ranks that have not arrived and those
// whose heartbeat stopped (stopped or dead, even inside the collective).
TEST(CollectiveWatchdog, AbortsACollectivePastItsDeadlineNamingTheLaggard) {
  std::vector<int64_t> published;
  std::atomic<int64_t> heartbeat{0};
  std::atomic<int> aborts{0};
  comm::CollectiveWatchdog watchdog(
      "mpi", /*rank=*/0, /*size=*/3, /*timeout_seconds=*/1,
      [&](int64_t entered) { published.push_back(entered); },
      [&](int64_t now_ns) { heartbeat.store(now_ns); },
      [] { return std::vector<comm::RankProgress>{{2, 0}, {2, 0}, {1, 0}}; },
      [&] { aborts.fetch_add(1); });
  {
    const comm::CollectiveWatchdog::Scope quick(watchdog, "barrier", 0);
  }
  EXPECT_EQ(watchdog.entered(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_EQ(aborts.load(), 0) << "an idle communicator timed out";
  EXPECT_GT(heartbeat.load(), 0) << "the watchdog publishes no heartbeat";
  {
    const comm::CollectiveWatchdog::Scope slow(watchdog, "all_gather", 4096);
    for (int i = 0; i < 50 && aborts.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_EQ(aborts.load(), 1);
  EXPECT_EQ(published, (std::vector<int64_t>{1, 2}));
  const std::string message = watchdog.timeout_message("all_gather", 4096, 2, 1.2, 1);
  EXPECT_NE(message.find("collective timeout on rank 0 of 3: all_gather (mpi, 4096 bytes, "
                         "this rank's collective #2) has waited 1 s, past the deadline of 1 s"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("waiting for rank 2 (entered 1 collectives)"), std::string::npos)
      << message;
  comm::CollectiveWatchdog across_nodes("mpi", 0, 2, 1, nullptr, nullptr, nullptr, [] {});
  EXPECT_NE(across_nodes.timeout_message("barrier", 0, 1, 1, 1).find("is unknown"),
            std::string::npos);
  // Across nodes, the peer a ring step receives from, with its node.
  across_nodes.set_node_names({"node1", "node2"});
  {
    const comm::CollectiveWatchdog::Scope ring(across_nodes, "reduce_scatter", 64);
    across_nodes.waiting_on(1);
    const std::string named = across_nodes.timeout_message("reduce_scatter", 64, 2, 1, 1);
    EXPECT_NE(named.find("waiting for rank 1 on node2"), std::string::npos) << named;
  }
  {
    const comm::CollectiveWatchdog::Scope next(across_nodes, "barrier", 0);  // forgets the peer
    EXPECT_NE(across_nodes.timeout_message("barrier", 0, 3, 1, 1).find("is unknown"),
              std::string::npos);
  }
}

// Heartbeats: rank 1 entered the collective and then stopped (its heartbeat is 10 s old), rank
// 2 is behind and silent too, rank 3 is inside and alive.
TEST(CollectiveWatchdog, SilentPeersAreNamedEvenInsideTheCollective) {
  const int64_t now = 100'000'000'000;
  const int64_t stale = now - 10'000'000'000;
  const int64_t fresh = now - 100'000'000;
  comm::CollectiveWatchdog watchdog(
      "mpi", 0, 4, 600, nullptr, nullptr,
      [&] { return std::vector<comm::RankProgress>{{7, fresh}, {7, stale}, {6, stale}, {7, fresh}}; },
      [] {});
  const std::string message = watchdog.timeout_message("reduce_scatter", 64, 7, 600, now);
  EXPECT_NE(message.find("waiting for rank 2 (entered 6 collectives, silent for 10 s)"),
            std::string::npos) << message;
  EXPECT_NE(message.find("rank 1 entered it too but has been silent for 10 s (stopped or dead)"),
            std::string::npos) << message;
  EXPECT_EQ(message.find("rank 3"), std::string::npos) << message;
  comm::CollectiveWatchdog all_alive(
      "mpi", 0, 2, 600, nullptr, nullptr,
      [&] { return std::vector<comm::RankProgress>{{7, fresh}, {7, fresh}}; }, [] {});
  EXPECT_NE(all_alive.timeout_message("barrier", 0, 7, 600, now).find("stuck inside it"),
            std::string::npos);
}

TEST(Comm, Basics) {
  auto comm = world();
  EXPECT_EQ(comm->backend_name(), "mpi");
  EXPECT_GE(comm->rank(), 0);
  EXPECT_LT(comm->rank(), comm->size());
  EXPECT_EQ(small_messages()->rank(), comm->rank());
  EXPECT_EQ(small_messages()->size(), comm->size());
  EXPECT_NO_THROW(comm->barrier()->wait());
}

TEST(Comm, ReduceScatterMatchesNoteOrderBitwise) {
  const int n = world()->size();
  const int r = world()->rank();
  uint64_t seed = 1000;
  for (const auto& [comm_name, comm, max_size, per_node] : communicators(false)) {
    for (auto dtype : kReduceTypes) {
      for (int64_t size : test_sizes(n)) {
        if (size > max_size) continue;
        for (const auto& layout : layouts(size, n)) {
          const int64_t total = sum_of(layout.chunks);
          const auto offsets = offsets_of(layout.chunks);
          for (bool in_place : {false, true}) {
            for (auto op : {ReduceOp::kSum, ReduceOp::kMax}) {
              if (op == ReduceOp::kMax && size != n + 1 && size != 100003) continue;
              ++seed;
              const std::string what =
                  case_name(comm_name.c_str(), dtype, size, layout.name, in_place, op);
              at::Tensor input = reduction_input(dtype, r, total, seed);
              at::Tensor output = in_place ? input.narrow(0, offsets[r], layout.chunks[r])
                                           : at::full({layout.chunks[r]}, 7.0, input.options());
              EXPECT_NO_THROW(comm->reduce_scatter(input, output, op, layout.counts)->wait()) << what;
              expect_bitwise_equal(output,
                                   expected_reduction(dtype, op, n, r, offsets[r],
                                                      layout.chunks[r], seed, false, per_node),
                                   what);
            }
          }
        }
      }
    }
  }
}

// The order check above is only meaningful if the order matters: with 3 or more ranks,
// summing the same fp32/bf16 inputs in another rank order gives different bits.
TEST(Comm, ReductionOrderIsObservable) {
  const int n = world()->size();
  const int r = world()->rank();
  const int64_t size = 100003;
  for (auto dtype : {c10::kFloat, c10::kBFloat16}) {
    const uint64_t seed = 77;
    const auto layout = layouts(size, n)[1];  // balanced: every rank owns a large chunk
    const auto offsets = offsets_of(layout.chunks);
    at::Tensor input = reduction_input(dtype, r, size, seed);
    at::Tensor output = at::empty({layout.chunks[r]}, input.options());
    EXPECT_NO_THROW(world()->reduce_scatter(input, output, ReduceOp::kSum, layout.counts)->wait());
    const at::Tensor note = expected_reduction(dtype, ReduceOp::kSum, n, r, offsets[r],
                                               layout.chunks[r], seed);
    expect_bitwise_equal(output, note, c10::toString(dtype));
    if (n >= 3 && layout.chunks[r] > 1000) {
      const at::Tensor other = expected_reduction(dtype, ReduceOp::kSum, n, r, offsets[r],
                                                  layout.chunks[r], seed, /*owner_first=*/true);
      const int64_t differing = (note != other).sum().item<int64_t>();
      EXPECT_GT(differing, 0) << "inputs do not make the summation order observable";
    }
  }
}

TEST(Comm, AllReduceMatchesNoteOrderAndIsIdenticalOnAllRanks) {
  const int n = world()->size();
  const int r = world()->rank();
  uint64_t seed = 5000;
  for (const auto& [comm_name, comm, max_size, per_node] : communicators(true)) {
    for (auto dtype : kReduceTypes) {
      for (int64_t size : test_sizes(n)) {
        if (size > max_size) continue;
        for (auto op : {ReduceOp::kSum, ReduceOp::kMax}) {
          if (op == ReduceOp::kMax && size != n + 1 && size != 100003) continue;
          ++seed;
          const std::string what = case_name(comm_name.c_str(), dtype, size, "balanced", true, op);
          at::Tensor buffer = reduction_input(dtype, r, size, seed);
          EXPECT_NO_THROW(comm->all_reduce(buffer, op)->wait()) << what;
          // Owners: balanced split, the first size % N ranks own one element more.
          const auto chunks = balanced(size, n);
          const auto offsets = offsets_of(chunks);
          for (int c = 0; c < n; ++c) {
            expect_bitwise_equal(
                buffer.narrow(0, offsets[c], chunks[c]),
                expected_reduction(dtype, op, n, c, offsets[c], chunks[c], seed, false, per_node),
                what + " chunk " + std::to_string(c));
          }
          at::Tensor gathered = at::empty({n * size}, buffer.options());
          EXPECT_NO_THROW(world()->all_gather(buffer, gathered)->wait());
          for (int c = 0; c < n; ++c) {
            expect_bitwise_equal(gathered.narrow(0, c * size, size), buffer,
                                 what + ": rank " + std::to_string(c) + " vs this rank");
          }
        }
      }
    }
  }
}

TEST(Comm, AllGather) {
  const int n = world()->size();
  const int r = world()->rank();
  uint64_t seed = 9000;
  for (const auto& [comm_name, comm, max_size, per_node] : communicators(true)) {
    for (auto dtype : kCopyTypes) {
      for (int64_t size : test_sizes(n)) {
        if (size > max_size) continue;
        if (size > 100003 && c10::elementSize(dtype) == 1) continue;  // same bytes as others
        for (const auto& layout : layouts(size, n)) {
          const int64_t total = sum_of(layout.chunks);
          const auto offsets = offsets_of(layout.chunks);
          for (bool in_place : {false, true}) {
            ++seed;
            const std::string what =
                case_name(comm_name.c_str(), dtype, size, layout.name, in_place, ReduceOp::kSum);
            const auto options = at::TensorOptions().dtype(dtype);
            at::Tensor expected = at::empty({total}, options);
            for (int c = 0; c < n; ++c) {
              fill_copy_data(expected.narrow(0, offsets[c], layout.chunks[c]), c, 0, seed);
            }
            at::Tensor output = at::zeros({total}, options);
            at::Tensor input = in_place ? output.narrow(0, offsets[r], layout.chunks[r])
                                        : at::empty({layout.chunks[r]}, options);
            fill_copy_data(input, r, 0, seed);
            EXPECT_NO_THROW(comm->all_gather(input, output, layout.counts)->wait()) << what;
            expect_bitwise_equal(output, expected, what);
          }
        }
      }
    }
  }
}

TEST(Comm, Broadcast) {
  const int n = world()->size();
  const int r = world()->rank();
  uint64_t seed = 13000;
  for (const auto& [comm_name, comm, max_size, per_node] : communicators(false)) {
    for (auto dtype : kCopyTypes) {
      for (int64_t size : test_sizes(n)) {
        if (size > max_size) continue;
        for (int root = 0; root < n; ++root) {
          ++seed;
          std::ostringstream what;
          what << comm_name << " " << c10::toString(dtype) << " size " << size << " root "
               << root;
          const auto options = at::TensorOptions().dtype(dtype);
          at::Tensor expected = at::empty({size}, options);
          fill_copy_data(expected, root, 0, seed);
          at::Tensor buffer = r == root ? expected.clone() : at::zeros({size}, options);
          EXPECT_NO_THROW(comm->broadcast(buffer, root)->wait()) << what.str();
          expect_bitwise_equal(buffer, expected, what.str());
        }
      }
    }
  }
}

TEST(Comm, MaxPropagatesNaNAndInfinity) {
  const int n = world()->size();
  const int r = world()->rank();
  for (auto dtype : kReduceTypes) {
    // Element 0: NaN on the last rank; element 1: +inf on rank 0; element 2: -inf everywhere.
    at::Tensor buffer = at::full({3 * n + 1}, static_cast<double>(r), at::TensorOptions().dtype(dtype));
    if (r == n - 1) buffer[0] = std::nan("");
    if (r == 0) buffer[1] = INFINITY;
    buffer[2] = -INFINITY;
    EXPECT_NO_THROW(world()->all_reduce(buffer, ReduceOp::kMax)->wait());
    EXPECT_TRUE(std::isnan(buffer[0].item<double>())) << c10::toString(dtype);
    EXPECT_EQ(buffer[1].item<double>(), INFINITY) << c10::toString(dtype);
    EXPECT_EQ(buffer[2].item<double>(), -INFINITY) << c10::toString(dtype);
    EXPECT_EQ(buffer[3].item<double>(), n - 1) << c10::toString(dtype);
  }
}

TEST(Comm, StatsFollowTheCountingNote) {
  auto comm = world();
  const int n = comm->size();
  const int r = comm->rank();
  const bool moves = n > 1;
  comm->reset_stats();
  CommStats s = comm->stats();
  EXPECT_EQ(s.total_bytes(), 0);
  EXPECT_EQ(s.reduce_scatter.calls + s.all_gather.calls + s.all_reduce.calls + s.broadcast.calls,
            0);

  // reduce_scatter, uneven counts, fp32: bytes of the chunks owned by other ranks.
  std::vector<int64_t> counts(n);
  for (int c = 0; c < n; ++c) counts[c] = 10 + 3 * c;
  const int64_t total = sum_of(counts);
  at::Tensor in = at::ones({total});
  at::Tensor out = at::empty({counts[r]});
  comm->reduce_scatter(in, out, ReduceOp::kSum, counts)->wait();
  comm->reduce_scatter(at::ones({total}), out, ReduceOp::kMax, counts)->wait();
  s = comm->stats();
  EXPECT_EQ(s.reduce_scatter.calls, 2);
  EXPECT_EQ(s.reduce_scatter.bytes, moves ? 2 * (total - counts[r]) * 4 : 0);

  // all_gather, equal chunks, bf16.
  at::Tensor chunk = at::ones({5}, at::kBFloat16);
  at::Tensor gathered = at::empty({5 * n}, at::kBFloat16);
  comm->all_gather(chunk, gathered)->wait();
  s = comm->stats();
  EXPECT_EQ(s.all_gather.calls, 1);
  EXPECT_EQ(s.all_gather.bytes, moves ? (n - 1) * 5 * 2 : 0);

  // all_reduce, fp64, 1001 elements: twice the bytes owned by others under the balanced split.
  at::Tensor buffer = at::ones({1001}, at::kDouble);
  comm->all_reduce(buffer, ReduceOp::kSum)->wait();
  const int64_t mine = balanced(1001, n)[r];
  s = comm->stats();
  EXPECT_EQ(s.all_reduce.calls, 1);
  EXPECT_EQ(s.all_reduce.bytes, moves ? 2 * (1001 - mine) * 8 : 0);
  // all_reduce does not count as reduce_scatter or all_gather.
  EXPECT_EQ(s.reduce_scatter.calls, 2);
  EXPECT_EQ(s.all_gather.calls, 1);

  // broadcast, int64: what each non-root receives.
  at::Tensor ints = at::zeros({100}, at::kLong);
  comm->broadcast(ints, 0)->wait();
  s = comm->stats();
  EXPECT_EQ(s.broadcast.calls, 1);
  EXPECT_EQ(s.broadcast.bytes, moves && r != 0 ? 800 : 0);

  // Zero-sized calls are calls.
  comm->all_reduce(at::empty({0}), ReduceOp::kSum)->wait();
  s = comm->stats();
  EXPECT_EQ(s.all_reduce.calls, 2);
  EXPECT_EQ(s.total_bytes(), s.reduce_scatter.bytes + s.all_gather.bytes +
                                 s.all_reduce.bytes + s.broadcast.bytes);

  comm->barrier()->wait();  // barriers are not counted
  EXPECT_EQ(comm->stats().total_bytes(), s.total_bytes());
  comm->reset_stats();
  s = comm->stats();
  EXPECT_EQ(s.total_bytes(), 0);
  EXPECT_EQ(s.all_reduce.calls, 0);
}

// Note [Topology] and the inter-node count of Note [Counting communicated bytes], on the
// ranks cut into virtual nodes of 2 (ZERO_RANKS_PER_NODE's option), with the flat ring and
// with the hierarchical schedules.
TEST(Comm, TopologyAndBytesAcrossNodes) {
  const int n = world()->size();
  const int r = world()->rank();
  const Topology& real = world()->topology();
  EXPECT_EQ(real.world_size(), n);
  EXPECT_EQ(real.nodes(), 1) << "the test runs on one machine: " << real.describe();
  EXPECT_FALSE(world()->capabilities().hierarchical);
  EXPECT_EQ(world()->stats().inter_node_bytes, 0);
  if (n % 2 != 0 || n < 4) {
    ZERO_SKIP_AT_THIS_RANK_COUNT("needs an even number of ranks, at least 4");
  }
  const int k = n / 2;  // nodes of 2 ranks
  for (bool hierarchical : {false, true}) {
    auto comm = virtual_nodes(2, hierarchical);
    const Topology& topology = comm->topology();
    EXPECT_EQ(topology.nodes(), k);
    EXPECT_TRUE(topology.blocked());
    EXPECT_EQ(topology.ranks_per_node(), 2);
    EXPECT_EQ(topology.node_of_rank[static_cast<size_t>(r)], r / 2);
    EXPECT_EQ(topology.node_names[0], "virtual-node-0");
    EXPECT_NE(topology.describe().find(std::to_string(k) + " nodes x 2 ranks: virtual-node-0 (ranks 0-1)"),
              std::string::npos) << topology.describe();
    EXPECT_EQ(comm->capabilities().hierarchical, hierarchical);
    EXPECT_FALSE(comm->capabilities().shared_buffers);
    comm->reset_stats();
    // Equal chunks of 100 fp32 per rank.
    const int64_t chunk = 100;
    at::Tensor input = at::ones({chunk * n});
    at::Tensor output = at::empty({chunk});
    comm->reduce_scatter(input, output, ReduceOp::kSum)->wait();
    EXPECT_EQ(output[0].item<float>(), static_cast<float>(n));
    at::Tensor gathered = at::empty({chunk * n});
    comm->all_gather(output, gathered)->wait();
    at::Tensor buffer = at::ones({chunk * n});
    comm->all_reduce(buffer, ReduceOp::kSum)->wait();
    const CommStats s = comm->stats();
    const int64_t others = (n - 1) * chunk * 4;  // what the rank moves, either schedule
    EXPECT_EQ(s.reduce_scatter.bytes, others);
    EXPECT_EQ(s.all_gather.bytes, others);
    EXPECT_EQ(s.all_reduce.bytes, 2 * others);
    // Flat: the first rank of each node receives everything from the node before.
    // Hierarchical: every rank receives the other nodes' chunks of its local index.
    const int64_t across = hierarchical ? (k - 1) * chunk * 4 : (r % 2 == 0 ? others : 0);
    EXPECT_EQ(s.inter_node_bytes, 4 * across) << (hierarchical ? "hierarchical" : "flat");
  }
}

// CollectiveGroup: all_to_all over every rank, and all_gather, reduce_scatter and all_to_all
// over the node groups, on every way to cut the ranks into nodes (1 node, 1 rank per node and
// everything between), with their counts (Note [Counting communicated bytes]).
TEST(Comm, NodeGroupsAndAllToAll) {
  const int n = world()->size();
  const int r = world()->rank();
  for (int m = 1; m <= n; ++m) {
    if (n % m != 0) continue;
    auto comm = virtual_nodes(m, true);
    SCOPED_TRACE("nodes of " + std::to_string(m) + " ranks");
    ASSERT_TRUE(comm->capabilities().node_groups);
    const int k = n / m, node = r / m, local = r % m;
    const int64_t chunk = 7;  // elements per rank
    // all_to_all over every rank: chunk j of rank r holds r * 1000 + j.
    {
      comm->reset_stats();
      at::Tensor input = at::empty({n * chunk}, at::kLong);
      for (int j = 0; j < n; ++j) input.narrow(0, j * chunk, chunk).fill_(r * 1000 + j);
      at::Tensor output = at::full({n * chunk}, -1, at::kLong);
      comm->all_to_all(input, output)->wait();
      for (int j = 0; j < n; ++j) {
        EXPECT_TRUE(output.narrow(0, j * chunk, chunk).eq(j * 1000 + r).all().item<bool>()) << j;
      }
      const CommStats s = comm->stats();
      EXPECT_EQ(s.all_to_all.calls, 1);
      EXPECT_EQ(s.all_to_all.bytes, (n - 1) * chunk * 8);
      EXPECT_EQ(s.inter_node_bytes, (n - m) * chunk * 8);  // from the ranks of other nodes
    }
    // The node group: ranks node * m .. node * m + m - 1; across nodes: local, m + local, ...
    for (CollectiveGroup group : {CollectiveGroup::kNode, CollectiveGroup::kAcrossNodes}) {
      const bool inside = group == CollectiveGroup::kNode;
      const int size = inside ? m : k;
      const int me = inside ? local : node;
      const auto member = [&](int j) { return inside ? node * m + j : j * m + local; };
      CollectiveOptions options;
      options.group = group;
      comm->reset_stats();
      at::Tensor mine = at::full({chunk}, static_cast<float>(r));
      at::Tensor gathered = at::full({size * chunk}, -1.f);
      comm->all_gather(mine, gathered, {}, options)->wait();
      for (int j = 0; j < size; ++j) {
        EXPECT_TRUE(gathered.narrow(0, j * chunk, chunk).eq(member(j)).all().item<bool>())
            << (inside ? "node" : "across") << " all_gather, chunk " << j;
      }
      // reduce_scatter: chunk j of rank r holds r + j; the group's sum of chunk `me`.
      at::Tensor input = at::empty({size * chunk});
      for (int j = 0; j < size; ++j) input.narrow(0, j * chunk, chunk).fill_(static_cast<float>(r + j));
      at::Tensor reduced = at::empty({chunk});
      comm->reduce_scatter(input, reduced, ReduceOp::kSum, {}, options)->wait();
      float expected = 0;
      for (int j = 0; j < size; ++j) expected += static_cast<float>(member(j) + me);
      EXPECT_TRUE(reduced.eq(expected).all().item<bool>()) << (inside ? "node" : "across");
      at::Tensor send = at::empty({size * chunk}, at::kInt);
      for (int j = 0; j < size; ++j) send.narrow(0, j * chunk, chunk).fill_(r * 1000 + member(j));
      at::Tensor received = at::empty({size * chunk}, at::kInt);
      comm->all_to_all(send, received, options)->wait();
      for (int j = 0; j < size; ++j) {
        EXPECT_TRUE(received.narrow(0, j * chunk, chunk).eq(member(j) * 1000 + r).all().item<bool>())
            << (inside ? "node" : "across") << " all_to_all, chunk " << j;
      }
      const CommStats s = comm->stats();
      const int64_t gather_bytes = (size - 1) * chunk * 4;
      EXPECT_EQ(s.all_gather.bytes, gather_bytes);
      EXPECT_EQ(s.reduce_scatter.bytes, gather_bytes);
      EXPECT_EQ(s.all_to_all.bytes, gather_bytes);
      EXPECT_EQ(s.inter_node_bytes, inside ? 0 : 3 * gather_bytes);
    }
    // Only the chunked collectives take a group; a group's counts are the group's.
    CollectiveOptions in_node;
    in_node.group = CollectiveGroup::kNode;
    at::Tensor buffer = at::zeros({4});
    EXPECT_THROW((void)comm->broadcast(buffer, 0, in_node), Error);
    EXPECT_THROW((void)comm->all_reduce(buffer, ReduceOp::kSum, in_node), Error);
    at::Tensor out = at::zeros({4 * (m + 1)});
    EXPECT_THROW((void)comm->all_gather(buffer, out, {}, in_node), Error);
    at::Tensor odd = at::zeros({m * 4 + 1});
    if (m > 1) {
      EXPECT_THROW((void)comm->all_to_all(odd, at::zeros({m * 4 + 1}), in_node), Error);
    }
    EXPECT_THROW((void)comm->all_to_all(buffer.narrow(0, 0, 2), buffer.narrow(0, 1, 2)), Error);
  }
}

TEST(Comm, StatsCanBeReadFromAnotherThread) {
  auto comm = world();
  comm->reset_stats();
  std::atomic<bool> done{false};
  std::atomic<bool> monotonic{true};
  std::thread reader([&] {
    int64_t last = 0;
    while (!done.load()) {
      const int64_t calls = comm->stats().all_reduce.calls;
      if (calls < last) monotonic = false;
      last = calls;
    }
  });
  at::Tensor buffer = at::ones({257});
  for (int i = 0; i < 200; ++i) comm->all_reduce(buffer, ReduceOp::kSum)->wait();
  done = true;
  reader.join();
  EXPECT_TRUE(monotonic.load());
  EXPECT_EQ(comm->stats().all_reduce.calls, 200);
  comm->reset_stats();
}

TEST(Comm, BadCallsThrowErrorsNamingOpRankAndSizes) {
  auto comm = world();
  const int n = comm->size();
  const int r = comm->rank();
  const std::string rank = "rank " + std::to_string(r);
  std::vector<int64_t> counts(n);
  for (int c = 0; c < n; ++c) counts[c] = 10 + c;
  const int64_t total = sum_of(counts);
  const auto offsets = offsets_of(counts);

  expect_error([&] { comm->reduce_scatter(at::ones({total}), at::empty({counts[r] + 1}),
                                          ReduceOp::kSum, counts)->wait(); },
               {"reduce_scatter", rank, "output must hold counts[" + std::to_string(r) + "] = " +
                std::to_string(counts[r]), "got " + std::to_string(counts[r] + 1),
                std::to_string(total) + " elements", "Float"},
               "reduce_scatter output size");
  std::vector<int64_t> too_many = counts;
  too_many.push_back(1);
  expect_error([&] { comm->reduce_scatter(at::ones({total + 1}), at::empty({counts[r]}),
                                          ReduceOp::kSum, too_many)->wait(); },
               {"reduce_scatter", rank, "one entry per rank (" + std::to_string(n) + ")",
                "got " + std::to_string(n + 1)},
               "reduce_scatter counts size");
  std::vector<int64_t> negative = counts;
  negative[0] = -1;
  expect_error([&] { comm->reduce_scatter(at::ones({total}),
                                          at::empty({std::max<int64_t>(negative[r], 0)}),
                                          ReduceOp::kSum, negative)->wait(); },
               {"reduce_scatter", rank, "counts[0] = -1", "negative"},
               "reduce_scatter negative count");
  expect_error([&] { comm->reduce_scatter(at::ones({total + 2}), at::empty({counts[r]}),
                                          ReduceOp::kSum, counts)->wait(); },
               {"reduce_scatter", rank, "sum(counts) = " + std::to_string(total),
                "got " + std::to_string(total + 2)},
               "reduce_scatter input size");
  expect_error([&] { comm->reduce_scatter(at::ones({4 * n + 1}), at::empty({4}),
                                          ReduceOp::kSum)->wait(); },
               {"reduce_scatter", rank, "counts {} (equal chunks)",
                std::to_string(4 * n + 1) + " elements"},
               "reduce_scatter equal chunks");
  expect_error([&] { comm->reduce_scatter(at::ones({total}), at::empty({counts[r]}, at::kDouble),
                                          ReduceOp::kSum, counts)->wait(); },
               {"reduce_scatter", rank, "dtypes differ", "Float", "Double"},
               "reduce_scatter dtype mismatch");
  expect_error([&] { comm->reduce_scatter(at::ones({total}, at::kInt),
                                          at::empty({counts[r]}, at::kInt), ReduceOp::kSum,
                                          counts)->wait(); },
               {"reduce_scatter", rank, "Int", "reductions support"},
               "reduce_scatter integer dtype");
  expect_error([&] { comm->all_reduce(at::ones({8}, at::kLong), ReduceOp::kMax)->wait(); },
               {"all_reduce", rank, "8 elements of Long", "reductions support"},
               "all_reduce integer dtype");
  expect_error([&] { comm->all_reduce(at::ones({8}, at::kByte), ReduceOp::kSum)->wait(); },
               {"all_reduce", rank, "Byte"}, "all_reduce byte dtype");
  expect_error([&] { comm->reduce_scatter(at::ones({2, total}).t(), at::empty({2 * counts[r]}),
                                          ReduceOp::kSum)->wait(); },
               {"reduce_scatter", rank, "not contiguous"}, "reduce_scatter non-contiguous");
  {
    // Output shifted by one element against input's own chunk.
    at::Tensor storage = at::ones({total + 1});
    at::Tensor in = storage.narrow(0, 0, total);
    expect_error([&] { comm->reduce_scatter(in, storage.narrow(0, offsets[r] + 1, counts[r]),
                                            ReduceOp::kSum, counts)->wait(); },
                 {"reduce_scatter", rank, "overlaps"}, "reduce_scatter partial overlap");
    expect_error([&] { comm->all_gather(storage.narrow(0, offsets[r] + 1, counts[r]), in,
                                        counts)->wait(); },
                 {"all_gather", rank, "overlaps"}, "all_gather partial overlap");
  }
  expect_error([&] { comm->all_gather(at::ones({counts[r]}), at::empty({total - 1}), counts)->wait(); },
               {"all_gather", rank, "output must hold sum(counts) = " + std::to_string(total),
                "got " + std::to_string(total - 1)},
               "all_gather output size");
  expect_error([&] { comm->all_gather(at::ones({3}), at::empty({3 * n + 1}))->wait(); },
               {"all_gather", rank, std::to_string(3 * n + 1)}, "all_gather equal chunks");
  expect_error([&] { comm->all_gather(at::ones({3}, at::kInt), at::empty({3 * n}, at::kLong))->wait(); },
               {"all_gather", rank, "dtypes differ", "Int", "Long"}, "all_gather dtype mismatch");
  expect_error([&] { comm->all_gather(at::ones({3}, at::kComplexFloat),
                                      at::empty({3 * n}, at::kComplexFloat))->wait(); },
               {"all_gather", rank, "ComplexFloat", "supported"}, "all_gather complex");
  expect_error([&] { comm->all_gather(at::empty({3}, at::device(at::kMeta)),
                                      at::empty({3 * n}))->wait(); },
               {"all_gather", rank, "device meta", "CPU"}, "all_gather meta tensor");
  expect_error([&] { comm->broadcast(at::ones({5}), n)->wait(); },
               {"broadcast", rank, "root must be in [0, " + std::to_string(n) + ")",
                "got " + std::to_string(n)},
               "broadcast root");
  expect_error([&] { comm->broadcast(at::Tensor(), 0)->wait(); }, {"broadcast", rank, "undefined"},
               "broadcast undefined");

  // Nobody was left inside a collective: the communicator still works.
  EXPECT_NO_THROW(comm->barrier()->wait());
  at::Tensor buffer = at::ones({10});
  EXPECT_NO_THROW(comm->all_reduce(buffer, ReduceOp::kSum)->wait());
  EXPECT_EQ(buffer[9].item<float>(), static_cast<float>(n));
}

// An MPI failure (here: ranks disagreeing on a broadcast's size, which truncates the
// message on rank 1) is reported as a zero::Error with MPI's error string. On a communicator
// that does not compare signatures: one that does stops the disagreement before MPI sees it
// (Note [Collective signatures]; test_collective_mismatch).
TEST(Comm, MpiFailuresBecomeErrors) {
  comm::MpiOptions unchecked = comm::MpiOptions::from_env();
  unchecked.check_signatures = false;
  auto comm = comm::make_mpi_communicator(unchecked);
  if (comm->size() != 2) ZERO_SKIP_AT_THIS_RANK_COUNT("needs exactly 2 ranks");
  if (comm->rank() == 0) {
    at::Tensor buffer = at::ones({64}, at::kByte);
    EXPECT_NO_THROW(comm->broadcast(buffer, 0)->wait());
  } else {
    at::Tensor buffer = at::zeros({16}, at::kByte);
    expect_error([&] { comm->broadcast(buffer, 0)->wait(); },
                 {"broadcast", "rank 1 of world size 2", "16 elements of Byte", "root 0",
                  "MPI_Bcast failed", "MPI_ERR_TRUNCATE"},
                 "truncated broadcast");
  }
  EXPECT_NO_THROW(comm->barrier()->wait());
}

}  // namespace
}  // namespace zero::test
