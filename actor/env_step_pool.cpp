#include "actor/env_step_pool.h"

#include <algorithm>
#include <utility>

namespace kvrl {

EnvStepPool::EnvStepPool(int64_t threads, std::function<void(int64_t)> step_one)
    : step_one_(std::move(step_one)) {
  for (int64_t i = 0; i < std::max<int64_t>(threads, 1); ++i) threads_.emplace_back([this] { work(); });
}

EnvStepPool::~EnvStepPool() {
  {
    std::unique_lock lock(mutex_);
    queued_.clear();  // steps not started are dropped; the ones running finish
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void EnvStepPool::submit(int64_t index) {
  {
    std::lock_guard lock(mutex_);
    queued_.push_back(index);
  }
  ++in_flight_;
  work_ready_.notify_one();
}

std::vector<int64_t> EnvStepPool::wait(int64_t count) {
  std::vector<int64_t> done;
  std::unique_lock lock(mutex_);
  const auto needed = static_cast<size_t>(std::min(count, in_flight_));
  waiting_for_ = needed;
  step_finished_.wait(lock, [&] { return failure_ || finished_.size() >= needed; });
  waiting_for_ = SIZE_MAX;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  done.swap(finished_);
  in_flight_ -= static_cast<int64_t>(done.size());
  return done;
}

void EnvStepPool::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
    if (queued_.empty()) return;  // stopping
    const int64_t index = queued_.front();
    queued_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      step_one_(index);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !failure_) failure_ = failure;
    finished_.push_back(index);
    if (failure_ || finished_.size() >= waiting_for_) step_finished_.notify_one();
  }
}

}  // namespace kvrl
