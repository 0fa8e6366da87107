// MountHolder: keeps the FUSE connection, restarts and upgrades daemons (see mount_holder.h).
#include "daemon/mount_holder.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/log.h"
#include "common/replace_file.h"
#include "daemon/daemon.h"
#include "daemon/holder_channel.h"
#include "fuse/fuse_mount.h"

extern char** environ;

namespace granary {
namespace {

using Clock = std::chrono::steady_clock;

// A daemon that ran at least this long before dying was not part of a
// crash loop: the count of failures in a row starts again.
constexpr std::chrono::seconds kStableAfter{10};
// The longest pause between two starts of a daemon that keeps dying.
constexpr std::chrono::milliseconds kMaxBackoff{2000};

int64_t MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

class Holder {
 public:
  explicit Holder(const MountHolderOptions& o) : o_(o), binary_(o.binary), ready_fd_(o.ready_fd) {}
  Status Run();

 private:
  Status Setup();
  // The mount's pid file: this process, and the daemon running now.
  Status WritePidFile();
  void Spawn();
  void OnSignals();
  void Reap();
  void OnDaemonExit(int status);
  void OnChannel();
  void OnClient();
  void StartHandover();
  void ReplyUpgrade(const nlohmann::json& reply);
  bool ConnectionAlive() const;
  void ReportStart(const std::string& text);
  // Ends the loop: unmounts what is left (aborting the connection first
  // when `abort`), closes the held fds, removes the run files.
  void Finish(Status result, bool abort);

  const MountHolderOptions& o_;
  std::string binary_;           // what the next daemon runs
  std::string previous_binary_;  // before an upgrade in progress
  std::string daemon_binary_;    // what the running daemon runs
  uint64_t spawns_ = 0;          // daemons started so far
  uint64_t daemon_spawn_ = 0;    // the running daemon's number (spawns_ when it started)
  uint64_t upgrade_after_ = 0;   // upgrade in progress: daemons numbered above run the new binary
  int ready_fd_;
  int signal_fd_ = -1;
  int listen_fd_ = -1;
  int channel_ = -1;
  pid_t daemon_ = 0;
  bool daemon_ready_ = false;
  Clock::time_point daemon_started_;
  std::vector<int> held_fds_;
  std::string state_json_;
  uint64_t dev_ = 0;
  bool reported_ = false;
  bool stopping_ = false;
  int failures_ = 0;  // daemons in a row that died within kStableAfter
  int restarts_ = 0;
  std::optional<Clock::time_point> restart_at_, kill_at_;
  std::optional<Clock::time_point> down_since_;  // no daemon serves since
  int64_t last_takeover_ms_ = -1;
  std::string start_error_;  // "<code> <message>" from a daemon that failed to start
  int upgrade_client_ = -1;
  bool handover_sent_ = false;
  Clock::time_point upgrade_started_;
  std::optional<Status> result_;
};

Status Holder::Setup() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&set, sig);
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return ErrnoStatus("sigprocmask", errno);
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return ErrnoStatus("signalfd", errno);

  const std::string path = HolderSocketPath(o_.run_dir, o_.mountpoint);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("--run-dir is too long for a socket path: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return ErrnoStatus("socket", errno);
  const mode_t old = ::umask(077);
  const int bound = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::umask(old);
  if (bound != 0) return ErrnoStatus("bind " + path, errno);
  if (::listen(listen_fd_, 8) != 0) return ErrnoStatus("listen " + path, errno);

  return WritePidFile();
}

Status Holder::WritePidFile() {
  std::string text = std::to_string(::getpid()) + "\n" + o_.mountpoint + "\n" + o_.source + "\n" +
                     std::to_string(ProcessStartTicks(::getpid())) + "\n";
  if (daemon_ > 0) {
    text += std::to_string(daemon_) + " " + std::to_string(ProcessStartTicks(daemon_)) + "\n";
  }
  return ReplaceFileContents(RunFilePath(o_.run_dir, o_.mountpoint, "pid"), text);
}

void Holder::Spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    GLOG_ERROR("holder: socketpair: {}", strerror(errno));
    Finish(ErrnoStatus("socketpair", errno), /*abort=*/false);
    return;
  }
  // Everything the child needs is built here: between fork and exec only
  // async-signal-safe calls.
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with(std::string(kHolderFdEnv) + "="))
      env_storage.emplace_back(*e);
  }
  env_storage.push_back(std::string(kHolderFdEnv) + "=" + std::to_string(sv[1]));
  std::vector<char*> envp, argv;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o_.argv;
  args[0] = binary_;  // what runs, as ps shows it
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string binary = binary_;
  const pid_t pid = ::fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::fcntl(sv[1], F_SETFD, 0);
    ::execve(binary.c_str(), argv.data(), envp.data());
    const char msg[] = "granary: mount holder: cannot run the daemon binary\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(sv[1]);
  if (pid < 0) {
    ::close(sv[0]);
    GLOG_ERROR("holder: fork: {}", strerror(errno));
    restart_at_ = Clock::now() + kMaxBackoff;
    return;
  }
  channel_ = sv[0];
  daemon_ = pid;
  daemon_ready_ = false;
  daemon_binary_ = binary_;
  daemon_spawn_ = ++spawns_;
  daemon_started_ = Clock::now();
  GLOG_INFO("holder: started daemon pid {} ({})", pid, binary_);
  if (Status s = WritePidFile(); !s.ok()) GLOG_WARN("holder: pid file: {}", s.ToString());
}

void Holder::OnSignals() {
  signalfd_siginfo si;
  while (::read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    switch (si.ssi_signo) {
      case SIGCHLD: Reap(); break;
      case SIGTERM:
      case SIGINT:
        if (stopping_) break;
        stopping_ = true;
        GLOG_INFO("holder: signal {}: stopping the mount", si.ssi_signo);
        restart_at_.reset();
        if (daemon_ > 0) {
          ::kill(daemon_, SIGTERM);
          kill_at_ = Clock::now() + o_.stop_timeout;
        } else {
          Finish(Status::Ok(), /*abort=*/false);
        }
        break;
      case SIGUSR1:  // write the stats file
      case SIGHUP:   // read --cluster-peers-file again
        if (daemon_ > 0) ::kill(daemon_, static_cast<int>(si.ssi_signo));
        break;
      default: break;
    }
    if (result_) return;
  }
}

void Holder::Reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (pid == daemon_) OnDaemonExit(status);
    if (result_) return;
  }
}

void Holder::OnDaemonExit(int status) {
  const pid_t dead = daemon_;
  const bool was_ready = daemon_ready_;
  const bool ran_long = Clock::now() - daemon_started_ >= kStableAfter;
  const bool runs_upgrade = upgrade_client_ >= 0 && daemon_spawn_ > upgrade_after_;
  daemon_ = 0;
  daemon_ready_ = false;
  kill_at_.reset();
  if (channel_ >= 0) {
    // What it said before dying (a start-up error) is still queued.
    pollfd p{.fd = channel_, .events = POLLIN, .revents = 0};
    while (::poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
      const int before = channel_;
      OnChannel();
      if (channel_ != before || result_) break;
    }
    if (channel_ >= 0) ::close(channel_);
    channel_ = -1;
  }
  if (result_) return;
  if (stopping_) {
    GLOG_INFO("holder: daemon pid {} {}", dead, DescribeExit(status));
    Finish(Status::Ok(), /*abort=*/false);
    return;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    GLOG_INFO("holder: daemon pid {} stopped; the mount is gone", dead);
    Finish(Status::Ok(), /*abort=*/false);
    return;
  }
  if (held_fds_.empty() || !reported_) {
    // It never served: the mount did not come up (the daemon unmounted
    // what it had mounted, or Finish() does).
    const std::string why =
        start_error_.empty() ? std::to_string(static_cast<int>(Code::kInternal)) + " the daemon " +
                                   DescribeExit(status) + " before the mount was ready"
                             : start_error_;
    ReportStart(why);
    const size_t space = why.find(' ');
    Finish(Status(static_cast<Code>(std::atoi(why.c_str())),
                  space == std::string::npos ? why : why.substr(space + 1)),
           /*abort=*/false);
    return;
  }
  if (!ConnectionAlive()) {
    GLOG_INFO("holder: daemon pid {} {} and the connection has ended (unmounted)", dead,
              DescribeExit(status));
    Finish(Status::Ok(), /*abort=*/false);
    return;
  }
  if (!down_since_) down_since_ = Clock::now();
  const bool handed_over = WIFEXITED(status) && WEXITSTATUS(status) == kExitHandedOver;
  if (handed_over) {
    GLOG_INFO("holder: daemon pid {} handed the mount over; starting {}", dead, binary_);
    restart_at_ = Clock::now();
    return;
  }
  if (runs_upgrade && !was_ready) {
    // The new binary did not come up: the previous one serves again.
    GLOG_ERROR("holder: upgrade: daemon pid {} ({}) {} before serving; going back to {}", dead,
               binary_, DescribeExit(status), previous_binary_);
    ReplyUpgrade(
        {{"ok", false},
         {"error", binary_ + " " + DescribeExit(status) + " before serving the mount" +
                       (start_error_.empty()
                            ? ""
                            : " (" + start_error_.substr(start_error_.find(' ') + 1) + ")") +
                       "; " + previous_binary_ + " serves it again"}});
    binary_ = previous_binary_;
    restart_at_ = Clock::now();
    return;
  }
  failures_ = ran_long ? 1 : failures_ + 1;
  if (failures_ > o_.max_failures) {
    GLOG_ERROR(
        "holder: daemon pid {} {}; {} daemons in a row died within {} s of starting: "
        "giving the mount up (readers get ECONNABORTED)",
        dead, DescribeExit(status), failures_, kStableAfter.count());
    Finish(Internal("the daemon kept dying (" + std::to_string(failures_) +
                    " times in a row); the mount was given up"),
           /*abort=*/true);
    return;
  }
  const auto backoff =
      failures_ <= 1
          ? std::chrono::milliseconds(0)
          : std::min<std::chrono::milliseconds>(
                kMaxBackoff, std::chrono::milliseconds(100L << std::min(failures_ - 2, 10)));
  GLOG_WARN("holder: daemon pid {} {}; restarting it{}", dead, DescribeExit(status),
            backoff.count() > 0 ? " in " + std::to_string(backoff.count()) + " ms" : "");
  restart_at_ = Clock::now() + backoff;
}

void Holder::OnChannel() {
  Result<HolderMessage> m = ReceiveHolderMessage(channel_);
  if (!m.ok()) {
    // The daemon is gone (its exit follows as SIGCHLD) or spoke nonsense.
    if (m.status().code() != Code::kNotFound) GLOG_WARN("holder: {}", m.status().ToString());
    ::close(channel_);
    channel_ = -1;
    return;
  }
  const std::string op = m->body["op"].get<std::string>();
  if (op == "hello") {
    nlohmann::json reply = {{"op", "resume"}, {"state", nullptr}};
    if (!held_fds_.empty()) reply["state"] = state_json_;
    Status s = SendHolderMessage(channel_, reply, held_fds_);
    if (!s.ok()) GLOG_WARN("holder: {}", s.ToString());
  } else if (op == "session" && m->body["state"].is_string() && held_fds_.empty()) {
    Result<FuseConnectionState> st =
        FuseConnectionStateFromJson(m->body["state"].get<std::string>());
    if (st.ok() && st->device_fds == m->fds.size()) {
      state_json_ = m->body["state"].get<std::string>();
      dev_ = st->dev;
      held_fds_ = std::move(m->fds);
      m->fds.clear();
    } else {
      GLOG_ERROR("holder: the daemon sent a connection it cannot be kept by: {}",
                 st.ok() ? "fd count differs" : st.status().ToString());
    }
  } else if (op == "ready") {
    daemon_ready_ = true;
    if (down_since_) {
      last_takeover_ms_ = MillisSince(*down_since_);
      GLOG_INFO("holder: daemon pid {} serves the mount again ({} ms without a daemon)", daemon_,
                last_takeover_ms_);
      down_since_.reset();
      ++restarts_;
    }
    start_error_.clear();
    ReportStart("ready");
    if (upgrade_client_ >= 0) {
      if (daemon_spawn_ > upgrade_after_) {
        ReplyUpgrade({{"ok", true},
                      {"daemon_pid", daemon_},
                      {"binary", binary_},
                      {"takeover_ms", MillisSince(upgrade_started_)}});
      } else {
        StartHandover();
      }
    }
  } else if (op == "failed") {
    start_error_ = std::to_string(m->body.value("code", static_cast<int>(Code::kInternal))) + " " +
                   m->body.value("message", std::string("the daemon failed to start"));
  } else {
    GLOG_WARN("holder: unexpected message '{}' from the daemon", op);
  }
  for (int fd : m->fds) ::close(fd);
}

void Holder::StartHandover() {
  if (daemon_ > 0 && daemon_ready_ && !handover_sent_) {
    handover_sent_ = true;
    upgrade_started_ = Clock::now();
    GLOG_INFO("holder: upgrade: asking daemon pid {} to hand the mount over to {}", daemon_,
              binary_);
    ::kill(daemon_, SIGUSR2);
  }
}

void Holder::ReplyUpgrade(const nlohmann::json& reply) {
  if (upgrade_client_ < 0) return;
  const std::string line = reply.dump() + "\n";
  (void)!::send(upgrade_client_, line.data(), line.size(), MSG_NOSIGNAL);
  ::close(upgrade_client_);
  upgrade_client_ = -1;
  handover_sent_ = false;
}

void Holder::OnClient() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  timeval tv{.tv_sec = 1, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string line;
  char buf[1024];
  while (line.find('\n') == std::string::npos && line.size() < 8192) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  auto reply = [fd](const nlohmann::json& j) {
    const std::string text = j.dump() + "\n";
    (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    ::close(fd);
  };
  nlohmann::json req = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
  const std::string op = req.is_object() ? req.value("op", std::string()) : std::string();
  if (op == "status") {
    reply({{"ok", true},
           {"holder_pid", ::getpid()},
           {"daemon_pid", daemon_},
           {"serving", daemon_ready_},
           {"binary", daemon_binary_},
           {"restarts", restarts_},
           {"last_takeover_ms", last_takeover_ms_}});
    return;
  }
  if (op != "upgrade") {
    reply({{"ok", false}, {"error", "unknown request '" + op + "' (status or upgrade)"}});
    return;
  }
  const std::string binary = req.value("binary", std::string());
  struct stat st {};
  if (binary.empty() || binary[0] != '/' || ::stat(binary.c_str(), &st) != 0 ||
      !S_ISREG(st.st_mode) || ::access(binary.c_str(), X_OK) != 0) {
    reply({{"ok", false}, {"error", "'" + binary + "' is not an executable file (absolute path)"}});
    return;
  }
  if (stopping_ || upgrade_client_ >= 0) {
    reply({{"ok", false},
           {"error", stopping_ ? "the mount is stopping" : "an upgrade is already in progress"}});
    return;
  }
  upgrade_client_ = fd;
  upgrade_after_ = spawns_;
  previous_binary_ = binary_;
  binary_ = binary;
  handover_sent_ = false;
  upgrade_started_ = Clock::now();
  StartHandover();  // or once the daemon starting now serves
}

bool Holder::ConnectionAlive() const {
  if (held_fds_.empty()) return false;
  // /dev/fuse polls POLLERR once the connection is aborted or unmounted.
  pollfd p{.fd = held_fds_[0], .events = 0, .revents = 0};
  return ::poll(&p, 1, 0) == 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
}

void Holder::ReportStart(const std::string& text) {
  if (reported_) return;
  reported_ = true;
  if (ready_fd_ < 0) return;
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(ready_fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    rest.remove_prefix(static_cast<size_t>(n));
  }
  ::close(ready_fd_);
  ready_fd_ = -1;
}

void Holder::Finish(Status result, bool abort) {
  if (result_) return;
  if (IsMountpoint(o_.mountpoint) && (!held_fds_.empty() || !reported_)) {
    if (abort && dev_ != 0) {
      Status a = AbortFuseConnection(static_cast<dev_t>(dev_));
      if (!a.ok()) GLOG_WARN("holder: abort: {}", a.ToString());
    }
    Status u = UnmountFuse(o_.mountpoint);
    if (!u.ok() && u.code() != Code::kNotFound) GLOG_WARN("holder: {}", u.ToString());
  }
  for (int fd : held_fds_) ::close(fd);  // the last reference: the connection ends
  held_fds_.clear();
  // "ready" went out already, unless the mount never came up.
  const Status start =
      result.ok() ? Internal("the daemon stopped before the mount was ready") : result;
  ReportStart(std::to_string(static_cast<int>(start.code())) + " " + start.message());
  ReplyUpgrade(
      {{"ok", false},
       {"error", "the mount ended: " + (result.ok() ? std::string("stopped") : result.message())}});
  ::unlink(HolderSocketPath(o_.run_dir, o_.mountpoint).c_str());
  ::unlink(RunFilePath(o_.run_dir, o_.mountpoint, "backing").c_str());
  ::unlink(RunFilePath(o_.run_dir, o_.mountpoint, "nodes").c_str());
  ::unlink(RunFilePath(o_.run_dir, o_.mountpoint, "overlay-nodes").c_str());
  if (Result<DaemonPidInfo> pid = ReadPidFile(o_.run_dir, o_.mountpoint);
      pid.ok() && pid->pid == ::getpid()) {
    ::unlink(RunFilePath(o_.run_dir, o_.mountpoint, "pid").c_str());
  }
  result_ = std::move(result);
}

Status Holder::Run() {
  if (Status s = Setup(); !s.ok()) {
    Finish(s, /*abort=*/false);
    return s;
  }
  Spawn();
  while (!result_) {
    int timeout_ms = -1;
    for (const auto& at : {restart_at_, kill_at_}) {
      if (!at) continue;
      const int64_t ms = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(*at - Clock::now()).count() + 1);
      timeout_ms =
          timeout_ms < 0 ? static_cast<int>(ms) : std::min(timeout_ms, static_cast<int>(ms));
    }
    pollfd fds[3] = {{.fd = signal_fd_, .events = POLLIN, .revents = 0},
                     {.fd = listen_fd_, .events = POLLIN, .revents = 0},
                     {.fd = channel_, .events = POLLIN, .revents = 0}};
    const int n = ::poll(fds, channel_ >= 0 ? 3 : 2, timeout_ms);
    if (n < 0 && errno != EINTR) {
      GLOG_ERROR("holder: poll: {}", strerror(errno));
      break;
    }
    if (n > 0 && channel_ >= 0 && fds[2].revents != 0) OnChannel();
    if (n > 0 && fds[0].revents != 0) OnSignals();
    if (result_) break;
    if (n > 0 && fds[1].revents != 0) OnClient();
    if (restart_at_ && Clock::now() >= *restart_at_ && daemon_ == 0) {
      restart_at_.reset();
      Spawn();
    }
    if (kill_at_ && Clock::now() >= *kill_at_ && daemon_ > 0) {
      GLOG_WARN("holder: daemon pid {} did not stop within {} s; killing it", daemon_,
                o_.stop_timeout.count());
      ::kill(daemon_, SIGKILL);
      kill_at_.reset();
    }
  }
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  return result_ ? *result_ : Internal("mount holder loop failed");
}

}  // namespace

Status RunMountHolder(const MountHolderOptions& options) { return Holder(options).Run(); }

}  // namespace granary
