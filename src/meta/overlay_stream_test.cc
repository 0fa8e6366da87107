// Overlay streaming uploads (S3 origins): parts go out while an appending
// writer is still writing, a write back into sent bytes aborts the upload,
// and an upload a crash left unfinished is aborted by the next mount. The
// origin is a recording multipart fake (the real S3 upload is tested in
// tests/integration/s3 and, through a mount, tests/integration/write).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>

#include "meta/overlay.h"
#include "testing/mem_ufs.h"
#include "testing/random_bytes.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPart = 5u << 20;  // S3's smallest part

// What the fake origin saw besides its objects. Guarded by mu.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> started;    // upload ids
  std::vector<std::string> aborted;    // upload ids
  std::vector<uint64_t> parts_at_add;  // part indexes, as added
};

class FakeUpload final : public StreamingUpload {
 public:
  FakeUpload(testing::MemUfs* ufs, Recorder* rec, std::string key, std::string id, int fd)
      : ufs_(ufs), rec_(rec), key_(std::move(key)), id_(std::move(id)), fd_(::dup(fd)) {}
  ~FakeUpload() override {
    if (!completed_) {
      std::lock_guard lock(rec_->mu);
      rec_->aborted.push_back(id_);
    }
    ::close(fd_);
  }
  const std::string& id() const override { return id_; }
  uint64_t part_size() const override { return kPart; }
  void AddPart(uint64_t index) override {
    // The bytes as they are when the part is sent.
    std::string part(kPart, '\0');
    EXPECT_EQ(::pread(fd_, part.data(), kPart, static_cast<off_t>(index * kPart)),
              static_cast<ssize_t>(kPart));
    EXPECT_EQ(index, parts_.size()) << "parts are added in order";
    parts_.push_back(std::move(part));
    std::lock_guard lock(rec_->mu);
    rec_->parts_at_add.push_back(index);
  }

 protected:
  Result<ObjectInfo> Complete(uint64_t size) override {
    std::string body;
    for (const auto& p : parts_) body += p;
    if (size < body.size()) return InvalidArgument("shorter than the parts sent");
    std::string tail(size - body.size(), '\0');
    EXPECT_EQ(::pread(fd_, tail.data(), tail.size(), static_cast<off_t>(body.size())),
              static_cast<ssize_t>(tail.size()));
    body += tail;
    completed_ = true;
    ufs_->Put(key_, std::move(body));
    return ufs_->Stat(key_);
  }

 private:
  testing::MemUfs* ufs_;
  Recorder* rec_;
  std::string key_, id_;
  int fd_;
  std::vector<std::string> parts_;
  bool completed_ = false;
};

// MemUfs with whole-file writes and recorded multipart uploads.
class FakeMultipartUfs final : public testing::MemUfs {
 public:
  explicit FakeMultipartUfs(Recorder* rec) : MemUfs("s3://fake"), rec_(rec) {}

 protected:
  Result<ObjectInfo> WriteImpl(std::string_view key, int fd, uint64_t size,
                               const WriteOptions&) override {
    std::string body(size, '\0');
    EXPECT_EQ(::pread(fd, body.data(), size, 0), static_cast<ssize_t>(size));
    Put(std::string(key), std::move(body));
    return Stat(key);
  }
  Result<std::unique_ptr<StreamingUpload>> StartUploadImpl(std::string_view key, int fd,
                                                           const WriteOptions&) override {
    std::lock_guard lock(rec_->mu);
    std::string id = "upload-" + std::to_string(rec_->started.size() + 1);
    rec_->started.push_back(id);
    return std::unique_ptr<StreamingUpload>(
        std::make_unique<FakeUpload>(this, rec_, std::string(key), id, fd));
  }
  Status AbortUploadImpl(std::string_view, std::string_view upload_id) override {
    std::lock_guard lock(rec_->mu);
    rec_->aborted.emplace_back(upload_id);
    return Status::Ok();
  }

 private:
  Recorder* rec_;
};

using testing::RandomBytes;

class OverlayStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary-overlay-stream-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ufs_ = std::make_shared<FakeMultipartUfs>(&rec_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  OverlayOptions Opts(const std::string& staging = "staging") {
    return OverlayOptions{.staging_dir = dir_ + "/" + staging,
                          .prefix = "ds/",
                          .upload = WriteOptions{.part_size = kPart, .parallel_parts = 2}};
  }
  // Appends `data` to `path` in 1 MiB writes from `from`.
  static void Append(Overlay& ov, const std::string& path, const std::string& data, size_t from,
                     size_t to) {
    for (size_t off = from; off < to; off += 1u << 20) {
      const size_t n = std::min<size_t>(1u << 20, to - off);
      ASSERT_TRUE(ov.Write(path, off, std::span(data).subspan(off, n)).ok());
    }
  }
  std::string MetaText(const std::string& staging = "staging") {
    std::string all;
    for (const auto& de : fs::directory_iterator(dir_ + "/" + staging)) {
      if (de.path().extension() != ".meta") continue;
      std::ifstream in(de.path());
      std::stringstream ss;
      ss << in.rdbuf();
      all += ss.str();
    }
    return all;
  }

  // The object at the origin; nullopt when there is none.
  std::optional<std::string> Object(const std::string& key) {
    if (!ufs_->Stat(key).ok()) return std::nullopt;
    auto r = ufs_->ReadRange(key, 0, 1ull << 30);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::optional(*r) : std::nullopt;
  }

  Recorder rec_;
  std::string dir_;
  std::shared_ptr<UnderStorage> ufs_;
};

TEST_F(OverlayStreamTest, AnAppendingWriterSendsEachPartItHasPassedBeforeClose) {
  auto o = Overlay::Open(Opts(), ufs_);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const std::string data = RandomBytes(4 * kPart + 12345, 1);
  ASSERT_TRUE((*o)->Create("ckpt.pt").ok());
  Append(**o, "ckpt.pt", data, 0, 2 * kPart + 1);
  EXPECT_EQ(rec_.parts_at_add, (std::vector<uint64_t>{0, 1}));
  EXPECT_NE(MetaText().find("upload-1"), std::string::npos)
      << "the upload id is recorded for a crash";
  Append(**o, "ckpt.pt", data, 2 * kPart + 1, data.size());
  EXPECT_EQ(rec_.parts_at_add, (std::vector<uint64_t>{0, 1, 2, 3}));  // the tail waits for close
  EXPECT_FALSE(Object("ds/ckpt.pt")) << "nothing is visible before close";
  ASSERT_TRUE((*o)->Commit("ckpt.pt").ok());
  EXPECT_TRUE(Object("ds/ckpt.pt") == data);
  EXPECT_EQ(rec_.started.size(), 1u);
  EXPECT_TRUE(rec_.aborted.empty());
  EXPECT_EQ(MetaText().find("upload-1"), std::string::npos);
  EXPECT_EQ(ufs_->stats().write_requests, 1u);
  EXPECT_EQ(ufs_->stats().write_bytes, data.size());
}

TEST_F(OverlayStreamTest, AWriteBackIntoSentPartsAbortsTheUploadAndCloseSendsTheFileWhole) {
  auto o = Overlay::Open(Opts(), ufs_);
  ASSERT_TRUE(o.ok());
  std::string data = RandomBytes(3 * kPart, 2);
  ASSERT_TRUE((*o)->Create("model.zip").ok());
  Append(**o, "model.zip", data, 0, data.size());
  ASSERT_EQ(rec_.parts_at_add.size(), 3u);
  // A zip writer going back to fix a header it wrote first.
  ASSERT_TRUE((*o)->Write("model.zip", 10, std::span<const char>("HDR", 3)).ok());
  data.replace(10, 3, "HDR");
  EXPECT_EQ(rec_.aborted, (std::vector<std::string>{"upload-1"}));
  Append(**o, "model.zip", data + RandomBytes(kPart, 3), data.size(), data.size() + 1000);
  EXPECT_EQ(rec_.parts_at_add.size(), 3u) << "no new parts after a write that was not an append";
  ASSERT_TRUE((*o)->Commit("model.zip").ok());
  std::string sent = Object("ds/model.zip").value_or("");
  ASSERT_EQ(sent.size(), data.size() + 1000);
  EXPECT_TRUE(sent.substr(0, data.size()) == data);
  // A truncate below the sent parts aborts too; the next close sends what is left.
  const std::string again = RandomBytes(2 * kPart, 4);
  ASSERT_TRUE((*o)->Truncate("model.zip", 0).ok());
  ASSERT_TRUE((*o)->Commit("model.zip").ok());  // an empty file: one PUT
  EXPECT_EQ(Object("ds/model.zip"), "");
  Append(**o, "model.zip", again, 0, again.size());
  const size_t aborted_before = rec_.aborted.size();
  ASSERT_TRUE((*o)->Truncate("model.zip", kPart / 2).ok());
  EXPECT_EQ(rec_.aborted.size(), aborted_before + 1);
  ASSERT_TRUE((*o)->Commit("model.zip").ok());
  EXPECT_TRUE(Object("ds/model.zip") == again.substr(0, kPart / 2));
}

TEST_F(OverlayStreamTest, AnUploadAStopLeftUnfinishedIsAbortedByTheNextOpen) {
  const std::string data = RandomBytes(2 * kPart + 7, 5);
  {
    auto o = Overlay::Open(Opts(), ufs_);
    ASSERT_TRUE(o.ok());
    ASSERT_TRUE((*o)->Create("half.bin").ok());
    Append(**o, "half.bin", data, 0, data.size());
    ASSERT_EQ(rec_.parts_at_add.size(), 2u);
    // The staging dir as kill -9 would leave it now (the overlay, destroyed
    // normally below, aborts its own upload; a killed daemon cannot).
    fs::copy(dir_ + "/staging", dir_ + "/crashed", fs::copy_options::recursive);
  }
  EXPECT_EQ(rec_.aborted, (std::vector<std::string>{"upload-1"}));
  rec_.aborted.clear();
  auto o = Overlay::Open(Opts("crashed"), ufs_);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ((*o)->stats().unclosed_files, 1u);
  ASSERT_TRUE((*o)->RecoverPending().ok());
  EXPECT_EQ(rec_.aborted, (std::vector<std::string>{"upload-1"}));
  EXPECT_FALSE(Object("ds/half.bin")) << "an unclosed file is never uploaded on its own";
  // Closing it through the mount sends it whole (a new upload).
  ASSERT_TRUE((*o)->Commit("half.bin").ok());
  EXPECT_TRUE(Object("ds/half.bin") == data);
  EXPECT_EQ(rec_.started.size(), 2u);
}

}  // namespace
}  // namespace granary
