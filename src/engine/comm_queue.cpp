#include "engine/comm_queue.h"

namespace zero {

CommQueue::CommQueue(bool use_thread) : use_thread_(use_thread) {
  if (use_thread_) thread_ = std::thread([this] { run(); });
}

CommQueue::~CommQueue() {
  if (!use_thread_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  thread_.join();
}

uint64_t CommQueue::submit(std::function<void()> task) {
  if (!use_thread_) {
    task();
    return ++finished_;
  }
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    ticket = ++submitted_;
  }
  work_available_.notify_one();
  return ticket;
}

void CommQueue::wait() {
  if (!use_thread_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait(lock, [this] { return tasks_.empty() && !busy_; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void CommQueue::wait_for(uint64_t ticket) {
  if (!use_thread_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait(lock, [this, ticket] { return finished_ >= ticket || error_ != nullptr; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

bool CommQueue::done(uint64_t ticket) {
  if (!use_thread_) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_ >= ticket;
}

void CommQueue::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_available_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping and drained
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    // After a failure the remaining tasks are dropped: the collective sequence is broken.
    const bool failed = error_ != nullptr;
    lock.unlock();
    try {
      if (!failed) task();
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    busy_ = false;
    ++finished_;
    drained_.notify_all();
  }
}

}  // namespace zero
