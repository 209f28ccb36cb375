// Thread pool-free parallel loop with Ctrl-C support.
//
// Kernels are called with the GIL released.  parallel_for() runs the tasks on the
// calling thread and `n_threads` - 1 new std::threads (dynamic scheduling through an
// atomic counter, so the assignment of tasks to threads never changes a result as
// long as each task is independent).  The calling thread starts on the tasks at once
// and runs the host's interrupt check between them and at its checkpoint()s, at most
// every 50 ms (set_interrupt_check: the Python bindings install Python's Ctrl-C
// check; without a host nothing interrupts), then waits for the tasks still running
// elsewhere, polling.  It never waits for a thread the system has not started yet: on
// a busy machine that can take milliseconds, longer than most calls; such a thread
// finds every task taken and leaves (the threads are detached; what they share lives
// until the last one has left).  On an interrupt the remaining tasks are skipped and
// sl::Interrupted is thrown (the bindings turn it into the KeyboardInterrupt Python's
// handler raised).
//
// This file does not depend on Python: the C++ core runs without it.
//
// With one worker (n_threads == 1, or a single task) the tasks run inline on the
// calling thread, which then polls between tasks and at every checkpoint() a task
// reaches (at most every 50 ms).  A task that can run long (a whole search for a
// few queries, say) calls checkpoint() between blocks of its work: inline it is
// the Ctrl-C poll, on a worker thread it abandons the task once the call is being
// stopped (Ctrl-C or another task's exception), so an interrupt never waits for
// the end of a long task.
//
// A signal that arrives while no poll is running (the last tasks, or after the
// kernel) stays pending: the interpreter raises it as soon as the kernel's Python
// call returns (CPython checks its eval breaker right after a C call returns), so
// a SIGINT is never lost, at worst noticed at the end of the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>

namespace sl {

// The host's interrupt check: returns true when the running call must stop (e.g. the
// user pressed Ctrl-C).  Called on the thread that called the kernel, at most every
// 50 ms.  Set once, before any kernel runs (not thread-safe against running kernels).
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);

// Thrown (on the calling thread) when the interrupt check said stop.
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

// Number of hardware threads (>= 1).
int hardware_threads();

// Run fn(task, thread_index) for task in [0, n_tasks).  Called from Python: WITHOUT
// the GIL (the interrupt check takes it).  thread_index is in [0, min(n_threads, n_tasks)).  Exceptions thrown by a
// task are re-thrown in the caller (first one wins; an interrupt wins over them).
void parallel_for(std::int64_t n_tasks, int n_threads,
                  const std::function<void(std::int64_t task, int thread)>& fn);

// Effective number of workers parallel_for() will use.
inline int n_workers(std::int64_t n_tasks, int n_threads) {
  if (n_threads < 1) n_threads = 1;
  return static_cast<int>(n_tasks < n_threads ? (n_tasks < 1 ? 1 : n_tasks) : n_threads);
}

// Interruption point for long parallel_for tasks: call it between blocks of a few
// tens of microseconds or more of work (a thread-local read and a relaxed load, or
// a clock read).  Inside a task on the calling thread it polls for an interrupt (at
// most every 50 ms) and throws sl::Interrupted; inside a task of a call being stopped
// (an interrupt, or another task's exception) it throws an internal exception that
// parallel_for() swallows; outside parallel_for() it does nothing.
void checkpoint();

// For long serial loops: call tick() once per iteration (it is cheap); about every
// 50 ms it runs the interrupt check and throws sl::Interrupted when it says stop.
// The clock is read every `gate` ticks, the gate doubling while reads are under
// 0.5 ms apart and falling back to 1 when they are over 2 ms apart (at most 1024):
// iterations of a few microseconds pay next to nothing, long ones get a read each,
// so the poll no longer waits for 64 long iterations as a fixed gate did.
class SignalPoll {
 public:
  void tick() {
    if (++count_ < gate_) return;
    count_ = 0;
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {  // the first read starts the 50 ms period (no clock read at construction)
      started_ = true;
      last_ = seen_ = now;
      return;
    }
    const auto gap = now - seen_;  // the last `gate_` ticks took this long
    seen_ = now;
    if (gap < std::chrono::microseconds(500)) {
      if (gate_ < kMaxGate) gate_ *= 2;
    } else if (gap > std::chrono::milliseconds(2)) {
      gate_ = 1;
    }
    if (now - last_ < std::chrono::milliseconds(50)) return;
    last_ = now;
    check();
  }

 private:
  static constexpr std::uint32_t kMaxGate = 1024;
  void check();
  std::chrono::steady_clock::time_point last_, seen_;
  std::uint32_t count_ = 0, gate_ = 1;
  bool started_ = false;
};

}  // namespace sl
