// PosixUfs: UnderStorage over a local or NFS-mounted filesystem.
//
// The root is "/" (file:///); a key is an absolute path without its leading
// slash ("data/train/a/1.JPEG" is /data/train/a/1.JPEG). Only regular files
// are objects; directories appear as common prefixes ("dir/") when listing with
// delimiter "/", and are walked when listing recursively.
//
// Listing follows S3 semantics: a prefix ending in "/" lists that directory; a
// prefix not ending in "/" lists the entries of its parent directory whose
// names start with the last component. Keys come back sorted bytewise, exactly
// as S3 would order them, paged by `max_keys`; the continuation token is the
// last key (or common prefix) returned. Continuation pages reuse the sorted
// contents of recently read directories (a small LRU, validated by inode and
// mtime), so paging through a directory of N files costs O(N log N) once. Symlinks are followed
// (loops are detected and skipped); broken symlinks and special files are skipped. A missing
// directory lists as empty, as a missing S3 prefix does.
//
// Stat uses stat(2); the etag is "<mtime_ns>-<size>". Read opens the file,
// preads, and closes it again: no file descriptor is held between calls.
// Errors carry the path and strerror (ErrnoStatus).
//
// Deadlines: a hung NFS server blocks open/pread/stat for ever, so every call
// (a read's open+fstat+pread, a stat, a listing page) runs on a helper thread
// and the caller waits at most `requestTimeout` (ufs/deadline_runner.h): then
// kUnavailable "origin read of /path did not finish within 60 s". The helper
// stays stuck in the kernel and is counted; while `maxStuckCalls` are stuck,
// new calls fail at once. A read with a deadline goes through a buffer of the
// helper's own (one extra copy), since the caller's may be gone by the time a
// stuck read returns.
//
// Options (UfsOptions::options; unknown keys are rejected):
//   requestTimeout  one call, e.g. "60s"; "0" = no deadline, calls run on the
//                   caller's thread (default 60s)
//   maxStuckCalls   calls past their deadline still blocked in the kernel
//                   before new calls are refused (default 16)
//
// Thread safety: every method may be called from many threads (the directory
// cache has its own lock).
#pragma once

#include <memory>

#include "common/uri.h"
#include "granary/status.h"
#include "ufs/open.h"
#include "ufs/ufs.h"

namespace granary {

// A PosixUfs serving file:///. The URI's key is ignored (every instance serves
// the whole filesystem). InvalidArgument naming an unknown option or a bad
// value, or when `options` holds a secret.
Result<std::unique_ptr<UnderStorage>> NewPosixUfs(const Uri& uri, const UfsOptions& options);

}  // namespace granary
