// FuseDispatcher: request -> FuseFilesystem call -> reply body. See the header.
#include "fuse/fuse_dispatch.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "fuse/fuse_dispatch_util.h"

namespace granary {
using namespace fuse_dispatch_util;
namespace {

constexpr uint32_t kBlockSize = 1 << 20;  // st_blksize: stdio/Python buffer hint

bool IsWriteOpcode(uint32_t op) {
  switch (op) {
    case FUSE_SETATTR:
    case FUSE_SYMLINK:
    case FUSE_MKNOD:
    case FUSE_MKDIR:
    case FUSE_UNLINK:
    case FUSE_RMDIR:
    case FUSE_RENAME:
    case FUSE_LINK:
    case FUSE_WRITE:
    case FUSE_SETXATTR:
    case FUSE_REMOVEXATTR:
    case FUSE_CREATE:
    case FUSE_FALLOCATE:
    case FUSE_RENAME2:
    case FUSE_COPY_FILE_RANGE:
    case FUSE_TMPFILE:
    case fusek::kOpCopyFileRange64: return true;
    default: return false;
  }
}

}  // namespace

int FuseErrno(const Status& status) {
  switch (status.code()) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kPermissionDenied: return EACCES;
    case Code::kUnavailable: return EIO;
    case Code::kIoError: return EIO;
    case Code::kCorruption: return EIO;
    case Code::kNoSpace: return ENOSPC;
    case Code::kUnimplemented: return ENOSYS;
    case Code::kCancelled: return EINTR;
    case Code::kInternal: return EIO;
    case Code::kStale: return ESTALE;
  }
  return EIO;
}

InitDecision NegotiateInit(const struct fuse_init_in& in, const InitPolicy& policy) {
  InitDecision d;
  d.info.kernel_major = in.major;
  d.info.kernel_minor = in.minor;
  if (in.major < fusek::kKernelMajor) {
    d.status = Unimplemented("kernel FUSE protocol " + std::to_string(in.major) + "." +
                             std::to_string(in.minor) + " is too old (need 7.x)");
    return d;
  }
  d.out.major = fusek::kKernelMajor;
  d.out.minor = fusek::kKernelMinor;
  if (in.major > fusek::kKernelMajor) {
    // The kernel will send a new INIT with our major; answer with just the version.
    d.out_size = 8;
    return d;
  }
  uint64_t offered = in.flags;
  if (in.flags & FUSE_INIT_EXT) offered |= static_cast<uint64_t>(in.flags2) << 32;
  uint64_t want = FUSE_ASYNC_READ | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES | FUSE_INIT_EXT |
                  FUSE_BIG_WRITES | FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO |
                  FUSE_NO_OPEN_SUPPORT | FUSE_NO_OPENDIR_SUPPORT | FUSE_CACHE_SYMLINKS |
                  FUSE_ABORT_ERROR | FUSE_HAS_RESEND;
  if (policy.want_passthrough && in.minor >= fusek::kMinorPassthrough) want |= FUSE_PASSTHROUGH;
  if (policy.want_uring && in.minor >= fusek::kMinorIoUring) want |= FUSE_OVER_IO_URING;
  uint64_t granted = want & offered;
  d.info.kernel_flags = offered;
  d.info.granted_flags = granted;
  d.info.max_readahead = in.max_readahead;
  d.info.passthrough = (granted & FUSE_PASSTHROUGH) != 0;
  d.info.transport = (granted & FUSE_OVER_IO_URING) ? FuseTransport::kUring : FuseTransport::kDev;

  d.out.max_readahead = in.max_readahead;
  d.out.flags = fusek::Low32(granted);
  d.out.flags2 = fusek::High32(granted);
  d.out.max_background = policy.max_background;
  d.out.congestion_threshold = static_cast<uint16_t>(policy.max_background * 3 / 4);
  d.out.max_write = policy.max_write;
  d.out.time_gran = 1;
  d.out.max_pages = (granted & FUSE_MAX_PAGES) ? policy.max_pages : 0;
  d.out.max_stack_depth = d.info.passthrough ? 1 : 0;
  d.info.max_pages = (granted & FUSE_MAX_PAGES) ? policy.max_pages : 32;
  // Minors before 23 expect the 24-byte reply; every kernel Granary targets is newer.
  d.out_size = in.minor < 23 ? 24 : sizeof(fusek::InitOut);
  return d;
}

FuseDispatcher::FuseDispatcher(FuseFilesystem* fs, const FuseOptions& options, uint32_t uid,
                               uint32_t gid)
    : fs_(fs), options_(options), uid_(uid), gid_(gid) {
  if (options_.read_waiters > 0) {
    waiters_ =
        std::make_unique<ElasticPool>(static_cast<size_t>(options_.read_waiters), "granary-fwait");
  }
}

FuseDispatcher::~FuseDispatcher() {
  CancelWaits();
  CloseAllBacking();
  if (journal_fd_ >= 0) ::close(journal_fd_);
}

void FuseDispatcher::SetDirPrefetch(std::function<void(std::string)> list) {
  list_dir_ = std::move(list);
  // The root (never looked up, never forgotten): parent 0, name "".
  Shard& s = ShardOf(kRootIno);
  MutexLock lock(s.mu);
  s.nodes[kRootIno].dir = std::make_unique<DirInfo>();
}

void FuseDispatcher::NoteDir(uint64_t ino, uint64_t parent, std::string_view name) {
  if (!list_dir_ || ino == kRootIno) return;
  Shard& s = ShardOf(ino);
  MutexLock lock(s.mu);
  std::unique_ptr<DirInfo>& dir = s.nodes[ino].dir;
  if (!dir) dir = std::make_unique<DirInfo>();
  DirInfo& d = *dir;
  if (d.parent != parent || d.name != name) {
    d.parent = parent;
    d.name = std::string(name);
  }
}

void FuseDispatcher::NoteFileLookup(uint64_t parent) {
  if (!list_dir_) return;
  {
    Shard& s = ShardOf(parent);
    MutexLock lock(s.mu);
    auto it = s.nodes.find(parent);
    if (it == s.nodes.end() || !it->second.dir || it->second.dir->listed) return;
    DirInfo& d = *it->second.dir;
    if (++d.file_lookups < kDirPrefetchAfterLookups) return;
    d.listed = true;
  }
  std::optional<std::string> path = DirPath(parent);
  if (path) list_dir_(std::move(*path));
}

std::optional<std::string> FuseDispatcher::DirPath(uint64_t ino) {
  std::vector<std::string> names;
  for (int depth = 0; ino != kRootIno; ++depth) {
    if (depth > 4096) return std::nullopt;  // a cycle would be a bug; never loop
    Shard& s = ShardOf(ino);
    MutexLock lock(s.mu);
    auto it = s.nodes.find(ino);
    if (it == s.nodes.end() || !it->second.dir) return std::nullopt;
    names.push_back(it->second.dir->name);
    ino = it->second.dir->parent;
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += *it;
  }
  return path;
}

void FuseDispatcher::EnablePassthrough(int dev_fd) { passthrough_dev_fd_ = dev_fd; }

void FuseDispatcher::FillAttr(const NodeAttr& a, struct fuse_attr* out) const {
  std::memset(out, 0, sizeof(*out));
  out->ino = a.ino;
  out->size = a.size;
  out->blocks = (a.size + 511) / 512;
  uint64_t sec = a.mtime_ns >= 0 ? static_cast<uint64_t>(a.mtime_ns / 1000000000) : 0;
  uint32_t nsec = a.mtime_ns >= 0 ? static_cast<uint32_t>(a.mtime_ns % 1000000000) : 0;
  out->atime = out->mtime = out->ctime = sec;
  out->atimensec = out->mtimensec = out->ctimensec = nsec;
  if (options_.writable) {
    out->mode = a.is_dir ? (S_IFDIR | 0755) : (S_IFREG | 0644);
  } else {
    out->mode = a.is_dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
  }
  out->nlink = a.nlink;
  out->uid = uid_;
  out->gid = gid_;
  out->blksize = kBlockSize;
}

void FuseDispatcher::FillEntry(const NodeAttr& a, struct fuse_entry_out* out) const {
  std::memset(out, 0, sizeof(*out));
  out->nodeid = a.ino;
  out->entry_valid = static_cast<uint64_t>(options_.entry_timeout.count());
  out->attr_valid = static_cast<uint64_t>(options_.attr_timeout.count());
  FillAttr(a, &out->attr);
}

HandlerReply FuseDispatcher::Handle(const struct fuse_in_header& h, std::span<const char> body,
                                    std::span<char> out, int reply_fd,
                                    const std::shared_ptr<DeferredReplySink>& sink, uint64_t tag) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (h.unique & FUSE_UNIQUE_RESEND) requests_resent_.fetch_add(1, std::memory_order_relaxed);
  by_opcode_[std::min<uint32_t>(h.opcode, 63)].fetch_add(1, std::memory_order_relaxed);
  HandlerReply r;
  switch (h.opcode) {
    case FUSE_LOOKUP: r = DoLookup(h, body, out); break;
    case FUSE_FORGET: {
      const auto* in = Arg<fuse_forget_in>(body);
      if (in != nullptr) DoForget(h.nodeid, in->nlookup);
      return NoReply();
    }
    case FUSE_BATCH_FORGET: {
      const auto* in = Arg<fuse_batch_forget_in>(body);
      if (in == nullptr) return NoReply();
      size_t room = (body.size() - sizeof(*in)) / sizeof(fuse_forget_one);
      const auto* items = reinterpret_cast<const fuse_forget_one*>(body.data() + sizeof(*in));
      for (size_t i = 0; i < std::min<size_t>(in->count, room); ++i) {
        DoForget(items[i].nodeid, items[i].nlookup);
      }
      return NoReply();
    }
    case FUSE_INTERRUPT: DoInterrupt(body); return NoReply();
    case FUSE_GETATTR: r = DoGetAttr(h, out); break;
    case FUSE_OPEN: r = DoOpen(h, body, out); break;
    case FUSE_READ: r = DoRead(h, body, out, reply_fd, sink, tag); break;
    case FUSE_RELEASE: r = DoRelease(h, body); break;
    // No-opendir: the kernel then caches listings (FOPEN_CACHE_DIR | KEEP_CACHE).
    case FUSE_OPENDIR: r = Error(ENOSYS); break;
    case FUSE_RELEASEDIR: r = Ok(0); break;
    case FUSE_READDIR: r = DoReadDir(h, body, out, /*plus=*/false); break;
    case FUSE_READDIRPLUS: r = DoReadDir(h, body, out, /*plus=*/true); break;
    case FUSE_STATFS: r = DoStatFs(out); break;
    case FUSE_ACCESS: {
      const auto* in = Arg<fuse_access_in>(body);
      r = (in != nullptr && (in->mask & W_OK) && !options_.writable) ? Error(EROFS) : Ok(0);
      break;
    }
    // ENOSYS once: the kernel stops sending FLUSH on every close(2) (no-open
    // files cannot carry FOPEN_NOFLUSH; opened ones do).
    case FUSE_FLUSH: r = options_.writable ? DoWriteOp(h, body, out) : Error(ENOSYS); break;
    case FUSE_FSYNC: r = options_.writable ? DoWriteOp(h, body, out) : Error(ENOSYS); break;
    case FUSE_GETXATTR: r = Error(ENODATA); break;
    case FUSE_LISTXATTR: r = DoListXattr(body, out); break;
    case FUSE_DESTROY: r = Ok(0); break;
    case FUSE_READLINK: r = Error(EINVAL); break;  // there are no symlinks
    default:
      if (IsWriteOpcode(h.opcode)) {
        r = options_.writable ? DoWriteOp(h, body, out) : Error(EROFS);
      } else {
        r = Error(ENOSYS);
      }
      break;
  }
  if (r.error != 0) errors_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

HandlerReply FuseDispatcher::DoLookup(const struct fuse_in_header& h, std::span<const char> body,
                                      std::span<char> out) {
  std::string_view name = NameArg(body);
  if (name.empty() || name.size() > 255) return Error(name.empty() ? EINVAL : ENAMETOOLONG);
  Result<NodeAttr> attr = fs_->Lookup(h.nodeid, name);
  if (!attr.ok()) {
    if (attr.status().code() == Code::kNotFound) {
      // A negative entry the kernel may cache for entry_timeout (nodeid 0).
      auto* e = reinterpret_cast<fuse_entry_out*>(out.data());
      std::memset(e, 0, sizeof(*e));
      e->entry_valid = static_cast<uint64_t>(options_.entry_timeout.count());
      return Ok(sizeof(*e));
    }
    return Error(FuseErrno(attr.status()));
  }
  AddLookup(attr->ino);
  if (attr->is_dir) {
    NoteDir(attr->ino, h.nodeid, name);
  } else {
    NoteFileLookup(h.nodeid);
  }
  FillEntry(*attr, reinterpret_cast<fuse_entry_out*>(out.data()));
  return Ok(sizeof(fuse_entry_out));
}

HandlerReply FuseDispatcher::DoGetAttr(const struct fuse_in_header& h, std::span<char> out) {
  Result<NodeAttr> attr = fs_->GetAttr(h.nodeid);
  if (!attr.ok()) return Error(FuseErrno(attr.status()));
  auto* a = reinterpret_cast<fuse_attr_out*>(out.data());
  std::memset(a, 0, sizeof(*a));
  a->attr_valid = static_cast<uint64_t>(options_.attr_timeout.count());
  FillAttr(*attr, &a->attr);
  return Ok(sizeof(*a));
}

HandlerReply FuseDispatcher::DoOpen(const struct fuse_in_header& h, std::span<const char> body,
                                    std::span<char> out) {
  const auto* in = Arg<fuse_open_in>(body);
  if (in == nullptr) return Error(EINVAL);
  if ((in->flags & O_ACCMODE) != O_RDONLY || (in->flags & O_TRUNC)) {
    return options_.writable ? DoOpenForWrite(h, *in, out) : Error(EROFS);
  }
  // No-open: the kernel stops sending OPEN/RELEASE and keeps the page cache.
  // Not on a writable mount: without OPEN replies (FOPEN_NOFLUSH for
  // read-only opens) every close(2) would send a FLUSH, and a reader's close
  // could not be told from a writer's.
  if (options_.read_mode == FuseReadMode::kCached && !options_.writable) return Error(ENOSYS);
  Result<OpenResult> opened = fs_->Open(h.nodeid, static_cast<int>(in->flags));
  if (!opened.ok()) return Error(FuseErrno(opened.status()));
  auto* o = reinterpret_cast<fusek::OpenOut*>(out.data());
  std::memset(o, 0, sizeof(*o));
  int32_t backing = AttachOpen(h.nodeid, passthrough() ? opened->backing_path : std::string());
  // FLUSH would only cost a round trip per close(2): the mount is read-only.
  o->open_flags = FOPEN_NOFLUSH;
  if (backing > 0) {
    o->fh = opened->fh | kPassthroughFh;
    o->open_flags |= FOPEN_PASSTHROUGH;
    o->backing_id = backing;
    passthrough_opens_.fetch_add(1, std::memory_order_relaxed);
  } else {
    o->fh = opened->fh & ~kPassthroughFh;
    if (opened->keep_cache) o->open_flags |= FOPEN_KEEP_CACHE;
    userspace_opens_.fetch_add(1, std::memory_order_relaxed);
    // A successor must not answer a passthrough open while this one is open.
    if (passthrough())
      JournalBacking("u " + std::to_string(h.nodeid) + " " +
                     std::to_string(h.unique & ~FUSE_UNIQUE_RESEND) + "\n");
  }
  return Ok(sizeof(*o));
}

HandlerReply FuseDispatcher::DoRead(const struct fuse_in_header& h, std::span<const char> body,
                                    std::span<char> out, int reply_fd,
                                    const std::shared_ptr<DeferredReplySink>& sink, uint64_t tag) {
  const auto* in = Arg<fuse_read_in>(body);
  if (in == nullptr) return Error(EINVAL);
  const size_t want = std::min<size_t>(in->size, out.size());
  const uint64_t fh = in->fh & ~kPassthroughFh;
  const uint64_t offset = in->offset;
  std::optional<Result<size_t>> local = fs_->TryRead(h.nodeid, fh, offset, out.first(want));
  if (local) {
    if (!local->ok()) return Error(FuseErrno(local->status()));
    userspace_reads_.fetch_add(1, std::memory_order_relaxed);
    userspace_read_bytes_.fetch_add(**local, std::memory_order_relaxed);
    return Ok(**local);
  }
  // The read must wait (for the origin): on a read waiter when one is free,
  // so this thread goes back to serving lookups and cached files.
  std::shared_ptr<CancelToken> token = AddWaiting(h.unique);
  if ((reply_fd >= 0 || sink) && waiters_) {
    const uint64_t unique = h.unique;
    const uint64_t nodeid = h.nodeid;
    {
      MutexLock lock(waiting_mu_);
      ++deferred_outstanding_;
    }
    const bool taken =
        waiters_->TrySubmit([this, token, reply_fd, sink, tag, unique, nodeid, fh, offset, want] {
          struct Answered {
            FuseDispatcher* d;
            ~Answered() {
              MutexLock lock(d->waiting_mu_);
              --d->deferred_outstanding_;
              d->answered_cv_.NotifyAll();
            }
          } answered{this};
          std::unique_ptr<char[]> buf(new char[want]);
          HandlerReply r =
              ServeWaitingRead(nodeid, fh, offset, std::span<char>(buf.get(), want), *token);
          RemoveWaiting(unique);
          if (r.error != 0) errors_.fetch_add(1, std::memory_order_relaxed);
          if (sink) {
            sink->Send(tag, unique, r.error,
                       std::span<const char>(buf.get(), r.error == 0 ? r.size : 0));
            return;
          }
          fuse_out_header oh{};
          oh.unique = unique;
          oh.error = -r.error;
          const size_t body_size = r.error == 0 ? r.size : 0;
          oh.len = static_cast<uint32_t>(sizeof(oh) + body_size);
          iovec iov[2] = {{&oh, sizeof(oh)}, {buf.get(), body_size}};
          if (::writev(reply_fd, iov, body_size > 0 ? 2 : 1) < 0) {
            const int err = errno;
            // ENOENT: the kernel dropped the interrupted request; ENODEV: unmounted.
            if (err != ENOENT && err != ENODEV && err != ENOTCONN && err != EBADF) {
              GLOG_WARN("fuse: deferred READ reply failed: {}", strerror(err));
            }
          }
        });
    if (!taken) {
      MutexLock lock(waiting_mu_);
      --deferred_outstanding_;
      answered_cv_.NotifyAll();
    }
    if (taken) {
      reads_deferred_.fetch_add(1, std::memory_order_relaxed);
      HandlerReply r = NoReply();
      r.deferred = true;
      return r;
    }
  }
  reads_waited_inline_.fetch_add(1, std::memory_order_relaxed);
  HandlerReply r = ServeWaitingRead(h.nodeid, fh, offset, out.first(want), *token);
  RemoveWaiting(h.unique);
  return r;
}

HandlerReply FuseDispatcher::ServeWaitingRead(uint64_t nodeid, uint64_t fh, uint64_t offset,
                                              std::span<char> out, CancelToken& cancel) {
  Result<size_t> n = fs_->ReadCancellable(nodeid, fh, offset, out, cancel);
  if (!n.ok()) return Error(FuseErrno(n.status()));
  userspace_reads_.fetch_add(1, std::memory_order_relaxed);
  userspace_read_bytes_.fetch_add(*n, std::memory_order_relaxed);
  return Ok(*n);
}

std::shared_ptr<CancelToken> FuseDispatcher::AddWaiting(uint64_t unique) {
  auto token = std::make_shared<CancelToken>();
  bool cancel = false;
  {
    MutexLock lock(waiting_mu_);
    waiting_[unique] = token;
    cancel = stopping_ || early_interrupts_.erase(unique) > 0;
  }
  if (cancel) token->Cancel();
  return token;
}

void FuseDispatcher::RemoveWaiting(uint64_t unique) {
  MutexLock lock(waiting_mu_);
  waiting_.erase(unique);
}

void FuseDispatcher::DoInterrupt(std::span<const char> body) {
  const auto* in = Arg<fuse_interrupt_in>(body);
  if (in == nullptr) return;
  interrupts_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<CancelToken> token;
  {
    MutexLock lock(waiting_mu_);
    auto it = waiting_.find(in->unique);
    if (it != waiting_.end()) {
      token = it->second;
    } else if (early_interrupts_.insert(in->unique).second) {
      // The request may still be on its way (or was served without waiting):
      // remember a bounded number of these.
      early_order_.push_back(in->unique);
      while (early_order_.size() > kEarlyInterrupts) {
        early_interrupts_.erase(early_order_.front());
        early_order_.pop_front();
      }
    }
  }
  if (token) {
    interrupted_reads_.fetch_add(1, std::memory_order_relaxed);
    token->Cancel();
  }
}

bool FuseDispatcher::WaitReadsAnswered(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(waiting_mu_);
  return answered_cv_.WaitUntil(
      lock, deadline, [this]() REQUIRES(waiting_mu_) { return deferred_outstanding_ == 0; });
}

void FuseDispatcher::CancelWaits() {
  std::vector<std::shared_ptr<CancelToken>> all;
  {
    MutexLock lock(waiting_mu_);
    stopping_ = true;
    for (auto& [unique, token] : waiting_) all.push_back(token);
  }
  for (auto& token : all) token->Cancel();
  if (waiters_) waiters_->Stop();
}

HandlerReply FuseDispatcher::DoRelease(const struct fuse_in_header& h, std::span<const char> body) {
  const auto* in = Arg<fuse_release_in>(body);
  if (in == nullptr) return Ok(0);
  bool was_passthrough = (in->fh & kPassthroughFh) != 0;
  int32_t to_close = 0;
  {
    Shard& s = ShardOf(h.nodeid);
    MutexLock lock(s.mu);
    auto it = s.nodes.find(h.nodeid);
    if (it != s.nodes.end()) {
      Node& n = it->second;
      if (was_passthrough && n.passthrough_opens > 0) --n.passthrough_opens;
      if (!was_passthrough && n.userspace_opens > 0) --n.userspace_opens;
      if (n.drop_pending && n.passthrough_opens == 0) {
        to_close = n.backing_id;
        n.backing_id = 0;
        n.backing_path.clear();
        n.drop_pending = false;
      }
    }
  }
  if (to_close > 0) CloseBacking(to_close);
  if (!was_passthrough && passthrough() && (in->flags & O_ACCMODE) == O_RDONLY) {
    JournalBacking("c " + std::to_string(h.nodeid) + " " +
                   std::to_string(h.unique & ~FUSE_UNIQUE_RESEND) + "\n");
  }
  fs_->Release(h.nodeid, in->fh & ~kPassthroughFh);
  return Ok(0);
}

HandlerReply FuseDispatcher::DoReadDir(const struct fuse_in_header& h, std::span<const char> body,
                                       std::span<char> out, bool plus) {
  const auto* in = Arg<fuse_read_in>(body);
  if (in == nullptr) return Error(EINVAL);
  size_t limit = std::min<size_t>(in->size, out.size());
  size_t used = 0;
  // Positions: 0 ".", 1 "..", 2 + i the filesystem's entry i; `off` = next position.
  auto put = [&](std::string_view name, const NodeAttr* attr, uint64_t ino, bool is_dir,
                 uint64_t next) {
    size_t head = plus ? offsetof(fuse_direntplus, dirent.name) : offsetof(fuse_dirent, name);
    size_t rec = FUSE_DIRENT_ALIGN(head + name.size());
    if (used + rec > limit) return false;
    char* p = out.data() + used;
    std::memset(p, 0, rec);
    fuse_dirent* d = reinterpret_cast<fuse_dirent*>(p);
    if (plus) {
      auto* dp = reinterpret_cast<fuse_direntplus*>(p);
      if (attr != nullptr) FillEntry(*attr, &dp->entry_out);
      d = &dp->dirent;
    }
    d->ino = ino;
    d->off = next;
    d->namelen = static_cast<uint32_t>(name.size());
    d->type = is_dir ? DT_DIR : DT_REG;
    std::memcpy(d->name, name.data(), name.size());
    used += rec;
    return true;
  };
  uint64_t pos = in->offset;
  if (pos == 0 && !put(".", nullptr, h.nodeid, true, 1)) return Ok(used);
  if (pos <= 1 && !put("..", nullptr, h.nodeid, true, 2)) return Ok(used);
  uint64_t next = std::max<uint64_t>(pos, 2);
  Status st = fs_->ReadDir(h.nodeid, next - 2, [&](const DirEntry& e) {
    if (!put(e.name, &e.attr, e.attr.ino, e.attr.is_dir, next + 1)) return false;
    if (plus) AddLookup(e.attr.ino);
    if (plus && e.attr.is_dir) NoteDir(e.attr.ino, h.nodeid, e.name);
    ++next;
    return true;
  });
  if (!st.ok() && used == 0) return Error(FuseErrno(st));
  return Ok(used);
}

HandlerReply FuseDispatcher::DoStatFs(std::span<char> out) {
  Result<StatFsResult> r = fs_->StatFs();
  if (!r.ok()) return Error(FuseErrno(r.status()));
  auto* s = reinterpret_cast<fuse_statfs_out*>(out.data());
  std::memset(s, 0, sizeof(*s));
  constexpr uint32_t kUnit = 4096;
  s->st.bsize = kUnit;
  s->st.frsize = kUnit;
  s->st.blocks = (r->total_bytes + kUnit - 1) / kUnit;
  s->st.bfree = r->free_bytes / kUnit;
  s->st.bavail = s->st.bfree;
  s->st.files = r->total_files;
  s->st.ffree = r->free_files;
  s->st.namelen = 255;
  return Ok(sizeof(*s));
}

HandlerReply FuseDispatcher::DoListXattr(std::span<const char> body, std::span<char> out) {
  const auto* in = Arg<fuse_getxattr_in>(body);
  if (in != nullptr && in->size == 0) {  // size probe: "no attributes"
    auto* o = reinterpret_cast<fuse_getxattr_out*>(out.data());
    std::memset(o, 0, sizeof(*o));
    return Ok(sizeof(*o));
  }
  return Ok(0);  // the empty list
}

void FuseDispatcher::AddLookup(uint64_t ino) {
  if (ino == kRootIno) return;
  Shard& s = ShardOf(ino);
  MutexLock lock(s.mu);
  ++s.nodes[ino].nlookup;
}

void FuseDispatcher::DoForget(uint64_t ino, uint64_t nlookup) {
  if (ino == kRootIno) return;
  int32_t to_close = 0;
  bool gone = false;
  {
    Shard& s = ShardOf(ino);
    MutexLock lock(s.mu);
    auto it = s.nodes.find(ino);
    if (it == s.nodes.end()) return;
    Node& n = it->second;
    n.nlookup = nlookup >= n.nlookup ? 0 : n.nlookup - nlookup;
    if (n.nlookup == 0) {
      // The kernel dropped the inode: no open of it can be outstanding.
      to_close = n.backing_id;
      s.nodes.erase(it);
      gone = true;
    }
  }
  if (to_close > 0) CloseBacking(to_close);
  if (gone) fs_->Forget(ino);
}

int32_t FuseDispatcher::AttachOpen(uint64_t ino, const std::string& backing_path) {
  Shard& s = ShardOf(ino);
  MutexLock lock(s.mu);
  Node& n = s.nodes[ino];
  int32_t id = 0;
  if (n.backing_id > 0 && n.passthrough_opens > 0) {
    // The kernel has this backing file attached to the inode and refuses any
    // other (EBUSY) or a userspace-read open (ETXTBSY) until those close; the
    // content is immutable, so keep serving through it.
    id = n.backing_id;
  } else if (!backing_path.empty() && n.userspace_opens == 0) {
    if (n.backing_id > 0 && n.backing_path == backing_path && !n.drop_pending) {
      id = n.backing_id;
    } else {
      if (n.backing_id > 0) CloseBacking(n.backing_id);
      n.backing_id = RegisterBacking(ino, backing_path);
      n.backing_path = n.backing_id > 0 ? backing_path : std::string();
      n.drop_pending = false;
      id = n.backing_id;
    }
  }
  if (id > 0) {
    ++n.passthrough_opens;
  } else {
    ++n.userspace_opens;
  }
  return id;
}

int32_t FuseDispatcher::RegisterBacking(uint64_t ino, const std::string& path) {
  Result<int> opened = fs_->OpenBackingFile(ino, path);
  if (!opened.ok()) {
    if (backing_open_failures_.fetch_add(1) == 0) {
      GLOG_WARN("fuse: cannot open backing file {}: {}", path, opened.status().ToString());
    }
    return 0;
  }
  int fd = *opened;
  fusek::BackingMap map{.fd = fd, .flags = 0, .padding = 0};
  int id = ::ioctl(passthrough_dev_fd_, fusek::kDevIocBackingOpen, &map);
  int err = errno;
  ::close(fd);  // the backing id holds its own reference to the file
  if (id <= 0) {
    if (backing_open_failures_.fetch_add(1) == 0) {
      GLOG_WARN("fuse: FUSE_DEV_IOC_BACKING_OPEN {} failed: {}; serving reads in userspace", path,
                strerror(err));
    }
    return 0;
  }
  backing_ids_open_.fetch_add(1, std::memory_order_relaxed);
  JournalBacking("+ " + std::to_string(ino) + " " + std::to_string(id) + " " + path + "\n");
  return id;
}

void FuseDispatcher::CloseBacking(int32_t id) {
  uint32_t arg = static_cast<uint32_t>(id);
  if (::ioctl(passthrough_dev_fd_, fusek::kDevIocBackingClose, &arg) != 0) {
    GLOG_DEBUG("fuse: FUSE_DEV_IOC_BACKING_CLOSE {} failed: {}", id, strerror(errno));
  }
  backing_ids_open_.fetch_sub(1, std::memory_order_relaxed);
  JournalBacking("- " + std::to_string(id) + "\n");
}

void FuseDispatcher::DropBacking(uint64_t ino) {
  int32_t to_close = 0;
  {
    Shard& s = ShardOf(ino);
    MutexLock lock(s.mu);
    auto it = s.nodes.find(ino);
    if (it == s.nodes.end() || it->second.backing_id <= 0) return;
    Node& n = it->second;
    if (n.passthrough_opens > 0) {
      n.drop_pending = true;
      return;
    }
    to_close = n.backing_id;
    n.backing_id = 0;
    n.backing_path.clear();
  }
  CloseBacking(to_close);
}

void FuseDispatcher::CloseAllBacking() {
  if (passthrough_dev_fd_ < 0 || leave_backing_.load()) return;
  for (Shard& s : shards_) {
    MutexLock lock(s.mu);
    for (auto& [ino, n] : s.nodes) {
      if (n.backing_id > 0) CloseBacking(n.backing_id);
      n.backing_id = 0;
    }
  }
}

void FuseDispatcher::FillStats(FuseStats* st) const {
  for (size_t i = 0; i < by_opcode_.size(); ++i) {
    st->requests_by_opcode[i] = by_opcode_[i].load(std::memory_order_relaxed);
  }
  st->requests = requests_.load(std::memory_order_relaxed);
  st->requests_resent = requests_resent_.load(std::memory_order_relaxed);
  st->errors = errors_.load(std::memory_order_relaxed);
  st->passthrough_opens = passthrough_opens_.load(std::memory_order_relaxed);
  st->userspace_opens = userspace_opens_.load(std::memory_order_relaxed);
  st->userspace_reads = userspace_reads_.load(std::memory_order_relaxed);
  st->userspace_read_bytes = userspace_read_bytes_.load(std::memory_order_relaxed);
  st->backing_ids_open = static_cast<uint64_t>(
      std::max<int64_t>(0, backing_ids_open_.load(std::memory_order_relaxed)));
  st->backing_open_failures = backing_open_failures_.load(std::memory_order_relaxed);
  st->uring_requests = uring_requests_.load(std::memory_order_relaxed);
  st->dirs_prefetched = dirs_prefetched_.load(std::memory_order_relaxed);
  st->reads_deferred = reads_deferred_.load(std::memory_order_relaxed);
  st->reads_waited_inline = reads_waited_inline_.load(std::memory_order_relaxed);
  st->interrupts = interrupts_.load(std::memory_order_relaxed);
  st->interrupted_reads = interrupted_reads_.load(std::memory_order_relaxed);
}

Result<int> FuseFilesystem::OpenBackingFile(uint64_t /*ino*/, const std::string& backing_path) {
  int fd = ::open(backing_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + backing_path, errno);
  return fd;
}

}  // namespace granary
