// Threads that step environments for a NativeVectorEnv, so environment steps overlap with
// each other and with the policy: submit(i) queues environment i's step, wait(n) returns
// the environments whose step finished once at least n have (in finishing order). The
// step itself is the vector env's; the pool only runs it. An exception thrown by a step
// is rethrown by the next wait() on the caller's thread, naming nothing more than the
// step did. Not thread-safe for callers: one thread submits and waits.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvrl {

class EnvStepPool {
 public:
  // `threads` >= 1 threads each run step_one(i) for the environments submitted.
  EnvStepPool(int64_t threads, std::function<void(int64_t)> step_one);
  // Lets the steps in flight finish, then stops the threads.
  ~EnvStepPool();
  EnvStepPool(const EnvStepPool&) = delete;
  EnvStepPool& operator=(const EnvStepPool&) = delete;

  void submit(int64_t index);
  // Blocks until at least min(count, in_flight()) steps have finished and returns every
  // environment finished by then; empty when nothing is in flight.
  std::vector<int64_t> wait(int64_t count);
  int64_t in_flight() const { return in_flight_; }

 private:
  void work();

  std::function<void(int64_t)> step_one_;
  std::mutex mutex_;
  std::condition_variable work_ready_, step_finished_;
  std::deque<int64_t> queued_;
  std::vector<int64_t> finished_;
  std::exception_ptr failure_;
  int64_t in_flight_ = 0;  // submitted and not yet returned by wait(); the caller's thread only
  // How many finished steps the waiting caller needs (SIZE_MAX: nobody waits). A step wakes
  // the caller only once that many have finished: in lockstep it then wakes once per vector
  // step, not once per environment, and leaves the cores to the steps still running.
  size_t waiting_for_ = SIZE_MAX;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvrl
