// FuseServer: mount, INIT, transport threads, shutdown. See fuse_server.h.
//
// Shutdown order (Stop): set stop_, abort the connection through fusectl (so
// every pending and future request fails at once and the loops see
// ENODEV/ENOTCONN), lazy-unmount, wake threads still blocked (signal, repeated
// until they leave), join, close backing ids, close the fds (closing the last
// /dev/fuse fd aborts the connection too, where fusectl was unavailable).
#include "fuse/fuse_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "fuse/close_watcher.h"
#include "fuse/dir_lister.h"
#include "fuse/fuse_connection_state.h"
#include "fuse/fuse_dispatch.h"
#include "fuse/fuse_mount.h"
#include "fuse/fuse_transport.h"

namespace granary {

Result<FuseTransport> ParseFuseTransport(std::string_view t) {
  if (t == "auto") return FuseTransport::kAuto;
  if (t == "dev") return FuseTransport::kDev;
  if (t == "uring") return FuseTransport::kUring;
  return InvalidArgument("fuse transport must be auto, dev or uring, not '" + std::string(t) + "'");
}

Result<FuseReadMode> ParseFuseReadMode(std::string_view t) {
  if (t == "passthrough") return FuseReadMode::kPassthrough;
  if (t == "cached") return FuseReadMode::kCached;
  return InvalidArgument("read mode must be passthrough or cached, not '" + std::string(t) + "'");
}

Result<FusePassthrough> ParseFusePassthrough(std::string_view t) {
  if (t == "auto") return FusePassthrough::kAuto;
  if (t == "on") return FusePassthrough::kOn;
  if (t == "off") return FusePassthrough::kOff;
  return InvalidArgument("passthrough must be auto, on or off, not '" + std::string(t) + "'");
}

std::string_view FuseTransportName(FuseTransport t) {
  switch (t) {
    case FuseTransport::kAuto: return "auto";
    case FuseTransport::kDev: return "dev";
    case FuseTransport::kUring: return "uring";
  }
  return "?";
}

std::string_view FuseReadModeName(FuseReadMode m) {
  return m == FuseReadMode::kCached ? "cached" : "passthrough";
}

Status ValidateFuseOptions(const FuseOptions& o) {
  if (o.mountpoint.empty()) return InvalidArgument("fuse: mountpoint is required");
  if (o.read_waiters < 0 || o.read_waiters > 4096) {
    return InvalidArgument("fuse: read_waiters must be 0..4096, not " +
                           std::to_string(o.read_waiters));
  }
  if (o.threads < 0 || o.threads > 1024) {
    return InvalidArgument("fuse: threads must be 0..1024, not " + std::to_string(o.threads));
  }
  if (o.max_background < 1 || o.max_background > 65535) {
    return InvalidArgument("fuse: max_background must be 1..65535, not " +
                           std::to_string(o.max_background));
  }
  if (o.uring_queue_depth < 1 || o.uring_queue_depth > 256) {
    return InvalidArgument("fuse: uring_queue_depth must be 1..256, not " +
                           std::to_string(o.uring_queue_depth));
  }
  if (o.entry_timeout.count() < 0 || o.attr_timeout.count() < 0) {
    return InvalidArgument("fuse: timeouts must not be negative");
  }
  if (o.read_mode == FuseReadMode::kCached && o.passthrough == FusePassthrough::kOn) {
    return InvalidArgument("fuse: passthrough=on needs read mode passthrough, not cached");
  }
  return Status::Ok();
}

class FuseServer::Impl {
 public:
  Impl(FuseFilesystem* fs, const FuseOptions& o) : fs_(fs), opts_(o) {}
  ~Impl() { Stop(); }

  Status Start();
  Status Resume(const FuseConnectionState& state, std::vector<int> fds);
  FuseConnectionState ConnectionState() const;
  std::vector<int> DeviceFds() const;
  bool Detach(std::chrono::milliseconds drain);
  void Stop();
  void Wait();
  FuseStats Stats() const;
  FuseSessionInfo Info() const;
  void DropBacking(uint64_t ino) {
    if (dispatcher_) dispatcher_->DropBacking(ino);
  }
  // Writes one notification (unique 0, error = code) to the device. ENOENT
  // (the kernel does not know the node) is OK, and sets *unknown if given.
  Status Notify(int code, const iovec* parts, int count, const std::string& what,
                bool* unknown = nullptr);
  // Lists `rel` through the mount in the lister process (DirLister), so the
  // kernel instantiates every entry. false: it could not.
  bool ListDir(const std::string& rel) EXCLUDES(lister_mu_);
  // The lister process, (re)started with the transport threads.
  void StartDirLister() EXCLUDES(lister_mu_);
  // Files read, counted from their closes (CloseWatcher), in cached
  // read-only mode: the one mode whose reads the kernel may serve from the
  // mount's page cache without a request, and whose files the kernel opens
  // and closes without one (so the watcher's own opens cost the daemon
  // nothing). Off, with one line in the log, where fanotify is not allowed.
  void StartCloseWatcher() EXCLUDES(watcher_mu_);
  void CountStore(size_t bytes) {
    stores_.fetch_add(1, std::memory_order_relaxed);
    store_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  Status Negotiate(InitPolicy policy);
  Status StartTransport();
  void StartDevThreads(int count);
  // Serves `fd` on a new transport thread.
  void ServeFd(int fd);
  // The dispatcher and directory read-ahead, as Start() and Resume() need them.
  void MakeDispatcher();
  void Spawn(std::function<void()> body);
  void Cleanup();
  // Directory read-ahead (FuseOptions::dir_prefetch): queues a directory,
  // and the thread that lists queued directories through the mount.
  void QueueList(std::string rel);
  void RunLister();
  void StopLister();

  FuseFilesystem* fs_;
  const FuseOptions opts_;
  uint32_t uid_ = 0;
  uint32_t gid_ = 0;
  int dev_fd_ = -1;
  std::vector<int> clone_fds_;
  dev_t dev_ = 0;
  bool mounted_ = false;
  bool detached_ = false;  // Detach() ran: the connection belongs to a successor
  std::unique_ptr<FuseDispatcher> dispatcher_;
  FuseSessionInfo info_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  // Guards dev_fd_ against Cleanup() (exclusive) while notifications are
  // written (shared: the kernel serializes what it must). A leaf lock.
  // dev_fd_ is not GUARDED_BY it: the transport threads read dev_fd_
  // without it (they are joined before Cleanup() closes it).
  SharedMutex notify_mu_;
  std::atomic<uint64_t> stores_{0}, store_bytes_{0};  // FUSE_NOTIFY_STORE done

  Mutex list_mu_;    // guards list_queue_, list_stop_; a leaf lock
  CondVar list_cv_;  // signalled when a directory is queued or list_stop_ is set
  std::deque<std::string> list_queue_ GUARDED_BY(list_mu_);
  bool list_stop_ GUARDED_BY(list_mu_) = false;
  std::thread lister_;
  Mutex lister_mu_;  // guards dir_lister_; a leaf lock (not held while listing)
  std::shared_ptr<DirLister> dir_lister_ GUARDED_BY(lister_mu_);
  mutable Mutex watcher_mu_;  // guards close_watcher_; a leaf lock
  std::unique_ptr<CloseWatcher> close_watcher_ GUARDED_BY(watcher_mu_);
  std::atomic<uint64_t> files_missed_{0};

  mutable Mutex mu_;  // guards running_ and the wake-up of Wait()/Stop(); a leaf lock
  CondVar cv_;
  int running_ GUARDED_BY(mu_) = 0;
};

void FuseServer::Impl::Spawn(std::function<void()> body) {
  {
    MutexLock lock(mu_);
    ++running_;
  }
  threads_.emplace_back([this, body = std::move(body)] {
    body();
    MutexLock lock(mu_);
    --running_;
    cv_.NotifyAll();
  });
}

Status FuseServer::Impl::Start() {
  RETURN_IF_ERROR(ValidateFuseOptions(opts_));
  RETURN_IF_ERROR(CheckMountpoint(opts_.mountpoint, opts_.allow_non_empty));
  uid_ = opts_.uid.value_or(getuid());
  gid_ = opts_.gid.value_or(getgid());
  InitPolicy policy{.max_background = static_cast<uint16_t>(opts_.max_background),
                    .max_pages = static_cast<uint16_t>(kFuseMaxPages)};
  // Writable mounts take 1 MiB writes (the request buffers hold max_pages).
  if (opts_.writable) policy.max_write = static_cast<uint32_t>(kFuseMaxPages * 4096);
  if (opts_.read_mode == FuseReadMode::kPassthrough && opts_.passthrough != FusePassthrough::kOff) {
    policy.want_passthrough = HaveCapSysAdmin();
    if (!policy.want_passthrough) info_.passthrough_note = "no CAP_SYS_ADMIN";
    if (!policy.want_passthrough && opts_.passthrough == FusePassthrough::kOn) {
      return PermissionDenied("fuse: passthrough=on needs CAP_SYS_ADMIN (run as root)");
    }
  } else {
    info_.passthrough_note =
        opts_.read_mode == FuseReadMode::kCached ? "read mode cached" : "passthrough=off";
  }
  if (opts_.transport != FuseTransport::kDev) {
    policy.want_uring = FuseUringEnabled();
    if (!policy.want_uring && opts_.transport == FuseTransport::kUring) {
      return Unimplemented(
          "fuse: transport uring unavailable: /sys/module/fuse/parameters/enable_uring is not Y "
          "(needs Linux >= 6.14 built with CONFIG_FUSE_IO_URING, then enable_uring=Y)");
    }
  }
  MakeDispatcher();
  if (!opts_.backing_journal.empty()) {
    Status j = dispatcher_->OpenBackingJournal(opts_.backing_journal, /*restore=*/false);
    if (!j.ok()) return j;
  }
  ASSIGN_OR_RETURN(dev_fd_, MountFuse(opts_, getuid(), getgid()));
  mounted_ = true;
  Status st = Negotiate(policy);
  if (st.ok()) st = StartTransport();
  if (!st.ok()) {
    Stop();
    return st;
  }
  struct stat sb;
  if (stat(opts_.mountpoint.c_str(), &sb) != 0) {
    Status err = ErrnoStatus("fuse: stat of the new mount " + opts_.mountpoint, errno);
    Stop();
    return err;
  }
  dev_ = sb.st_dev;
  StartDirLister();
  StartCloseWatcher();
  if (opts_.dir_prefetch) lister_ = std::thread([this] { RunLister(); });
  if (opts_.readahead_kb > 0) {
    Status ra = SetFuseReadahead(dev_, opts_.readahead_kb);
    if (!ra.ok()) GLOG_WARN("fuse: cannot raise readahead: {}", ra.ToString());
  }
  GLOG_INFO(
      "fuse: mounted {} (protocol 7.{}, transport {}, {} threads, read mode {}, "
      "passthrough {})",
      opts_.mountpoint, info_.kernel_minor, FuseTransportName(info_.transport), info_.threads,
      FuseReadModeName(opts_.read_mode),
      info_.passthrough ? "on" : "off (" + info_.passthrough_note + ")");
  return Status::Ok();
}

void FuseServer::Impl::MakeDispatcher() {
  dispatcher_ = std::make_unique<FuseDispatcher>(fs_, opts_, uid_, gid_);
  {
    MutexLock lock(list_mu_);
    list_stop_ = false;
  }
  if (opts_.dir_prefetch) {
    dispatcher_->SetDirPrefetch([this](std::string rel) { QueueList(std::move(rel)); });
  }
}

Status FuseServer::Impl::Resume(const FuseConnectionState& st, std::vector<int> fds) {
  auto close_all = [&fds] {
    for (int fd : fds) ::close(fd);
  };
  Status valid = ValidateFuseOptions(opts_);
  if (valid.ok() && fds.empty()) valid = InvalidArgument("fuse: resume without a /dev/fuse fd");
  if (valid.ok() && st.session.transport != FuseTransport::kDev) {
    valid = Unimplemented("fuse: an io_uring connection cannot be taken over");
  }
  if (valid.ok() && st.read_mode != opts_.read_mode) {
    valid = InvalidArgument("fuse: the connection runs read mode " +
                            std::string(FuseReadModeName(st.read_mode)) + ", not " +
                            std::string(FuseReadModeName(opts_.read_mode)));
  }
  if (!valid.ok()) {
    close_all();
    return valid;
  }
  uid_ = opts_.uid.value_or(getuid());
  gid_ = opts_.gid.value_or(getgid());
  MakeDispatcher();
  dev_fd_ = fds[0];
  clone_fds_.assign(fds.begin() + 1, fds.end());
  mounted_ = true;
  dev_ = static_cast<dev_t>(st.dev);
  info_ = st.session;
  info_.threads = 0;
  if (info_.passthrough) {
    dispatcher_->EnablePassthrough(dev_fd_);
    if (!opts_.backing_journal.empty()) {
      Status j = dispatcher_->OpenBackingJournal(opts_.backing_journal, /*restore=*/true);
      if (!j.ok())
        GLOG_WARN("fuse: {} (files open in passthrough may fail to open again)", j.ToString());
    }
  }
  const int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads =
      std::max(opts_.threads > 0 ? opts_.threads : cpus, static_cast<int>(fds.size()));
  for (int i = 0; i < threads; ++i) {
    ServeFd(fds[static_cast<size_t>(i) % fds.size()]);
    ++info_.threads;
  }
  StartDirLister();
  StartCloseWatcher();
  if (opts_.dir_prefetch) lister_ = std::thread([this] { RunLister(); });
  if (info_.kernel_flags & FUSE_HAS_RESEND) {
    Status r = Notify(FUSE_NOTIFY_RESEND_CODE, nullptr, 0, "resend unanswered requests");
    if (!r.ok()) GLOG_WARN("fuse: {}", r.ToString());
  } else {
    GLOG_WARN(
        "fuse: the kernel (protocol 7.{}) cannot resend requests the previous daemon "
        "read; those wait until their callers give up",
        info_.kernel_minor);
  }
  GLOG_INFO("fuse: took over {} (protocol 7.{}, {} threads, read mode {}, passthrough {})",
            opts_.mountpoint, info_.kernel_minor, info_.threads, FuseReadModeName(opts_.read_mode),
            info_.passthrough ? "on" : "off");
  return Status::Ok();
}

FuseConnectionState FuseServer::Impl::ConnectionState() const {
  return FuseConnectionState{.session = info_,
                             .read_mode = opts_.read_mode,
                             .dev = static_cast<uint64_t>(dev_),
                             .device_fds = static_cast<uint32_t>(1 + clone_fds_.size())};
}

std::vector<int> FuseServer::Impl::DeviceFds() const {
  std::vector<int> fds;
  if (dev_fd_ < 0) return fds;
  fds.push_back(dev_fd_);
  fds.insert(fds.end(), clone_fds_.begin(), clone_fds_.end());
  return fds;
}

bool FuseServer::Impl::Detach(std::chrono::milliseconds drain) {
  if (!mounted_ || detached_) return true;
  const auto deadline = Clock::Real()->Now() + drain;
  // The lister lists through the mount: let this server answer what it asked.
  StopLister();
  stop_.store(true);
  detached_ = true;
  dispatcher_->LeaveBackingRegistered();
  {
    // Threads blocked in read(2) leave at the signal; one serving a request
    // leaves once it has written the reply.
    MutexLock lock(mu_);
    while (running_ > 0 && Clock::Real()->Now() < deadline) {
      for (auto& t : threads_) WakeTransportThread(t.native_handle());
      cv_.WaitFor(lock, std::chrono::milliseconds(20));
    }
    if (running_ > 0) return false;
  }
  // READs handed to read waiters: answered before this returns.
  if (!dispatcher_->WaitReadsAnswered(deadline)) return false;
  for (auto& t : threads_) t.join();
  threads_.clear();
  {
    WriterMutexLock lock(notify_mu_);
    for (int fd : clone_fds_) ::close(fd);
    clone_fds_.clear();
    if (dev_fd_ >= 0) ::close(dev_fd_);
    dev_fd_ = -1;
  }
  {
    MutexLock lock(mu_);
    mounted_ = false;
  }
  cv_.NotifyAll();
  return true;
}

// Reads INIT from the fresh connection and answers it.
Status FuseServer::Impl::Negotiate(InitPolicy policy) {
  std::vector<char> buf(kFuseRequestBuffer);
  for (int attempt = 0; attempt < 3; ++attempt) {
    pollfd pfd{.fd = dev_fd_, .events = POLLIN, .revents = 0};
    if (poll(&pfd, 1, 10000) != 1) return Unavailable("fuse: the kernel sent no INIT within 10 s");
    ssize_t n = read(dev_fd_, buf.data(), buf.size());
    if (n < 0) return ErrnoStatus("fuse: read INIT", errno);
    const auto* h = reinterpret_cast<const fuse_in_header*>(buf.data());
    if (static_cast<size_t>(n) < sizeof(*h) + 8 || h->opcode != FUSE_INIT) {
      return Internal("fuse: first request is not INIT");
    }
    struct fuse_init_in in {};
    std::memcpy(&in, buf.data() + sizeof(*h),
                std::min(sizeof(in), static_cast<size_t>(n) - sizeof(*h)));
    InitDecision d = NegotiateInit(in, policy);
    fuse_out_header oh{.len = 0, .error = 0, .unique = h->unique};
    if (!d.status.ok()) {
      oh.len = sizeof(oh);
      oh.error = -EPROTO;
      (void)!write(dev_fd_, &oh, sizeof(oh));
      return d.status;
    }
    Status need = Status::Ok();
    if (opts_.passthrough == FusePassthrough::kOn && !d.info.passthrough && in.major == 7) {
      need = Unimplemented("fuse: passthrough=on but the kernel (protocol 7." +
                           std::to_string(in.minor) + ") does not offer FUSE_PASSTHROUGH");
    }
    if (opts_.transport == FuseTransport::kUring && d.info.transport != FuseTransport::kUring &&
        in.major == 7) {
      need = Unimplemented("fuse: transport uring but the kernel (protocol 7." +
                           std::to_string(in.minor) + ") does not offer FUSE_OVER_IO_URING");
    }
    if (!need.ok()) {
      oh.len = sizeof(oh);
      oh.error = -EPROTO;
      (void)!write(dev_fd_, &oh, sizeof(oh));
      return need;
    }
    oh.len = static_cast<uint32_t>(sizeof(oh) + d.out_size);
    iovec iov[2] = {{&oh, sizeof(oh)}, {&d.out, d.out_size}};
    if (writev(dev_fd_, iov, 2) < 0) return ErrnoStatus("fuse: reply to INIT", errno);
    if (in.major > fusek::kKernelMajor) continue;  // the kernel retries with 7.x
    std::string note = info_.passthrough_note;
    info_ = d.info;
    if (info_.passthrough) {
      dispatcher_->EnablePassthrough(dev_fd_);
    } else if (note.empty()) {
      info_.passthrough_note = "kernel did not grant FUSE_PASSTHROUGH";
    } else {
      info_.passthrough_note = note;
    }
    return Status::Ok();
  }
  return Internal("fuse: INIT version negotiation did not converge");
}

void FuseServer::Impl::StartDevThreads(int count) {
  for (int i = 0; i < count; ++i) {
    int fd = dev_fd_;
    if (i >= kFuseMaxDeviceFds) {
      const int k = i % kFuseMaxDeviceFds;
      fd = k == 0 ? dev_fd_ : clone_fds_[static_cast<size_t>(k - 1) % clone_fds_.size()];
    } else if (i > 0) {
      fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
      uint32_t src = static_cast<uint32_t>(dev_fd_);
      if (fd < 0 || ioctl(fd, fusek::kDevIocClone, &src) != 0) {
        GLOG_WARN("fuse: FUSE_DEV_IOC_CLONE failed ({}); using {} thread(s)", strerror(errno), i);
        if (fd >= 0) close(fd);
        break;
      }
      clone_fds_.push_back(fd);
    }
    ServeFd(fd);
    ++info_.threads;
  }
}

void FuseServer::Impl::ServeFd(int fd) {
  Spawn([this, fd] { RunDevLoop(fd, dispatcher_.get(), &stop_); });
}

Status FuseServer::Impl::StartTransport() {
  int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int dev_threads = opts_.threads > 0 ? opts_.threads : cpus;
  if (info_.transport != FuseTransport::kUring) {
    StartDevThreads(dev_threads);
    return Status::Ok();
  }
  // FORGET and INTERRUPT keep arriving on /dev/fuse.
  StartDevThreads(1);
  int queues = FuseUringQueueCount();
  std::vector<std::promise<Status>> promises(static_cast<size_t>(queues));
  for (int q = 0; q < queues; ++q) {
    UringQueueConfig c{.dev_fd = dev_fd_, .qid = q, .depth = opts_.uring_queue_depth};
    std::promise<Status>* p = &promises[static_cast<size_t>(q)];
    Spawn([this, c, p] {
      RunUringQueue(c, dispatcher_.get(), &stop_, [p](Status s) { p->set_value(std::move(s)); });
    });
  }
  Status failed = Status::Ok();
  for (auto& p : promises) {
    Status s = p.get_future().get();
    if (!s.ok() && failed.ok()) failed = s;
  }
  if (failed.ok()) {
    info_.threads += queues;
    return Status::Ok();
  }
  if (opts_.transport == FuseTransport::kUring) return failed.WithContext("fuse: transport uring");
  GLOG_WARN("fuse: io_uring setup failed ({}); falling back to /dev/fuse", failed.ToString());
  info_.transport = FuseTransport::kDev;
  StartDevThreads(std::max(0, dev_threads - 1));
  return Status::Ok();
}

void FuseServer::Impl::Stop() {
  if (!mounted_ || detached_) return;
  stop_.store(true);
  if (dev_ != 0) {
    Status ab = AbortFuseConnection(dev_);
    if (!ab.ok()) GLOG_DEBUG("fuse: abort via fusectl: {}", ab.ToString());
  }
  Status um = UnmountFuse(opts_.mountpoint);
  if (!um.ok() && um.code() != Code::kNotFound) GLOG_WARN("fuse: {}", um.ToString());
  // READs waiting for the origin (on read waiters or transport threads)
  // end now with EINTR; the waiters leave.
  if (dispatcher_) dispatcher_->CancelWaits();
  // Wake threads blocked in read(2)/io_uring_enter until they have all left;
  // repeated because a signal may land just before a thread blocks.
  MutexLock lock(mu_);
  while (running_ > 0) {
    for (auto& t : threads_) WakeTransportThread(t.native_handle());
    cv_.WaitFor(lock, std::chrono::milliseconds(20));
  }
  lock.Unlock();
  Cleanup();
}

void FuseServer::Impl::QueueList(std::string rel) {
  MutexLock lock(list_mu_);
  if (list_stop_ || list_queue_.size() >= 65536) return;  // bounded; a miss only costs LOOKUPs
  list_queue_.push_back(std::move(rel));
  list_cv_.NotifyOne();
}

// Lists each queued directory through the mount (in the lister process).
void FuseServer::Impl::RunLister() {
  for (;;) {
    std::string rel;
    {
      MutexLock lock(list_mu_);
      list_cv_.Wait(lock,
                    [this]() REQUIRES(list_mu_) { return list_stop_ || !list_queue_.empty(); });
      if (list_stop_) return;
      rel = std::move(list_queue_.front());
      list_queue_.pop_front();
    }
    ListDir(rel);
  }
}

void FuseServer::Impl::StartCloseWatcher() {
  if (opts_.read_mode != FuseReadMode::kCached || opts_.writable || opts_.count_file_reads <= 0) {
    return;
  }
  MutexLock lock(watcher_mu_);
  if (close_watcher_) return;
  auto started = CloseWatcher::Start(opts_.mountpoint, std::min(1.0, opts_.count_file_reads),
                                     {.closed =
                                          [this](uint64_t node) {
                                            if (fs_->TakeMiss(node))
                                              files_missed_.fetch_add(1, std::memory_order_relaxed);
                                          },
                                      .window_start = [this] { fs_->TrackMisses(); }});
  if (!started.ok()) {
    GLOG_INFO("fuse: files read are not counted (status shows the daemon's own hit ratio): {}",
              started.status().ToString());
    return;
  }
  close_watcher_ = std::move(*started);
}

void FuseServer::Impl::StartDirLister() {
  Result<std::unique_ptr<DirLister>> started = DirLister::Start(opts_.mountpoint);
  if (!started.ok()) {
    GLOG_WARN("fuse: directory listing ahead is off: {}", started.status().ToString());
  }
  MutexLock lock(lister_mu_);
  dir_lister_ = started.ok() ? std::shared_ptr<DirLister>(std::move(*started)) : nullptr;
}

bool FuseServer::Impl::ListDir(const std::string& rel) {
  std::shared_ptr<DirLister> lister;
  {
    MutexLock lock(lister_mu_);
    lister = dir_lister_;
  }
  if (!lister) return false;
  const bool listed = lister->List(rel, [this] {
    MutexLock lock(list_mu_);
    return list_stop_ || stop_.load();
  });
  if (listed) dispatcher_->CountDirPrefetched();
  return listed;
}

void FuseServer::Impl::StopLister() {
  {
    MutexLock lock(list_mu_);
    list_stop_ = true;
    list_queue_.clear();
  }
  list_cv_.NotifyAll();
  if (lister_.joinable()) lister_.join();
  MutexLock lock(lister_mu_);
  dir_lister_.reset();  // a listing still running elsewhere keeps its own reference
}

void FuseServer::Impl::Cleanup() {
  StopLister();  // after the abort: a listing in flight fails at once
  {
    MutexLock lock(watcher_mu_);
    close_watcher_.reset();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (dispatcher_) dispatcher_->CloseAllBacking();
  for (int fd : clone_fds_) close(fd);
  clone_fds_.clear();
  {
    WriterMutexLock lock(notify_mu_);
    if (dev_fd_ >= 0) close(dev_fd_);
    dev_fd_ = -1;
  }
  {
    MutexLock lock(mu_);
    mounted_ = false;
  }
  cv_.NotifyAll();
}

void FuseServer::Impl::Wait() {
  MutexLock lock(mu_);
  cv_.Wait(lock, [this]() REQUIRES(mu_) { return running_ == 0; });
}

FuseStats FuseServer::Impl::Stats() const {
  FuseStats s;
  if (dispatcher_) dispatcher_->FillStats(&s);
  s.stores = stores_.load(std::memory_order_relaxed);
  s.store_bytes = store_bytes_.load(std::memory_order_relaxed);
  MutexLock lock(watcher_mu_);
  if (close_watcher_) {
    s.files_read_counted = true;
    s.files_read = close_watcher_->closes();
    s.files_read_missed = files_missed_.load(std::memory_order_relaxed);
    s.file_close_overflows = close_watcher_->overflows();
  }
  return s;
}

FuseSessionInfo FuseServer::Impl::Info() const { return info_; }

Status FuseServer::Impl::Notify(int code, const iovec* parts, int count, const std::string& what,
                                bool* unknown) {
  size_t len = sizeof(fuse_out_header);
  for (int i = 0; i < count; ++i) len += parts[i].iov_len;
  fuse_out_header out{.len = static_cast<uint32_t>(len), .error = code, .unique = 0};
  std::vector<iovec> iov;
  iov.push_back({&out, sizeof(out)});
  iov.insert(iov.end(), parts, parts + count);
  ReaderMutexLock lock(notify_mu_);
  if (dev_fd_ < 0 || stop_.load()) return Unavailable("fuse: " + what + ": not mounted");
  if (::writev(dev_fd_, iov.data(), static_cast<int>(iov.size())) < 0) {
    if (errno == ENOENT) {  // the kernel had nothing cached
      if (unknown != nullptr) *unknown = true;
      return Status::Ok();
    }
    return ErrnoStatus("fuse: " + what, errno);
  }
  return Status::Ok();
}

Status FuseServer::InvalidateEntry(uint64_t parent, std::string_view name) {
  fuse_notify_inval_entry_out arg{.parent = parent, .namelen = static_cast<uint32_t>(name.size())};
  static const char kNul = '\0';
  iovec parts[3] = {{&arg, sizeof(arg)},
                    {const_cast<char*>(name.data()), name.size()},
                    {const_cast<char*>(&kNul), 1}};
  return impl_->Notify(FUSE_NOTIFY_INVAL_ENTRY, parts, 3,
                       "invalidate entry '" + std::string(name) + "'");
}

Status FuseServer::InvalidateNode(uint64_t node) {
  fuse_notify_inval_inode_out arg{.ino = node, .off = 0, .len = 0};
  iovec parts[1] = {{&arg, sizeof(arg)}};
  return impl_->Notify(FUSE_NOTIFY_INVAL_INODE, parts, 1,
                       "invalidate node " + std::to_string(node));
}

Result<bool> FuseServer::StoreData(uint64_t node, uint64_t offset, std::string_view data) {
  if (data.size() > UINT32_MAX) return InvalidArgument("fuse: store: range too large");
  fuse_notify_store_out arg{
      .nodeid = node, .offset = offset, .size = static_cast<uint32_t>(data.size()), .padding = 0};
  iovec parts[2] = {{&arg, sizeof(arg)}, {const_cast<char*>(data.data()), data.size()}};
  bool unknown = false;
  // A fixed name: this runs once per pushed file and the failure is rare.
  static const std::string kWhat = "store into the page cache";
  RETURN_IF_ERROR(impl_->Notify(FUSE_NOTIFY_STORE, parts, 2, kWhat, &unknown));
  if (unknown) return false;
  impl_->CountStore(data.size());
  return true;
}

bool FuseServer::ListDir(const std::string& rel) { return impl_->ListDir(rel); }

FuseServer::FuseServer(FuseFilesystem* fs, FuseOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(fs, options_)) {}

FuseServer::~FuseServer() = default;

Status FuseServer::Start() { return impl_->Start(); }
Status FuseServer::Resume(const FuseConnectionState& state, std::vector<int> fds) {
  return impl_->Resume(state, std::move(fds));
}
FuseConnectionState FuseServer::connection_state() const { return impl_->ConnectionState(); }
std::vector<int> FuseServer::device_fds() const { return impl_->DeviceFds(); }
bool FuseServer::Detach(std::chrono::milliseconds drain) { return impl_->Detach(drain); }
void FuseServer::Wait() { impl_->Wait(); }
void FuseServer::Stop() { impl_->Stop(); }
void FuseServer::DropBacking(uint64_t ino) { impl_->DropBacking(ino); }
FuseStats FuseServer::stats() const { return impl_->Stats(); }
FuseSessionInfo FuseServer::session() const { return impl_->Info(); }

}  // namespace granary
