// The native client API: read a Granary dataset without FUSE (docs/api.md).
//
// Two ways to get a Client:
//  - Client::Open(source, OpenOptions): the dataset runs in this process
//    (snapshot, tiered store, engine), over the same cache directory format
//    as `granary mount`. The store's lock keeps a daemon and this process from
//    using one cache dir at once.
//  - Client::Attach(path): talks to the daemon serving a mount point (or to a
//    process that called Serve()) over its Unix socket. For a cached, verified
//    object the daemon passes the cache file's descriptor (SCM_RIGHTS) and the
//    client preads it: no FUSE, no copy through the daemon. A cached file of
//    at most one block is opened by the client itself, without a message
//    (AttachOptions::direct; docs/api.md "Reads without the daemon"). An uncached object
//    is fetched by the daemon first (joining any fetch in flight); an object
//    the cache refuses (no room) is read through the daemon.
//
// Descriptors are kept per client, at most AttachOptions::max_open_files (the
// least recently used is closed). A descriptor stays readable and its bytes
// right when the object is evicted meanwhile: eviction unlinks the cache
// file, and an object is never rewritten in place. `granary sync` swaps the
// snapshot: a client keeps serving the version it opened a path with until it
// drops the descriptor (Client::Refresh drops them all).
//
// Paths are relative to the dataset root ("train/n01440764/x.JPEG"); a
// leading "/" is ignored.
//
// Errors: NotFound (no such path), InvalidArgument (a directory where a file
// is needed, a bad offset or option), PermissionDenied (credentials refused),
// Unavailable (origin unreachable or too slow), IoError.
//
// Thread safety: every method may be called from many threads at once.
// After fork() a Client must not be used by the child (reopen with Attach).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "granary/dataset.h"
#include "granary/options.h"
#include "granary/status.h"

namespace granary {

class Client {
 public:
  // In-process. `source`: s3://bucket/prefix, a local or NFS path, http(s)://...
  static Result<std::unique_ptr<Client>> Open(const std::string& source,
                                              const OpenOptions& options = {});
  // Attached. `target`: a granary mount point (or a path inside one: its
  // daemon), or a socket path a Serve() call returned.
  static Result<std::unique_ptr<Client>> Attach(const std::string& target,
                                                const AttachOptions& options = {});

  // In-process clients close the dataset (pending admissions drained, index
  // checkpointed); attached ones close their descriptors and connections.
  virtual ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  virtual DatasetInfo Info() = 0;
  virtual Result<FileInfo> Stat(std::string_view path) = 0;
  // The entries of a directory, or with `recursive` every file below it
  // (files only), in the snapshot's order. From the snapshot: no origin request.
  virtual Result<std::vector<FileInfo>> List(std::string_view dir, bool recursive = false) = 0;
  // Reads up to out.size() bytes at `offset`; fewer only at the end of the file.
  virtual Result<size_t> ReadAt(std::string_view path, uint64_t offset, std::span<char> out) = 0;
  // The whole file.
  virtual Result<std::string> ReadWhole(std::string_view path) = 0;
  // The whole file into memory the caller provides: `buffer` is called once
  // with the file's size and returns where the bytes go (at least that many;
  // fewer is InvalidArgument). Returns the bytes read. For callers that own
  // the destination (the Python module's bytes objects): no zero-fill and no
  // copy after the read.
  virtual Result<size_t> ReadWholeInto(
      std::string_view path, const std::function<std::span<char>(uint64_t size)>& buffer) = 0;
  // Hands the engine an order of files to fetch ahead: it fetches them in
  // exactly this order, at most `window` files ahead of the readers (a read
  // of a path in the order moves the position forward). A new call replaces
  // the previous order (a new epoch). Cached files cost nothing.
  virtual Status Prefetch(const std::vector<std::string>& paths, size_t window = 256) = 0;
  virtual PrefetchProgress PrefetchStatus() = 0;
  // Warms `path` (a directory, a file or "" = everything), like `granary load`.
  virtual Result<LoadResult> Load(std::string_view path = "") = 0;
  // The dataset status as `granary status --json` prints it (one object).
  virtual Result<std::string> StatusJson() = 0;
  // Drops cached descriptors and re-reads the snapshot version served now.
  virtual Status Refresh() = 0;

  // In-process only: serves this dataset on a Unix socket so other processes
  // (DataLoader workers) can Attach to it; returns the socket path (in a
  // private 0700 directory). Idempotent. Unimplemented on an attached client.
  virtual Result<std::string> Serve() = 0;

 protected:
  Client() = default;
};

}  // namespace granary
