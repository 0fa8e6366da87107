#include "bench_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace granary::bench_test {
namespace {

using Clock = std::chrono::steady_clock;

pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

int DecodeStatus(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for pid until `deadline`; returns the status or -1 on timeout.
int WaitUntil(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return DecodeStatus(status);
    if (r < 0 || Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a child's exit
  }
}

}  // namespace

RunResult RunProgram(const std::vector<std::string>& argv, std::chrono::seconds deadline) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
  pid_t pid = Spawn(argv, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  RunResult r;
  auto end = Clock::now() + deadline;
  pollfd fds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
  int open_fds = 2;
  while (open_fds > 0 && Clock::now() < end) {
    if (::poll(fds, 2, 200) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  r.exit_code = WaitUntil(pid, end);
  if (r.exit_code < 0) {
    ::kill(pid, SIGKILL);
    r.exit_code = WaitUntil(pid, Clock::now() + std::chrono::seconds(10));
  }
  return r;
}

Result<std::unique_ptr<Background>> Background::Start(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return IoError("pipe failed");
  pid_t pid = Spawn(argv, out[1], 2);
  ::close(out[1]);
  auto proc = std::unique_ptr<Background>(new Background(pid, ""));
  auto end = Clock::now() + std::chrono::seconds(30);
  std::string line;
  pollfd pfd{.fd = out[0], .events = POLLIN};
  while (line.find('\n') == std::string::npos && Clock::now() < end) {
    if (::poll(&pfd, 1, 200) <= 0) continue;
    char buf[256];
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (line.find('\n') == std::string::npos) {
    return Unavailable(argv[0] + ": exited or printed no line within 30 s");
  }
  proc->first_line_ = line.substr(0, line.find('\n'));
  return proc;
}

int Background::Stop() {
  if (pid_ < 0) return -1;
  ::kill(pid_, SIGTERM);
  int code = WaitUntil(pid_, Clock::now() + std::chrono::seconds(10));
  if (code < 0) {
    ::kill(pid_, SIGKILL);
    code = WaitUntil(pid_, Clock::now() + std::chrono::seconds(10));
  }
  pid_ = -1;
  return code;
}

Background::~Background() { Stop(); }

ScratchDir::ScratchDir() {
  char tmpl[] = "/tmp/granary-bench-test-XXXXXX";
  const char* made = ::mkdtemp(tmpl);
  path_ = made != nullptr ? made : "/tmp/granary-bench-test-failed";
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace granary::bench_test
