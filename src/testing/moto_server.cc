// MotoServer implementation: fork/exec, free-port discovery, readiness polling
// and PID-based shutdown. See moto_server.h.
#include "testing/moto_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

#include "ufs/curl_client.h"

namespace granary::testing {
namespace {

Result<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus("bind 127.0.0.1:0", err);
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// True once the child has exited (and reaps it).
bool Exited(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

}  // namespace

Result<std::unique_ptr<MotoServer>> MotoServer::Start(MotoServerOptions options) {
  ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
  const std::string port_text = std::to_string(port);
  // The child's environment, built before fork (no allocation after it).
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("INITIAL_NO_AUTH_ACTION_COUNT="))
      env_storage.emplace_back(*e);
  }
  if (options.initial_no_auth_actions >= 0) {
    env_storage.push_back("INITIAL_NO_AUTH_ACTION_COUNT=" +
                          std::to_string(options.initial_no_auth_actions));
  }
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* argv[] = {"moto_server", "-H", "127.0.0.1", "-p", port_text.c_str(), nullptr};
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork moto_server", errno);
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a stop reaches any helper it spawns
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDOUT_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    execvpe("moto_server", const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  setpgid(pid, pid);
  std::unique_ptr<MotoServer> server(new MotoServer(pid, port));

  CurlClient probe(CurlClientOptions{.max_in_flight = 1,
                                     .connect_timeout = std::chrono::milliseconds(500),
                                     .request_timeout = std::chrono::milliseconds(2000)});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = probe.Send(HttpRequest{.method = "GET", .url = server->endpoint() + "/"});
    if (r.ok() && r->status > 0) {
      if (options.initial_no_auth_actions < 0) return server;
      // The probes counted as unauthenticated requests, and a slow start
      // takes several (one that timed out here may still have been served):
      // the count starts again now (moto's reset-auth, itself not counted).
      const std::string count = std::to_string(options.initial_no_auth_actions);
      auto reset = probe.Send(HttpRequest{
          .method = "POST", .url = server->endpoint() + "/moto-api/reset-auth", .body = count});
      if (reset.ok() && reset->status == 200) return server;
      return Unavailable("moto_server on port " + port_text + ": reset-auth failed: " +
                         (reset.ok() ? reset->body : reset.status().ToString()));
    }
    if (Exited(pid)) {
      server->pid_ = -1;
      return Unavailable("moto_server on port " + port_text +
                         " exited at start-up (is moto_server on PATH? pip's moto[server])");
    }
    // Polling an external process for readiness: a short pause between probes.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Unavailable("moto_server on port " + port_text + " did not answer within 30 s");
}

MotoServer::~MotoServer() { Stop(); }

std::string MotoServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

void MotoServer::Kill() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void MotoServer::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Exited(pid_)) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill();
}

}  // namespace granary::testing
