// NginxServer: a real nginx serving a directory on loopback, for the HTTP
// connector's integration tests.
//
// Start() writes a config into a private temp dir (pid file, logs and temp
// paths all inside it), picks a free port and runs
// `nginx -p DIR -e DIR/error.log -c DIR/nginx.conf -g 'daemon off;'` as a
// child in its own process group, then waits until the port answers. The
// destructor always stops the whole group (SIGTERM, bounded wait, SIGKILL);
// Kill() simulates a crash (SIGKILL to the group now).
//
// Thread safety: one instance is used by one thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "granary/status.h"
#include "subprocess.h"

namespace granary::testing {

class NginxServer {
 public:
  // Serves `root` (a directory) at http://127.0.0.1:PORT/, except that
  // /status/503 and /status/403 always answer with that status, and HEAD
  // under /nohead/ gets 405 (fault injection for error-path tests). Unavailable naming
  // the reason when nginx is missing or does not come up in 15 s.
  static Result<std::unique_ptr<NginxServer>> Start(const std::string& root);

  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  // "http://127.0.0.1:PORT".
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

  // SIGKILL to nginx and its workers now; reaps the master.
  void Kill();

 private:
  NginxServer() = default;

  TempDir dir_;  // config, pid, logs, temp files
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace granary::testing
