// DirLister: lists directories of a FUSE mount through the mount, from a
// child process, for directory read-ahead (FuseOptions::dir_prefetch): the
// kernel turns each getdents64 into READDIRPLUS requests and instantiates
// every entry, so later opens by path find them cached.
//
// Why a process: a thread of the daemon blocked on its own mount keeps the
// daemon from dying. Once a transport thread has taken the listing's
// READDIRPLUS, the kernel waits for its answer uninterruptibly, even for a
// killed process; a killed daemon would never finish exiting, its holder
// would never see it end, and no successor would answer. A child blocks only
// itself: the daemon exits, the successor resends and answers the request,
// and the child ends at the end of its socket.
//
// Thread safety: List() may be called from many threads (one listing at a
// time: request_mu_); the destructor after every call returned.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "granary/status.h"

namespace granary {

class DirLister {
 public:
  // Forks the child. IoError when the socket pair or the fork fails.
  static Result<std::unique_ptr<DirLister>> Start(const std::string& mountpoint);
  // Closes the socket (the child ends when it next reads it) and reaps the
  // child if it has ended; one still blocked on the mount is left to end later.
  ~DirLister();
  DirLister(const DirLister&) = delete;
  DirLister& operator=(const DirLister&) = delete;

  // Lists <mountpoint>/<rel> ("" = the root) in the child: true when the
  // listing ran to its end. Returns false without waiting longer once
  // `stopped()` is true (checked every 100 ms while the child lists).
  bool List(const std::string& rel, const std::function<bool()>& stopped) EXCLUDES(request_mu_);

 private:
  DirLister(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  pid_t pid_;
  int fd_;            // the parent's end of the socket pair
  Mutex request_mu_;  // one request and its answer at a time; a leaf lock
};

}  // namespace granary
