// FuseServer: mounts a FuseFilesystem read-only and speaks the FUSE kernel
// protocol (linux/fuse.h) directly: mount(2) with fd= as root or fusermount3
// otherwise, INIT negotiation (async read, parallel dirops, 1 MiB requests,
// passthrough, io_uring), one thread per cloned /dev/fuse fd or FUSE over
// io_uring (one ring and thread per CPU), and two read modes:
//   passthrough: files the filesystem backs with a complete local file are
//                opened with FOPEN_PASSTHROUGH (the kernel reads that file; no
//                daemon work, no second page-cache copy); others go through
//                FuseFilesystem::Read().
//   cached:      OPEN answers ENOSYS once, so the kernel stops sending
//                OPEN/RELEASE ("no-open"); the page cache is kept across
//                opens; every READ goes to FuseFilesystem::Read().
// See docs/fuse.md for the protocol details and semantics.
//
// Lifecycle: construct, Start() (returns once the mount answers, or with a
// clear error) or Resume() (takes over a connection a previous server left:
// a daemon restarted or upgraded under a mount holder), optionally Wait(),
// Stop() (unmounts, aborts the connection so readers get errors instead of
// hanging, joins the threads) or Detach() (leaves the connection to a
// successor). The destructor calls Stop().
//
// Thread safety: Start/Stop/Wait from one controlling thread; stats(),
// session(), DropBacking() from any thread. The FuseFilesystem is called from
// the transport threads concurrently.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fuse/fuse_filesystem.h"
#include "granary/status.h"

namespace granary {

struct FuseConnectionState;

// How requests travel between the kernel and the daemon.
enum class FuseTransport {
  kAuto,   // io_uring when the kernel offers it (enable_uring=Y), else dev
  kDev,    // read/writev on cloned /dev/fuse fds, one thread each
  kUring,  // FUSE over io_uring; fail Start() if unavailable
};

// How file contents are served.
enum class FuseReadMode {
  kPassthrough,  // FOPEN_PASSTHROUGH on complete local files, userspace reads otherwise
  kCached,       // no-open + keep_cache; every read through FuseFilesystem::Read()
};

// Whether kernel passthrough is used in kPassthrough read mode.
enum class FusePassthrough {
  kAuto,  // when the kernel grants it (minor >= 40) and we hold CAP_SYS_ADMIN
  kOn,    // required: Start() fails with the reason when unavailable
  kOff,   // never; OPEN replies ask for userspace reads
};

Result<FuseTransport> ParseFuseTransport(std::string_view text);      // "auto" | "dev" | "uring"
Result<FuseReadMode> ParseFuseReadMode(std::string_view text);        // "passthrough" | "cached"
Result<FusePassthrough> ParseFusePassthrough(std::string_view text);  // "auto" | "on" | "off"
std::string_view FuseTransportName(FuseTransport t);
std::string_view FuseReadModeName(FuseReadMode m);

struct FuseOptions {
  // Existing empty directory to mount on. Required.
  std::string mountpoint;
  FuseTransport transport = FuseTransport::kAuto;
  FuseReadMode read_mode = FuseReadMode::kPassthrough;
  FusePassthrough passthrough = FusePassthrough::kAuto;
  // Transport threads (dev: cloned fds; uring: ignored, one per CPU). 0 = one per CPU.
  int threads = 0;
  // Owner shown for every node; unset = the mounting user/group.
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  // Let other users access the mount (mount option allow_other).
  bool allow_other = false;
  // Accept writes (create, write, mkdir, unlink, truncate; FuseFilesystem's
  // write operations decide). false: every write answers EROFS.
  bool writable = false;
  // How long the kernel may cache names and attributes (the snapshot is immutable).
  std::chrono::seconds entry_timeout{86400};
  std::chrono::seconds attr_timeout{86400};
  // Kernel background request limit (async reads/readahead); >= 64 recommended.
  int max_background = 128;
  // Readahead of the mount's bdi in KiB (the kernel starts at 128); 0 = leave it.
  // 1024 lets a whole file of up to 1 MiB arrive in one READ.
  uint32_t readahead_kb = 1024;
  // io_uring: ring entries (requests in flight) per CPU queue.
  int uring_queue_depth = 8;
  // Mount on a non-empty directory (hides its contents).
  bool allow_non_empty = false;
  // Source name shown in /proc/mounts.
  std::string fsname = "granary";
  // Mount through fusermount3/fusermount even as root (tests the unprivileged path).
  bool force_fusermount = false;
  // Directory entry read-ahead: once files of a directory have been looked up
  // by name (kDirPrefetchAfterLookups of them), a helper thread lists that
  // directory once through the mount, so READDIRPLUS hands the kernel every
  // entry in a few requests. A loader that opens files by path from a list
  // (PaddleClas train_list.txt, DALI file_list) then pays no LOOKUP round trip
  // per file on a fresh mount, as one that lists the tree first (torchvision
  // ImageFolder) already does not. Costs the kernel a dentry and an inode per
  // entry: what an epoch over the directory creates anyway.
  bool dir_prefetch = true;
  // `cached` read-only mode: the share of time (0..1) the layer counts the
  // files readers close (CloseWatcher), which HIT RATIO needs to see the
  // page cache's re-reads; each counted close costs its reader about 3 us.
  // 0 = never.
  double count_file_reads = 0.1;
  // Read waiters: threads (started on demand) that serve READs which must
  // wait (FuseFilesystem::TryRead said so: not in the local cache) and
  // write their replies, so the transport threads go back to /dev/fuse at
  // once. When all are busy a READ waits on its transport thread (counted
  // in FuseStats::reads_waited_inline). 0: every READ on the transport
  // threads. io_uring: READs are served on the ring's thread (see docs/fuse.md).
  int read_waiters = 64;
  // A file that records the passthrough backing ids registered on the
  // connection (appended as they change; "" = none). They belong to the
  // connection, not to the process: a server that Resume()s it after a
  // crash or an upgrade reads the file and keeps answering OPENs of a node
  // with the id the kernel already attached to it (a second backing file on
  // one inode is refused). Start() empties it.
  std::string backing_journal;
};

inline constexpr uint32_t kDirPrefetchAfterLookups = 2;

// The most /dev/fuse fds (the original and its clones) a connection is served
// through; more transport threads share them.
inline constexpr int kFuseMaxDeviceFds = 64;

// Checks values once (mountpoint set, threads >= 0, ...). InvalidArgument names the field.
Status ValidateFuseOptions(const FuseOptions& options);

// Monotonic counters a daemon exposes (status output, metrics).
struct FuseStats {
  std::array<uint64_t, 64> requests_by_opcode{};  // index = FUSE opcode (>= 64 folded into 63)
  uint64_t requests = 0;                          // all requests read from the kernel
  uint64_t requests_resent = 0;  // of those, resent by the kernel (a previous daemon had read them)
  uint64_t errors = 0;           // replies with a non-zero errno (ENOENT included)
  uint64_t passthrough_opens = 0;      // OPEN replies with FOPEN_PASSTHROUGH
  uint64_t userspace_opens = 0;        // OPEN replies served by FuseFilesystem::Read()
  uint64_t userspace_reads = 0;        // READ requests answered by the daemon
  uint64_t userspace_read_bytes = 0;   // bytes in those replies
  uint64_t backing_ids_open = 0;       // backing ids currently registered (gauge)
  uint64_t backing_open_failures = 0;  // FUSE_DEV_IOC_BACKING_OPEN failures (fell back)
  uint64_t uring_requests = 0;         // requests that arrived over io_uring (the rest: /dev/fuse)
  uint64_t dirs_prefetched = 0;        // directories listed ahead by FuseOptions::dir_prefetch
  uint64_t reads_deferred = 0;         // READs handed to a read waiter (not local)
  uint64_t reads_waited_inline =
      0;  // READs not local served on a transport thread (waiters busy or io_uring)
  uint64_t interrupts = 0;         // FUSE_INTERRUPTs received
  uint64_t interrupted_reads = 0;  // of those, cancelled a READ that was waiting
  uint64_t stores = 0;             // ranges put into the page cache (StoreData)
  uint64_t store_bytes = 0;        // bytes in them
  // Files readers closed after reading, page-cache reads included (cached
  // read-only mode, where fanotify is allowed: files_read_counted).
  bool files_read_counted = false;
  uint64_t files_read = 0;
  uint64_t files_read_missed = 0;     // of those, read partly from the origin or a peer
  uint64_t file_close_overflows = 0;  // times the kernel dropped close events
};

// What the kernel granted at INIT, and what is in use.
struct FuseSessionInfo {
  uint32_t kernel_major = 0;
  uint32_t kernel_minor = 0;
  uint64_t kernel_flags = 0;   // offered by the kernel (flags | flags2 << 32)
  uint64_t granted_flags = 0;  // offered & requested
  uint32_t max_pages = 0;
  uint32_t max_readahead = 0;
  bool passthrough = false;                       // FOPEN_PASSTHROUGH in use
  FuseTransport transport = FuseTransport::kDev;  // kDev or kUring, as running
  int threads = 0;                                // transport threads running
  std::string passthrough_note;                   // why passthrough is off, when it is
};

class FuseServer {
 public:
  // `fs` is borrowed and must outlive the server.
  FuseServer(FuseFilesystem* fs, FuseOptions options);
  ~FuseServer();
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  // Mounts, negotiates INIT and starts the transport. Returns OK once the
  // mount serves requests, or an error naming the problem (mount point
  // missing, not empty, already a mount, /dev/fuse unavailable, uring or
  // passthrough demanded but unavailable). On error nothing stays mounted.
  Status Start();

  // Serves a connection another server mounted and negotiated (it crashed,
  // or handed over with Detach()): `fds` are the connection's /dev/fuse fds,
  // the original first (this server owns them, also on error), served by one
  // transport thread each; INIT is not sent again. The options' read mode
  // must be state.read_mode. Once the threads run, the kernel is asked to
  // resend every request it handed out and has no reply for
  // (FUSE_NOTIFY_RESEND, Linux 6.9+): requests the previous server read
  // and never answered arrive again (with FUSE_UNIQUE_RESEND in unique).
  // Unimplemented for an io_uring connection.
  Status Resume(const FuseConnectionState& state, std::vector<int> fds);

  // What a successor needs to Resume() this connection (after Start() or
  // Resume() succeeded), and the fds to hand it (still owned by this server).
  FuseConnectionState connection_state() const;
  std::vector<int> device_fds() const;

  // Leaves the connection to a successor: stops reading requests, waits up
  // to `drain` for those being served to be answered, closes this server's
  // fds; neither unmounts nor aborts nor closes backing ids. true: drained.
  // false: requests were still being served at the deadline; their threads
  // still run, so the caller must end the process (_exit) without destroying
  // this server (the successor's resend gets those requests).
  // Stop() after Detach() does nothing.
  bool Detach(std::chrono::milliseconds drain);

  // Blocks until the filesystem is unmounted (by Stop() or externally).
  void Wait();

  // Unmounts (lazy), aborts the connection (in-flight and later requests
  // fail with ENOTCONN/ECONNABORTED; no reader hangs), joins all threads and
  // releases backing ids. Idempotent.
  void Stop();

  // Drops the passthrough backing id of `ino` (e.g. its cache file was
  // evicted). Files already open keep reading the old file; the next OPEN
  // asks the filesystem again.
  void DropBacking(uint64_t ino);

  // Makes the kernel forget the cached name `name` in directory `parent`
  // (FUSE_NOTIFY_INVAL_ENTRY; a directory's cached subtree goes with it), so
  // the next access looks it up again. OK when the kernel had no such entry.
  Status InvalidateEntry(uint64_t parent, std::string_view name);
  // Drops the kernel's cached attributes and pages of `node`
  // (FUSE_NOTIFY_INVAL_INODE). OK when the kernel does not know the node.
  Status InvalidateNode(uint64_t node);
  // Puts `data` at `offset` of `node` into the kernel's page cache
  // (FUSE_NOTIFY_STORE), so reads of that range need no READ request (the
  // `cached` read mode keeps such pages across opens). true: stored; false:
  // the kernel does not know the node (not looked up yet, or forgotten) and
  // nothing was stored.
  Result<bool> StoreData(uint64_t node, uint64_t offset, std::string_view data);
  // Lists directory `rel` (relative to the mount point, "" = root) through
  // the mount, now, in the lister process (DirLister), so the kernel learns
  // every entry (READDIRPLUS, answered by the transport threads: never call
  // this from one of them). false: it could not be listed.
  bool ListDir(const std::string& rel);

  FuseStats stats() const;
  FuseSessionInfo session() const;
  const FuseOptions& options() const { return options_; }

  class Impl;

 private:
  FuseOptions options_;
  std::unique_ptr<Impl> impl_;
};

// Lazily unmounts `mountpoint` (also a dead mount whose daemon died):
// umount2(MNT_DETACH) as root, else `fusermount3 -u -z`. NotFound when it is
// not a mount point.
Status UnmountFuse(const std::string& mountpoint);

}  // namespace granary
