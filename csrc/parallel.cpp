#include "parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

namespace sl {

namespace {

InterruptCheck host_check = nullptr;  // set_interrupt_check(); none: never interrupted

bool interrupt_requested() { return host_check != nullptr && host_check(); }

// What checkpoint() does on this thread: the innermost parallel_for() running a
// task here sets it for the duration of the call (inline on the calling thread:
// its Ctrl-C poll; on a worker: the call's stop flag).
struct TaskScope {
  const std::atomic<bool>* stop = nullptr;
  SignalPoll* poll = nullptr;
};
thread_local TaskScope tls_scope;

class ScopeGuard {
 public:
  explicit ScopeGuard(TaskScope s) : saved_(tls_scope) { tls_scope = s; }
  ~ScopeGuard() { tls_scope = saved_; }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  TaskScope saved_;
};

// Thrown by checkpoint() in a worker whose call is being stopped; never escapes
// parallel_for() (the interrupt or the first task exception is reported instead).
struct Abandoned {};

}  // namespace

void set_interrupt_check(InterruptCheck check) { host_check = check; }

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void checkpoint() {
  const TaskScope& s = tls_scope;
  if (s.stop && s.stop->load(std::memory_order_relaxed)) throw Abandoned{};
  if (s.poll) s.poll->tick();
}

namespace {

// What the threads of one parallel_for() call share.  It lives on the heap, owned by
// the call and by each worker it started, so a worker the system starts late (after
// the call has returned: every task was taken, or the call was stopped) finds no task
// and leaves without touching anything else: fn is only called for a task taken
// while the call still waits for it (in_flight counts the threads inside the loop).
struct Shared {
  std::int64_t n_tasks = 0;
  const std::function<void(std::int64_t, int)>* fn = nullptr;
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> throw_after_{false};  // an Interrupted was seen (interrupt()): the call reports it
  std::atomic<int> in_flight{0};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu);
    if (!error) error = e;
    stop.store(true);
  }
  // A poll said stop (in a task, or the caller's): the remaining tasks are skipped, the call throws Interrupted.
  void interrupt() {
    throw_after_.store(true);
    stop.store(true);
  }
  // One task, or false when none is left (or the call is being stopped).
  bool run_one(int tid) {
    in_flight.fetch_add(1);
    std::int64_t t;
    bool ran = false;
    if (!stop.load() && (t = next.fetch_add(1)) < n_tasks) {
      ran = true;
      try {
        (*fn)(t, tid);
      } catch (const Abandoned&) {  // stop was set: whoever set it reports why
      } catch (const Interrupted&) {  // a poll in the task (the caller's, or a nested call's) said stop
        interrupt();
      } catch (...) {
        fail(std::current_exception());
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      in_flight.fetch_sub(1);
    }
    cv.notify_all();
    return ran;
  }
};

}  // namespace

void parallel_for(std::int64_t n_tasks, int n_threads,
                  const std::function<void(std::int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  const int nw = n_workers(n_tasks, n_threads);
  if (nw == 1) {  // one worker (or one task): run inline (no thread start-up), polling for Ctrl-C
    if (tls_scope.stop) {  // nested in a task of an outer call on a worker: its stop flag still rules
      for (std::int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
      return;
    }
    SignalPoll poll;
    ScopeGuard scope({nullptr, &poll});  // checkpoint() inside the tasks polls too
    for (std::int64_t t = 0; t < n_tasks; ++t) {
      fn(t, 0);
      poll.tick();
    }
    return;
  }
  // nw - 1 new threads (indices 1..nw-1) and the calling thread (index 0) take tasks from
  // one counter.  The caller starts at once, so a call never waits for the system to
  // schedule a new thread (on a busy machine that can take milliseconds): it returns
  // when every task has run, and a worker that starts after that finds none and leaves.
  auto sh = std::make_shared<Shared>();
  sh->n_tasks = n_tasks;
  sh->fn = &fn;
  for (int i = 1; i < nw; ++i) {
    try {
      std::thread([sh, i]() {
        ScopeGuard scope({&sh->stop, nullptr});
        while (sh->run_one(i)) {
        }
      }).detach();
    } catch (const std::system_error&) {  // no more threads to be had: the others (and the caller) do the work
      break;
    }
  }
  {
    SignalPoll poll;
    ScopeGuard scope({&sh->stop, &poll});  // checkpoint() in the caller's tasks: stop flag and Ctrl-C poll
    for (;;) {
      if (!sh->run_one(0)) break;
      if (sh->throw_after_.load()) break;
      try {
        poll.tick();
      } catch (const Interrupted&) {
        sh->interrupt();
        break;
      }
    }
  }
  // the tasks the workers still run (or none): wait for them, polling for Ctrl-C
  {
    std::unique_lock<std::mutex> lk(sh->mu);
    while (sh->in_flight.load() > 0) {
      sh->cv.wait_for(lk, std::chrono::milliseconds(50));
      if (sh->in_flight.load() == 0 || sh->throw_after_.load()) continue;
      lk.unlock();
      if (interrupt_requested()) sh->interrupt();
      lk.lock();
    }
  }
  if (sh->throw_after_.load()) throw Interrupted{};  // also a nested call's poll on a worker
  if (sh->error) std::rethrow_exception(sh->error);
}

void SignalPoll::check() {
  if (interrupt_requested()) throw Interrupted{};
}

}  // namespace sl
