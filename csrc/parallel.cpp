#include "parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

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
  if (s.stop) {
    if (s.stop->load(std::memory_order_relaxed)) throw Abandoned{};
  } else if (s.poll) {
    s.poll->tick();
  }
}

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
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<int> running{nw};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;

  auto worker = [&](int tid) {
    ScopeGuard scope({&stop, nullptr});
    try {
      for (;;) {
        if (stop.load(std::memory_order_relaxed)) break;
        std::int64_t t = next.fetch_add(1, std::memory_order_relaxed);
        if (t >= n_tasks) break;
        fn(t, tid);
      }
    } catch (const Abandoned&) {  // stop was set: whoever set it reports why
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!error) error = std::current_exception();
      stop.store(true);
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      --running;
    }
    cv.notify_all();
  };

  std::vector<std::thread> threads;
  threads.reserve(nw);
  for (int i = 0; i < nw; ++i) threads.emplace_back(worker, i);

  bool interrupted = false;
  {
    std::unique_lock<std::mutex> lk(mu);
    while (running.load() > 0) {
      cv.wait_for(lk, std::chrono::milliseconds(50));
      if (running.load() == 0 || interrupted) continue;
      lk.unlock();
      if (interrupt_requested()) {
        interrupted = true;
        stop.store(true);
      }
      lk.lock();
    }
  }
  for (auto& t : threads) t.join();
  if (interrupted) throw Interrupted{};
  if (error) std::rethrow_exception(error);
}

void SignalPoll::check() {
  if (interrupt_requested()) throw Interrupted{};
}

}  // namespace sl
