// Dataset and object locations as users write them.
//
//   s3://bucket/prefix      (also s3a://, oss://, bos:// — any S3-compatible store)
//   file:///abs/path        or a plain path (relative paths are made absolute)
//   http://host[:port]/path, https://...
//
// Every Uri names a root that one UnderStorage instance serves (the bucket, the
// filesystem root "/", or scheme://host:port) and a key inside it (no leading
// slash). Thread safety: values.
#pragma once

#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary {

enum class Scheme {
  kS3,     // S3-compatible object store; root is the bucket
  kFile,   // local or NFS path; root is "/"
  kHttp,   // plain HTTP, read-only; root is http://host[:port]
  kHttps,  // HTTP over TLS, read-only; root is https://host[:port]
};

struct Uri {
  Scheme scheme = Scheme::kFile;
  std::string scheme_text;  // as written: "s3", "oss", "file", "http", ...
  std::string bucket;       // kS3: the bucket name
  std::string host;         // kHttp/kHttps: host[:port]
  std::string key;          // path inside the root, without a leading slash (may be empty)

  // The root this URI lives in: "s3://bucket", "file:///", "http://host:port".
  std::string Root() const;
  // The canonical form: Root() joined with key.
  std::string ToString() const;
  // A copy whose key is key + "/" + child (with single slashes).
  Uri Child(std::string_view child) const;
};

// Parses `text`. Bad input gives InvalidArgument naming the value and the
// problem, e.g. "uri 's3:///x': missing bucket name".
Result<Uri> ParseUri(std::string_view text);

// `url` without the "user:password@" of its authority, for logs and error
// messages: "http://u:p@host:9000/x" -> "http://***@host:9000/x". Text that
// is not a URL with userinfo comes back unchanged.
std::string StripUserinfo(std::string_view url);

}  // namespace granary
