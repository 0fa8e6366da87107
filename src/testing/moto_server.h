// MotoServer: a real S3-compatible server (moto_server, from Python's moto) on
// loopback for integration tests and benchmarks, owned RAII-style.
//
// Start() picks a free port (binds port 0), runs `moto_server -H 127.0.0.1 -p
// PORT` as a child process in its own process group, and polls it over HTTP
// until it answers (deadline 30 s). The destructor always stops it: SIGTERM,
// a bounded wait, then SIGKILL. Kill() simulates a crash (SIGKILL now).
// Nothing global is changed: tests set credentials themselves (moto accepts
// any access key) or pass them in UfsOptions.
//
// Thread safety: Start() is thread-safe; one instance is used by one thread
// (endpoint() and pid() may be read from any thread).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "granary/status.h"

namespace granary::testing {

struct MotoServerOptions {
  // -1: moto accepts any credentials (its default). N >= 0: the first N
  // requests after Start returns are unauthenticated, then moto checks
  // access keys and SigV4 signatures against its IAM
  // (INITIAL_NO_AUTH_ACTION_COUNT, set only in the child's environment, and
  // counted again from 0 once the server answers: its readiness probes do
  // not use it up).
  int initial_no_auth_actions = -1;
};

class MotoServer {
 public:
  // Starts a server and waits until it answers. Unavailable naming the reason
  // when moto_server is missing, exits early, or does not answer in 30 s.
  static Result<std::unique_ptr<MotoServer>> Start(MotoServerOptions options = {});

  ~MotoServer();
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;

  // "http://127.0.0.1:PORT".
  std::string endpoint() const;
  int port() const { return port_; }
  // The child's process id (-1 once it has been reaped).
  pid_t pid() const { return pid_; }

  // SIGKILL now and reap: the server disappears mid-request, like a crash.
  void Kill();

 private:
  MotoServer(pid_t pid, int port) : pid_(pid), port_(port) {}
  void Stop();

  pid_t pid_;
  int port_;
};

}  // namespace granary::testing
