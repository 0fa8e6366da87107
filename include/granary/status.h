// Status and Result<T>: how every Granary function reports failure.
//
// A Status is either OK or carries a Code and a one-line message naming what
// failed and why ("s3://nope/x: bucket does not exist (404 NoSuchBucket)").
// Result<T> holds either a T or a non-OK Status. Both are [[nodiscard]]: an
// error that is deliberately dropped must go through IgnoreError(), so it can
// be found with grep.
//
// No exceptions cross module boundaries; errno appears only at the FUSE
// boundary (src/fuse maps Code to errno in one function).
//
// Thread safety: values; safe to copy and move between threads.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace granary {

// The few error codes. Pick the one a caller would branch on.
enum class Code : int {
  kOk = 0,                // success
  kInvalidArgument = 1,   // the caller's input is wrong (bad URI, bad config value, bad range)
  kNotFound = 2,          // the named object, bucket, file or key does not exist
  kPermissionDenied = 3,  // credentials missing or wrong, access refused
  kUnavailable = 4,       // transient: network, timeout, 5xx, SlowDown; retrying may help
  kIoError = 5,           // local I/O failed (disk, socket) and retrying will not help
  kCorruption = 6,        // data failed validation: checksum, magic, version, truncated file
  kNoSpace = 7,           // a quota or the disk is full (ENOSPC)
  kUnimplemented = 8,     // the operation is not supported by this backend (e.g. list over HTTP)
  kCancelled = 9,         // the operation was stopped on request (shutdown, Ctrl-C)
  kInternal = 10,         // a broken invariant: a bug in Granary
  kStale = 11,  // the origin object changed since the snapshot (etag differs): `granary sync`
};

// Short lowercase name of a code, e.g. "not found".
std::string_view CodeName(Code code);

// True for the bytes a Status message never holds (C0 controls and DEL):
// the constructor escapes them, so a message stays one line.
inline bool IsControlChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;
  // A message that spans lines (a name or a body quoted from input) is kept
  // on one line: control characters are written as \n, \r, \t or \xNN.
  Status(Code code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "not found: s3://b/k: no such key" style, or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  // Marks a deliberately ignored error (greppable).
  void IgnoreError() const {}

  bool operator==(const Status& other) const = default;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
inline Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
inline Status PermissionDenied(std::string msg) {
  return {Code::kPermissionDenied, std::move(msg)};
}
inline Status Unavailable(std::string msg) { return {Code::kUnavailable, std::move(msg)}; }
inline Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
inline Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
inline Status NoSpace(std::string msg) { return {Code::kNoSpace, std::move(msg)}; }
inline Status Unimplemented(std::string msg) { return {Code::kUnimplemented, std::move(msg)}; }
inline Status Cancelled(std::string msg) { return {Code::kCancelled, std::move(msg)}; }
inline Status Internal(std::string msg) { return {Code::kInternal, std::move(msg)}; }
inline Status Stale(std::string msg) { return {Code::kStale, std::move(msg)}; }

// IoError/NoSpace/NotFound/PermissionDenied from an errno value, prefixed with `what`.
Status ErrnoStatus(std::string_view what, int err);

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // Caller must check ok() first.
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The value, or `fallback` on error.
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

namespace internal {
inline Status AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace granary

#define GRANARY_CONCAT_INNER(a, b) a##b
#define GRANARY_CONCAT(a, b) GRANARY_CONCAT_INNER(a, b)

// Returns the error of a Status or Result expression from the enclosing function.
#define RETURN_IF_ERROR(expr)                                                \
  do {                                                                       \
    ::granary::Status granary_status_ = ::granary::internal::AsStatus(expr); \
    if (!granary_status_.ok()) return granary_status_;                       \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` : binds the value or returns the error.
// `lhs` may be a declaration, which parentheses would break.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ASSIGN_OR_RETURN(lhs, expr)                            \
  auto GRANARY_CONCAT(granary_result_, __LINE__) = (expr);     \
  if (!GRANARY_CONCAT(granary_result_, __LINE__).ok())         \
    return GRANARY_CONCAT(granary_result_, __LINE__).status(); \
  lhs = std::move(GRANARY_CONCAT(granary_result_, __LINE__)).value()
// NOLINTEND(bugprone-macro-parentheses)
