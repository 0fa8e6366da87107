#include "common/uri.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>

namespace granary {
namespace {

// The error names the URI without any "user:password@" in it.
Status Bad(std::string_view text, std::string_view why) {
  return InvalidArgument("uri '" + StripUserinfo(text) + "': " + std::string(why));
}

// Collapses repeated slashes and strips leading ones.
std::string CleanKey(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    if (c == '/' && (out.empty() || out.back() == '/')) continue;
    out += c;
  }
  return out;
}

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  return std::all_of(b.begin(), b.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

}  // namespace

std::string Uri::Root() const {
  switch (scheme) {
    case Scheme::kS3: return scheme_text + "://" + bucket;
    case Scheme::kFile: return "file:///";
    case Scheme::kHttp: return "http://" + host;
    case Scheme::kHttps: return "https://" + host;
  }
  return "";
}

std::string Uri::ToString() const {
  std::string root = Root();
  if (key.empty()) return root;
  if (root.back() != '/') root += '/';
  return root + key;
}

Uri Uri::Child(std::string_view child) const {
  Uri out = *this;
  std::string joined = key;
  if (!joined.empty() && joined.back() != '/') joined += '/';
  joined += child;
  out.key = CleanKey(joined);
  return out;
}

Result<Uri> ParseUri(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  if (text.find('\0') != std::string_view::npos) return Bad(text, "contains a NUL byte");
  Uri uri;
  size_t sep = text.find("://");
  if (sep == std::string_view::npos) {
    if (text.find(':') != std::string_view::npos && text.find('/') == std::string_view::npos) {
      return Bad(text,
                 "unknown form (expected s3://bucket/prefix, file:///path, http(s)://host/path "
                 "or a path)");
    }
    uri.scheme = Scheme::kFile;
    uri.scheme_text = "file";
    std::string path(text);
    if (path.front() != '/') {
      char cwd[PATH_MAX];
      if (getcwd(cwd, sizeof cwd) == nullptr) return Bad(text, "cannot resolve a relative path");
      path = std::string(cwd) + "/" + path;
    }
    uri.key = CleanKey(path);
    return uri;
  }
  std::string scheme(text.substr(0, sep));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view rest = text.substr(sep + 3);
  uri.scheme_text = scheme;
  if (scheme == "s3" || scheme == "s3a" || scheme == "oss" || scheme == "bos") {
    uri.scheme = Scheme::kS3;
    size_t slash = rest.find('/');
    uri.bucket = std::string(rest.substr(0, slash));
    if (uri.bucket.empty()) return Bad(text, "missing bucket name");
    if (!ValidBucket(uri.bucket)) {
      return Bad(text, "invalid bucket name '" + uri.bucket +
                           "' (3-63 characters: lowercase letters, digits, '-', '.', '_')");
    }
    if (slash != std::string_view::npos) uri.key = CleanKey(rest.substr(slash));
    return uri;
  }
  if (scheme == "file") {
    uri.scheme = Scheme::kFile;
    if (rest.empty() || rest.front() != '/') {
      return Bad(text, "file URIs need an absolute path (file:///path)");
    }
    uri.key = CleanKey(rest);
    return uri;
  }
  if (scheme == "http" || scheme == "https") {
    uri.scheme = scheme == "http" ? Scheme::kHttp : Scheme::kHttps;
    size_t slash = rest.find('/');
    uri.host = std::string(rest.substr(0, slash));
    if (uri.host.empty()) return Bad(text, "missing host");
    if (uri.host.find('@') != std::string::npos) {
      return Bad(text, "credentials in the URL are not supported");
    }
    if (slash != std::string_view::npos) uri.key = CleanKey(rest.substr(slash));
    return uri;
  }
  return Bad(text,
             "unsupported scheme '" + scheme + "' (expected s3, s3a, oss, bos, file, http, https)");
}

std::string StripUserinfo(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t start = scheme + 3;
  size_t end = url.find_first_of("/?#", start);
  if (end == std::string_view::npos) end = url.size();
  const size_t at = url.substr(start, end - start).rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, start)) + "***" + std::string(url.substr(start + at));
}

}  // namespace granary
