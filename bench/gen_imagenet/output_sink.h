// OutputSink: where gen_imagenet puts files — a local directory, or objects
// under a bucket prefix of an S3-compatible store (s3_sink.cc).
//
// Keys are relative paths such as "train/n01440764/n01440764_0.JPEG".
// Thread safety: Put() may be called from many threads at once; PrepareDir()
// is called from one thread before any Put().
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "granary/status.h"

namespace granary::bench {

struct SinkOptions {
  std::string dir;          // --out: local directory (created if missing)
  std::string s3_endpoint;  // --s3-endpoint: "http://host:port"; set instead of dir
  std::string bucket;       // --bucket (created if missing)
  std::string prefix;       // --prefix: key prefix of the dataset root ("" = bucket root)
};

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Makes sure files can be written under `rel_dir`.
  virtual Status PrepareDir(const std::string& rel_dir) = 0;
  // Writes `data` as `rel_path`, replacing any previous content.
  virtual Status Put(const std::string& rel_path, std::string_view data) = 0;
  // "dir /data/imagenet" or "s3://bucket/prefix at http://...".
  virtual std::string Describe() const = 0;
};

// The sink for `options`: InvalidArgument when neither or both of --out and
// --s3-endpoint are given, or --bucket is missing.
Result<std::unique_ptr<OutputSink>> OpenSink(const SinkOptions& options);

}  // namespace granary::bench
