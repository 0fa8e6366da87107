// _granary: the pybind11 binding of the native client (include/granary/client.h).
// The Python package (python/granary) builds the user-facing classes on it.
//
// Invariants:
//  - Every call that may do I/O or wait (open, attach, read, list, prefetch,
//    load, status, close) releases the GIL.
//  - A ClientHandle remembers the pid that created it. In another process
//    (a fork child) the inherited native Client is never used nor destroyed:
//    its threads, sockets and locks belong to the parent. Its methods raise
//    OSError there, and its destructor leaks the object on purpose.
//  - Status codes become Python exceptions in one function (RaiseStatus):
//    NotFound -> FileNotFoundError, PermissionDenied -> PermissionError,
//    InvalidArgument -> ValueError, every other code -> OSError. The
//    exception's filename is the path the call named.
//
// Thread safety: a ClientHandle may be used from many Python threads at once
// (the native Client is thread-safe); close() must not race other calls.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "granary/client.h"

namespace py = pybind11;

namespace granary {
namespace {

// The errno an OSError carries for a code (Python picks the subclass from it:
// ENOENT FileNotFoundError, EACCES PermissionError; Unavailable stays a plain
// OSError with EIO, since it covers refused connections as well as timeouts).
int ErrnoOf(Code code) {
  switch (code) {
    case Code::kNotFound: return ENOENT;
    case Code::kPermissionDenied: return EACCES;
    case Code::kNoSpace: return ENOSPC;
    case Code::kUnimplemented: return ENOTSUP;
    case Code::kCancelled: return ECANCELED;
    case Code::kStale: return ESTALE;
    default: return EIO;
  }
}

// Sets the Python exception for a non-OK status and throws
// error_already_set. `path` ("" = none) becomes the exception's filename.
[[noreturn]] void RaiseStatus(const Status& status, std::string_view path) {
  if (status.code() == Code::kInvalidArgument) {
    throw py::value_error(status.ToString());
  }
  PyObject* type = PyExc_OSError;
  if (status.code() == Code::kNotFound) type = PyExc_FileNotFoundError;
  if (status.code() == Code::kPermissionDenied) type = PyExc_PermissionError;
  py::object args = path.empty()
                        ? py::make_tuple(ErrnoOf(status.code()), status.ToString())
                        : py::make_tuple(ErrnoOf(status.code()), status.ToString(), py::str(path));
  PyErr_SetObject(type, args.ptr());
  throw py::error_already_set();
}

template <typename T>
T ValueOrRaise(Result<T> result, std::string_view path) {
  if (!result.ok()) RaiseStatus(result.status(), path);
  return std::move(result).value();
}

void OkOrRaise(const Status& status, std::string_view path) {
  if (!status.ok()) RaiseStatus(status, path);
}

py::dict FileInfoDict(const FileInfo& f) {
  py::dict d;
  d["path"] = f.path;
  d["is_dir"] = f.is_dir;
  d["size"] = f.size;
  d["mtime_ns"] = f.mtime_ns;
  return d;
}

// Owns a native Client for the process that created it (see the file comment).
class ClientHandle {
 public:
  explicit ClientHandle(std::unique_ptr<Client> client)
      : client_(std::move(client)), owner_pid_(getpid()) {}

  ~ClientHandle() {
    if (getpid() != owner_pid_) {
      // A fork child: the object's threads live in the parent only; running
      // its destructor here would join threads that do not exist.
      (void)client_.release();
      return;
    }
    if (client_ != nullptr) {
      py::gil_scoped_release unlocked;
      client_.reset();
    }
  }
  ClientHandle(const ClientHandle&) = delete;
  ClientHandle& operator=(const ClientHandle&) = delete;

  // The client, or OSError when closed or inherited through fork().
  Client& Get() const {
    if (getpid() != owner_pid_) {
      PyErr_SetObject(PyExc_OSError,
                      py::make_tuple(EBADF,
                                     "granary client inherited through fork(); attach again "
                                     "(granary.Dataset does so by itself)")
                          .ptr());
      throw py::error_already_set();
    }
    if (client_ == nullptr) {
      PyErr_SetObject(PyExc_OSError, py::make_tuple(EBADF, "granary client is closed").ptr());
      throw py::error_already_set();
    }
    return *client_;
  }

  // Closes the native client now (in-process: drains admissions, checkpoints).
  void Close() {
    if (getpid() != owner_pid_) {
      (void)client_.release();
      return;
    }
    std::unique_ptr<Client> closing = std::move(client_);
    py::gil_scoped_release unlocked;
    closing.reset();
  }

  bool closed() const { return client_ == nullptr; }
  int owner_pid() const { return owner_pid_; }

 private:
  std::unique_ptr<Client> client_;
  const pid_t owner_pid_;
};

std::unique_ptr<ClientHandle> OpenClient(const std::string& source,
                                         std::vector<std::string> cache_dirs,
                                         std::string cache_size, std::string mem_cache,
                                         std::map<std::string, std::string> origin_options,
                                         std::map<std::string, std::string> origin_secrets,
                                         int origin_concurrency, double origin_timeout_s,
                                         std::string policy) {
  if (origin_concurrency < 0) throw py::value_error("origin_concurrency must be >= 0");
  if (!(origin_timeout_s > 0)) throw py::value_error("origin_timeout must be > 0 seconds");
  OpenOptions options{
      .cache_dirs = std::move(cache_dirs),
      .cache_size = std::move(cache_size),
      .mem_cache = std::move(mem_cache),
      .origin_options = std::move(origin_options),
      .origin_secrets = std::move(origin_secrets),
      .origin_concurrency = origin_concurrency,
      .origin_timeout = std::chrono::milliseconds(static_cast<int64_t>(origin_timeout_s * 1000)),
      .policy = std::move(policy),
  };
  Result<std::unique_ptr<Client>> client = [&] {
    py::gil_scoped_release unlocked;
    return Client::Open(source, options);
  }();
  return std::make_unique<ClientHandle>(ValueOrRaise(std::move(client), source));
}

std::unique_ptr<ClientHandle> AttachClient(const std::string& target, int connections,
                                           size_t max_open_files, std::string run_dir,
                                           bool direct) {
  if (connections <= 0) throw py::value_error("connections must be > 0");
  if (max_open_files == 0) throw py::value_error("max_open_files must be > 0");
  AttachOptions options{
      .run_dir = std::move(run_dir),
      .connections = connections,
      .max_open_files = max_open_files,
      .direct = direct,
  };
  Result<std::unique_ptr<Client>> client = [&] {
    py::gil_scoped_release unlocked;
    return Client::Attach(target, options);
  }();
  return std::make_unique<ClientHandle>(ValueOrRaise(std::move(client), target));
}

// The whole file as bytes. With `size` (the snapshot's, >= 0) the bytes object
// is allocated first and read into: no copy. One byte more is asked for, so a
// file longer than `size` (the snapshot moved on: `granary sync`) is seen and
// read whole instead of cut short. Without `size`: ReadWholeInto a bytes
// object of the file's size (no copy).
py::bytes Read(ClientHandle& h, const std::string& path, int64_t size) {
  Client& client = h.Get();
  if (size >= 0) {
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, size + 1);
    if (raw == nullptr) throw py::error_already_set();
    py::object bytes = py::reinterpret_steal<py::object>(raw);
    // Nobody else holds `bytes` yet: filling it without the GIL is safe.
    Result<size_t> got = [&] {
      py::gil_scoped_release unlocked;
      return client.ReadAt(path, 0, std::span<char>(PyBytes_AS_STRING(raw), size + 1));
    }();
    size_t n = ValueOrRaise(std::move(got), path);
    if (static_cast<int64_t>(n) <= size) {
      // Shrink in place, as _PyBytes_Resize does after its realloc (the
      // unused tail byte stays allocated); the hash is not computed yet.
      Py_SET_SIZE(raw, static_cast<Py_ssize_t>(n));
      PyBytes_AS_STRING(raw)[n] = '\0';
      return py::reinterpret_steal<py::bytes>(bytes.release());
    }
  }
  // Straight into a bytes object of the file's size, made (with the GIL)
  // once the size is known.
  PyObject* raw = nullptr;
  Result<size_t> got = [&] {
    py::gil_scoped_release unlocked;
    return client.ReadWholeInto(path, [&raw](uint64_t n) -> std::span<char> {
      py::gil_scoped_acquire gil;
      raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
      if (raw == nullptr) return {};
      return {PyBytes_AS_STRING(raw), static_cast<size_t>(n)};
    });
  }();
  if (raw == nullptr && PyErr_Occurred()) throw py::error_already_set();
  py::object bytes = py::reinterpret_steal<py::object>(raw);
  size_t n = ValueOrRaise(std::move(got), path);
  if (raw == nullptr) return py::bytes();  // the path names nothing readable
  if (static_cast<Py_ssize_t>(n) < PyBytes_GET_SIZE(raw)) {
    Py_SET_SIZE(raw, static_cast<Py_ssize_t>(n));  // shorter than listed: as above
    PyBytes_AS_STRING(raw)[n] = '\0';
  }
  return py::reinterpret_steal<py::bytes>(bytes.release());
}

// Reads into a writable, C-contiguous buffer from `offset` in the file; returns
// the bytes read (fewer than the buffer only at the end of the file).
size_t ReadInto(ClientHandle& h, const std::string& path, const py::buffer& buffer,
                int64_t offset) {
  if (offset < 0) throw py::value_error("offset must be >= 0");
  Client& client = h.Get();
  Py_buffer view;
  if (PyObject_GetBuffer(buffer.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
    // As io's readinto: TypeError for a read-only or non-contiguous buffer.
    PyErr_Clear();
    throw py::type_error("readinto: the buffer must be a writable, C-contiguous bytes-like object");
  }
  std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release(&view, PyBuffer_Release);
  Result<size_t> got = [&] {
    py::gil_scoped_release unlocked;
    return client.ReadAt(path, static_cast<uint64_t>(offset),
                         std::span<char>(static_cast<char*>(view.buf), view.len));
  }();
  return ValueOrRaise(std::move(got), path);
}

py::bytes ReadAt(ClientHandle& h, const std::string& path, int64_t offset, int64_t length) {
  if (offset < 0) throw py::value_error("offset must be >= 0");
  if (length < 0) throw py::value_error("length must be >= 0");
  std::string data(static_cast<size_t>(length), '\0');
  Client& client = h.Get();
  Result<size_t> got = [&] {
    py::gil_scoped_release unlocked;
    return client.ReadAt(path, static_cast<uint64_t>(offset), std::span<char>(data));
  }();
  data.resize(ValueOrRaise(std::move(got), path));
  return py::bytes(data);
}

py::list List(ClientHandle& h, const std::string& dir, bool recursive) {
  Client& client = h.Get();
  Result<std::vector<FileInfo>> entries = [&] {
    py::gil_scoped_release unlocked;
    return client.List(dir, recursive);
  }();
  py::list out;
  for (const FileInfo& f : ValueOrRaise(std::move(entries), dir)) {
    out.append(py::make_tuple(f.path, f.is_dir, f.size, f.mtime_ns));
  }
  return out;
}

py::dict Stat(ClientHandle& h, const std::string& path) {
  Client& client = h.Get();
  Result<FileInfo> info = [&] {
    py::gil_scoped_release unlocked;
    return client.Stat(path);
  }();
  return FileInfoDict(ValueOrRaise(std::move(info), path));
}

py::dict Info(ClientHandle& h) {
  Client& client = h.Get();
  DatasetInfo info = [&] {
    py::gil_scoped_release unlocked;
    return client.Info();
  }();
  py::dict d;
  d["source"] = info.source;
  d["files"] = info.files;
  d["bytes"] = info.bytes;
  d["snapshot_version"] = info.snapshot_version;
  d["attached"] = info.attached;
  return d;
}

void Prefetch(ClientHandle& h, std::vector<std::string> paths, size_t window) {
  if (window == 0) throw py::value_error("window must be > 0");
  Client& client = h.Get();
  Status status = [&] {
    py::gil_scoped_release unlocked;
    return client.Prefetch(paths, window);
  }();
  OkOrRaise(status, "");
}

py::dict PrefetchStatus(ClientHandle& h) {
  Client& client = h.Get();
  PrefetchProgress p = [&] {
    py::gil_scoped_release unlocked;
    return client.PrefetchStatus();
  }();
  py::dict d;
  d["queued"] = p.queued;
  d["fetched"] = p.fetched;
  d["skipped"] = p.skipped;
  d["failed"] = p.failed;
  d["position"] = p.position;
  return d;
}

py::dict Load(ClientHandle& h, const std::string& path) {
  Client& client = h.Get();
  Result<LoadResult> summary = [&] {
    py::gil_scoped_release unlocked;
    return client.Load(path);
  }();
  LoadResult s = ValueOrRaise(std::move(summary), path);
  py::dict d;
  d["files_requested"] = s.files_requested;
  d["bytes_requested"] = s.bytes_requested;
  d["files_cached"] = s.files_cached;
  d["bytes_cached"] = s.bytes_cached;
  d["files_failed"] = s.files_failed;
  d["files_not_fitted"] = s.files_not_fitted;
  d["missing"] = s.missing;
  d["elapsed_s"] = s.elapsed_s;
  d["complete"] = s.complete();
  return d;
}

std::string StatusJson(ClientHandle& h) {
  Client& client = h.Get();
  Result<std::string> json = [&] {
    py::gil_scoped_release unlocked;
    return client.StatusJson();
  }();
  return ValueOrRaise(std::move(json), "");
}

void Refresh(ClientHandle& h) {
  Client& client = h.Get();
  Status status = [&] {
    py::gil_scoped_release unlocked;
    return client.Refresh();
  }();
  OkOrRaise(status, "");
}

std::string Serve(ClientHandle& h) {
  Client& client = h.Get();
  Result<std::string> socket = [&] {
    py::gil_scoped_release unlocked;
    return client.Serve();
  }();
  return ValueOrRaise(std::move(socket), "");
}

}  // namespace
}  // namespace granary

PYBIND11_MODULE(_granary, m) {
  using granary::ClientHandle;
  m.doc() =
      "Native binding of the Granary client (include/granary/client.h); use the "
      "`granary` package.";
  py::class_<ClientHandle>(m, "Client")
      .def_static("open", &granary::OpenClient, py::arg("source"),
                  py::arg("cache_dirs") = std::vector<std::string>{}, py::arg("cache_size") = "",
                  py::arg("mem_cache") = "",
                  py::arg("origin_options") = std::map<std::string, std::string>{},
                  py::arg("origin_secrets") = std::map<std::string, std::string>{},
                  py::arg("origin_concurrency") = 0, py::arg("origin_timeout") = 60.0,
                  py::arg("policy") = "lru",
                  "Opens the dataset at `source` in this process (Client::Open).")
      .def_static("attach", &granary::AttachClient, py::arg("target"), py::arg("connections") = 16,
                  py::arg("max_open_files") = 65536, py::arg("run_dir") = "",
                  py::arg("direct") = true,
                  "Attaches to the daemon serving a mount point or a Serve() socket.")
      .def("info", &granary::Info)
      .def("stat", &granary::Stat, py::arg("path"))
      .def("list", &granary::List, py::arg("dir") = "", py::arg("recursive") = false,
           "[(path, is_dir, size, mtime_ns)] from the snapshot.")
      .def("read", &granary::Read, py::arg("path"), py::arg("size") = -1,
           "The whole file; `size` (the snapshot's) lets it read straight into the bytes.")
      .def("read_at", &granary::ReadAt, py::arg("path"), py::arg("offset"), py::arg("length"))
      .def("readinto", &granary::ReadInto, py::arg("path"), py::arg("buffer"),
           py::arg("offset") = 0)
      .def("prefetch", &granary::Prefetch, py::arg("paths"), py::arg("window") = 256)
      .def("prefetch_status", &granary::PrefetchStatus)
      .def("load", &granary::Load, py::arg("path") = "")
      .def("status_json", &granary::StatusJson)
      .def("refresh", &granary::Refresh)
      .def("serve", &granary::Serve)
      .def("close", &ClientHandle::Close)
      .def_property_readonly("closed", &ClientHandle::closed)
      .def_property_readonly("owner_pid", &ClientHandle::owner_pid);
}
