// A moto_server with one bucket, for the mount tests that read from S3: sets
// moto's test credentials in the environment (inherited by the `granary`
// processes the tests start), starts the server and creates the bucket.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "granary/status.h"
#include "testing/moto_server.h"
#include "ufs/s3_ufs.h"

namespace granary::testing {

struct MotoBucket {
  std::unique_ptr<MotoServer> server;
  std::unique_ptr<UnderStorage> ufs;  // s3://<bucket> on the server
  S3Ufs* s3 = nullptr;                // the same, for PutObject
};

// Errors: the server did not start, or the bucket could not be created.
inline Result<MotoBucket> StartMotoBucket(const std::string& bucket) {
  ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
  ::setenv("AWS_CONFIG_FILE", "/dev/null", 1);
  MotoBucket b;
  ASSIGN_OR_RETURN(b.server, MotoServer::Start());
  ASSIGN_OR_RETURN(Uri uri, ParseUri("s3://" + bucket));
  ASSIGN_OR_RETURN(b.ufs,
                   NewS3Ufs(uri, UfsOptions{.options = {{"endpoint", b.server->endpoint()}}}));
  b.s3 = dynamic_cast<S3Ufs*>(b.ufs.get());
  if (b.s3 == nullptr) return Internal("s3://" + bucket + " did not open as an S3 connector");
  RETURN_IF_ERROR(b.s3->CreateBucket());
  return b;
}

}  // namespace granary::testing
