// Per-opcode facts of the FUSE protocol: first-argument sizes and names.
#include "fuse/fuse_kernel.h"

namespace granary::fusek {

size_t OpHeaderSize(uint32_t opcode) {
  switch (opcode) {
    case FUSE_FORGET: return sizeof(struct fuse_forget_in);
    case FUSE_GETATTR: return sizeof(struct fuse_getattr_in);
    case FUSE_OPEN:
    case FUSE_OPENDIR: return sizeof(struct fuse_open_in);
    case FUSE_READ:
    case FUSE_READDIR:
    case FUSE_READDIRPLUS: return sizeof(struct fuse_read_in);
    case FUSE_RELEASE:
    case FUSE_RELEASEDIR: return sizeof(struct fuse_release_in);
    case FUSE_FLUSH: return sizeof(struct fuse_flush_in);
    case FUSE_ACCESS: return sizeof(struct fuse_access_in);
    case FUSE_GETXATTR:
    case FUSE_LISTXATTR: return sizeof(struct fuse_getxattr_in);
    case FUSE_INTERRUPT: return sizeof(struct fuse_interrupt_in);
    case FUSE_BATCH_FORGET: return sizeof(struct fuse_batch_forget_in);
    case FUSE_INIT: return sizeof(struct fuse_init_in);
    default: return 0;  // LOOKUP, STATFS, DESTROY, ... and opcodes Granary does not parse
  }
}

const char* OpcodeName(uint32_t opcode) {
  static const char* const kNames[] = {
      "OP_0",         "LOOKUP",        "FORGET",      "GETATTR",  "SETATTR",  "READLINK",
      "SYMLINK",      "OP_7",          "MKNOD",       "MKDIR",    "UNLINK",   "RMDIR",
      "RENAME",       "LINK",          "OPEN",        "READ",     "WRITE",    "STATFS",
      "RELEASE",      "OP_19",         "FSYNC",       "SETXATTR", "GETXATTR", "LISTXATTR",
      "REMOVEXATTR",  "FLUSH",         "INIT",        "OPENDIR",  "READDIR",  "RELEASEDIR",
      "FSYNCDIR",     "GETLK",         "SETLK",       "SETLKW",   "ACCESS",   "CREATE",
      "INTERRUPT",    "BMAP",          "DESTROY",     "IOCTL",    "POLL",     "NOTIFY_REPLY",
      "BATCH_FORGET", "FALLOCATE",     "READDIRPLUS", "RENAME2",  "LSEEK",    "COPY_FILE_RANGE",
      "SETUPMAPPING", "REMOVEMAPPING", "SYNCFS",      "TMPFILE",  "STATX",    "COPY_FILE_RANGE_64",
  };
  if (opcode < sizeof(kNames) / sizeof(kNames[0])) return kNames[opcode];
  return "OP_UNKNOWN";
}

}  // namespace granary::fusek
