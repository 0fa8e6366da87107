// The two ways requests travel between the kernel and FuseDispatcher.
//
// dev:   RunDevLoop reads one request at a time from a /dev/fuse fd (the
//        original or a FUSE_DEV_IOC_CLONE'd one; replies must go back to the
//        fd the request came from) into its own 1 MiB+ buffer and answers
//        with writev. One thread per fd.
// uring: RunUringQueue serves one io_uring queue (qid = CPU index; the kernel
//        routes a request to the queue of the CPU its caller runs on and
//        becomes ready only when every possible CPU's queue has registered).
//        Each ring entry owns a header buffer and a payload buffer; a reply
//        is committed and the next request fetched in one SQE. FORGET and
//        INTERRUPT still arrive on /dev/fuse, so a dev loop runs alongside.
//
// Both loops return when the connection ends (unmount/abort: ENODEV,
// ENOTCONN) or when `stop` is set and the thread is woken with
// WakeTransportThread().
//
// Thread safety: each loop owns its buffers and ring; the dispatcher is shared.
#pragma once

#include <pthread.h>

#include <atomic>
#include <functional>

#include "fuse/fuse_dispatch.h"
#include "granary/status.h"

namespace granary {

// Buffer sizes: a READ reply of max_pages pages plus slack for headers.
inline constexpr size_t kFuseMaxPages = 256;
inline constexpr size_t kFuseReplyBuffer = kFuseMaxPages * 4096 + 4096;
inline constexpr size_t kFuseRequestBuffer = kFuseMaxPages * 4096 + 8192;

// Serves requests from `fd` until the connection ends or `stop` is set.
void RunDevLoop(int fd, FuseDispatcher* dispatcher, const std::atomic<bool>* stop);

struct UringQueueConfig {
  int dev_fd = -1;      // the original /dev/fuse fd
  int qid = 0;          // queue index = CPU
  int depth = 8;        // ring entries (requests in flight) on this queue
  bool pin_cpu = true;  // pin the thread to CPU `qid`
};

// Sets up the ring, registers `depth` entries and calls `registered` once
// with the outcome (OK, or why io_uring cannot be used); then, on success,
// serves requests until the connection ends or `stop` is set.
void RunUringQueue(const UringQueueConfig& config, FuseDispatcher* dispatcher,
                   const std::atomic<bool>* stop, const std::function<void(Status)>& registered);

// The number of io_uring queues the kernel expects (possible CPUs).
int FuseUringQueueCount();

// True when /sys/module/fuse/parameters/enable_uring reads Y.
bool FuseUringEnabled();

// Interrupts a blocking read/io_uring wait in `thread` (a no-op signal
// without SA_RESTART), so it can notice `stop`.
void WakeTransportThread(pthread_t thread);

}  // namespace granary
