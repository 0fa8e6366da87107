#include "gen_imagenet/output_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace granary::bench {
namespace {

class DirSink : public OutputSink {
 public:
  explicit DirSink(std::string root) : root_(std::move(root)) {}

  Status PrepareDir(const std::string& rel_dir) override {
    std::error_code ec;
    std::filesystem::create_directories(root_ + "/" + rel_dir, ec);
    if (ec) return IoError(root_ + "/" + rel_dir + ": cannot create: " + ec.message());
    return Status::Ok();
  }

  Status Put(const std::string& rel_path, std::string_view data) override {
    std::string path = root_ + "/" + rel_path;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(path + ": open", errno);
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(fd, data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = errno;
        ::close(fd);
        return ErrnoStatus(path + ": write", err);
      }
      off += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) return ErrnoStatus(path + ": close", errno);
    return Status::Ok();
  }

  std::string Describe() const override { return "dir " + root_; }

 private:
  std::string root_;
};

}  // namespace

Result<std::unique_ptr<OutputSink>> OpenS3Sink(const SinkOptions& options);

Result<std::unique_ptr<OutputSink>> OpenSink(const SinkOptions& options) {
  if (options.dir.empty() == options.s3_endpoint.empty()) {
    return InvalidArgument("give exactly one of --out DIR or --s3-endpoint URL");
  }
  if (!options.dir.empty()) {
    std::unique_ptr<OutputSink> sink = std::make_unique<DirSink>(options.dir);
    RETURN_IF_ERROR(sink->PrepareDir("."));
    return sink;
  }
  if (options.bucket.empty()) return InvalidArgument("--s3-endpoint needs --bucket");
  return OpenS3Sink(options);
}

}  // namespace granary::bench
