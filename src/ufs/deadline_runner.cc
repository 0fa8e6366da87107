// DeadlineRunner implementation: a queue of jobs, helper threads started on
// demand, and per-job completion flags guarded by one mutex. See
// deadline_runner.h.
#include "ufs/deadline_runner.h"

#include <algorithm>
#include <deque>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "common/clock.h"
#include "common/mutex.h"

namespace granary {
namespace {

// One call handed to a helper. Its flags are guarded by the runner's
// State::mu (not annotated: the analysis cannot name another object's mutex).
struct Job {
  std::function<void()> fn;
  CondVar finished;        // signalled when done turns true (or on Abort)
  bool started = false;    // a helper took it
  bool done = false;       // fn returned
  bool abandoned = false;  // its caller stopped waiting
};

// "60 s", "1.5 s".
std::string Seconds(std::chrono::milliseconds d) {
  const auto ms = d.count();
  std::string out = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string frac = std::to_string(1000 + ms % 1000).substr(1);
    while (frac.ends_with('0')) frac.pop_back();
    out += "." + frac;
  }
  return out + " s";
}

}  // namespace

struct DeadlineRunner::State {
  Mutex mu;      // guards everything below and every Job's flags; leaf lock
  CondVar work;  // a job was queued, or stopping
  std::deque<std::shared_ptr<Job>> queue GUARDED_BY(mu);
  std::unordered_set<Job*> waited_on GUARDED_BY(mu);  // jobs whose caller is waiting (for Abort)
  int threads GUARDED_BY(mu) = 0;                     // helpers alive
  int idle GUARDED_BY(mu) = 0;                        // helpers waiting for work
  int stuck GUARDED_BY(mu) = 0;                       // abandoned jobs still running
  bool stopping GUARDED_BY(mu) = false;               // the runner is gone: idle helpers end
  bool aborted GUARDED_BY(mu) = false;                // Abort(): refuse and release callers
};

DeadlineRunner::DeadlineRunner(DeadlineRunnerOptions options)
    : options_([&] {
        options.max_stuck = std::max(1, options.max_stuck);
        options.max_threads = std::max(1, options.max_threads);
        return options;
      }()),
      state_(std::make_shared<State>()) {}

DeadlineRunner::~DeadlineRunner() {
  {
    MutexLock lock(state_->mu);
    state_->stopping = true;
  }
  state_->work.NotifyAll();
}

void DeadlineRunner::Abort() {
  MutexLock lock(state_->mu);
  state_->aborted = true;
  for (Job* job : state_->waited_on) job->finished.NotifyAll();
}

int DeadlineRunner::stuck() const {
  MutexLock lock(state_->mu);
  return state_->stuck;
}

void DeadlineRunner::HelperLoop(std::shared_ptr<State> st) {
  MutexLock lock(st->mu);
  for (;;) {
    ++st->idle;
    st->work.Wait(lock, [&]() REQUIRES(st->mu) { return st->stopping || !st->queue.empty(); });
    --st->idle;
    if (st->queue.empty()) break;  // stopping
    std::shared_ptr<Job> job = std::move(st->queue.front());
    st->queue.pop_front();
    job->started = true;
    lock.Unlock();
    job->fn();
    std::function<void()>().swap(job->fn);  // drop captures outside the lock
    lock.Lock();
    job->done = true;
    if (job->abandoned) --st->stuck;
    job->finished.NotifyAll();
  }
  --st->threads;
}

Status DeadlineRunner::RunErased(const std::string& what, std::function<void()> fn) {
  const auto deadline = Clock::Real()->Now() + options_.timeout;
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  State& st = *state_;
  MutexLock lock(st.mu);
  if (st.aborted) return Cancelled(what + ": the origin connector is shutting down");
  if (st.stuck >= options_.max_stuck) {
    return Unavailable(what + ": refused, " + std::to_string(st.stuck) +
                       " earlier origin calls are still stuck past their " +
                       Seconds(options_.timeout) + " deadline (hung NFS server?)");
  }
  st.queue.push_back(job);
  if (st.idle < static_cast<int>(st.queue.size()) && st.threads < options_.max_threads) {
    try {
      std::thread(&DeadlineRunner::HelperLoop, state_).detach();
      ++st.threads;
    } catch (const std::system_error&) {
      // No new helper: the job waits for a busy one, within its deadline.
    }
  }
  st.work.NotifyOne();
  st.waited_on.insert(job.get());
  job->finished.WaitUntil(lock, deadline,
                          [&]() REQUIRES(st.mu) { return job->done || st.aborted; });
  st.waited_on.erase(job.get());
  if (job->done) return Status::Ok();
  job->abandoned = true;
  if (job->started) {
    ++st.stuck;
  } else {
    std::erase(st.queue, job);
  }
  if (st.aborted) return Cancelled(what + ": the origin connector is shutting down");
  return Unavailable(what + " did not finish within " + Seconds(options_.timeout));
}

}  // namespace granary
