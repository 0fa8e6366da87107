// The S3 OutputSink: uploads each file as one object under --prefix with the
// project's S3 connector (src/ufs/s3_ufs.h), creating the bucket first.
// Credentials and region follow the AWS conventions ResolveS3Options reads
// (AWS_ACCESS_KEY_ID, ...); none at all means unsigned requests.
// Thread safety: S3Ufs::PutObject is thread-safe, so Put() is too.
#include "gen_imagenet/output_sink.h"
#include "ufs/s3_ufs.h"

namespace granary::bench {
namespace {

class S3Sink : public OutputSink {
 public:
  S3Sink(std::unique_ptr<S3Ufs> s3, std::string prefix, std::string endpoint)
      : s3_(std::move(s3)), prefix_(std::move(prefix)), endpoint_(std::move(endpoint)) {}

  Status PrepareDir(const std::string&) override { return Status::Ok(); }

  Status Put(const std::string& rel_path, std::string_view data) override {
    return s3_->PutObject(prefix_.empty() ? rel_path : prefix_ + "/" + rel_path, data);
  }

  std::string Describe() const override {
    return s3_->Root() + (prefix_.empty() ? "" : "/" + prefix_) + " at " + endpoint_;
  }

 private:
  std::unique_ptr<S3Ufs> s3_;
  std::string prefix_;  // no leading or trailing '/'
  std::string endpoint_;
};

}  // namespace

Result<std::unique_ptr<OutputSink>> OpenS3Sink(const SinkOptions& options) {
  UfsOptions ufs{.options = {{"endpoint", options.s3_endpoint}}};
  ASSIGN_OR_RETURN(S3Options s3_options, ResolveS3Options(ufs));
  auto s3 = std::make_unique<S3Ufs>(options.bucket, std::move(s3_options));
  RETURN_IF_ERROR(s3->CreateBucket().WithContext("--bucket " + options.bucket));
  std::string prefix = options.prefix;
  while (prefix.starts_with("/")) prefix.erase(0, 1);
  while (prefix.ends_with("/")) prefix.pop_back();
  return std::unique_ptr<OutputSink>(
      std::make_unique<S3Sink>(std::move(s3), std::move(prefix), options.s3_endpoint));
}

}  // namespace granary::bench
