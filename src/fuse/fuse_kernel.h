// The FUSE kernel protocol as Granary speaks it: <linux/fuse.h> plus, in this
// ONE place, what Debian 12's header (protocol 7.38) lacks and the running
// kernels (7.40+ for passthrough, 7.42+ for io_uring; 6.18 speaks 7.45) offer.
//
// Every value below is the one documented in include/uapi/linux/fuse.h of
// Linux 6.14+; sizes and ioctl numbers are pinned with static_assert, so a
// typo fails the build instead of corrupting the wire. Constants are guarded
// with #ifndef so a newer system header (which defines them) still works.
// Structs whose 7.38 layout differs from 7.45 (fuse_open_out gained
// backing_id, fuse_init_out gained max_stack_depth) get Granary-named
// layout-compatible copies in namespace granary::fusek.
//
// Thread safety: declarations only.
#pragma once

#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cstddef>
#include <cstdint>

// ---- INIT flags (bits 32..63 travel in flags2, shifted down by 32) ----
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)  // 7.39
#endif
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ULL << 37)  // 7.40: FOPEN_PASSTHROUGH + backing ids
#endif
#ifndef FUSE_NO_EXPORT_SUPPORT
#define FUSE_NO_EXPORT_SUPPORT (1ULL << 38)  // 7.40
#endif
#ifndef FUSE_HAS_RESEND
#define FUSE_HAS_RESEND (1ULL << 39)  // 7.40
#endif
#ifndef FUSE_ALLOW_IDMAP
#define FUSE_ALLOW_IDMAP (1ULL << 40)  // 7.41
#endif
#ifndef FUSE_OVER_IO_URING
#define FUSE_OVER_IO_URING (1ULL << 41)  // 7.42: requests over io_uring
#endif
#ifndef FUSE_REQUEST_TIMEOUT
#define FUSE_REQUEST_TIMEOUT (1ULL << 42)  // 7.43
#endif

// ---- notifications (fuse_out_header.error of an unsolicited write) ----
#ifndef FUSE_NOTIFY_RESEND_CODE
// 7.40 (Linux 6.9): the kernel puts every request it handed to the server and
// has no reply for back on its queue, with FUSE_UNIQUE_RESEND set in unique.
#define FUSE_NOTIFY_RESEND_CODE 7
#endif
#ifndef FUSE_UNIQUE_RESEND
#define FUSE_UNIQUE_RESEND (1ULL << 63)  // in fuse_in_header.unique of a resent request
#endif

// ---- OPEN reply flags ----
#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH (1 << 7)  // 7.40: reads/writes go to the backing file
#endif

namespace granary::fusek {

// The protocol version Granary implements and answers INIT with.
inline constexpr uint32_t kKernelMajor = 7;
inline constexpr uint32_t kKernelMinor = 45;
// Minimum minor for passthrough (FUSE_PASSTHROUGH, backing ids).
inline constexpr uint32_t kMinorPassthrough = 40;
// Minimum minor for FUSE over io_uring.
inline constexpr uint32_t kMinorIoUring = 42;

// Opcodes that 7.38's enum lacks (values from the 7.45 enum fuse_opcode).
inline constexpr uint32_t kOpStatx = 52;            // 7.39
inline constexpr uint32_t kOpCopyFileRange64 = 53;  // 7.45

// The two halves of the 64-bit INIT flag word.
inline constexpr uint32_t Low32(uint64_t flags) { return static_cast<uint32_t>(flags); }
inline constexpr uint32_t High32(uint64_t flags) { return static_cast<uint32_t>(flags >> 32); }

// struct fuse_open_out of 7.40+ (7.38 calls the last field `padding`).
struct OpenOut {
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};
static_assert(sizeof(OpenOut) == sizeof(struct fuse_open_out));
static_assert(offsetof(OpenOut, backing_id) == 12);

// struct fuse_init_out of 7.43+ (adds max_stack_depth and request_timeout).
struct InitOut {
  uint32_t major;
  uint32_t minor;
  uint32_t max_readahead;
  uint32_t flags;
  uint16_t max_background;
  uint16_t congestion_threshold;
  uint32_t max_write;
  uint32_t time_gran;
  uint16_t max_pages;
  uint16_t map_alignment;
  uint32_t flags2;
  uint32_t max_stack_depth;  // 7.40: passthrough backing files may be this deep
  uint16_t request_timeout;  // 7.43: seconds; 0 = none
  uint16_t unused[11];
};
static_assert(sizeof(InitOut) == 64);
static_assert(sizeof(InitOut) == sizeof(struct fuse_init_out));
static_assert(offsetof(InitOut, flags2) == 32);
static_assert(offsetof(InitOut, max_stack_depth) == 36);

// struct fuse_init_in (unchanged since 7.36; re-stated for the static_asserts).
static_assert(sizeof(struct fuse_init_in) == 64);
static_assert(sizeof(struct fuse_in_header) == 40);
static_assert(sizeof(struct fuse_out_header) == 16);
static_assert(sizeof(struct fuse_attr) == 88);
static_assert(sizeof(struct fuse_entry_out) == 128);
static_assert(sizeof(struct fuse_attr_out) == 104);
static_assert(sizeof(struct fuse_read_in) == 40);
static_assert(sizeof(struct fuse_kstatfs) == 80);

// struct fuse_backing_map: argument of FUSE_DEV_IOC_BACKING_OPEN.
struct BackingMap {
  int32_t fd;      // an open file to pass through to; may be closed after the ioctl
  uint32_t flags;  // must be 0
  uint64_t padding;
};
static_assert(sizeof(BackingMap) == 16);

// /dev/fuse ioctls (magic 229). CLONE is in 7.38; the backing ones are 7.40.
inline constexpr unsigned long kDevIocClone = _IOR(229, 0, uint32_t);
inline constexpr unsigned long kDevIocBackingOpen = _IOW(229, 1, BackingMap);
inline constexpr unsigned long kDevIocBackingClose = _IOW(229, 2, uint32_t);
static_assert(kDevIocClone == 0x8004e500UL);
static_assert(kDevIocBackingOpen == 0x4010e501UL);
static_assert(kDevIocBackingClose == 0x4004e502UL);

// ---- FUSE over io_uring (7.42) ----
// Each ring entry owns two user buffers, passed as a 2-iovec array in the
// REGISTER SQE: iov[0] a UringReqHeader, iov[1] the payload (at least
// max(8 KiB, max_write, max_pages * page size) bytes).
inline constexpr size_t kUringInOutHeaderSize = 128;  // FUSE_URING_IN_OUT_HEADER_SZ
inline constexpr size_t kUringOpInOutSize = 128;      // FUSE_URING_OP_IN_OUT_SZ

// struct fuse_uring_ent_in_out.
struct UringEntInOut {
  uint64_t flags;
  uint64_t commit_id;   // kernel -> server: echo in the COMMIT_AND_FETCH command
  uint32_t payload_sz;  // bytes used in the payload buffer (both directions)
  uint32_t padding;
  uint64_t reserved;
};
static_assert(sizeof(UringEntInOut) == 32);

// struct fuse_uring_req_header.
struct UringReqHeader {
  char in_out[kUringInOutHeaderSize];  // fuse_in_header (request) / fuse_out_header (reply)
  char op_in[kUringOpInOutSize];       // the per-opcode first argument (e.g. fuse_read_in)
  UringEntInOut ring_ent_in_out;
};
static_assert(sizeof(UringReqHeader) == 288);

// enum fuse_uring_cmd: sqe->cmd_op of an IORING_OP_URING_CMD on /dev/fuse.
inline constexpr uint32_t kUringCmdRegister = 1;        // FUSE_IO_URING_CMD_REGISTER
inline constexpr uint32_t kUringCmdCommitAndFetch = 2;  // FUSE_IO_URING_CMD_COMMIT_AND_FETCH

// struct fuse_uring_cmd_req: the 80-byte command area of a 128-byte SQE.
struct UringCmdReq {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;  // queue = CPU index; one queue per possible CPU must register
  uint8_t padding[6];
};
static_assert(sizeof(UringCmdReq) == 24);

// Size of the per-opcode first argument the kernel places in op_in (io_uring)
// or at the start of the body (/dev/fuse), for the opcodes Granary parses.
// 0 for opcodes whose first argument is empty (LOOKUP: the name follows).
size_t OpHeaderSize(uint32_t opcode);

// "LOOKUP", "READ", ... or "OP_<n>" for unknown opcodes.
const char* OpcodeName(uint32_t opcode);

}  // namespace granary::fusek
