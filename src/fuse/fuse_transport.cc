// /dev/fuse and io_uring request loops. See fuse_transport.h.
#include "fuse/fuse_transport.h"

#include <liburing.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"

namespace granary {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

// Request and reply buffers, their pages faulted in now: the kernel copies a
// request into a buffer after taking it off its queue, and a copy that faults
// while the daemon is being killed (a pending SIGKILL fails the fault) fails
// that request with EIO instead of leaving it for the next daemon to resend.
AlignedBuffer Allocate(size_t size) {
  const size_t rounded = (size + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p != nullptr) std::memset(p, 0, rounded);
  return AlignedBuffer(static_cast<char*>(p));
}

int WakeSignal() { return SIGRTMIN + 7; }

void NoopHandler(int) {}

void InstallWakeHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = NoopHandler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: blocking reads return EINTR
    sigaction(WakeSignal(), &sa, nullptr);
  });
}

bool ConnectionGone(int err) {
  return err == ENODEV || err == ENOTCONN || err == ECONNABORTED || err == EBADF;
}

}  // namespace

void RunDevLoop(int fd, FuseDispatcher* dispatcher, const std::atomic<bool>* stop) {
  InstallWakeHandler();
  AlignedBuffer in = Allocate(kFuseRequestBuffer);
  AlignedBuffer out = Allocate(kFuseReplyBuffer);
  while (!stop->load(std::memory_order_relaxed)) {
    ssize_t n = ::read(fd, in.get(), kFuseRequestBuffer);
    if (n < 0) {
      int err = errno;
      if (err == EINTR || err == EAGAIN || err == ENOENT) continue;
      if (!ConnectionGone(err)) GLOG_ERROR("fuse: read /dev/fuse: {}", strerror(err));
      return;
    }
    if (static_cast<size_t>(n) < sizeof(fuse_in_header)) {
      GLOG_ERROR("fuse: short request ({} bytes) from /dev/fuse", n);
      continue;
    }
    const auto* h = reinterpret_cast<const fuse_in_header*>(in.get());
    std::span<const char> body(in.get() + sizeof(fuse_in_header),
                               static_cast<size_t>(n) - sizeof(fuse_in_header));
    HandlerReply r = dispatcher->Handle(*h, body, std::span<char>(out.get(), kFuseReplyBuffer), fd);
    if (!r.send) continue;
    fuse_out_header oh{};
    oh.unique = h->unique;
    oh.error = -r.error;
    size_t body_size = r.error == 0 ? r.size : 0;
    oh.len = static_cast<uint32_t>(sizeof(oh) + body_size);
    iovec iov[2] = {{&oh, sizeof(oh)}, {out.get(), body_size}};
    if (::writev(fd, iov, body_size > 0 ? 2 : 1) < 0) {
      int err = errno;
      // ENOENT: the request was interrupted meanwhile; the kernel dropped it.
      if (err != ENOENT && !ConnectionGone(err)) {
        GLOG_WARN("fuse: reply to {} failed: {}", fusek::OpcodeName(h->opcode), strerror(err));
      }
    }
  }
}

namespace {

// The user_data of the eventfd read that wakes a ring thread for deferred
// replies (entries use their index).
constexpr uint64_t kRepliesReady = ~uint64_t{0};

// Deferred READ replies of one ring (see DeferredReplySink): read waiters
// queue them and bump an eventfd the ring thread keeps a read posted on; the
// ring thread commits them. After Close() (the ring is gone) they are dropped:
// the kernel has failed those requests already.
class RingReplies final : public DeferredReplySink {
 public:
  struct Reply {
    uint64_t entry;  // ring entry index (the tag)
    uint64_t unique;
    int error;  // positive errno or 0
    std::string body;
  };

  RingReplies() : efd_(::eventfd(0, EFD_CLOEXEC)) {}
  ~RingReplies() override {
    if (efd_ >= 0) ::close(efd_);
  }
  RingReplies(const RingReplies&) = delete;
  RingReplies& operator=(const RingReplies&) = delete;

  int fd() const { return efd_; }

  void Send(uint64_t tag, uint64_t unique, int error, std::span<const char> body) override {
    {
      MutexLock lock(mu_);
      if (closed_) return;
      ready_.push_back(Reply{.entry = tag,
                             .unique = unique,
                             .error = error,
                             .body = std::string(body.data(), body.size())});
    }
    const uint64_t one = 1;
    if (::write(efd_, &one, sizeof one) < 0) {
      GLOG_WARN("fuse: waking the io_uring thread for a deferred reply: {}", strerror(errno));
    }
  }

  // The replies queued so far (the ring thread's).
  std::vector<Reply> Take() {
    MutexLock lock(mu_);
    std::vector<Reply> out;
    out.swap(ready_);
    return out;
  }

  void Close() {
    MutexLock lock(mu_);
    closed_ = true;
    ready_.clear();
  }

 private:
  const int efd_;
  Mutex mu_;  // guards ready_ and closed_; a leaf lock
  std::vector<Reply> ready_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

struct RingEntry {
  AlignedBuffer header;  // fusek::UringReqHeader
  AlignedBuffer payload;
  iovec iov[2];
  bool live = true;
  uint64_t commit_id = 0;  // of the request a read waiter is serving (deferred)
};

void PrepCommand(io_uring* ring, int dev_fd, uint32_t cmd, RingEntry& e, uint64_t index, int qid,
                 uint64_t commit_id) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) {  // cannot happen: the ring has 2 SQEs per entry; flush and retry
    io_uring_submit(ring);
    sqe = io_uring_get_sqe(ring);
  }
  // SQE128 ring: the 80-byte command area extends past struct io_uring_sqe
  // (the compiler cannot know; hide the pointer's provenance from it).
  char* raw = reinterpret_cast<char*>(sqe);
  asm volatile("" : "+r"(raw));
  std::memset(raw, 0, 128);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = dev_fd;
  sqe->cmd_op = cmd;
  sqe->addr = reinterpret_cast<uint64_t>(e.iov);
  sqe->len = 2;
  sqe->user_data = index;
  auto* req = reinterpret_cast<fusek::UringCmdReq*>(raw + offsetof(io_uring_sqe, cmd));
  req->qid = static_cast<uint16_t>(qid);
  req->commit_id = commit_id;
}

Status InitRing(io_uring* ring, unsigned entries) {
  const unsigned kFlagSets[] = {
      IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_SQE128,
  };
  int rc = -EINVAL;
  for (unsigned flags : kFlagSets) {
    io_uring_params p{};
    p.flags = flags;
    rc = io_uring_queue_init_params(entries, ring, &p);
    if (rc == 0) return Status::Ok();
  }
  return ErrnoStatus("io_uring_queue_init (128-byte SQEs)", -rc);
}

// Writes the reply header (and `body_size` bytes already in the payload
// buffer) into entry `e` and queues its COMMIT_AND_FETCH.
void CommitEntry(io_uring* ring, const UringQueueConfig& c, RingEntry& e, uint64_t index,
                 uint64_t unique, int error, size_t body_size, uint64_t commit_id) {
  auto* hdr = reinterpret_cast<fusek::UringReqHeader*>(e.header.get());
  fuse_out_header oh{};
  oh.unique = unique;
  oh.error = -error;
  oh.len = static_cast<uint32_t>(sizeof(oh) + body_size);
  std::memcpy(hdr->in_out, &oh, sizeof(oh));
  hdr->ring_ent_in_out.payload_sz = static_cast<uint32_t>(body_size);
  PrepCommand(ring, c.dev_fd, fusek::kUringCmdCommitAndFetch, e, index, c.qid, commit_id);
}

// Posts the read of `replies`' eventfd that wakes this ring's thread.
void ArmRepliesRead(io_uring* ring, RingReplies& replies, uint64_t* counter) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) {
    io_uring_submit(ring);
    sqe = io_uring_get_sqe(ring);
  }
  io_uring_prep_read(sqe, replies.fd(), counter, sizeof(*counter), 0);
  io_uring_sqe_set_data64(sqe, kRepliesReady);
}

// Commits the deferred replies read waiters have finished.
void CommitDeferred(io_uring* ring, const UringQueueConfig& c, std::vector<RingEntry>& entries,
                    RingReplies& replies) {
  for (RingReplies::Reply& r : replies.Take()) {
    if (r.entry >= entries.size() || !entries[r.entry].live) continue;
    RingEntry& e = entries[r.entry];
    const size_t body_size = std::min(r.body.size(), e.iov[1].iov_len);
    if (r.error == 0 && body_size > 0) std::memcpy(e.payload.get(), r.body.data(), body_size);
    CommitEntry(ring, c, e, r.entry, r.unique, r.error, r.error == 0 ? body_size : 0, e.commit_id);
  }
}

// Serves the request in entry `e`, writes the reply into it and queues the
// COMMIT_AND_FETCH for it; a READ a read waiter took is committed later
// (CommitDeferred).
void ServeEntry(io_uring* ring, const UringQueueConfig& c, FuseDispatcher* d, RingEntry& e,
                uint64_t index, std::vector<char>& scratch,
                const std::shared_ptr<DeferredReplySink>& replies) {
  auto* hdr = reinterpret_cast<fusek::UringReqHeader*>(e.header.get());
  fuse_in_header ih;
  std::memcpy(&ih, hdr->in_out, sizeof(ih));
  size_t opsz = std::min(fusek::OpHeaderSize(ih.opcode), fusek::kUringOpInOutSize);
  uint32_t psz = hdr->ring_ent_in_out.payload_sz;
  uint64_t commit_id = hdr->ring_ent_in_out.commit_id;
  std::span<const char> body(hdr->op_in, opsz);
  if (psz > 0 && opsz + psz <= scratch.size()) {
    // The reply is written into the payload buffer: parse from a copy.
    std::memcpy(scratch.data(), hdr->op_in, opsz);
    std::memcpy(scratch.data() + opsz, e.payload.get(), psz);
    body = std::span<const char>(scratch.data(), opsz + psz);
  }
  d->CountUringRequest();
  HandlerReply r = d->Handle(ih, body, std::span<char>(e.payload.get(), e.iov[1].iov_len),
                             /*reply_fd=*/-1, replies, index);
  if (r.deferred) {
    e.commit_id = commit_id;
    return;
  }
  const size_t body_size = (r.send && r.error == 0) ? r.size : 0;
  CommitEntry(ring, c, e, index, ih.unique, r.send ? r.error : 0, body_size, commit_id);
}

// The first CQE error among completions posted so far (0 if none), without consuming them.
int FirstImmediateError(io_uring* ring) {
  unsigned head;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(ring, head, cqe) {
    if (cqe->res < 0) return cqe->res;
  }
  return 0;
}

}  // namespace

void RunUringQueue(const UringQueueConfig& c, FuseDispatcher* d, const std::atomic<bool>* stop,
                   const std::function<void(Status)>& registered) {
  InstallWakeHandler();
  if (c.pin_cpu && c.qid < CPU_SETSIZE) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(c.qid, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort (CPU may be offline)
  }
  io_uring ring;
  Status st = InitRing(&ring, static_cast<unsigned>(c.depth) * 2);
  if (!st.ok()) {
    registered(st);
    return;
  }
  std::vector<RingEntry> entries(static_cast<size_t>(c.depth));
  for (size_t i = 0; i < entries.size(); ++i) {
    RingEntry& e = entries[i];
    e.header = Allocate(sizeof(fusek::UringReqHeader));
    e.payload = Allocate(kFuseReplyBuffer);
    std::memset(e.header.get(), 0, sizeof(fusek::UringReqHeader));
    e.iov[0] = {e.header.get(), sizeof(fusek::UringReqHeader)};
    e.iov[1] = {e.payload.get(), kFuseReplyBuffer};
    PrepCommand(&ring, c.dev_fd, fusek::kUringCmdRegister, e, i, c.qid, 0);
  }
  int rc = io_uring_submit(&ring);
  int err = rc < 0 ? rc : FirstImmediateError(&ring);
  if (err < 0) {
    registered(ErrnoStatus("FUSE_IO_URING_CMD_REGISTER on queue " + std::to_string(c.qid), -err));
    io_uring_queue_exit(&ring);
    return;
  }
  registered(Status::Ok());
  // READs that must wait go to read waiters; their replies come back here.
  auto replies = std::make_shared<RingReplies>();
  uint64_t replies_counter = 0;
  std::shared_ptr<DeferredReplySink> sink;
  if (replies->fd() >= 0) {
    sink = replies;
    ArmRepliesRead(&ring, *replies, &replies_counter);
  } else {
    GLOG_WARN("fuse: eventfd for io_uring queue {}: {}; reads that wait hold the queue's thread",
              c.qid, strerror(errno));
  }
  std::vector<char> scratch(8192);
  size_t live = entries.size();
  while (live > 0 && !stop->load(std::memory_order_relaxed)) {
    rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      GLOG_ERROR("fuse: io_uring wait on queue {}: {}", c.qid, strerror(-rc));
      break;
    }
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      uint64_t index = cqe->user_data;
      if (index == kRepliesReady) {
        CommitDeferred(&ring, c, entries, *replies);
        if (cqe->res >= 0 || cqe->res == -EINTR || cqe->res == -EAGAIN) {
          ArmRepliesRead(&ring, *replies, &replies_counter);
        } else if (cqe->res != -ECANCELED) {
          GLOG_WARN("fuse: io_uring queue {}: reading the deferred-reply eventfd: {}", c.qid,
                    strerror(-cqe->res));
        }
        continue;
      }
      if (index >= entries.size()) continue;
      RingEntry& e = entries[index];
      if (cqe->res < 0) {
        if (e.live) --live;
        e.live = false;
        if (!ConnectionGone(-cqe->res) && cqe->res != -ECANCELED) {
          GLOG_WARN("fuse: io_uring entry {} on queue {} failed: {}", index, c.qid,
                    strerror(-cqe->res));
        }
        continue;
      }
      ServeEntry(&ring, c, d, e, index, scratch, sink);
    }
    io_uring_cq_advance(&ring, seen);
  }
  replies->Close();            // read waiters finishing later drop their replies
  io_uring_queue_exit(&ring);  // cancels entries still registered
}

int FuseUringQueueCount() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  in >> text;  // "0-1" or "0-3,6-7"
  int max_cpu = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    std::string part = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    size_t dash = part.find('-');
    int last = std::atoi((dash == std::string::npos ? part : part.substr(dash + 1)).c_str());
    max_cpu = std::max(max_cpu, last);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return max_cpu >= 0 ? max_cpu + 1 : static_cast<int>(sysconf(_SC_NPROCESSORS_CONF));
}

bool FuseUringEnabled() {
  std::ifstream in("/sys/module/fuse/parameters/enable_uring");
  std::string v;
  in >> v;
  return v == "Y" || v == "1";
}

void WakeTransportThread(pthread_t thread) {
  InstallWakeHandler();
  pthread_kill(thread, WakeSignal());
}

}  // namespace granary
