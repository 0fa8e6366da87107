// FuseDispatcher's write operations (FuseOptions::writable; docs/semantics.md):
// OPEN for writing, CREATE, MKDIR, WRITE, FLUSH, FSYNC, SETATTR, UNLINK,
// RMDIR and RENAME, each translated to one FuseFilesystem call. See
// fuse_dispatch.h.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "fuse/fuse_dispatch.h"
#include "fuse/fuse_dispatch_util.h"

namespace granary {

using namespace fuse_dispatch_util;

namespace {

// A write-only descriptor (a log, torch.save) cannot read or map what it
// writes, so its writes skip the kernel's page cache (FOPEN_DIRECT_IO): the
// bytes go straight to the staged file, not into a second cached copy a
// 2 GiB checkpoint would push the dataset's pages out for. Read-write
// descriptors keep the page cache (their reads and shared mmaps use it).
uint32_t WriteOnlyFlags(uint32_t open_flags) {
  return (open_flags & O_ACCMODE) == O_WRONLY ? FOPEN_DIRECT_IO : 0;
}

// A request the kernel resent after the daemon that read it died
// (FUSE_NOTIFY_RESEND): that daemon may have carried it out already.
bool Resent(const struct fuse_in_header& h) { return (h.unique & FUSE_UNIQUE_RESEND) != 0; }

}  // namespace

HandlerReply FuseDispatcher::DoOpenForWrite(const struct fuse_in_header& h,
                                            const struct fuse_open_in& in, std::span<char> out) {
  OpenResult opened;
  int err = fs_->OpenForWrite(h.nodeid, static_cast<int>(in.flags), h.pid, &opened);
  if (err != 0) return Error(err);
  auto* o = reinterpret_cast<fusek::OpenOut*>(out.data());
  std::memset(o, 0, sizeof(*o));
  o->fh = opened.fh & ~kPassthroughFh;
  o->open_flags = (opened.keep_cache ? FOPEN_KEEP_CACHE : 0) | WriteOnlyFlags(in.flags);
  userspace_opens_.fetch_add(1, std::memory_order_relaxed);
  return Ok(sizeof(*o));
}

// CREATE: a new file, opened for writing.
HandlerReply FuseDispatcher::DoCreate(const struct fuse_in_header& h, std::span<const char> body,
                                      std::span<char> out) {
  const auto* in = Arg<fuse_create_in>(body);
  if (in == nullptr) return Error(EINVAL);
  std::string_view name = NameArg(body, sizeof(fuse_create_in));
  if (name.empty() || name.size() > 255) return Error(name.empty() ? EINVAL : ENAMETOOLONG);
  if (!S_ISREG(in->mode) && (in->mode & S_IFMT) != 0) return Error(EPERM);  // files only
  NodeAttr attr;
  OpenResult opened;
  int err = fs_->Create(h.nodeid, name, static_cast<int>(in->flags), h.pid, &attr, &opened);
  if (err == EEXIST && Resent(h)) {
    // A previous daemon created it and died before its reply: open what it made.
    Result<NodeAttr> made = fs_->Lookup(h.nodeid, name);
    err = made.ok()
              ? fs_->OpenForWrite(made->ino, static_cast<int>(in->flags & ~(O_CREAT | O_EXCL)),
                                  h.pid, &opened)
              : EEXIST;
    if (made.ok()) attr = *made;
  }
  if (err != 0) return Error(err);
  AddLookup(attr.ino);
  auto* e = reinterpret_cast<fuse_entry_out*>(out.data());
  FillEntry(attr, e);
  auto* o = reinterpret_cast<fusek::OpenOut*>(out.data() + sizeof(fuse_entry_out));
  std::memset(o, 0, sizeof(*o));
  o->fh = opened.fh & ~kPassthroughFh;
  o->open_flags = WriteOnlyFlags(in->flags);
  userspace_opens_.fetch_add(1, std::memory_order_relaxed);
  return Ok(sizeof(fuse_entry_out) + sizeof(fusek::OpenOut));
}

// MKDIR.
HandlerReply FuseDispatcher::DoMkdir(const struct fuse_in_header& h, std::span<const char> body,
                                     std::span<char> out) {
  std::string_view name = NameArg(body, sizeof(fuse_mkdir_in));
  if (Arg<fuse_mkdir_in>(body) == nullptr || name.empty()) return Error(EINVAL);
  if (name.size() > 255) return Error(ENAMETOOLONG);
  NodeAttr attr;
  int err = fs_->Mkdir(h.nodeid, name, &attr);
  if (err == EEXIST && Resent(h)) {
    Result<NodeAttr> made = fs_->Lookup(h.nodeid, name);  // made by a previous daemon
    if (made.ok() && made->is_dir) {
      attr = *made;
      err = 0;
    }
  }
  if (err != 0) return Error(err);
  AddLookup(attr.ino);
  NoteDir(attr.ino, h.nodeid, name);
  FillEntry(attr, reinterpret_cast<fuse_entry_out*>(out.data()));
  return Ok(sizeof(fuse_entry_out));
}

// SETATTR: truncate; mode and owner changes are refused by the adapter.
HandlerReply FuseDispatcher::DoSetattr(const struct fuse_in_header& h, std::span<const char> body,
                                       std::span<char> out) {
  const auto* in = Arg<fuse_setattr_in>(body);
  if (in == nullptr) return Error(EINVAL);
  std::optional<uint64_t> size;
  if (in->valid & FATTR_SIZE) size = in->size;
  const bool mode_or_owner = (in->valid & (FATTR_MODE | FATTR_UID | FATTR_GID)) != 0;
  NodeAttr attr;
  int err = fs_->SetAttr(h.nodeid, size, mode_or_owner, &attr);
  if (err != 0) return Error(err);
  auto* a = reinterpret_cast<fuse_attr_out*>(out.data());
  std::memset(a, 0, sizeof(*a));
  a->attr_valid = static_cast<uint64_t>(options_.attr_timeout.count());
  FillAttr(attr, &a->attr);
  return Ok(sizeof(*a));
}

// RENAME and RENAME2 (no flags offered).
HandlerReply FuseDispatcher::DoRename(const struct fuse_in_header& h, std::span<const char> body,
                                      std::span<char> out) {
  const size_t skip = h.opcode == FUSE_RENAME ? sizeof(fuse_rename_in) : sizeof(fuse_rename2_in);
  if (body.size() < skip) return Error(EINVAL);
  const uint64_t newdir = reinterpret_cast<const fuse_rename_in*>(body.data())->newdir;
  std::string_view from = NameArg(body, skip);
  std::string_view to = NameArg(body, skip + from.size() + 1);
  if (from.empty() || to.empty()) return Error(EINVAL);
  int err = fs_->Rename(h.nodeid, from, newdir, to);
  // A previous daemon renamed it: the source is gone and the target is there.
  if (err == ENOENT && Resent(h) && fs_->Lookup(newdir, to).ok() &&
      !fs_->Lookup(h.nodeid, from).ok()) {
    err = 0;
  }
  return Error(err);
}

HandlerReply FuseDispatcher::DoWriteOp(const struct fuse_in_header& h, std::span<const char> body,
                                       std::span<char> out) {
  switch (h.opcode) {
    case FUSE_CREATE: return DoCreate(h, body, out);
    case FUSE_MKDIR: return DoMkdir(h, body, out);
    case FUSE_WRITE: {
      const auto* in = Arg<fuse_write_in>(body);
      if (in == nullptr || body.size() < sizeof(fuse_write_in) + in->size) return Error(EINVAL);
      size_t written = 0;
      int err = fs_->Write(h.nodeid, in->fh & ~kPassthroughFh, in->offset,
                           body.subspan(sizeof(fuse_write_in), in->size), &written);
      if (err != 0) return Error(err);
      auto* o = reinterpret_cast<fuse_write_out*>(out.data());
      std::memset(o, 0, sizeof(*o));
      o->size = static_cast<uint32_t>(written);
      return Ok(sizeof(*o));
    }
    case FUSE_FLUSH: {
      const auto* in = Arg<fuse_flush_in>(body);
      if (in == nullptr) return Error(EINVAL);
      int err = fs_->Flush(h.nodeid, in->fh & ~kPassthroughFh, h.pid);
      return err != 0 ? Error(err) : Ok(0);
    }
    case FUSE_FSYNC: {
      const auto* in = Arg<fuse_fsync_in>(body);
      if (in == nullptr) return Error(EINVAL);
      int err = fs_->Fsync(h.nodeid, in->fh & ~kPassthroughFh);
      return err != 0 ? Error(err) : Ok(0);
    }
    case FUSE_SETATTR: return DoSetattr(h, body, out);
    case FUSE_UNLINK:
    case FUSE_RMDIR: {
      std::string_view name = NameArg(body);
      if (name.empty()) return Error(EINVAL);
      int err = h.opcode == FUSE_UNLINK ? fs_->Unlink(h.nodeid, name) : fs_->Rmdir(h.nodeid, name);
      if (err == ENOENT && Resent(h)) err = 0;  // a previous daemon removed it
      return err != 0 ? Error(err) : Ok(0);
    }
    case FUSE_RENAME:
    case FUSE_RENAME2: return DoRename(h, body, out);
    default:
      // Links, special files, xattrs, fallocate, copy_file_range: not offered.
      return Error(EPERM);
  }
}

}  // namespace granary
