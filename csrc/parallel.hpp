// Thread pool-free parallel loop with Ctrl-C support.
//
// Kernels are called with the GIL released.  parallel_for() runs the tasks on
// `n_threads` std::threads (dynamic scheduling through an atomic counter, so the
// assignment of tasks to threads never changes a result as long as each task is
// independent), while the calling thread sleeps and, every few tens of
// milliseconds, briefly takes the GIL to run PyErr_CheckSignals().  On Ctrl-C
// the remaining tasks are skipped and KeyboardInterrupt is raised in Python.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace sl {

// Number of hardware threads (>= 1).
int hardware_threads();

// Run fn(task, thread_index) for task in [0, n_tasks).  Must be called WITHOUT the
// GIL.  thread_index is in [0, min(n_threads, n_tasks)).  Exceptions thrown by a
// task are re-thrown in the caller (first one wins).
void parallel_for(std::int64_t n_tasks, int n_threads,
                  const std::function<void(std::int64_t task, int thread)>& fn);

// Effective number of workers parallel_for() will use.
inline int n_workers(std::int64_t n_tasks, int n_threads) {
  if (n_threads < 1) n_threads = 1;
  return static_cast<int>(n_tasks < n_threads ? (n_tasks < 1 ? 1 : n_tasks) : n_threads);
}

// For long serial loops run WITHOUT the GIL: call tick() often (it is cheap); about
// every 50 ms it takes the GIL and runs PyErr_CheckSignals(), and throws
// pybind11::error_already_set (KeyboardInterrupt) when a handler raised.
class SignalPoll {
 public:
  SignalPoll() : last_(std::chrono::steady_clock::now()) {}
  void tick() {
    if (++count_ & 63) return;
    poll();
  }
  // The same without the 64-call gate, for loops of few long iterations (reads the
  // clock on every call).
  void poll() {
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(50)) return;
    last_ = now;
    check();
  }

 private:
  void check();
  std::chrono::steady_clock::time_point last_;
  std::uint32_t count_ = 0;
};

}  // namespace sl
