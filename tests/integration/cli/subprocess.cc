// Process, temp-dir and port helpers for the CLI integration tests.
#include "subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace granary::testing {
namespace fs = std::filesystem;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for `pid` to exit, at most `deadline`; true when it exited in time.
bool WaitWithDeadline(pid_t pid, std::chrono::seconds deadline, int* status) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    struct pollfd p {
      .fd = pidfd, .events = POLLIN
    };
    int ms = static_cast<int>(std::chrono::milliseconds(deadline).count());
    int r;
    do {
      r = ::poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    ::close(pidfd);
    if (r == 0) return false;
  }
  return ::waitpid(pid, status, 0) == pid;
}

}  // namespace

ProcessResult RunProcess(const std::vector<std::string>& argv, std::chrono::seconds deadline) {
  ProcessResult result;
  TempDir dir;
  const std::string out_path = dir.path() + "/stdout";
  const std::string err_path = dir.path() + "/stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    result.err = "posix_spawn " + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  int status = 0;
  if (!WaitWithDeadline(pid, deadline, &status)) {
    result.timed_out = true;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

Result<int> FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("bind 127.0.0.1:0", err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

Status WaitForPort(int port, std::chrono::seconds deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (up) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling an external server
  }
  return Unavailable("127.0.0.1:" + std::to_string(port) + ": nothing listening after " +
                     std::to_string(deadline.count()) + "s");
}

double MetricSample(const std::string& page, const std::string& name) {
  size_t at = page.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  size_t sp = page.find("} ", at);
  return std::stod(page.substr(sp + 2, page.find('\n', sp) - sp - 2));
}

}  // namespace granary::testing
