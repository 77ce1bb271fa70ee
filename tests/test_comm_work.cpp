// Work handles and in_order tasks of the communicator (zero/comm.h), at 1 to 4 ranks: what
// overlap_comm is built on. Collectives complete in issue order and in_order tasks run between
// them; wait_for times out while a peer has not arrived; a failed task breaks the sequence.
// Run under ThreadSanitizer too (scripts/sanitize.sh): the hand-offs between the issuing thread
// and the progress thread.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_util.h"
#include "zero/comm.h"
#include "zero/comm_mpi.h"
#include "zero/error.h"

namespace zero::test {
namespace {

using std::chrono::milliseconds;

TEST(CommWork, CollectivesAndTasksCompleteInIssueOrder) {
  auto comm = world();
  const int n = comm->size();
  std::vector<at::Tensor> buffers;
  std::vector<WorkHandle> works;
  works.reserve(32);  // tasks read earlier elements while later ones are appended
  std::vector<int> order;  // touched by tasks only, on the progress thread, until the wait
  for (int i = 0; i < 16; ++i) {
    buffers.push_back(at::full({1000 + i}, static_cast<float>(comm->rank() + i)));
    works.push_back(comm->all_reduce(buffers.back(), ReduceOp::kSum));
    // A task sees the collective issued before it completed, and none after it.
    works.push_back(comm->in_order([&, i] {
      EXPECT_TRUE(works[2 * i]->completed());
      order.push_back(i);
    }));
  }
  works.back()->wait();
  for (const WorkHandle& work : works) EXPECT_TRUE(work->completed());
  ASSERT_EQ(order.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(order[i], i);
    const float expected = static_cast<float>(n * (n - 1) / 2 + n * i);
    EXPECT_TRUE(at::all(buffers[i] == expected).item<bool>()) << "buffer " << i;
  }
}

TEST(CommWork, EveryWorkReportsWhatItMoved) {
  auto comm = world();
  const int n = comm->size();
  const CommStats before = comm->stats();
  at::Tensor buffer = at::ones({64 * n});
  const WorkHandle reduce = comm->all_reduce(buffer, ReduceOp::kSum);
  const WorkHandle task = comm->in_order([] {});
  task->wait();
  // Counted when issued (Note [Counting communicated bytes]): 2 (N-1)/N of the buffer.
  EXPECT_EQ(reduce->stats().all_reduce.calls, 1);
  EXPECT_EQ(reduce->stats().all_reduce.bytes, n > 1 ? 2 * 64 * (n - 1) * 4 : 0);
  EXPECT_EQ(task->stats().total_bytes(), 0);
  EXPECT_EQ(comm->stats().all_reduce.calls - before.all_reduce.calls, 1);
}

// Rank 0 issues a barrier at once; the others arrive 400 ms later. Until then rank 0's
// wait_for times out and completed() is false; then the barrier completes everywhere.
TEST(CommWork, WaitForTimesOutWhileAPeerHasNotArrived) {
  auto comm = world();
  if (comm->size() == 1) ZERO_SKIP_AT_THIS_RANK_COUNT("needs a peer");
  if (comm->rank() != 0) std::this_thread::sleep_for(milliseconds(400));
  const WorkHandle barrier = comm->barrier();
  if (comm->rank() == 0) {
    EXPECT_FALSE(barrier->wait_for(milliseconds(50)));
    EXPECT_FALSE(barrier->completed());
  }
  EXPECT_TRUE(barrier->wait_for(milliseconds(20000)));
  EXPECT_TRUE(barrier->completed());
  barrier->wait();  // again: returns at once
}

// A collective issued from inside a task runs there, at once; the issuing thread goes on.
TEST(CommWork, TasksRunOnTheProgressThreadAndTheirCollectivesRunAtOnce) {
  auto comm = world();
  const std::thread::id caller = std::this_thread::get_id();
  at::Tensor value = at::full({8}, 1.0);
  std::atomic<bool> ran_elsewhere{false};
  const WorkHandle task = comm->in_order([&] {
    ran_elsewhere = std::this_thread::get_id() != caller;
    const WorkHandle inner = comm->all_reduce(value, ReduceOp::kSum);
    EXPECT_TRUE(inner->completed());
    value.mul_(2);  // after the reduction: in order
  });
  at::Tensor work = at::ones({128, 128});
  for (int i = 0; i < 10; ++i) work = at::mm(work, at::eye(128)) + 1;  // compute meanwhile
  task->wait();
  EXPECT_TRUE(ran_elsewhere.load());
  EXPECT_TRUE(at::all(value == 2.0 * comm->size()).item<bool>());
  EXPECT_FLOAT_EQ(work[0][0].item<float>(), 11.0f);
}

// A task that throws fails its Work and every later one on every rank (each rank's task
// throws here, so the ranks stay matched); a fresh communicator is used, since this one is
// then unusable.
TEST(CommWork, AFailedTaskBreaksTheSequence) {
  std::shared_ptr<Communicator> comm = make_mpi_communicator();
  const WorkHandle before = comm->barrier();
  const WorkHandle failing = comm->in_order([] { throw Error("the task's own error"); });
  at::Tensor buffer = at::ones({4});
  const WorkHandle after = comm->all_reduce(buffer, ReduceOp::kSum);
  before->wait();
  try {
    failing->wait();
    ADD_FAILURE() << "the task's error was not rethrown";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the task's own error");
  }
  try {
    after->wait();
    ADD_FAILURE() << "a collective after a failed task ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce on rank " + std::to_string(comm->rank()) +
                                         " was not run: an earlier in_order task failed: the "
                                         "task's own error"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(at::all(buffer == 1.0f).item<bool>()) << "the collective after it changed its buffer";
}

TEST(CommWork, ArgumentErrorsAreThrownWhenIssued) {
  auto comm = world();
  EXPECT_THROW((void)comm->all_reduce(at::Tensor(), ReduceOp::kSum), Error);
  EXPECT_THROW((void)comm->broadcast(at::ones({2}), comm->size()), Error);
  // Nothing was issued: the sequence still works.
  comm->barrier()->wait();
}

}  // namespace
}  // namespace zero::test
