// The run directory's layout (run_files.h).
#include "control/run_files.h"

#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "common/uri.h"
#include "dataset/dataset.h"

namespace granary {

namespace {

std::string Hex12(std::string_view text) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(text.data(), text.size())));
  return std::string(buf, 12);
}

}  // namespace

std::string WorkerRunName(std::string_view dataset_id) {
  return "@worker-" + std::string(dataset_id);
}

Result<std::string> WorkerSocketPath(std::string_view run_dir, std::string_view source) {
  // A Fluid dataset is named "fluid://<namespace>/<name>", not a URI;
  // DatasetId canonicalizes the URIs it can parse.
  if (!source.starts_with("fluid://")) RETURN_IF_ERROR(ParseUri(source).status());
  return RunFilePath(run_dir, WorkerRunName(DatasetId(source)), "sock");
}

std::string CanonicalMountpoint(std::string_view mountpoint) {
  std::string path(mountpoint);
  if (char* real = ::realpath(path.c_str(), nullptr); real != nullptr) {
    path = real;
    ::free(real);
    return path;
  }
  if (!path.empty() && path[0] != '/') {
    std::error_code ec;
    path = std::filesystem::absolute(path, ec).lexically_normal().string();
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string RunFilePath(std::string_view run_dir, std::string_view mountpoint,
                        std::string_view ext) {
  // A worker's run name ("@worker-<id>") is not a path.
  const std::string name =
      mountpoint.starts_with('@') ? std::string(mountpoint) : CanonicalMountpoint(mountpoint);
  return std::string(run_dir) + "/mount-" + Hex12(name) + "." + std::string(ext);
}

}  // namespace granary
