// Opening an UnderStorage from a URI and its mount options.
//
// Thread safety: OpenUnderStorage may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/uri.h"
#include "granary/status.h"
#include "ufs/ufs.h"

namespace granary {

// Settings for a connector. Keys are documented in docs/configuration.md
// (e.g. "endpoint", "region", "addressing", "anonymous" for S3). Values in
// `secrets` (access keys, tokens) are never logged.
struct UfsOptions {
  std::map<std::string, std::string> options;
  std::map<std::string, std::string> secrets;
};

// The connector for uri.scheme, serving uri.Root(). InvalidArgument for
// unknown options or values, naming them.
Result<std::unique_ptr<UnderStorage>> OpenUnderStorage(const Uri& uri,
                                                       const UfsOptions& options = {});

}  // namespace granary
