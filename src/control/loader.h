// Warm-up of one dataset (`granary load`, `mount --load`): a LoadJob makes a
// set of snapshot files fully cached through CacheEngine::Fetch at
// Priority::kLow, so demand reads from the mount keep priority over it.
//
// Targets are resolved once, up front (ResolveLoadTargets): every file of the
// dataset, a sub-directory, or the lines of a list file (one relative path per
// line; PaddleClas "path label" lines are accepted: the first field counts).
// Files already cached are skipped (a second run resumes); files that the
// store refused (no room, training policy) are reported as "not fitted", never
// as loaded. The result is computed from the cache at the end (IsCached per
// target), so it is exact even when eviction dropped something loaded earlier.
//
// LoadManager enforces one load at a time per daemon and keeps the last
// finished job for status/metrics.
//
// Thread safety: LoadJob's public methods may be called from any thread;
// progress counters are atomics, the result is guarded by mu_. Worker threads
// are owned by the job and joined by Wait() or the destructor (which cancels).
// LoadManager: every method is thread-safe (mu_ guards current_ and last_).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/engine.h"
#include "common/mutex.h"
#include "common/origin_defaults.h"
#include "granary/dataset.h"
#include "granary/status.h"
#include "meta/snapshot.h"

namespace granary {

// The most fetch threads one load may run (the CLI's --threads limit too).
inline constexpr int kMaxLoadThreads = 4096;

// What to load. Paths are relative to the mount root.
struct LoadRequest {
  // Sub-directory (or single file) of the dataset to load; "" = everything.
  std::string path;
  // Lines of a list file (relative paths, "path label" lines accepted). When
  // non-empty, `path` only serves to resolve lines relative to it.
  std::vector<std::string> list_lines;
  // Concurrent fetches (1..kMaxLoadThreads).
  int threads = kDefaultOriginConcurrency;
  // Only report what is cached; fetch nothing.
  bool check_only = false;
};

// Targets of a request, resolved against one snapshot.
struct LoadTargets {
  std::vector<uint64_t> inos;              // files to load, de-duplicated, in inode order
  uint64_t bytes = 0;                      // their total size
  uint64_t missing = 0;                    // list lines naming no file of the snapshot
  std::vector<std::string> missing_paths;  // the first few of them
};

// Resolves a request. A list line is tried as: relative to the mount root,
// relative to request.path, and with the dataset's origin prefix stripped.
// Errors: InvalidArgument when request.path is not in the snapshot, or threads < 1.
Result<LoadTargets> ResolveLoadTargets(const Snapshot& snapshot, const LoadRequest& request);

// Live counters of a job.
struct LoadProgress {
  uint64_t files_total = 0;
  uint64_t bytes_total = 0;
  uint64_t files_done = 0;  // targets handled (cached, skipped, refused or failed)
  uint64_t bytes_done = 0;
  uint64_t files_skipped = 0;  // already cached when reached
  uint64_t bytes_fetched = 0;  // bytes of files this job fetched
  double elapsed_s = 0;
  double bytes_per_s = 0;  // bytes_done / elapsed
  double files_per_s = 0;
  double eta_s = -1;  // remaining bytes / rate; -1 when unknown
  bool running = false;
};

class LoadJob {
 public:
  // Borrows `engine` (must outlive the job). `targets` were resolved against
  // `snapshot`, which the job keeps using even if `granary sync` replaces the
  // engine's current version meanwhile. Does not start.
  LoadJob(CacheEngine* engine, std::shared_ptr<const Snapshot> snapshot, LoadTargets targets,
          int threads, bool check_only);
  // Cancels and joins.
  ~LoadJob();
  LoadJob(const LoadJob&) = delete;
  LoadJob& operator=(const LoadJob&) = delete;

  // Starts the worker threads. Call once.
  void Start();
  // Stops taking new files; fetches in flight finish. Idempotent.
  void Cancel();
  // Blocks until done (Start must have been called); returns the result.
  LoadResult Wait();
  // Waits at most `timeout`; true when the job has finished.
  bool WaitFor(std::chrono::milliseconds timeout);
  bool finished() const;
  bool cancelled() const { return cancelled_.load(); }
  LoadProgress progress() const;

 private:
  enum class TargetState : uint8_t {
    kPending,  // not reached yet
    kDone,     // fetched into this node's cache
    kRemote,   // cached by its owner elsewhere in the cluster (cluster-wide warm-up)
    kRefused,  // the store (here or at the owner) refused it
    kFailed,   // the fetch failed
  };
  void Worker();
  void Handle(size_t index);
  LoadResult Finish();

  CacheEngine* engine_;
  std::shared_ptr<const Snapshot> snapshot_;
  LoadTargets targets_;
  int threads_;
  bool check_only_;
  std::vector<std::atomic<TargetState>> state_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> cancelled_{false};
  std::atomic<uint64_t> files_done_{0}, bytes_done_{0}, files_skipped_{0}, bytes_fetched_{0};
  std::chrono::steady_clock::time_point start_;
  std::vector<std::thread> workers_;
  std::atomic<int> running_workers_{0};

  mutable Mutex mu_;  // guards failures_, finished_, result_, elapsed_s_
  CondVar done_cv_;
  std::vector<LoadFailure> failures_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
  double elapsed_s_ GUARDED_BY(mu_) = 0;
  LoadResult result_ GUARDED_BY(mu_);
};

// One load at a time per daemon.
class LoadManager {
 public:
  // Borrows `engine`.
  explicit LoadManager(CacheEngine* engine) : engine_(engine) {}
  // Cancels a running load.
  ~LoadManager();

  // Resolves and starts a load. Unavailable "a load is already running ..."
  // while another one runs; errors of ResolveLoadTargets.
  Result<std::shared_ptr<LoadJob>> Start(const LoadRequest& request);
  // Cancels the running load; NotFound when none runs.
  Status Cancel();
  // The running job (or the last one, finished); null before the first load.
  std::shared_ptr<LoadJob> current() const;
  bool loading() const;

 private:
  CacheEngine* engine_;
  mutable Mutex mu_;  // guards current_
  std::shared_ptr<LoadJob> current_ GUARDED_BY(mu_);
};

}  // namespace granary
