// The communication thread of overlap_comm (src/engine/comm_queue.h): FIFO order, tickets,
// errors, and real collectives on the thread while the main thread computes. Run under
// ThreadSanitizer too (scripts/sanitize.sh), which checks the hand-offs between the threads.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <vector>

#include "engine/comm_queue.h"
#include "test_util.h"
#include "zero/comm.h"

namespace zero::test {
namespace {

TEST(CommQueue, TasksRunInSubmissionOrderOnTheThread) {
  CommQueue queue(/*use_thread=*/true);
  std::vector<int> order;  // touched by the queue's thread only until wait()
  const std::thread::id main_thread = std::this_thread::get_id();
  std::atomic<int> on_main{0};
  for (int i = 0; i < 1000; ++i) {
    const uint64_t ticket = queue.submit([&, i] {
      if (std::this_thread::get_id() == main_thread) on_main.fetch_add(1);
      order.push_back(i);
    });
    EXPECT_EQ(ticket, static_cast<uint64_t>(i + 1));
  }
  queue.wait();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(on_main.load(), 0);
}

TEST(CommQueue, WaitForATicketWaitsForThatTaskAndEveryEarlierOne) {
  CommQueue queue(true);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  const uint64_t first = queue.submit([&] { ran.fetch_add(1); });
  const uint64_t blocked = queue.submit([&, released] {
    released.wait();
    ran.fetch_add(1);
  });
  const uint64_t last = queue.submit([&] { ran.fetch_add(1); });
  queue.wait_for(first);
  EXPECT_TRUE(queue.done(first));
  EXPECT_FALSE(queue.done(blocked));
  EXPECT_FALSE(queue.done(last));
  release.set_value();
  queue.wait_for(last);
  EXPECT_TRUE(queue.done(blocked));
  EXPECT_EQ(ran.load(), 3);
}

TEST(CommQueue, AFailedTaskIsRethrownAndTheTasksAfterItAreDropped) {
  CommQueue queue(true);
  std::atomic<int> after{0};
  queue.submit([] {});
  queue.submit([] { throw std::runtime_error("collective failed"); });
  queue.submit([&] { after.fetch_add(1); });
  try {
    queue.wait();
    ADD_FAILURE() << "the task's error was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "collective failed");
  }
  EXPECT_EQ(after.load(), 0) << "a task after the failed one ran (the collective order is broken)";
  queue.wait();  // the error is reported once
}

TEST(CommQueue, InlineModeRunsEachTaskAtOnce) {
  CommQueue queue(false);
  int ran = 0;
  const uint64_t ticket = queue.submit([&] { ++ran; });
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(queue.done(ticket));
  queue.wait();
}

// overlap_comm's pattern: all-reduces run on the queue's thread while the main thread computes
// on other tensors; after wait() the main thread reads the results and runs a collective of
// its own (one thread in the communicator at a time: the Communicator contract).
TEST(CommQueue, CollectivesOnTheThreadWhileTheMainThreadComputes) {
  auto comm = world();
  const int n = comm->size();
  CommQueue queue(true);
  std::vector<at::Tensor> buffers;
  for (int i = 0; i < 8; ++i) {
    buffers.push_back(at::full({4096 + i}, static_cast<float>(comm->rank() + i), at::kFloat));
  }
  for (const at::Tensor& buffer : buffers) {
    queue.submit([comm, buffer] { comm->all_reduce(buffer, ReduceOp::kSum); });
  }
  at::Tensor work = at::ones({256, 256});
  for (int i = 0; i < 20; ++i) work = at::mm(work, at::eye(256)) + 1;  // the "backward"
  queue.wait();
  for (int i = 0; i < 8; ++i) {
    const float expected = static_cast<float>(n * (n - 1) / 2 + n * i);
    EXPECT_TRUE(at::all(buffers[i] == expected).item<bool>()) << "buffer " << i;
  }
  EXPECT_FLOAT_EQ(work[0][0].item<float>(), 21.0f);
  at::Tensor after = at::full({1}, 1.0, at::kDouble);
  comm->all_reduce(after, ReduceOp::kSum);
  EXPECT_EQ(after.item<double>(), n);
}

}  // namespace
}  // namespace zero::test
