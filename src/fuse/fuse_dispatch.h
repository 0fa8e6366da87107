// FuseDispatcher: turns one FUSE request into calls on a FuseFilesystem and
// one reply body; transport-independent (the /dev/fuse and io_uring loops in
// fuse_transport.cc hand it requests and write its replies). Also holds:
//   - INIT negotiation (NegotiateInit, a pure function),
//   - the node table: the kernel's lookup count per node, and per node at
//     most ONE passthrough backing id, kept until the count drops to zero
//     (FORGET) or DropBacking(); never an fd per node,
//   - the counters behind FuseStats,
//   - the one Status -> errno map (FuseErrno).
//
// Invariants: a backing id is closed only when no passthrough open of its
// node is outstanding (the kernel attaches one backing file per inode and
// refuses a second one, or a userspace-read open, while it is in use).
//
// Waiting vs serving: a READ that FuseFilesystem::TryRead() cannot serve
// without waiting goes to a read waiter (an ElasticPool of
// FuseOptions::read_waiters threads) that calls ReadCancellable() and writes
// the reply to the request's fd itself (over io_uring: hands it to the ring's
// DeferredReplySink); Handle() returns at once (send = false, deferred). Such a READ is kept by its
// `unique` until answered: a FUSE_INTERRUPT naming it cancels its CancelToken (the reader gets
// EINTR). An INTERRUPT may arrive before the request it names: unmatched ones are remembered (the
// last kEarlyInterrupts) and cancel that request on arrival. CancelWaits() (unmount) cancels every
// waiting READ.
//
// Thread safety: Handle() is called from many transport threads at once.
// The node table is sharded; each shard's mutex guards its map only, and no
// other lock is taken while holding one (FuseFilesystem calls happen outside).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/cancel.h"
#include "common/elastic_pool.h"
#include "common/mutex.h"
#include "fuse/fuse_filesystem.h"
#include "fuse/fuse_kernel.h"
#include "fuse/fuse_server.h"
#include "granary/status.h"

namespace granary {

// The errno a FUSE reply carries for `status` (positive; 0 for OK):
// NotFound ENOENT, InvalidArgument EINVAL, PermissionDenied EACCES,
// Unavailable EIO (a blocking read(2) must not see EAGAIN), IoError EIO,
// Corruption EIO, NoSpace ENOSPC, Unimplemented ENOSYS, Cancelled EINTR,
// Internal EIO.
int FuseErrno(const Status& status);

// What Granary asks for at INIT, before intersecting with the kernel's offer.
struct InitPolicy {
  bool want_passthrough = false;  // ask for FUSE_PASSTHROUGH (caller checked CAP_SYS_ADMIN)
  bool want_uring = false;        // ask for FUSE_OVER_IO_URING
  uint16_t max_background = 128;
  uint32_t max_write = 128 * 1024;
  uint16_t max_pages = 256;  // 1 MiB requests
};

struct InitDecision {
  fusek::InitOut out{};  // the reply body
  size_t out_size = 0;   // bytes of `out` to send (shorter for old minors)
  FuseSessionInfo info;  // what was offered and granted
  Status status;         // not OK: unsupported major; reply with an error
};

// Decides the INIT reply for the kernel's `in`. Pure.
InitDecision NegotiateInit(const struct fuse_init_in& in, const InitPolicy& policy);

// One reply as a handler produced it; the body sits in the caller's buffer.
struct HandlerReply {
  int error = 0;          // positive errno; 0 = success
  size_t size = 0;        // body bytes (0 on error)
  bool send = true;       // false for FORGET, BATCH_FORGET, INTERRUPT, and a deferred READ
  bool deferred = false;  // a read waiter took the request and sends its reply later
};

// Where a read waiter sends the reply of a READ it took (a deferred reply)
// when the request came over io_uring: the ring's thread must commit it (the
// ring has one issuer), so the transport queues it and wakes that thread.
// Send() is called from read waiter threads; the sink outlives every waiter
// that holds it (shared ownership), also after its ring is gone.
class DeferredReplySink {
 public:
  virtual ~DeferredReplySink() = default;
  // Sends the reply to request `unique`; `tag` is what the transport passed
  // to Handle() with it. `error`: positive errno or 0; `body` when 0.
  virtual void Send(uint64_t tag, uint64_t unique, int error, std::span<const char> body) = 0;
};

class FuseDispatcher {
 public:
  FuseDispatcher(FuseFilesystem* fs, const FuseOptions& options, uint32_t uid, uint32_t gid);
  ~FuseDispatcher();

  // Enables passthrough: backing ids are registered on `dev_fd` (the
  // original /dev/fuse fd; it must stay open while the dispatcher lives).
  void EnablePassthrough(int dev_fd);
  bool passthrough() const { return passthrough_dev_fd_ >= 0; }

  // Handles one request. `body` is the request after fuse_in_header (the
  // per-opcode argument, then names); `out` receives the reply body and must
  // hold at least max_pages * 4 KiB (+ 4 KiB). `reply_fd`: the /dev/fuse fd
  // the request came from, where a read waiter writes a deferred reply; -1
  // and no `sink` serves every request on the calling thread. Over io_uring,
  // `sink` takes deferred replies instead, with `tag` (the ring entry).
  HandlerReply Handle(const struct fuse_in_header& header, std::span<const char> body,
                      std::span<char> out, int reply_fd = -1,
                      const std::shared_ptr<DeferredReplySink>& sink = nullptr, uint64_t tag = 0);

  // Cancels every READ waiting now and every later one (unmount), then
  // waits until the read waiters have written their replies and left.
  void CancelWaits();

  // See FuseServer::DropBacking.
  void DropBacking(uint64_t ino);

  // Closes every backing id (at shutdown, before the fd closes), unless
  // LeaveBackingRegistered() was called.
  void CloseAllBacking();

  // Records backing ids in the file `path` (FuseOptions::backing_journal):
  // "+ <ino> <id> <path>" when one is registered, "- <id>" when closed,
  // written before the OPEN reply that uses the id; with passthrough on, also
  // userspace-read opens: "u <ino> <unique>" before the OPEN reply, "c <ino>
  // <unique>" at their RELEASE ("U <ino> <count>" when compacted). restore =
  // false empties it; true first reads it (after a crash or a handover):
  // every id listed is taken as registered for its node, with passthrough
  // opens of unknown number outstanding, so OPENs of the node reuse it (the
  // kernel refuses a second backing file while one is attached, and a
  // userspace-read open) and it is closed only when the kernel forgets the
  // node; a node with userspace-read opens outstanding gets no passthrough
  // until they are released (the kernel refuses that too). A request the
  // kernel resent counts once (by unique). Call before requests flow.
  Status OpenBackingJournal(const std::string& path, bool restore);

  // The connection goes to a successor: backing ids stay registered.
  void LeaveBackingRegistered() { leave_backing_.store(true); }

  // Waits until every READ handed to a read waiter has been answered (the
  // reply written), or `deadline`. true: none is left.
  bool WaitReadsAnswered(std::chrono::steady_clock::time_point deadline);

  void FillStats(FuseStats* stats) const;

  // Unmatched INTERRUPTs remembered for a request still to come.
  static constexpr size_t kEarlyInterrupts = 1024;

  // Counts a request that arrived over io_uring (called by the uring loop).
  void CountUringRequest() { uring_requests_.fetch_add(1, std::memory_order_relaxed); }

  // Directory read-ahead (FuseOptions::dir_prefetch): `list` is called, from
  // a request thread and at most once per directory while the kernel holds
  // it, with the directory's path relative to the mount root ("" = root) once
  // kDirPrefetchAfterLookups files in it have been looked up. It must only
  // queue the work: the listing itself goes through the mount.
  void SetDirPrefetch(std::function<void(std::string)> list);
  void CountDirPrefetched() { dirs_prefetched_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // A directory the kernel holds, for directory read-ahead: where it is (to
  // build its path) and how many of its files were looked up by name.
  struct DirInfo {
    uint64_t parent = 0;
    std::string name;
    uint32_t file_lookups = 0;
    bool listed = false;  // handed to the lister already
  };
  struct Node {
    uint64_t nlookup = 0;
    int32_t backing_id = 0;    // > 0 when registered
    std::string backing_path;  // the file behind backing_id
    uint32_t passthrough_opens = 0;
    uint32_t userspace_opens = 0;
    bool drop_pending = false;     // DropBacking() while passthrough opens were outstanding
    std::unique_ptr<DirInfo> dir;  // directories, with directory read-ahead on
  };
  struct Shard {
    Mutex mu;  // guards nodes; a leaf lock
    std::unordered_map<uint64_t, Node> nodes GUARDED_BY(mu);
  };
  // Records a directory child seen in a LOOKUP or READDIRPLUS reply.
  void NoteDir(uint64_t ino, uint64_t parent, std::string_view name);
  // Counts a file looked up in `parent`; hands `parent` to the lister once.
  void NoteFileLookup(uint64_t parent);
  // The path of directory `ino` relative to the root; nullopt when unknown.
  std::optional<std::string> DirPath(uint64_t ino);
  static constexpr size_t kShards = 64;
  Shard& ShardOf(uint64_t ino) { return shards_[ino % kShards]; }

  HandlerReply DoLookup(const struct fuse_in_header& h, std::span<const char> body,
                        std::span<char> out);
  HandlerReply DoGetAttr(const struct fuse_in_header& h, std::span<char> out);
  HandlerReply DoOpen(const struct fuse_in_header& h, std::span<const char> body,
                      std::span<char> out);
  HandlerReply DoRead(const struct fuse_in_header& h, std::span<const char> body,
                      std::span<char> out, int reply_fd,
                      const std::shared_ptr<DeferredReplySink>& sink, uint64_t tag);
  void DoInterrupt(std::span<const char> body);
  // Registers a READ that waits; its token is already cancelled when an
  // INTERRUPT for it came first or the dispatcher is stopping.
  std::shared_ptr<CancelToken> AddWaiting(uint64_t unique);
  void RemoveWaiting(uint64_t unique);
  // Serves a READ that waits (on a read waiter or inline) into `out`.
  HandlerReply ServeWaitingRead(uint64_t nodeid, uint64_t fh, uint64_t offset, std::span<char> out,
                                CancelToken& cancel);
  HandlerReply DoRelease(const struct fuse_in_header& h, std::span<const char> body);
  HandlerReply DoReadDir(const struct fuse_in_header& h, std::span<const char> body,
                         std::span<char> out, bool plus);
  HandlerReply DoStatFs(std::span<char> out);
  // Writable mounts (FuseOptions::writable; fuse_dispatch_write.cc); every
  // one answers EROFS otherwise.
  HandlerReply DoOpenForWrite(const struct fuse_in_header& h, const struct fuse_open_in& in,
                              std::span<char> out);
  HandlerReply DoWriteOp(const struct fuse_in_header& h, std::span<const char> body,
                         std::span<char> out);
  // DoWriteOp's larger ops, one each.
  HandlerReply DoCreate(const struct fuse_in_header& h, std::span<const char> body,
                        std::span<char> out);
  HandlerReply DoMkdir(const struct fuse_in_header& h, std::span<const char> body,
                       std::span<char> out);
  HandlerReply DoSetattr(const struct fuse_in_header& h, std::span<const char> body,
                         std::span<char> out);
  HandlerReply DoRename(const struct fuse_in_header& h, std::span<const char> body,
                        std::span<char> out);
  HandlerReply DoListXattr(std::span<const char> body, std::span<char> out);
  void DoForget(uint64_t ino, uint64_t nlookup);

  // Adds one kernel reference to `ino`.
  void AddLookup(uint64_t ino);
  // Chooses the backing id for an OPEN of `ino` (0: userspace reads) and
  // records the open. Called with the fs's answer.
  int32_t AttachOpen(uint64_t ino, const std::string& backing_path);
  // Registers `path` as a backing file; 0 on failure (counted, logged once).
  int32_t RegisterBacking(uint64_t ino, const std::string& path);
  void CloseBacking(int32_t id);

  void FillAttr(const NodeAttr& a, struct fuse_attr* out) const;
  void FillEntry(const NodeAttr& a, struct fuse_entry_out* out) const;

  FuseFilesystem* fs_;
  const FuseOptions options_;
  const uint32_t uid_;
  const uint32_t gid_;
  int passthrough_dev_fd_ = -1;
  std::array<Shard, kShards> shards_;

  std::array<std::atomic<uint64_t>, 64> by_opcode_{};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> requests_resent_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> passthrough_opens_{0};
  std::atomic<uint64_t> userspace_opens_{0};
  std::atomic<uint64_t> userspace_reads_{0};
  std::atomic<uint64_t> userspace_read_bytes_{0};
  std::atomic<int64_t> backing_ids_open_{0};
  std::atomic<uint64_t> backing_open_failures_{0};
  std::atomic<uint64_t> uring_requests_{0};
  std::atomic<uint64_t> dirs_prefetched_{0};
  std::function<void(std::string)> list_dir_;  // set before requests flow
  // Passthrough opens outstanding on a node restored from the backing
  // journal: unknown, so never taken as zero.
  static constexpr uint32_t kUnknownOpens = 1u << 30;
  void JournalBacking(const std::string& line);
  int journal_fd_ = -1;  // FuseOptions::backing_journal, O_APPEND; -1 = none
  std::atomic<bool> journal_warned_{false};
  std::atomic<bool> leave_backing_{false};

  Mutex waiting_mu_;  // guards waiting_, early_*, stopping_, deferred_outstanding_; a leaf lock
  std::unordered_map<uint64_t, std::shared_ptr<CancelToken>> waiting_
      GUARDED_BY(waiting_mu_);  // by unique
  std::unordered_set<uint64_t> early_interrupts_ GUARDED_BY(waiting_mu_);
  std::deque<uint64_t> early_order_ GUARDED_BY(waiting_mu_);  // oldest first, for the bound
  bool stopping_ GUARDED_BY(waiting_mu_) = false;
  // READs taken by read waiters, reply not yet written.
  size_t deferred_outstanding_ GUARDED_BY(waiting_mu_) = 0;
  CondVar answered_cv_;  // deferred_outstanding_ dropped
  std::atomic<uint64_t> reads_deferred_{0}, reads_waited_inline_{0}, interrupts_{0},
      interrupted_reads_{0};
  std::unique_ptr<ElasticPool> waiters_;  // null when read_waiters is 0
};

}  // namespace granary
