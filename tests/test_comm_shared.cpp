// Reduce-scatter over buffers from Communicator::allocate_buffer (Note [Shared-memory
// reduce-scatter]): bitwise the ring's results, in place or not, with mixed shared and ordinary
// inputs across ranks, after buffers are freed on some ranks only.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "test_util.h"

namespace zero::test {
namespace {

// Inputs whose sums depend on the order of addition, different on every rank.
at::Tensor contribution(int64_t numel, at::ScalarType dtype, int rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(77 + rank);
  return (at::randn({numel}, generator) * std::pow(10.0, rank % 3)).to(dtype);
}

std::vector<int64_t> skewed_counts(int64_t numel, int world) {
  std::vector<int64_t> counts(world, 0);
  counts[0] = numel / 2;
  int64_t left = numel - counts[0];
  for (int r = 1; r < world; ++r) {
    counts[r] = r + 1 == world ? left : left / 3;
    left -= counts[r];
  }
  return counts;
}

TEST(SharedBuffers, ReduceScatterMatchesTheRingBitwise) {
  auto comm = world();
  const int n = comm->size();
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    for (int64_t numel : {int64_t{100003}, int64_t{1} << 20}) {
      for (bool skewed : {false, true}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(testing::Message() << dtype << " numel " << numel << " skewed " << skewed
                                          << " in place " << in_place);
          std::vector<int64_t> counts =
              skewed ? skewed_counts(numel, n) : std::vector<int64_t>(n, numel / n);
          int64_t total = 0;
          for (int64_t c : counts) total += c;
          const at::Tensor data = contribution(total, dtype, comm->rank());
          int64_t offset = 0;
          for (int r = 0; r < comm->rank(); ++r) offset += counts[r];
          // Reference: the ring, on an ordinary tensor.
          at::Tensor plain = data.clone();
          at::Tensor expected = at::empty({counts[comm->rank()]}, data.options());
          comm->reduce_scatter(plain, expected, ReduceOp::kSum, counts)->wait();
          // Shared buffer.
          at::Tensor shared = comm->allocate_buffer(total, dtype);
          EXPECT_TRUE(at::equal(shared, at::zeros_like(shared)));
          shared.copy_(data);
          at::Tensor output = in_place ? shared.narrow(0, offset, counts[comm->rank()])
                                       : at::empty({counts[comm->rank()]}, data.options());
          comm->reduce_scatter(shared, output, ReduceOp::kSum, counts)->wait();
          EXPECT_TRUE(at::equal(output, expected));
        }
      }
    }
  }
}

TEST(SharedBuffers, MixedSharedAndOrdinaryInputsFallBackTogether) {
  auto comm = world();
  const int n = comm->size();
  const int64_t numel = 64 * 1024 * n;
  at::Tensor shared = comm->allocate_buffer(numel, at::kFloat);
  const at::Tensor data = contribution(numel, at::kFloat, comm->rank());
  at::Tensor plain = data.clone();
  at::Tensor expected = at::empty({numel / n});
  comm->reduce_scatter(plain, expected, ReduceOp::kSum)->wait();
  // Rank 0 passes an ordinary tensor, the others their shared buffer: everyone takes the ring.
  at::Tensor input = comm->rank() == 0 ? data.clone() : shared.copy_(data);
  at::Tensor output = at::empty({numel / n});
  comm->reduce_scatter(input, output, ReduceOp::kSum)->wait();
  EXPECT_TRUE(at::equal(output, expected));
  // A buffer freed on one rank only: the others' shared inputs are not visible to it.
  at::Tensor second = comm->allocate_buffer(numel, at::kFloat);
  if (comm->rank() == n - 1) second = at::Tensor();
  at::Tensor again = comm->rank() == n - 1 ? data.clone() : second.copy_(data);
  comm->reduce_scatter(again, output, ReduceOp::kSum)->wait();
  EXPECT_TRUE(at::equal(output, expected));
}

TEST(SharedBuffers, BytesAreCountedLikeTheRing) {
  auto comm = world();
  const int n = comm->size();
  const int64_t numel = 32768 * n;
  at::Tensor shared = comm->allocate_buffer(numel, at::kFloat);
  const CommStats before = comm->stats();
  comm->reduce_scatter(shared, shared.narrow(0, comm->rank() * (numel / n), numel / n),
                       ReduceOp::kSum)->wait();
  const CommStats after = comm->stats();
  EXPECT_EQ(after.reduce_scatter.bytes - before.reduce_scatter.bytes,
            n > 1 ? (numel - numel / n) * 4 : 0);
}

}  // namespace
}  // namespace zero::test
