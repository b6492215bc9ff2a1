// A small fixed thread pool for the cpu backend's row-parallel kernels.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace step5::cpu {

class ThreadPool {
 public:
  // `threads` counts the calling thread, which always takes part in the
  // work; threads - 1 workers are started. At least 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that may run a body at once; thread ids are 0..size()-1.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(index, thread) for every index in [0, count), indices handed
  // out dynamically; returns when all are done. `thread` names the running
  // thread so a body can use that thread's scratch. Bodies must not throw
  // (the kernels validate before they run) and must not call parallel_for.
  // Calls from several threads are serialized.
  void parallel_for(int64_t count, const std::function<void(int64_t index, int thread)>& body);

 private:
  void worker_loop(int thread);
  void run_tasks(int thread);

  std::vector<std::thread> workers_;
  std::mutex dispatch_;  // one parallel_for at a time
  std::mutex mutex_;     // guards the job fields below
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int)>* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;  // bumped once per job
  int busy_ = 0;             // workers still on the current job
  bool stop_ = false;
};

}  // namespace step5::cpu
