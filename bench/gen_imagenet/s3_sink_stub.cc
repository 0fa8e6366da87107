// Stand-in for the S3 sink while the S3 connector (src/ufs/s3_ufs.cc) is not
// part of the build: --s3-endpoint reports that it is unavailable.
#include "gen_imagenet/output_sink.h"

namespace granary::bench {

Result<std::unique_ptr<OutputSink>> OpenS3Sink(const SinkOptions& options) {
  return Unimplemented("--s3-endpoint " + options.s3_endpoint +
                       ": this build has no S3 connector; use --out DIR");
}

}  // namespace granary::bench
