// S3 uploads: one PUT, or a multipart upload whose parts go out on worker
// threads while the caller keeps adding them (StreamingUpload). Every body
// carries a checksum the origin verifies (BodyChecksum); a multipart upload
// is completed only after every part arrived and is aborted on any failure,
// so the object appears whole or not at all.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <pugixml.hpp>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "ufs/s3_ufs.h"
#include "ufs/sigv4.h"

namespace granary {
namespace {

// S3 allows at most this many parts in one upload.
constexpr uint64_t kMaxParts = 10000;

Result<std::string> PreadExactly(int fd, uint64_t offset, uint64_t length,
                                 const std::string& what) {
  std::string buf(length, '\0');
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, buf.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(what + ": reading the staged file: " + std::strerror(errno));
    if (n == 0) return IoError(what + ": the staged file is shorter than expected");
    done += static_cast<size_t>(n);
  }
  return buf;
}

// WriteOptions::release_sent: the range goes to disk, then out of the page
// cache (POSIX_FADV_DONTNEED drops clean pages only, hence the write first).
// Best effort: a failure leaves the pages cached, nothing else.
void ReleasePages(int fd, uint64_t offset, uint64_t length) {
  const auto off = static_cast<off64_t>(offset);
  const auto len = static_cast<off64_t>(length);
  if (::sync_file_range(
          fd, off, len,
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) == 0) {
    ::posix_fadvise(fd, off, len, POSIX_FADV_DONTNEED);
  }
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

// Parts queue up in AddPart; up to parallel_parts worker threads (started as
// parts arrive) send them. The first failure stops the rest; Complete then
// aborts. mu_ guards everything below it.
class S3Ufs::Upload final : public StreamingUpload {
 public:
  Upload(S3Ufs* s3, std::string key, std::string id, int fd, const WriteOptions& options)
      : s3_(s3),
        key_(std::move(key)),
        what_(s3->Root() + "/" + key_),
        id_(std::move(id)),
        fd_(fd),
        part_size_(options.part_size),
        parallel_(options.parallel_parts),
        release_sent_(options.release_sent) {}

  ~Upload() override {
    if (!completed_) {
      Stop(Cancelled(what_ + ": upload abandoned")).IgnoreError();
      s3_->AbortMultipart(key_, id_, what_);
    }
    ::close(fd_);
  }

  const std::string& id() const override { return id_; }
  uint64_t part_size() const override { return part_size_; }

  void AddPart(uint64_t index) override { Queue(index, part_size_); }

  // Public here: WriteImpl completes its own uploads (counted as its Write).
  Result<ObjectInfo> Complete(uint64_t size) override {
    uint64_t parts = (size + part_size_ - 1) / part_size_;
    Status bad;
    if (size < added_ * part_size_) {
      bad = InvalidArgument(what_ + ": the file (" + std::to_string(size) +
                            " bytes) is shorter than the parts already sent");
    } else if (parts > kMaxParts) {
      bad = InvalidArgument(what_ + ": " + std::to_string(size) + " bytes need more than " +
                            std::to_string(kMaxParts) + " parts of " + std::to_string(part_size_));
    } else if (parts == 0) {
      bad = InvalidArgument(what_ + ": an empty file cannot be a multipart upload");
    }
    if (!bad.ok()) {
      Stop(bad).IgnoreError();
      return bad;
    }
    for (uint64_t i = added_; i < parts; ++i) Queue(i, std::min(part_size_, size - i * part_size_));
    Status failed = Stop(Status::Ok());
    if (!failed.ok()) return failed;  // the destructor aborts
    std::string body = "<CompleteMultipartUpload>";
    {
      MutexLock lock(mu_);  // uncontended: Stop() joined the workers
      for (uint64_t i = 0; i < parts; ++i) {
        body += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
                XmlEscape(etags_[i]) + "</ETag></Part>";
      }
    }
    body += "</CompleteMultipartUpload>";
    auto done = s3_->Execute("POST", key_, CanonicalQuery({{"uploadId", id_}}), body, std::nullopt,
                             nullptr, what_ + " (complete upload)");
    // A 200 can still carry an error document (S3 reports late failures so).
    if (!done.ok()) return done.status();
    if (done->status != 200 || done->body.find("<Error>") != std::string::npos) {
      Status s = S3Error(*done, what_ + " (complete upload)", "NoSuchUpload");
      return s.ok() ? IoError(what_ + ": completing the multipart upload failed") : s;
    }
    completed_ = true;
    return s3_->Stat(key_);
  }

 private:
  void Queue(uint64_t index, uint64_t length) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (index >= etags_.size()) etags_.resize(index + 1);
    queue_.push_back({index, length});
    added_ = std::max(added_, index + 1);
    if (workers_.size() < static_cast<size_t>(parallel_) &&
        workers_.size() < queue_.size() + busy_) {
      workers_.emplace_back([this] { Work(); });
    }
    cv_.NotifyOne();
  }

  void Work() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (;;) {
      cv_.Wait(lock, [&]() REQUIRES(mu_) { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;
      auto [index, length] = queue_.front();
      queue_.pop_front();
      if (!error_.ok()) continue;  // a part failed: the rest are not sent
      ++busy_;
      lock.Unlock();
      auto etag = s3_->UploadPart(key_, id_, static_cast<int>(index + 1), fd_, index * part_size_,
                                  length, what_);
      if (etag.ok() && release_sent_) ReleasePages(fd_, index * part_size_, length);
      lock.Lock();
      --busy_;
      if (etag.ok()) {
        etags_[index] = std::move(*etag);
      } else if (error_.ok()) {
        error_ = etag.status();
      }
    }
  }

  // Lets the workers finish the queue (or, given an error, drop it), joins
  // them and returns the first error.
  Status Stop(const Status& why) EXCLUDES(mu_) {
    std::vector<std::thread> workers;
    {
      MutexLock lock(mu_);
      if (!why.ok() && error_.ok()) error_ = why;
      stopping_ = true;
      workers.swap(workers_);
    }
    cv_.NotifyAll();
    for (auto& t : workers) t.join();
    MutexLock lock(mu_);
    stopping_ = false;
    return error_;
  }

  S3Ufs* s3_;
  const std::string key_, what_, id_;
  const int fd_;  // ours (a duplicate)
  const uint64_t part_size_;
  const int parallel_;
  const bool release_sent_;
  bool completed_ = false;
  uint64_t added_ = 0;  // parts added (the next index)
  Mutex mu_;            // guards the members below; a leaf (parts are sent without it)
  CondVar cv_;          // signalled when a part is queued or stopping_ is set
  // (index, length) not yet taken.
  std::deque<std::pair<uint64_t, uint64_t>> queue_ GUARDED_BY(mu_);
  std::vector<std::string> etags_ GUARDED_BY(mu_);  // by part index
  std::vector<std::thread> workers_ GUARDED_BY(mu_);
  int busy_ GUARDED_BY(mu_) = 0;  // parts being sent
  bool stopping_ GUARDED_BY(mu_) = false;
  Status error_ GUARDED_BY(mu_);
};

S3Ufs::Headers S3Ufs::BodyChecksum(std::string_view body) const {
  // A signed request carries the body's SHA-256 (x-amz-content-sha256, part
  // of the signature), which S3 checks against the body it received
  // (XAmzContentSHA256Mismatch): that is the body's checksum. An anonymous
  // request has none, so it gets a Content-MD5 (MD5 costs about 1.3 s of
  // CPU per GiB here, twice SHA-256 with SHA-NI: not paid twice).
  if (credentials_) return {};
  return {{"Content-MD5", ContentMd5(body)}};
}

Result<std::string> S3Ufs::UploadPart(std::string_view key, const std::string& upload_id,
                                      int number, int fd, uint64_t offset, uint64_t length,
                                      const std::string& what) {
  const std::string part_what = what + " (part " + std::to_string(number) + ")";
  ASSIGN_OR_RETURN(std::string data, PreadExactly(fd, offset, length, part_what));
  const Headers md5 = BodyChecksum(data);
  const std::string query =
      CanonicalQuery({{"partNumber", std::to_string(number)}, {"uploadId", upload_id}});
  ASSIGN_OR_RETURN(HttpResponse r,
                   Execute("PUT", key, query, data, std::nullopt, nullptr, part_what, &md5));
  if (r.status != 200) return S3Error(r, part_what, "NoSuchUpload");
  auto etag = r.headers.find("etag");
  if (etag == r.headers.end() || etag->second.empty()) {
    return IoError(part_what + ": the origin returned no ETag for the part");
  }
  return etag->second;
}

void S3Ufs::AbortMultipart(std::string_view key, const std::string& upload_id,
                           const std::string& what) {
  auto r = Execute("DELETE", key, CanonicalQuery({{"uploadId", upload_id}}), "", std::nullopt,
                   nullptr, what + " (abort upload)");
  if (!r.ok() || (r->status != 204 && r->status != 200 && r->status != 404)) {
    GLOG_WARN(
        "{}: aborting multipart upload {} failed ({}); the bucket's lifecycle rule for "
        "incomplete uploads removes its parts",
        what, upload_id, r.ok() ? "HTTP " + std::to_string(r->status) : r.status().ToString());
  }
}

Status S3Ufs::AbortUploadImpl(std::string_view key, std::string_view upload_id) {
  const std::string what = Root() + "/" + std::string(key) + " (abort upload)";
  ASSIGN_OR_RETURN(HttpResponse r,
                   Execute("DELETE", key, CanonicalQuery({{"uploadId", std::string(upload_id)}}),
                           "", std::nullopt, nullptr, what));
  if (r.status == 204 || r.status == 200 || r.status == 404) return Status::Ok();
  return S3Error(r, what, "NoSuchUpload");
}

Result<std::unique_ptr<StreamingUpload>> S3Ufs::StartUploadImpl(std::string_view key, int fd,
                                                                const WriteOptions& options) {
  const std::string what = Root() + "/" + std::string(key) + " (start upload)";
  ASSIGN_OR_RETURN(HttpResponse init, Execute("POST", key, CanonicalQuery({{"uploads", ""}}), "",
                                              std::nullopt, nullptr, what));
  if (init.status != 200) return S3Error(init, what, "NoSuchBucket");
  pugi::xml_document doc;
  std::string upload_id;
  if (doc.load_buffer(init.body.data(), init.body.size())) {
    upload_id = doc.child("InitiateMultipartUploadResult").child_value("UploadId");
  }
  if (upload_id.empty()) return IoError(what + ": the origin's reply has no UploadId");
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    const int err = errno;
    AbortMultipart(key, upload_id, what);
    return IoError(what + ": duplicating the source file: " + std::strerror(err));
  }
  return std::unique_ptr<StreamingUpload>(
      std::make_unique<Upload>(this, std::string(key), std::move(upload_id), dup, options));
}

Result<ObjectInfo> S3Ufs::WriteImpl(std::string_view key, int fd, uint64_t size,
                                    const WriteOptions& options) {
  const std::string what = Root() + "/" + std::string(key);
  if (size <= options.part_size) {
    ASSIGN_OR_RETURN(std::string data, PreadExactly(fd, 0, size, what));
    const Headers md5 = BodyChecksum(data);
    ASSIGN_OR_RETURN(HttpResponse r,
                     Execute("PUT", key, "", data, std::nullopt, nullptr, what, &md5));
    if (r.status != 200) return S3Error(r, what, "NoSuchBucket");
    return Stat(key);
  }
  // Every part is known: a part size that keeps the count within S3's limit.
  WriteOptions whole = options;
  whole.part_size = std::max(options.part_size, (size + kMaxParts - 1) / kMaxParts);
  ASSIGN_OR_RETURN(std::unique_ptr<StreamingUpload> up, StartUploadImpl(key, fd, whole));
  return static_cast<Upload&>(*up).Complete(size);
}

}  // namespace granary
