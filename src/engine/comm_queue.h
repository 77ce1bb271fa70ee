// Runs the engine's collectives either inline (overlap_comm false) or on one communication
// thread (overlap_comm true), always in submission order.
//
// Why a thread: OpenMPI 4.1's non-blocking collectives progress only inside MPI calls, so
// overlapping communication with backward needs a thread that sits in the (blocking) MPI
// call while autograd keeps computing. Tasks run strictly in FIFO order, so every rank issues
// its collectives in the same order (Note [Bucket order] in engine.cpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zero {

class CommQueue {
 public:
  explicit CommQueue(bool use_thread);
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  /// Runs `task` now (inline mode) or enqueues it (thread mode). Returns its ticket: tasks
  /// are numbered 1, 2, ... in submission order.
  uint64_t submit(std::function<void()> task);
  /// Blocks until every submitted task has finished; rethrows the first task exception.
  void wait();
  /// Blocks until the task with `ticket` (and so every earlier one) has finished; rethrows the
  /// first task exception.
  void wait_for(uint64_t ticket);
  /// True once the task with `ticket` has finished (never blocks).
  bool done(uint64_t ticket);

 private:
  void run();

  bool use_thread_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable drained_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  uint64_t submitted_ = 0;  // tickets handed out
  uint64_t finished_ = 0;   // tasks finished, in order (FIFO: ticket t is done iff t <= finished_)
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace zero
