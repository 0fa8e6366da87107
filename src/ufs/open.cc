// OpenUnderStorage: picks the connector for a URI's scheme (see open.h).
#include "ufs/open.h"

#include "ufs/http_ufs.h"
#include "ufs/posix_ufs.h"
#include "ufs/s3_ufs.h"

namespace granary {

Result<std::unique_ptr<UnderStorage>> OpenUnderStorage(const Uri& uri, const UfsOptions& options) {
  switch (uri.scheme) {
    case Scheme::kS3: return NewS3Ufs(uri, options);
    case Scheme::kFile: return NewPosixUfs(uri, options);
    case Scheme::kHttp:
    case Scheme::kHttps: return NewHttpUfs(uri, options);
  }
  return Internal(uri.ToString() + ": no connector for this scheme");
}

}  // namespace granary
