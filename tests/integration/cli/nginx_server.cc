// NginxServer implementation: generated config, spawn, readiness, PID-based stop.
#include "nginx_server.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

extern char** environ;

namespace granary::testing {
namespace {

// The nginx binary: on PATH, or Debian's /usr/sbin (not on every user's PATH).
std::string FindNginx() {
  for (const char* p : {"/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string Config(const std::string& dir, const std::string& root, int port) {
  std::string user = ::geteuid() == 0 ? "user root;\n" : "";  // workers must read a 0700 temp dir
  return user + "worker_processes 1;\n" + "pid " + dir + "/nginx.pid;\n" + "error_log " + dir +
         "/error.log warn;\n" + "events { worker_connections 256; }\n" + "http {\n" +
         "  access_log off;\n" + "  client_body_temp_path " + dir + "/body;\n" +
         "  proxy_temp_path " + dir + "/proxy;\n" + "  fastcgi_temp_path " + dir + "/fastcgi;\n" +
         "  uwsgi_temp_path " + dir + "/uwsgi;\n" + "  scgi_temp_path " + dir + "/scgi;\n" +
         "  types { application/octet-stream bin; }\n" + "  server {\n" +
         "    listen 127.0.0.1:" + std::to_string(port) + ";\n" + "    root " + root + ";\n" +
         "    location = /status/503 { return 503; }\n" +
         "    location = /status/403 { return 403; }\n" +
         "    location /nohead/ { if ($request_method = HEAD) { return 405; } }\n" + "  }\n" +
         "}\n";
}

bool Reaped(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

}  // namespace

Result<std::unique_ptr<NginxServer>> NginxServer::Start(const std::string& root) {
  std::string nginx = FindNginx();
  if (nginx.empty()) return Unavailable("nginx not found (apt-get install nginx-light)");
  std::unique_ptr<NginxServer> server(new NginxServer());
  ASSIGN_OR_RETURN(server->port_, FreeLoopbackPort());
  const std::string dir = server->dir_.path();
  const std::string conf = dir + "/nginx.conf";
  std::ofstream(conf) << Config(dir, root, server->port_);
  std::vector<std::string> argv = {nginx, "-p", dir,  "-e",         dir + "/error.log",
                                   "-c",  conf, "-g", "daemon off;"};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a stop reaches the workers too
  int rc = posix_spawn(&server->pid_, nginx.c_str(), nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoStatus("spawn " + nginx, rc);
  Status up = WaitForPort(server->port_, std::chrono::seconds(15));
  if (!up.ok() || Reaped(server->pid_)) {
    std::ifstream log(dir + "/error.log");
    std::string line, last;
    while (std::getline(log, line)) last = line;
    server->pid_ = -1;
    return Unavailable("nginx did not start: " + (last.empty() ? up.message() : last));
  }
  return server;
}

void NginxServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

NginxServer::~NginxServer() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  bool gone = false;
  for (int i = 0; i < 100 && !(gone = Reaped(pid_)); ++i) {
    ::usleep(50'000);  // bounded wait for a clean exit
  }
  if (!gone) {
    Kill();
    return;
  }
  ::kill(-pid_, SIGKILL);  // stray workers, if any
  pid_ = -1;
}

}  // namespace granary::testing
