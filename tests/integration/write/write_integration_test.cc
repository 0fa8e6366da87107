// Writes through `granary mount --writable` end to end (docs/semantics.md):
// the PaddleJob log pattern under concurrent readers (checked with awscli),
// torch.save / torch.load across a fresh mount, random writes and truncates
// of a 64 MiB file, kill -9 of the daemon during a 200 MiB upload, the
// refused operations' errnos and a failing origin.
//
// Needs root and /dev/fuse (skipped otherwise). Every mount is undone by the
// fixture (granary umount, then a lazy unmount), also when a test fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "cli_runner.h"
#include "common/page_cache.h"
#include "daemon/daemon.h"
#include "fuse/fuse_server.h"
#include "testing/moto_server.h"
#include "ufs/open.h"
#include "ufs/s3_ufs.h"

namespace granary {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::RunGranary;
using testing::RunProcess;
using testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteAll(int fd, const std::string& data, off_t offset) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pwrite(fd, data.data() + done, data.size() - done, offset + static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

class WriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || ::access("/dev/fuse", R_OK | W_OK) != 0)
      GTEST_SKIP() << "needs root and /dev/fuse";
    mp_ = work_.path() + "/mnt";
    fs::create_directories(mp_);
  }
  void TearDown() override { Unmount(); }
  void Unmount() {
    if (!IsMountpoint(mp_)) return;
    RunGranary({"umount", "--run-dir", RunDir(), mp_});
    if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
  }
  std::string RunDir() const { return work_.path() + "/run"; }
  ProcessResult Mount(const std::string& source, const std::string& cache,
                      std::vector<std::string> extra) {
    std::vector<std::string> args = {"mount",       source,         mp_,
                                     "--cache-dir", cache + ":2G",  "--run-dir",
                                     RunDir(),      "--block-size", "1MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunGranary(args);
  }
  nlohmann::json Status() {
    ProcessResult r = RunGranary({"status", mp_, "--json", "--run-dir", RunDir()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_array() && !j.empty() ? j[0] : j;
  }

  TempDir work_;
  std::string mp_;
};

// ---------------- over S3 (moto_server) ----------------

class S3WriteTest : public WriteTest {
 protected:
  void SetUp() override {
    WriteTest::SetUp();
    if (IsSkipped()) return;
    ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_DEFAULT_REGION", "us-east-1", 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
    ::setenv("AWS_CONFIG_FILE", "/dev/null", 1);
    auto moto = testing::MotoServer::Start();
    ASSERT_TRUE(moto.ok()) << moto.status().ToString();
    moto_ = std::move(*moto);
    auto ufs = NewS3Ufs(*ParseUri("s3://bucket"),
                        UfsOptions{.options = {{"endpoint", moto_->endpoint()}}});
    ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
    s3_.reset(dynamic_cast<S3Ufs*>(ufs->release()));
    ASSERT_TRUE(s3_->CreateBucket().ok());
    for (int i = 0; i < 120; ++i) {
      std::string rel = "train/c" + std::to_string(i % 6) + "/img" + std::to_string(i) + ".jpg";
      tree_[rel] = testing::RandomBytes(2000 + (i * 7919) % 40000, i);
      ASSERT_TRUE(s3_->PutObject("ds/" + rel, tree_[rel]).ok());
    }
  }
  void TearDown() override {
    WriteTest::TearDown();
    moto_.reset();
  }
  void MustMount(const std::string& cache, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--endpoint", moto_->endpoint(), "--writable"});
    ProcessResult r = Mount("s3://bucket/ds", cache, extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // The object as awscli fetches it ("" + false when it does not exist).
  ::testing::AssertionResult AwsGet(const std::string& key, std::string* out) {
    std::string file = work_.path() + "/aws-get";
    fs::remove(file);
    ProcessResult r = RunProcess(
        {"/bin/sh", "-c",
         "aws --endpoint-url " + moto_->endpoint() + " s3 cp s3://bucket/" + key + " " + file},
        std::chrono::seconds(180));
    if (r.exit_code != 0) {
      return ::testing::AssertionFailure()
             << "aws s3 cp of " << key << " failed (exit " << r.exit_code
             << (r.timed_out ? ", killed after 180 s" : "") << "): " << r.err;
    }
    *out = Slurp(file);
    return ::testing::AssertionSuccess();
  }
  // Multipart uploads started at the origin and neither completed nor aborted.
  int UnfinishedUploads() {
    ProcessResult r =
        RunProcess({"/bin/sh", "-c",
                    "aws --endpoint-url " + moto_->endpoint() +
                        " s3api list-multipart-uploads --bucket bucket --output json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out.empty() ? "{}" : r.out, nullptr, false);
    return j.is_object() && j.contains("Uploads") ? static_cast<int>(j["Uploads"].size()) : 0;
  }

  std::unique_ptr<testing::MotoServer> moto_;
  std::unique_ptr<S3Ufs> s3_;
  std::map<std::string, std::string> tree_;
};

TEST_F(S3WriteTest, PaddleJobLogAppendedAndFsyncedWhileSixteenReadersReadTheTrainingSet) {
  MustMount(work_.path() + "/cache");
  ASSERT_EQ(::mkdir((mp_ + "/log").c_str(), 0755), 0) << strerror(errno);
  std::atomic<bool> writing{true};
  std::atomic<int> read_errors{0}, reads{0};
  std::vector<std::thread> readers;
  // Stops and joins the readers however the test leaves (a failed ASSERT
  // returns from here with them running).
  struct Joiner {
    std::atomic<bool>& writing;
    std::vector<std::thread>& threads;
    ~Joiner() {
      writing = false;
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } joiner{writing, readers};
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<const std::pair<const std::string, std::string>*> files;
      for (const auto& kv : tree_) files.push_back(&kv);
      while (writing) {
        const auto* kv = files[rng() % files.size()];
        if (Slurp(mp_ + "/" + kv->first) != kv->second) ++read_errors;
        ++reads;
      }
    });
  }
  std::string written;
  int fd =
      ::open((mp_ + "/log/workerlog.0").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  for (int i = 0; i < 15; ++i) {
    std::string line = "[2026-11-25 02:00:" + std::to_string(i) + "] epoch 0 step " +
                       std::to_string(i * 10) + " loss " + std::to_string(6.9 - i * 0.1) + "\n";
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    written += line;
    ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
    if (i == 7) {
      // Durable at the origin after fsync, while the file stays open. Read
      // with this process's S3 client: awscli's start (seconds of Python
      // imports) can take over a minute while the readers keep both CPUs busy.
      Result<std::string> mid = s3_->ReadRange("ds/log/workerlog.0", 0, written.size() + 1);
      ASSERT_TRUE(mid.ok()) << mid.status().ToString();
      EXPECT_EQ(*mid, written);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(::close(fd), 0);
  writing = false;
  for (auto& t : readers) t.join();
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_GT(reads.load(), 100);
  std::string at_origin;
  ASSERT_TRUE(AwsGet("ds/log/workerlog.0", &at_origin));
  EXPECT_EQ(at_origin, written);
  EXPECT_EQ(Slurp(mp_ + "/log/workerlog.0"), written);  // read back through the mount
  nlohmann::json st = Status();
  ASSERT_TRUE(st.contains("writes")) << st.dump();
  EXPECT_EQ(st["writes"]["pending_files"].get<uint64_t>(), 0u);
  EXPECT_GE(st["writes"]["uploads"].get<uint64_t>(), 15u);
  EXPECT_EQ(st["writes"]["upload_failures"].get<uint64_t>(), 0u);
}

TEST_F(S3WriteTest, RandomOffsetWritesAndTruncatesOfA64MiBFileAreByteExactAtTheOrigin) {
  MustMount(work_.path() + "/cache");
  std::string model = testing::RandomBytes(64u << 20, 7);
  int fd = ::open((mp_ + "/ckpt.bin").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  // Written back to front in 1 MiB pieces, then patched at random offsets.
  for (int i = 63; i >= 0; --i) {
    ASSERT_TRUE(WriteAll(fd, model.substr(static_cast<size_t>(i) << 20, 1u << 20),
                         static_cast<off_t>(i) << 20));
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    size_t off = rng() % model.size();
    std::string patch = testing::RandomBytes(1 + rng() % 5000, 100 + i);
    if (off + patch.size() > model.size()) patch.resize(model.size() - off);
    model.replace(off, patch.size(), patch);
    ASSERT_TRUE(WriteAll(fd, patch, static_cast<off_t>(off)));
  }
  ASSERT_EQ(::ftruncate(fd, 50u << 20), 0);
  model.resize(50u << 20);
  ASSERT_EQ(::ftruncate(fd, (50u << 20) + 1000), 0);  // grows with zeros
  model.append(1000, '\0');
  ASSERT_TRUE(WriteAll(fd, "tail", static_cast<off_t>(model.size())));
  model += "tail";
  ASSERT_EQ(::close(fd), 0);
  auto back = s3_->ReadRange("ds/ckpt.bin", 0, model.size() + 10);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->size(), model.size());
  EXPECT_TRUE(*back == model);
  EXPECT_TRUE(Slurp(mp_ + "/ckpt.bin") == model);
  // Rewritten (this mount's file): re-uploaded whole on close.
  fd = ::open((mp_ + "/ckpt.bin").c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_TRUE(WriteAll(fd, "v2", 0));
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(*s3_->ReadRange("ds/ckpt.bin", 0, 100), "v2");
}

TEST_F(S3WriteTest, TorchSaveOfAResNet50LoadsBackFromAFreshMountWithAnEmptyCache) {
  if (::access("/usr/bin/python3", X_OK) != 0 ||
      RunProcess({"/usr/bin/python3", "-c", "import torch, torchvision"}).exit_code != 0) {
    GTEST_SKIP() << "needs Debian's python3-torch and python3-torchvision";
  }
  MustMount(work_.path() + "/cache1");
  const std::string script = work_.path() + "/save.py";
  std::ofstream(script) << R"(
import sys, torch, torchvision
torch.manual_seed(0)
sd = torchvision.models.resnet50().state_dict()
if sys.argv[1] == "save":
    import os
    os.makedirs(sys.argv[2] + "/ckpt", exist_ok=True)
    torch.save(sd, sys.argv[2] + "/ckpt/resnet50.pt")
else:
    got = torch.load(sys.argv[2] + "/ckpt/resnet50.pt")
    assert got.keys() == sd.keys(), "keys differ"
    for k in sd:
        assert torch.equal(got[k], sd[k]), k
    print("equal", len(sd))
)";
  ProcessResult saved =
      RunProcess({"/usr/bin/python3", script, "save", mp_}, std::chrono::seconds(180));
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  Unmount();
  MustMount(work_.path() + "/cache2");  // fresh, empty cache: the bytes come from the origin
  ProcessResult loaded =
      RunProcess({"/usr/bin/python3", script, "load", mp_}, std::chrono::seconds(180));
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.out.find("equal"), std::string::npos) << loaded.out;
}

// True once a staged file under `cache` is sealed (closed by its writer, its
// upload starting).
bool Sealed(const std::string& cache) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(cache, ec)) {
    if (e.path().extension() != ".meta") continue;
    auto j = nlohmann::json::parse(Slurp(e.path().string()), nullptr, false);
    if (j.is_object() && j.value("sealed", false)) return true;
  }
  return false;
}

TEST_F(S3WriteTest, KillDuringA200MiBUploadLeavesNoPartialObjectAndTheNextMountFinishesIt) {
  const std::string big = testing::RandomBytes(200u << 20, 11);
  int round = 0;
  int interrupted = 0;  // rounds whose kill came before the upload completed
  for (int delay_ms : {0, 700}) {
    SCOPED_TRACE("kill after " + std::to_string(delay_ms) + " ms of close()");
    const std::string key = "ds/upload" + std::to_string(round) + ".bin";
    const std::string cache = work_.path() + "/cache-kill" + std::to_string(round++);
    // No mount holder: the daemon's death ends the mount (the test is about
    // what the next mount finds).
    MustMount(cache, {"--no-restart"});
    auto pid = ReadPidFile(RunDir(), mp_);
    ASSERT_TRUE(pid.ok()) << pid.status().ToString();
    std::thread writer([&] {
      int fd = ::open((mp_ + "/" + key.substr(3)).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return;
      for (size_t off = 0; off < big.size(); off += 1u << 20) {
        if (!WriteAll(fd, big.substr(off, 1u << 20), static_cast<off_t>(off))) break;
      }
      ::close(fd);  // the upload runs inside this close; it fails once the daemon dies
    });
    // The upload starts when close() reaches the daemon: the staged file's
    // description then says "sealed" (its writer is done).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline && !Sealed(cache)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(Sealed(cache));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(::kill(pid->pid, SIGKILL), 0);
    writer.join();
    auto partial = s3_->Stat(key);
    if (partial.ok()) {
      EXPECT_EQ(partial->size, big.size()) << "a partial object is visible";
    } else {
      EXPECT_EQ(partial.status().code(), Code::kNotFound) << partial.status().ToString();
      ++interrupted;
    }
    RunGranary({"umount", "--run-dir", RunDir(), mp_});  // cleans up after the dead daemon
    if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
    // The next mount over the same cache finds the staged file and uploads it.
    MustMount(cache);
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      nlohmann::json st = Status();
      if (st.contains("writes") && st["writes"]["pending_files"].get<uint64_t>() == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    EXPECT_EQ(Status()["writes"]["pending_files"].get<uint64_t>(), 0u);
    auto done = s3_->ReadRange(key, 0, big.size() + 1);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->size(), big.size());
    EXPECT_TRUE(*done == big);
    EXPECT_EQ(UnfinishedUploads(), 0) << "the killed upload was not aborted";
    Unmount();
  }
  EXPECT_GE(interrupted, 1) << "no kill landed during an upload: the test did not test it";
}

TEST_F(S3WriteTest, KillWhileAFileIsBeingWrittenNeverUploadsThePartialFile) {
  const std::string cache = work_.path() + "/cache-staging";
  MustMount(cache, {"--no-restart"});  // the daemon's death ends the mount
  auto pid = ReadPidFile(RunDir(), mp_);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  int fd = ::open((mp_ + "/half.bin").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  const std::string chunk = testing::RandomBytes(1u << 20, 5);
  for (int i = 0; i < 48; ++i) ASSERT_TRUE(WriteAll(fd, chunk, static_cast<off_t>(i) << 20));
  // An appending writer: its first parts were sent already (streaming), as
  // parts of an upload that is not complete, so no object exists.
  EXPECT_EQ(UnfinishedUploads(), 1);
  ASSERT_EQ(::kill(pid->pid, SIGKILL), 0);  // the writer has not closed the file
  ::close(fd);
  RunGranary({"umount", "--run-dir", RunDir(), mp_});
  if (IsMountpoint(mp_)) UnmountFuse(mp_).IgnoreError();
  MustMount(cache);
  // The next mount aborts the upload the kill left (its id is in the staged
  // file's description), so its parts cost no storage.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (UnfinishedUploads() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(UnfinishedUploads(), 0);
  nlohmann::json st = Status();
  EXPECT_EQ(st["writes"]["pending_files"].get<uint64_t>(), 1u) << st.dump();
  EXPECT_EQ(st["writes"]["unclosed_files"].get<uint64_t>(), 1u) << st.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(s3_->Stat("ds/half.bin").status().code(), Code::kNotFound);  // never a partial object
  EXPECT_EQ(Slurp(mp_ + "/half.bin").size(), 48u << 20);  // what was written is still readable
  ProcessResult table = RunGranary({"status", mp_, "--run-dir", RunDir()});
  EXPECT_NE(table.out.find("never closed"), std::string::npos) << table.out;
  Unmount();
  // --discard-pending drops it.
  MustMount(cache, {"--discard-pending"});
  EXPECT_EQ(Status()["writes"]["pending_files"].get<uint64_t>(), 0u);
  EXPECT_FALSE(fs::exists(mp_ + "/half.bin"));
  EXPECT_EQ(s3_->Stat("ds/half.bin").status().code(), Code::kNotFound);
}

TEST_F(S3WriteTest, AForkedChildsCloseDoesNotUploadAHalfWrittenFile) {
  MustMount(work_.path() + "/cache-fork");
  const std::string data = testing::RandomBytes(20u << 20, 21);
  int fd = ::open((mp_ + "/forked.bin").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_TRUE(WriteAll(fd, data.substr(0, 12u << 20), 0));
  // A training job's launcher forks and execs (a data loader, a shell):
  // the child inherits the descriptor and closes it (here: plainly).
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fd);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_EQ(s3_->Stat("ds/forked.bin").status().code(), Code::kNotFound)
      << "the child's close uploaded";
  ASSERT_TRUE(WriteAll(fd, data.substr(12u << 20), 12 << 20));
  ASSERT_EQ(::close(fd), 0);  // the writer's own close uploads, and waits for it
  auto back = s3_->ReadRange("ds/forked.bin", 0, data.size() + 1);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
  EXPECT_EQ(UnfinishedUploads(), 0);
}

TEST_F(S3WriteTest, ASharedWritableMmapIsUploadedAtClose) {
  MustMount(work_.path() + "/cache-mmap");
  const size_t size = 3u << 20;
  std::string data = testing::RandomBytes(size, 22);
  int fd = ::open((mp_ + "/mapped.bin").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0) << strerror(errno);
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED) << strerror(errno);
  std::memcpy(m, data.data(), size);
  data[12345] = 'Z';
  static_cast<char*>(m)[12345] = 'Z';
  ASSERT_EQ(::msync(m, size, MS_SYNC), 0) << strerror(errno);
  ASSERT_EQ(::munmap(m, size), 0);
  ASSERT_EQ(::close(fd), 0);
  auto back = s3_->ReadRange("ds/mapped.bin", 0, size + 1);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
}

// Bytes of the file open as `fd` in the page cache, or nullopt where the
// kernel has no cachestat(2). It needs no mapping, so it also sees a
// write-only descriptor's file, and it opens nothing (an open of a written
// file drops its cache).
std::optional<uint64_t> CachedBytes(int fd) {
  const int64_t pages = CachedPages(fd, 0, 0);
  if (pages < 0) return std::nullopt;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

TEST_F(S3WriteTest, AWriteOnlyCheckpointLeavesNoCopyOfItsBytesInThePageCache) {
  // A 40 MiB checkpoint (5 parts) written the way torch.save writes: a
  // write-only descriptor, 1 MiB writes. Neither the mount's page cache nor
  // the staged file's may keep the bytes once they are at the origin: on a
  // training node that memory holds the dataset.
  const std::string cache = work_.path() + "/cache-pages";
  MustMount(cache);
  const std::string data = testing::RandomBytes(40u << 20, 23);
  int fd = ::open((mp_ + "/ckpt.pt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  for (size_t off = 0; off < data.size(); off += 1u << 20) {
    ASSERT_TRUE(WriteAll(fd, data.substr(off, 1u << 20), static_cast<off_t>(off)));
  }
  std::optional<uint64_t> mount_cached = CachedBytes(fd);
  if (!mount_cached) GTEST_SKIP() << "no cachestat(2) on this kernel: " << strerror(errno);
  EXPECT_EQ(*mount_cached, 0u) << "the mount cached a write-only descriptor's bytes";
  ASSERT_EQ(::close(fd), 0);
  auto back = s3_->ReadRange("ds/ckpt.pt", 0, data.size() + 1);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(*back == data);

  std::string staged;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    if (e.is_regular_file() && e.path().extension() == ".data" && e.file_size() == data.size()) {
      staged = e.path().string();
    }
  }
  ASSERT_FALSE(staged.empty()) << "no staged file of " << data.size() << " bytes under " << cache;
  int sfd = ::open(staged.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(sfd, 0) << strerror(errno);
  std::optional<uint64_t> staged_cached = CachedBytes(sfd);
  ::close(sfd);
  if (!staged_cached) GTEST_SKIP() << "no cachestat(2) on this kernel: " << strerror(errno);
  EXPECT_EQ(*staged_cached, 0u) << "sent parts stayed in the page cache";

  // Still readable through the mount (from the staged file).
  EXPECT_TRUE(Slurp(mp_ + "/ckpt.pt") == data);

  // A read-write descriptor keeps the kernel's cache (its reads and mmaps use it).
  fd = ::open((mp_ + "/rw.bin").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_TRUE(WriteAll(fd, data.substr(0, 4u << 20), 0));
  EXPECT_EQ(CachedBytes(fd).value_or(0), 4u << 20);
  ASSERT_EQ(::close(fd), 0);
}

// After close the file is in the mount's namespace and is read back from the
// staged copy with no origin request; /metrics counts the upload; another
// mount of the bucket (another node) sees the file after its next
// `granary sync`, not before; `granary sync` on the writer's mount folds it
// into the snapshot and the bytes stay the same.
TEST_F(S3WriteTest, AnUploadedFileIsReadBackWithoutTheOriginAndAnotherNodeSeesItAfterItsSync) {
  auto port = testing::FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  MustMount(work_.path() + "/cache-a", {"--metrics-addr", "127.0.0.1:" + std::to_string(*port)});
  const std::string mp_b = work_.path() + "/mnt-b", run_b = work_.path() + "/run-b";
  fs::create_directories(mp_b);
  ProcessResult mb =
      RunGranary({"mount", "s3://bucket/ds", mp_b, "--cache-dir", work_.path() + "/cache-b:1G",
                  "--run-dir", run_b, "--endpoint", moto_->endpoint()});
  ASSERT_EQ(mb.exit_code, 0) << mb.err;
  struct UnmountB {
    std::string mp, run;
    ~UnmountB() {
      RunGranary({"umount", "--run-dir", run, mp});
      if (IsMountpoint(mp)) UnmountFuse(mp).IgnoreError();
    }
  } unmount_b{mp_b, run_b};

  const std::string data = testing::RandomBytes((3u << 20) + 123, 24);
  ASSERT_EQ(::mkdir((mp_ + "/out").c_str(), 0755), 0) << strerror(errno);
  int fd = ::open((mp_ + "/out/result.bin").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_TRUE(WriteAll(fd, data, 0));
  ASSERT_EQ(::close(fd), 0);

  const uint64_t before = Status()["origin_requests"].get<uint64_t>();
  EXPECT_TRUE(Slurp(mp_ + "/out/result.bin") == data);
  EXPECT_EQ(Status()["origin_requests"].get<uint64_t>(), before) << "read back from the origin";
  ProcessResult metrics =
      RunProcess({"/usr/bin/curl", "-s", "http://127.0.0.1:" + std::to_string(*port) + "/metrics"});
  ASSERT_EQ(metrics.exit_code, 0) << metrics.err;
  EXPECT_EQ(testing::MetricSample(metrics.out, "granary_write_uploads_total"), 1) << metrics.out;
  EXPECT_EQ(testing::MetricSample(metrics.out, "granary_write_uploaded_bytes_total"), data.size());
  EXPECT_EQ(testing::MetricSample(metrics.out, "granary_write_pending_files"), 0);

  EXPECT_FALSE(fs::exists(mp_b + "/out/result.bin")) << "seen before the other node's sync";
  ProcessResult sb = RunGranary({"sync", mp_b, "--run-dir", run_b});
  ASSERT_EQ(sb.exit_code, 0) << sb.err;
  EXPECT_TRUE(Slurp(mp_b + "/out/result.bin") == data);

  ProcessResult sa = RunGranary({"sync", mp_, "--run-dir", RunDir()});
  ASSERT_EQ(sa.exit_code, 0) << sa.err;
  EXPECT_TRUE(Slurp(mp_ + "/out/result.bin") == data);
  EXPECT_EQ(Status()["writes"]["pending_files"].get<uint64_t>(), 0u);
}

// ---------------- over a posix directory ----------------

class PosixWriteTest : public WriteTest {
 protected:
  void SetUp() override {
    WriteTest::SetUp();
    if (IsSkipped()) return;
    src_ = work_.path() + "/src";
    fs::create_directories(src_ + "/train/c0");
    std::ofstream(src_ + "/train/c0/a.jpg") << "origin bytes";
  }
  void MustMount(const std::vector<std::string>& extra = {}) {
    ProcessResult r = Mount(src_, work_.path() + "/cache", extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::string src_;
};

int Errno(int rc) { return rc == 0 ? 0 : errno; }

TEST_F(PosixWriteTest, RefusedOperationsReturnTheDocumentedErrno) {
  MustMount({"--writable"});
  const std::string origin_file = mp_ + "/train/c0/a.jpg";
  EXPECT_EQ(::open(origin_file.c_str(), O_WRONLY | O_CLOEXEC), -1);
  EXPECT_EQ(errno, EPERM);  // overwriting an origin object needs --allow-overwrite
  EXPECT_EQ(Errno(::truncate(origin_file.c_str(), 0)), EPERM);
  EXPECT_EQ(Errno(::unlink(origin_file.c_str())), EPERM);  // --allow-delete
  EXPECT_EQ(Errno(::rmdir((mp_ + "/train").c_str())), ENOTEMPTY);
  EXPECT_EQ(Errno(::mkdir((mp_ + "/train").c_str(), 0755)), EEXIST);
  EXPECT_EQ(Errno(::symlink("x", (mp_ + "/link").c_str())), EPERM);
  std::ofstream(mp_ + "/new.txt") << "mine";
  EXPECT_EQ(Errno(::rename((mp_ + "/new.txt").c_str(), (mp_ + "/moved.txt").c_str())), EXDEV);
  EXPECT_EQ(Slurp(src_ + "/new.txt"), "mine");
  EXPECT_EQ(Errno(::unlink((mp_ + "/new.txt").c_str())), 0);  // this mount's file
  EXPECT_FALSE(fs::exists(src_ + "/new.txt"));
  EXPECT_EQ(Slurp(src_ + "/train/c0/a.jpg"), "origin bytes");
  Unmount();

  // The io_uring transport does not carry writes yet: refused with a clear error.
  ProcessResult uring =
      Mount(src_, work_.path() + "/cache", {"--writable", "--fuse-transport", "uring"});
  EXPECT_NE(uring.exit_code, 0);
  EXPECT_NE(uring.err.find("uring"), std::string::npos) << uring.err;
  EXPECT_FALSE(IsMountpoint(mp_));

  // A read-only mount answers EROFS; with the opt-ins, origin files can be replaced and deleted.
  MustMount();
  EXPECT_EQ(::open((mp_ + "/x").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  Unmount();
  MustMount({"--writable", "--allow-overwrite", "--allow-delete"});
  {
    std::ofstream out(origin_file, std::ios::app);
    out << " + appended";
  }
  EXPECT_EQ(Slurp(src_ + "/train/c0/a.jpg"), "origin bytes + appended");
  EXPECT_EQ(Errno(::unlink(origin_file.c_str())), 0);
  EXPECT_FALSE(fs::exists(src_ + "/train/c0/a.jpg"));
  EXPECT_FALSE(fs::exists(origin_file));
}

TEST_F(PosixWriteTest, AnOriginFailingMidUploadGivesEioAtCloseAndTheDataIsNotLost) {
  MustMount({"--writable"});
  ASSERT_EQ(::mkdir((mp_ + "/out").c_str(), 0755), 0);
  // The origin cannot take the upload: where the directory must go, a file.
  std::ofstream(src_ + "/out") << "in the way";
  int fd = ::open((mp_ + "/out/result.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::write(fd, "precious", 8), 8);
  EXPECT_EQ(Errno(::fsync(fd)), EIO);
  EXPECT_EQ(Errno(::close(fd)), EIO);
  nlohmann::json st = Status();
  EXPECT_EQ(st["writes"]["pending_files"].get<uint64_t>(), 1u) << st.dump();
  EXPECT_GE(st["writes"]["upload_failures"].get<uint64_t>(), 2u);
  EXPECT_EQ(Slurp(mp_ + "/out/result.txt"), "precious");  // still readable from staging
  // The origin recovers: the next close (or the next mount) uploads it.
  fs::remove(src_ + "/out");
  fd = ::open((mp_ + "/out/result.txt").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::write(fd, "!", 1), 1);
  EXPECT_EQ(Errno(::close(fd)), 0);
  EXPECT_EQ(Slurp(src_ + "/out/result.txt"), "precious!");
  EXPECT_EQ(Status()["writes"]["pending_files"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace granary
