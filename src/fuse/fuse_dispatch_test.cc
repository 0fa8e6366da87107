// Unit tests of the FUSE protocol layer that need no mount: INIT
// negotiation, the errno map, reply framing of LOOKUP/READDIR(PLUS)/OPEN,
// lookup counting and FORGET, write opcodes answering EROFS, what a successor
// daemon takes over (connection state, backing journal).
#include "fuse/fuse_dispatch.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fuse/fuse_connection_state.h"

namespace granary {
namespace {

// A fixed two-level tree: / { a (file, 10 bytes), d/ { b (file, 3 bytes) } }.
class TinyFs : public FuseFilesystem {
 public:
  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) override {
    for (const auto& [p, n, a] : kids_) {
      if (p == parent && n == name) return a;
    }
    return NotFound("no " + std::string(name));
  }
  Result<NodeAttr> GetAttr(uint64_t ino) override {
    if (ino == kRootIno) return NodeAttr{.ino = 1, .size = 4096, .is_dir = true, .nlink = 2};
    for (const auto& k : kids_) {
      if (std::get<2>(k).ino == ino) return std::get<2>(k);
    }
    return NotFound("no node");
  }
  void Forget(uint64_t ino) override { forgotten.push_back(ino); }
  Result<OpenResult> Open(uint64_t ino, int flags) override {
    return OpenResult{.fh = 7, .backing_path = backing, .keep_cache = true};
  }
  std::string backing;  // offered for passthrough by Open()
  Result<size_t> Read(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out) override {
    std::string data = ino == 2 ? "0123456789" : "xyz";
    if (offset >= data.size()) return size_t{0};
    size_t n = std::min(out.size(), data.size() - offset);
    std::memcpy(out.data(), data.data() + offset, n);
    return n;
  }
  Status ReadDir(uint64_t ino, uint64_t offset, const DirEntrySink& emit) override {
    std::vector<DirEntry> list;
    for (const auto& [p, n, a] : kids_) {
      if (p == ino) list.push_back(DirEntry{.name = n, .attr = a});
    }
    for (size_t i = offset; i < list.size(); ++i) {
      if (!emit(list[i])) break;
    }
    return Status::Ok();
  }
  std::vector<uint64_t> forgotten;

 private:
  std::vector<std::tuple<uint64_t, std::string, NodeAttr>> kids_ = {
      {1, "a", NodeAttr{.ino = 2, .size = 10, .mtime_ns = 1500000000123, .is_dir = false}},
      {1, "d", NodeAttr{.ino = 3, .size = 4096, .is_dir = true, .nlink = 2}},
      {3, "b", NodeAttr{.ino = 4, .size = 3, .is_dir = false}},
  };
};

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() : out_(1 << 20), d_(&fs_, Options(), 1234, 5678) {}
  static FuseOptions Options() {
    FuseOptions o;
    o.mountpoint = "/unused";
    o.entry_timeout = std::chrono::seconds(100);
    return o;
  }
  HandlerReply Call(uint32_t opcode, uint64_t nodeid, const std::string& body) {
    fuse_in_header h{};
    h.opcode = opcode;
    h.nodeid = nodeid;
    h.unique = ++unique_;
    h.len = static_cast<uint32_t>(sizeof(h) + body.size());
    return d_.Handle(h, std::span<const char>(body.data(), body.size()), out_);
  }
  template <typename T>
  static std::string Bytes(const T& v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  static std::string ReadIn(uint64_t offset, uint32_t size, uint64_t fh = 0) {
    fuse_read_in in{};
    in.fh = fh;
    in.offset = offset;
    in.size = size;
    return Bytes(in);
  }
  // Names in a READDIR(PLUS) reply.
  std::vector<std::string> Names(const HandlerReply& r, bool plus) {
    std::vector<std::string> names;
    size_t pos = 0;
    while (pos < r.size) {
      const fuse_dirent* d;
      size_t head;
      if (plus) {
        d = &reinterpret_cast<const fuse_direntplus*>(out_.data() + pos)->dirent;
        head = offsetof(fuse_direntplus, dirent.name);
      } else {
        d = reinterpret_cast<const fuse_dirent*>(out_.data() + pos);
        head = offsetof(fuse_dirent, name);
      }
      names.emplace_back(d->name, d->namelen);
      pos += FUSE_DIRENT_ALIGN(head + d->namelen);
    }
    return names;
  }

  TinyFs fs_;
  std::vector<char> out_;
  FuseDispatcher d_;
  uint64_t unique_ = 0;
};

TEST(FuseErrnoTest, MapsEveryCode) {
  EXPECT_EQ(FuseErrno(Status::Ok()), 0);
  EXPECT_EQ(FuseErrno(NotFound("x")), ENOENT);
  EXPECT_EQ(FuseErrno(InvalidArgument("x")), EINVAL);
  EXPECT_EQ(FuseErrno(PermissionDenied("x")), EACCES);
  EXPECT_EQ(FuseErrno(Unavailable("x")), EIO);
  EXPECT_EQ(FuseErrno(IoError("x")), EIO);
  EXPECT_EQ(FuseErrno(Corruption("x")), EIO);
  EXPECT_EQ(FuseErrno(NoSpace("x")), ENOSPC);
  EXPECT_EQ(FuseErrno(Unimplemented("x")), ENOSYS);
  EXPECT_EQ(FuseErrno(Cancelled("x")), EINTR);
  EXPECT_EQ(FuseErrno(Internal("x")), EIO);
}

TEST(NegotiateInitTest, GrantsWhatBothSidesWant) {
  fuse_init_in in{};
  in.major = 7;
  in.minor = 45;
  in.max_readahead = 131072;
  uint64_t kernel = FUSE_ASYNC_READ | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES | FUSE_INIT_EXT |
                    FUSE_DO_READDIRPLUS | FUSE_PASSTHROUGH | FUSE_OVER_IO_URING |
                    FUSE_WRITEBACK_CACHE;
  in.flags = fusek::Low32(kernel);
  in.flags2 = fusek::High32(kernel);
  InitDecision d = NegotiateInit(in, InitPolicy{.want_passthrough = true, .want_uring = true});
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.out.major, 7u);
  EXPECT_EQ(d.out.minor, fusek::kKernelMinor);
  EXPECT_EQ(d.out_size, 64u);
  EXPECT_EQ(d.out.max_pages, 256);
  EXPECT_GE(d.out.max_background, 64);
  EXPECT_EQ(d.out.time_gran, 1u);
  EXPECT_EQ(d.out.max_stack_depth, 1u);
  EXPECT_TRUE(d.info.passthrough);
  EXPECT_EQ(d.info.transport, FuseTransport::kUring);
  EXPECT_TRUE(d.out.flags & FUSE_ASYNC_READ);
  EXPECT_TRUE(d.out.flags & FUSE_PARALLEL_DIROPS);
  EXPECT_FALSE(d.out.flags & FUSE_WRITEBACK_CACHE);  // never asked for
  EXPECT_FALSE(d.out.flags & FUSE_NO_OPEN_SUPPORT);  // not offered by this kernel
  EXPECT_EQ(d.out.flags2, fusek::High32(FUSE_PASSTHROUGH | FUSE_OVER_IO_URING));
}

TEST(NegotiateInitTest, OldKernelGetsNoPassthroughOrUring) {
  fuse_init_in in{};
  in.major = 7;
  in.minor = 38;
  in.flags = FUSE_ASYNC_READ | FUSE_INIT_EXT;
  in.flags2 = fusek::High32(FUSE_PASSTHROUGH | FUSE_OVER_IO_URING);
  InitDecision d = NegotiateInit(in, InitPolicy{.want_passthrough = true, .want_uring = true});
  EXPECT_FALSE(d.info.passthrough);
  EXPECT_EQ(d.info.transport, FuseTransport::kDev);
  EXPECT_EQ(d.out.max_stack_depth, 0u);
  EXPECT_EQ(d.out.flags2, 0u);
}

TEST(NegotiateInitTest, NewerMajorGetsVersionOnlyAndOlderFails) {
  fuse_init_in in{};
  in.major = 8;
  EXPECT_EQ(NegotiateInit(in, InitPolicy{}).out_size, 8u);
  in.major = 6;
  EXPECT_FALSE(NegotiateInit(in, InitPolicy{}).status.ok());
}

TEST_F(DispatcherTest, LookupFillsEntryWithNormalisedAttributes) {
  HandlerReply r = Call(FUSE_LOOKUP, 1, std::string("a\0", 2));
  ASSERT_EQ(r.error, 0);
  ASSERT_EQ(r.size, sizeof(fuse_entry_out));
  const auto* e = reinterpret_cast<const fuse_entry_out*>(out_.data());
  EXPECT_EQ(e->nodeid, 2u);
  EXPECT_EQ(e->entry_valid, 100u);
  EXPECT_EQ(e->attr.size, 10u);
  EXPECT_EQ(e->attr.mode, static_cast<uint32_t>(S_IFREG | 0444));
  EXPECT_EQ(e->attr.uid, 1234u);
  EXPECT_EQ(e->attr.gid, 5678u);
  EXPECT_EQ(e->attr.mtime, 1500u);
  EXPECT_EQ(e->attr.mtimensec, 123u);
  r = Call(FUSE_LOOKUP, 1, std::string("d\0", 2));
  EXPECT_EQ(reinterpret_cast<const fuse_entry_out*>(out_.data())->attr.mode,
            static_cast<uint32_t>(S_IFDIR | 0555));
}

TEST_F(DispatcherTest, MissingNameIsANegativeEntry) {
  HandlerReply r = Call(FUSE_LOOKUP, 1, std::string("nope\0", 5));
  ASSERT_EQ(r.error, 0);
  EXPECT_EQ(reinterpret_cast<const fuse_entry_out*>(out_.data())->nodeid, 0u);
}

TEST_F(DispatcherTest, ForgetReachesTheFilesystemWhenLookupsDropToZero) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Call(FUSE_LOOKUP, 1, std::string("a\0", 2)).error, 0);
  fuse_forget_in f{.nlookup = 2};
  EXPECT_FALSE(Call(FUSE_FORGET, 2, Bytes(f)).send);
  EXPECT_TRUE(fs_.forgotten.empty());
  fuse_batch_forget_in b{.count = 1, .dummy = 0};
  fuse_forget_one one{.nodeid = 2, .nlookup = 1};
  EXPECT_FALSE(Call(FUSE_BATCH_FORGET, 0, Bytes(b) + Bytes(one)).send);
  EXPECT_EQ(fs_.forgotten, std::vector<uint64_t>{2});
}

TEST_F(DispatcherTest, ReadDirListsDotsThenChildrenAndResumesAtOffset) {
  HandlerReply r = Call(FUSE_READDIR, 1, ReadIn(0, 4096));
  ASSERT_EQ(r.error, 0);
  EXPECT_EQ(Names(r, false), (std::vector<std::string>{".", "..", "a", "d"}));
  r = Call(FUSE_READDIR, 1, ReadIn(3, 4096));  // after ".", "..", "a"
  EXPECT_EQ(Names(r, false), (std::vector<std::string>{"d"}));
  r = Call(FUSE_READDIRPLUS, 3, ReadIn(0, 4096));
  EXPECT_EQ(Names(r, true), (std::vector<std::string>{".", "..", "b"}));
  // A small buffer takes what fits; the rest follows from the last offset.
  r = Call(FUSE_READDIR, 1, ReadIn(0, 64));  // 32 bytes per dot record
  EXPECT_EQ(Names(r, false), (std::vector<std::string>{".", ".."}));
}

TEST_F(DispatcherTest, ReadServesBytesAndCountsThem) {
  HandlerReply r = Call(FUSE_READ, 2, ReadIn(4, 100));
  ASSERT_EQ(r.error, 0);
  EXPECT_EQ(std::string(out_.data(), r.size), "456789");
  r = Call(FUSE_READ, 2, ReadIn(50, 100));
  EXPECT_EQ(r.size, 0u);
  FuseStats st;
  d_.FillStats(&st);
  EXPECT_EQ(st.userspace_reads, 2u);
  EXPECT_EQ(st.userspace_read_bytes, 6u);
  EXPECT_EQ(st.requests_by_opcode[FUSE_READ], 2u);
}

TEST_F(DispatcherTest, OpenWithoutBackingAsksForUserspaceReads) {
  fuse_open_in in{.flags = O_RDONLY, .open_flags = 0};
  HandlerReply r = Call(FUSE_OPEN, 2, Bytes(in));
  ASSERT_EQ(r.error, 0);
  const auto* o = reinterpret_cast<const fusek::OpenOut*>(out_.data());
  EXPECT_EQ(o->fh, 7u);
  EXPECT_FALSE(o->open_flags & FOPEN_PASSTHROUGH);
  EXPECT_TRUE(o->open_flags & FOPEN_KEEP_CACHE);
  in.flags = O_WRONLY;
  EXPECT_EQ(Call(FUSE_OPEN, 2, Bytes(in)).error, EROFS);
}

TEST_F(DispatcherTest, WritesAreReadOnlyAndUnknownOpcodesUnimplemented) {
  for (uint32_t op : {FUSE_WRITE, FUSE_CREATE, FUSE_MKDIR, FUSE_UNLINK, FUSE_RENAME, FUSE_SETATTR,
                      FUSE_RMDIR, FUSE_SYMLINK, FUSE_LINK, FUSE_MKNOD, FUSE_SETXATTR,
                      FUSE_FALLOCATE, FUSE_COPY_FILE_RANGE, FUSE_RENAME2}) {
    EXPECT_EQ(Call(op, 2, std::string(64, '\0')).error, EROFS) << fusek::OpcodeName(op);
  }
  EXPECT_EQ(Call(999, 2, "").error, ENOSYS);
  EXPECT_EQ(Call(FUSE_GETXATTR, 2, std::string(16, '\0')).error, ENODATA);
  EXPECT_EQ(Call(FUSE_OPENDIR, 1, std::string(8, '\0')).error, ENOSYS);
  EXPECT_FALSE(Call(FUSE_INTERRUPT, 0, std::string(8, '\0')).send);
}

// A tree that renames: / { a, b } with Rename moving a name to another.
class RenamingFs : public TinyFs {
 public:
  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) override {
    if (parent == kRootIno && names.contains(std::string(name))) {
      return NodeAttr{.ino = names[std::string(name)], .size = 1};
    }
    return NotFound("no " + std::string(name));
  }
  int Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
             std::string_view new_name) override {
    auto it = names.find(std::string(name));
    if (parent != kRootIno || new_parent != kRootIno || it == names.end()) return ENOENT;
    const uint64_t ino = it->second;
    names.erase(it);
    names[std::string(new_name)] = ino;
    return 0;
  }
  std::map<std::string, uint64_t> names = {{"a", 2}, {"b", 5}};
};

TEST(FuseResendTest, AResentRenameADeadDaemonCarriedOutSucceedsAndAMissingSourceStillFails) {
  RenamingFs fs;
  FuseOptions o;
  o.mountpoint = "/unused";
  o.writable = true;
  FuseDispatcher d(&fs, o, 0, 0);
  std::vector<char> out(1 << 16);
  auto rename = [&](const std::string& from, const std::string& to, bool resent) {
    fuse_rename_in in{};
    in.newdir = kRootIno;
    std::string body(reinterpret_cast<const char*>(&in), sizeof(in));
    body += from + '\0' + to + '\0';
    fuse_in_header h{};
    h.opcode = FUSE_RENAME;
    h.nodeid = kRootIno;
    h.unique = 10 | (resent ? FUSE_UNIQUE_RESEND : 0);
    h.len = static_cast<uint32_t>(sizeof(h) + body.size());
    return d.Handle(h, std::span<const char>(body.data(), body.size()), out).error;
  };
  ASSERT_EQ(rename("a", "c", /*resent=*/false), 0);
  // The daemon that did it died before replying; the kernel resends it.
  EXPECT_EQ(rename("a", "c", /*resent=*/true), 0);
  EXPECT_EQ(fs.names.at("c"), 2u);
  // Not resent, or the target is not there: the source is missing.
  EXPECT_EQ(rename("a", "c", /*resent=*/false), ENOENT);
  EXPECT_EQ(rename("x", "y", /*resent=*/true), ENOENT);
}

TEST(FuseCachedModeTest, OpenAnswersEnosysSoTheKernelStopsSendingIt) {
  TinyFs fs;
  FuseOptions o;
  o.mountpoint = "/unused";
  o.read_mode = FuseReadMode::kCached;
  FuseDispatcher d(&fs, o, 0, 0);
  std::vector<char> out(1 << 20);
  fuse_in_header h{};
  h.opcode = FUSE_OPEN;
  h.nodeid = 2;
  fuse_open_in in{.flags = O_RDONLY, .open_flags = 0};
  HandlerReply r =
      d.Handle(h, std::span<const char>(reinterpret_cast<char*>(&in), sizeof(in)), out);
  EXPECT_EQ(r.error, ENOSYS);
}

TEST(FuseOptionsTest, ParsesAndValidates) {
  EXPECT_EQ(*ParseFuseTransport("uring"), FuseTransport::kUring);
  EXPECT_FALSE(ParseFuseTransport("tcp").ok());
  EXPECT_EQ(*ParseFuseReadMode("cached"), FuseReadMode::kCached);
  EXPECT_EQ(*ParseFusePassthrough("off"), FusePassthrough::kOff);
  FuseOptions o;
  EXPECT_FALSE(ValidateFuseOptions(o).ok());  // no mountpoint
  o.mountpoint = "/mnt/x";
  EXPECT_TRUE(ValidateFuseOptions(o).ok());
  o.threads = -1;
  EXPECT_NE(ValidateFuseOptions(o).message().find("threads"), std::string::npos);
}

// A filesystem with one cached file (ino 2, served by TryRead)
// and one cold file (ino 5) whose reads wait for an origin that answers
// only when Release() is called -- or the read is cancelled.
class StallFs : public TinyFs {
 public:
  std::optional<Result<size_t>> TryRead(uint64_t ino, uint64_t fh, uint64_t offset,
                                        std::span<char> out) override {
    if (ino == 5) return std::nullopt;
    return Read(ino, fh, offset, out);
  }
  Result<size_t> ReadCancellable(uint64_t ino, uint64_t fh, uint64_t offset, std::span<char> out,
                                 CancelToken& cancel) override {
    if (ino != 5) return Read(ino, fh, offset, out);
    CancelToken::Wake wake(&cancel, [this] {
      { std::lock_guard lock(mu_); }
      cv_.notify_all();
    });
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_ || cancel.cancelled(); });
    --waiting_;
    if (!released_) return Cancelled("interrupted");
    out[0] = 'C';
    return size_t{1};
  }
  void AwaitWaiting(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_ >= n; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool released_ = false;
};

// Replies arrive on one end of a socket pair standing in for /dev/fuse (one
// message per writev, like the device).
class WaitingReadTest : public ::testing::Test {
 protected:
  WaitingReadTest() : out_(1 << 20) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    dev_ = fds[0];
    kernel_ = fds[1];
  }
  ~WaitingReadTest() override {
    fs_.Release();
    d_.reset();
    ::close(dev_);
    ::close(kernel_);
  }
  void Start(int waiters) {
    FuseOptions o;
    o.mountpoint = "/unused";
    o.read_waiters = waiters;
    d_ = std::make_unique<FuseDispatcher>(&fs_, o, 0, 0);
  }
  HandlerReply Send(uint32_t opcode, uint64_t unique, uint64_t nodeid, const std::string& body) {
    return SendInto(opcode, unique, nodeid, body, out_);
  }
  HandlerReply SendInto(uint32_t opcode, uint64_t unique, uint64_t nodeid, const std::string& body,
                        std::vector<char>& out) {
    fuse_in_header h{};
    h.opcode = opcode;
    h.nodeid = nodeid;
    h.unique = unique;
    h.len = static_cast<uint32_t>(sizeof(h) + body.size());
    return d_->Handle(h, std::span<const char>(body.data(), body.size()), out, dev_);
  }
  static std::string ReadIn(uint32_t size) {
    fuse_read_in in{};
    in.size = size;
    return std::string(reinterpret_cast<const char*>(&in), sizeof(in));
  }
  static std::string InterruptIn(uint64_t unique) {
    fuse_interrupt_in in{};
    in.unique = unique;
    return std::string(reinterpret_cast<const char*>(&in), sizeof(in));
  }
  // The next reply a read waiter wrote: its header and body.
  std::pair<fuse_out_header, std::string> NextReply() {
    char buf[4096];
    ssize_t n = ::recv(kernel_, buf, sizeof(buf), 0);
    EXPECT_GE(n, static_cast<ssize_t>(sizeof(fuse_out_header)));
    fuse_out_header oh{};
    std::memcpy(&oh, buf, sizeof(oh));
    return {oh, std::string(buf + sizeof(oh), static_cast<size_t>(n) - sizeof(oh))};
  }

  StallFs fs_;
  std::vector<char> out_;
  std::unique_ptr<FuseDispatcher> d_;
  int dev_ = -1;
  int kernel_ = -1;
};

// Reads waiting for a stalled origin leave the transport thread at once:
// more of them than there are transport threads, and a lookup, a getattr
// and a read of a cached file are still answered right away.
TEST_F(WaitingReadTest, WaitingReadsDoNotBlockLookupsOrCachedReads) {
  Start(8);
  for (uint64_t u = 1; u <= 4; ++u) {
    HandlerReply r = Send(FUSE_READ, u, 5, ReadIn(4096));
    EXPECT_FALSE(r.send) << "deferred to a read waiter";
  }
  fs_.AwaitWaiting(4);
  HandlerReply look = Send(FUSE_LOOKUP, 10, kRootIno, std::string("a") + '\0');
  EXPECT_EQ(look.error, 0);
  HandlerReply attr = Send(FUSE_GETATTR, 11, 2, std::string(sizeof(fuse_getattr_in), '\0'));
  EXPECT_EQ(attr.error, 0);
  HandlerReply cached = Send(FUSE_READ, 12, 2, ReadIn(4096));
  ASSERT_TRUE(cached.send);
  EXPECT_EQ(std::string(out_.data(), cached.size), "0123456789");
  fs_.Release();
  std::set<uint64_t> answered;
  for (int i = 0; i < 4; ++i) {
    auto [oh, body] = NextReply();
    EXPECT_EQ(oh.error, 0);
    EXPECT_EQ(body, "C");
    answered.insert(oh.unique);
  }
  EXPECT_EQ(answered, (std::set<uint64_t>{1, 2, 3, 4}));
  FuseStats st;
  d_->FillStats(&st);
  EXPECT_EQ(st.reads_deferred, 4u);
  EXPECT_EQ(st.reads_waited_inline, 0u);
}

// FUSE_INTERRUPT of a waiting read: that read is answered EINTR at once;
// another waiting read is not disturbed.
TEST_F(WaitingReadTest, InterruptGivesTheWaitingReadEintr) {
  Start(8);
  EXPECT_FALSE(Send(FUSE_READ, 1, 5, ReadIn(4096)).send);
  EXPECT_FALSE(Send(FUSE_READ, 2, 5, ReadIn(4096)).send);
  fs_.AwaitWaiting(2);
  EXPECT_FALSE(Send(FUSE_INTERRUPT, 3, 0, InterruptIn(1)).send);
  auto [oh, body] = NextReply();
  EXPECT_EQ(oh.unique, 1u);
  EXPECT_EQ(oh.error, -EINTR);
  fs_.Release();
  auto [oh2, body2] = NextReply();
  EXPECT_EQ(oh2.unique, 2u);
  EXPECT_EQ(oh2.error, 0);
  FuseStats st;
  d_->FillStats(&st);
  EXPECT_EQ(st.interrupts, 1u);
  EXPECT_EQ(st.interrupted_reads, 1u);
}

// The kernel may send an INTERRUPT before the request it names: the request
// is cancelled when it arrives.
TEST_F(WaitingReadTest, InterruptBeforeItsRequestCancelsItOnArrival) {
  Start(8);
  EXPECT_FALSE(Send(FUSE_INTERRUPT, 9, 0, InterruptIn(8)).send);
  EXPECT_FALSE(Send(FUSE_READ, 8, 5, ReadIn(4096)).send);
  auto [oh, body] = NextReply();
  EXPECT_EQ(oh.unique, 8u);
  EXPECT_EQ(oh.error, -EINTR);
}

// With every read waiter busy a waiting read is served on the calling
// thread; an INTERRUPT (from another transport thread) still ends it, and
// unmount (CancelWaits) ends the deferred one.
TEST_F(WaitingReadTest, FullWaiterPoolServesInlineAndStaysInterruptible) {
  Start(1);
  EXPECT_FALSE(Send(FUSE_READ, 1, 5, ReadIn(4096)).send);
  fs_.AwaitWaiting(1);
  HandlerReply inline_reply;
  std::vector<char> out2(1 << 20);
  std::thread t([&] { inline_reply = SendInto(FUSE_READ, 2, 5, ReadIn(4096), out2); });
  fs_.AwaitWaiting(2);
  EXPECT_FALSE(Send(FUSE_INTERRUPT, 3, 0, InterruptIn(2)).send);
  t.join();
  EXPECT_TRUE(inline_reply.send);
  EXPECT_EQ(inline_reply.error, EINTR);
  d_->CancelWaits();
  auto [oh, body] = NextReply();
  EXPECT_EQ(oh.unique, 1u);
  EXPECT_EQ(oh.error, -EINTR);
  FuseStats st;
  d_->FillStats(&st);
  EXPECT_EQ(st.reads_deferred, 1u);
  EXPECT_EQ(st.reads_waited_inline, 1u);
}

TEST(FuseConnectionStateTest, RoundTripsAndRefusesWhatItDoesNotKnow) {
  FuseConnectionState st{.session = {.kernel_major = 7,
                                     .kernel_minor = 45,
                                     .kernel_flags = FUSE_HAS_RESEND | FUSE_PASSTHROUGH,
                                     .granted_flags = FUSE_PASSTHROUGH,
                                     .max_pages = 256,
                                     .max_readahead = 131072,
                                     .passthrough = true,
                                     .transport = FuseTransport::kDev,
                                     .threads = 4},
                         .read_mode = FuseReadMode::kCached,
                         .dev = 77,
                         .device_fds = 4};
  Result<FuseConnectionState> back = FuseConnectionStateFromJson(FuseConnectionStateToJson(st));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->session.kernel_minor, 45u);
  EXPECT_EQ(back->session.kernel_flags, st.session.kernel_flags);
  EXPECT_TRUE(back->session.passthrough);
  EXPECT_EQ(back->read_mode, FuseReadMode::kCached);
  EXPECT_EQ(back->dev, 77u);
  EXPECT_EQ(back->device_fds, 4u);

  nlohmann::json j = nlohmann::json::parse(FuseConnectionStateToJson(st));
  j["version"] = 2;
  EXPECT_EQ(FuseConnectionStateFromJson(j.dump()).status().code(), Code::kInvalidArgument);
  j = nlohmann::json::parse(FuseConnectionStateToJson(st));
  j.erase("dev");
  EXPECT_NE(FuseConnectionStateFromJson(j.dump()).status().message().find("dev"),
            std::string::npos);
  j = nlohmann::json::parse(FuseConnectionStateToJson(st));
  j["transport"] = "auto";
  EXPECT_FALSE(FuseConnectionStateFromJson(j.dump()).ok());
  EXPECT_FALSE(FuseConnectionStateFromJson("not json").ok());
}

// What a daemon taking over a connection reads from the backing journal: a
// node the kernel has a backing id attached to keeps that id (the kernel
// refuses a second one), a node with a userspace-read open outstanding gets
// no passthrough until it is released (the kernel refuses that too), and a
// request the kernel resent counts once.
TEST(BackingJournalTest, ASuccessorKeepsTheKernelsBackingIdsAndUserspaceOpens) {
  char path[] = "/tmp/granary-journal-XXXXXX";
  const int tmp = ::mkstemp(path);
  ASSERT_GE(tmp, 0);
  ::close(tmp);
  {
    std::ofstream j(path);
    j << "+ 2 3 /old/cache/a\n"
      << "+ 9 5 /old/cache/x\n- 5\n"
      << "u 4 100\nu 4 " << (100 | FUSE_UNIQUE_RESEND) << "\nu 4 101\nc 4 200\n";
  }
  TinyFs fs;
  fs.backing = path;  // an existing file, so registering gets as far as the ioctl
  FuseOptions o;
  o.mountpoint = "/unused";
  FuseDispatcher d(&fs, o, 0, 0);
  const int not_fuse = ::open("/dev/null", O_RDWR | O_CLOEXEC);  // any registration fails
  d.EnablePassthrough(not_fuse);
  ASSERT_TRUE(d.OpenBackingJournal(path, /*restore=*/true).ok());
  std::vector<char> out(1 << 20);
  uint64_t unique = 1000;
  auto open = [&](uint64_t node) {
    fuse_in_header h{.len = 0, .opcode = FUSE_OPEN, .unique = ++unique, .nodeid = node};
    fuse_open_in in{.flags = O_RDONLY, .open_flags = 0};
    HandlerReply r =
        d.Handle(h, std::span<const char>(reinterpret_cast<const char*>(&in), sizeof in), out);
    EXPECT_EQ(r.error, 0);
    return *reinterpret_cast<const fusek::OpenOut*>(out.data());
  };
  auto release = [&](uint64_t node, uint64_t fh) {
    fuse_in_header h{.len = 0, .opcode = FUSE_RELEASE, .unique = ++unique, .nodeid = node};
    fuse_release_in in{.fh = fh, .flags = O_RDONLY, .release_flags = 0, .lock_owner = 0};
    d.Handle(h, std::span<const char>(reinterpret_cast<const char*>(&in), sizeof in), out);
  };
  FuseStats st;
  d.FillStats(&st);
  EXPECT_EQ(st.backing_ids_open, 1u);

  fusek::OpenOut a = open(2);
  EXPECT_TRUE(a.open_flags & FOPEN_PASSTHROUGH);
  EXPECT_EQ(a.backing_id, 3);
  fusek::OpenOut b = open(4);  // one userspace open is still out there
  EXPECT_FALSE(b.open_flags & FOPEN_PASSTHROUGH);
  d.FillStats(&st);
  EXPECT_EQ(st.backing_open_failures, 0u) << "passthrough was tried on a node in userspace use";
  {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("+ 2 3 /old/cache/a\n"), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("U 4 1\n"), std::string::npos) << text.str();
    EXPECT_EQ(text.str().find("/old/cache/x"), std::string::npos) << text.str();
  }
  release(4, b.fh);
  release(4, b.fh);  // the one opened by the previous daemon
  open(4);           // passthrough is tried again (and fails on /dev/null)
  d.FillStats(&st);
  EXPECT_EQ(st.backing_open_failures, 1u);
  d.LeaveBackingRegistered();
  ::close(not_fuse);
  ::unlink(path);
}

}  // namespace
}  // namespace granary
