// DeadlineRunner: runs blocking calls that have no timeout of their own (open,
// pread, stat on a POSIX/NFS origin) on helper threads, and gives up waiting
// for one after a deadline.
//
// A hung NFS server blocks a syscall for ever and it cannot be interrupted, so
// a caller that must not hang hands the call to a helper thread and waits at
// most `timeout`. Past that the caller gets kUnavailable naming the call
// ("origin read of /mnt/x did not finish within 60 s"); the helper stays stuck
// in the syscall until it returns (if ever), and is counted. While
// `max_stuck` helpers are stuck, new calls fail at once instead of piling up
// more stuck threads.
//
// Helpers start on demand (at most `max_threads`; a call waits in the queue
// for one, within its deadline), park when idle, and end when the runner is
// destroyed (a stuck one when its call returns). The callable must own
// everything it touches: it may outlive the caller and the runner, so it must
// never write into the caller's memory (copy results out through the value it
// returns).
//
// Thread safety: Run and Abort may be called from many threads at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "granary/status.h"

namespace granary {

struct DeadlineRunnerOptions {
  // How long a caller waits for one call; 0 = no helper threads, calls run on
  // the caller's thread without a deadline.
  std::chrono::milliseconds timeout{60'000};
  int max_stuck = 16;     // calls past their deadline and still running; more -> refuse (>= 1)
  int max_threads = 256;  // helper threads at once, stuck ones included (>= 1)
};

class DeadlineRunner {
 public:
  explicit DeadlineRunner(DeadlineRunnerOptions options);
  ~DeadlineRunner();  // parks nothing: idle helpers end, stuck ones end when their call returns
  DeadlineRunner(const DeadlineRunner&) = delete;
  DeadlineRunner& operator=(const DeadlineRunner&) = delete;

  // fn() on a helper thread, waited for at most options.timeout. `what` names
  // the call in errors ("origin read of /mnt/x"). kUnavailable when the
  // deadline passes or too many calls are stuck; kCancelled after Abort().
  template <typename T>
  Result<T> Run(const std::string& what, std::function<Result<T>()> fn) {
    if (options_.timeout.count() <= 0) return fn();
    auto slot = std::make_shared<std::optional<Result<T>>>();
    Status s = RunErased(what, [slot, fn = std::move(fn)] { slot->emplace(fn()); });
    if (!s.ok()) return s;
    return std::move(**slot);
  }

  // Waiting callers return kCancelled now; later calls fail at once.
  void Abort();

  // False when options.timeout is 0 (calls run inline).
  bool has_deadline() const { return options_.timeout.count() > 0; }

  // Calls past their deadline whose helper has not returned yet.
  int stuck() const;

 private:
  struct State;
  // Runs `job`; OK once it has finished (its effects are then visible).
  Status RunErased(const std::string& what, std::function<void()> job);
  // A helper thread's loop; `st` keeps the state alive past the runner.
  static void HelperLoop(std::shared_ptr<State> st);

  const DeadlineRunnerOptions options_;
  std::shared_ptr<State> state_;  // shared with the helper threads
};

}  // namespace granary
