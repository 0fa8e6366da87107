// Tests for PosixUfs against real temporary directories.
#include "ufs/posix_ufs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "testing/temp_dir.h"
#include "ufs/open.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

// A temporary directory that also names its files as this connector's keys.
class TempDir : public testing::TempDir {
 public:
  // The key of `rel` inside this directory (absolute path without the leading slash).
  std::string Key(const std::string& rel = "") const { return path().substr(1) + "/" + rel; }
};

class PosixUfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ufs = NewPosixUfs(Uri{.scheme = Scheme::kFile, .scheme_text = "file"}, {});
    ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
    ufs_ = std::move(*ufs);
  }

  // Every key and common prefix of a listing, following continuation tokens.
  std::vector<std::string> ListKeys(const std::string& prefix, const std::string& delimiter,
                                    int max_keys = 1000, int* pages = nullptr) {
    std::vector<std::string> out;
    ListRequest req{.prefix = prefix, .delimiter = delimiter, .max_keys = max_keys};
    int n = 0;
    do {
      auto page = ufs_->List(req);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) break;
      for (const auto& o : page->objects) out.push_back(o.key);
      for (const auto& p : page->common_prefixes) out.push_back(p);
      req.continuation_token = page->next_token;
      ++n;
    } while (!req.continuation_token.empty() && n < 10000);
    if (pages != nullptr) *pages = n;
    return out;
  }

  TempDir dir_;
  std::unique_ptr<UnderStorage> ufs_;
};

TEST_F(PosixUfsTest, RecursiveListingIsSortedLikeS3) {
  // "a-b" sorts before "a/x" bytewise ('-' < '/'), though a directory walk
  // would naturally visit "a" first.
  dir_.Write("a/x", "1");
  dir_.Write("a-b", "22");
  dir_.Write("a/sub/y", "333");
  dir_.Write("b", "");
  std::vector<std::string> want = {dir_.Key("a-b"), dir_.Key("a/sub/y"), dir_.Key("a/x"),
                                   dir_.Key("b")};
  EXPECT_EQ(ListKeys(dir_.Key(), ""), want);
}

TEST_F(PosixUfsTest, DelimiterGivesCommonPrefixes) {
  dir_.Write("train/cat/1.JPEG", "x");
  dir_.Write("train/dog/1.JPEG", "x");
  dir_.Write("train/labels.txt", "x");
  auto page = ufs_->List({.prefix = dir_.Key("train/"), .delimiter = "/"});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, dir_.Key("train/labels.txt"));
  EXPECT_EQ(page->common_prefixes,
            (std::vector<std::string>{dir_.Key("train/cat/"), dir_.Key("train/dog/")}));
  EXPECT_TRUE(page->next_token.empty());
}

TEST_F(PosixUfsTest, PrefixWithoutSlashFiltersNames) {
  dir_.Write("train/1", "x");
  dir_.Write("train2/1", "x");
  dir_.Write("test/1", "x");
  EXPECT_EQ(ListKeys(dir_.Key("tra"), "/"),
            (std::vector<std::string>{dir_.Key("train/"), dir_.Key("train2/")}));
  EXPECT_EQ(ListKeys(dir_.Key("train"), ""),
            (std::vector<std::string>{dir_.Key("train/1"), dir_.Key("train2/1")}));
}

TEST_F(PosixUfsTest, PagingReturnsEveryKeyOnce) {
  std::vector<std::string> want;
  for (int d = 0; d < 7; ++d) {
    for (int f = 0; f < 13; ++f) {
      std::string rel = "d" + std::to_string(d) + "/f" + std::to_string(f);
      dir_.Write(rel, rel);
      want.push_back(dir_.Key(rel));
    }
  }
  std::sort(want.begin(), want.end());
  int pages = 0;
  EXPECT_EQ(ListKeys(dir_.Key(), "", 10, &pages), want);
  EXPECT_EQ(pages, 10);  // 91 keys, 10 per page
  // With a delimiter the seven directories page too.
  EXPECT_EQ(ListKeys(dir_.Key(), "/", 3, &pages).size(), 7u);
  EXPECT_EQ(pages, 3);
}

TEST_F(PosixUfsTest, PagingThroughALargeFlatDirectory) {
  std::vector<std::string> want;
  for (int i = 0; i < 2500; ++i) {
    std::string rel = "flat/" + std::to_string(i * 7919 % 10007);
    dir_.Write(rel, "");
    want.push_back(dir_.Key(rel));
  }
  std::sort(want.begin(), want.end());
  int pages = 0;
  EXPECT_EQ(ListKeys(dir_.Key("flat/"), "", 97, &pages), want);
  EXPECT_EQ(pages, 26);
  EXPECT_EQ(ListKeys(dir_.Key("flat/"), "/", 1000, &pages), want);
  EXPECT_EQ(pages, 3);
}

TEST_F(PosixUfsTest, FirstPageSeesNewFiles) {
  dir_.Write("d/a", "");
  EXPECT_EQ(ListKeys(dir_.Key("d/"), "").size(), 1u);
  dir_.Write("d/b", "");  // possibly within the same mtime tick as the first write
  EXPECT_EQ(ListKeys(dir_.Key("d/"), "").size(), 2u);
}

TEST_F(PosixUfsTest, MissingDirectoryListsEmpty) {
  auto page = ufs_->List({.prefix = dir_.Key("nope/")});
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->objects.empty());
  EXPECT_TRUE(page->next_token.empty());
}

TEST_F(PosixUfsTest, UnsupportedDelimiterIsRejected) {
  auto page = ufs_->List({.prefix = dir_.Key(), .delimiter = "|"});
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), Code::kInvalidArgument);
  EXPECT_NE(page.status().message().find("'|'"), std::string::npos);
}

TEST_F(PosixUfsTest, StatGivesSizeMtimeAndEtag) {
  dir_.Write("f", "hello");
  struct stat st {};
  ASSERT_EQ(::stat((dir_.path() + "/f").c_str(), &st), 0);
  auto info = ufs_->Stat(dir_.Key("f"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key, dir_.Key("f"));
  EXPECT_EQ(info->size, 5u);
  int64_t mtime = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
  EXPECT_EQ(info->mtime_ns, mtime);
  EXPECT_EQ(info->etag, std::to_string(mtime) + "-5");
}

TEST_F(PosixUfsTest, MissingPathsAreNotFoundNamingThePath) {
  auto info = ufs_->Stat(dir_.Key("missing"));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Code::kNotFound);
  EXPECT_NE(info.status().message().find(dir_.path() + "/missing"), std::string::npos);
  std::vector<char> buf(10);
  auto n = ufs_->Read(dir_.Key("missing"), 0, buf);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kNotFound);
  dir_.Write("d/f", "x");
  auto d = ufs_->Stat(dir_.Key("d"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos);
}

TEST_F(PosixUfsTest, ReadsAreByteExact) {
  std::string data(3 * 1024 * 1024 + 17, '\0');
  std::mt19937 rng(42);
  for (char& c : data) c = static_cast<char>(rng());
  dir_.Write("blob", data);
  auto all = ufs_->ReadRange(dir_.Key("blob"), 0, data.size());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == data);
  auto mid = ufs_->ReadRange(dir_.Key("blob"), 1'000'001, 4096);
  ASSERT_TRUE(mid.ok());
  EXPECT_TRUE(*mid == data.substr(1'000'001, 4096));
  auto tail = ufs_->ReadRange(dir_.Key("blob"), data.size() - 5, 100);  // short at the end
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(*tail == data.substr(data.size() - 5));
  auto past = ufs_->ReadRange(dir_.Key("blob"), data.size() + 10, 100);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
}

TEST_F(PosixUfsTest, ReadWithAnotherEtagIsStale) {
  dir_.Write("f", "version one");
  auto st = ufs_->Stat(dir_.Key("f"));
  ASSERT_TRUE(st.ok());
  std::string buf(64, '\0');
  auto ok = ufs_->Read(dir_.Key("f"), 0, std::span<char>(buf.data(), buf.size()), st->etag);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, 11u);
  auto stale = ufs_->Read(dir_.Key("f"), 0, std::span<char>(buf.data(), buf.size()), "1-11");
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), Code::kStale) << stale.status().ToString();
}

TEST_F(PosixUfsTest, SymlinksAreFollowedAndBrokenOnesSkipped) {
  dir_.Write("real/f", "abc");
  fs::create_symlink(dir_.path() + "/real/f", dir_.path() + "/link-file");
  fs::create_symlink(dir_.path() + "/real", dir_.path() + "/link-dir");
  fs::create_symlink(dir_.path() + "/nowhere", dir_.path() + "/broken");
  fs::create_symlink(dir_.path(), dir_.path() + "/real/loop");  // a cycle back to the top
  std::vector<std::string> want = {dir_.Key("link-dir/f"), dir_.Key("link-file"),
                                   dir_.Key("real/f")};
  EXPECT_EQ(ListKeys(dir_.Key(), ""), want);
  auto info = ufs_->Stat(dir_.Key("link-file"));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 3u);
}

TEST_F(PosixUfsTest, ListAllWalksInParallel) {
  for (int d = 0; d < 20; ++d) dir_.Write("p" + std::to_string(d) + "/x/y", "z");
  auto all = ufs_->ListAll(dir_.Key(), 4);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 20u);
}

TEST_F(PosixUfsTest, UnknownOptionsAreRejected) {
  UfsOptions opts{.options = {{"endpoint", "http://x"}}};
  auto ufs = NewPosixUfs(Uri{.scheme = Scheme::kFile}, opts);
  ASSERT_FALSE(ufs.ok());
  EXPECT_NE(ufs.status().message().find("'endpoint'"), std::string::npos);
}

// A FIFO with no writer stands in for a file on a hung NFS server: open(2)
// blocks until a writer comes. Release() plays the server coming back.
class HungFile {
 public:
  explicit HungFile(const TempDir& dir, const std::string& rel = "hung")
      : path_(dir.path() + "/" + rel), key_(dir.Key(rel)) {
    EXPECT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  }
  ~HungFile() { Release(); }
  const std::string& path() const { return path_; }
  const std::string& key() const { return key_; }
  // Lets every reader blocked in open(2) go on (each then sees a FIFO, not a
  // regular file, and fails). Retries until one is blocked, at most 30 s.
  void Release() {
    for (int i = 0; i < 300 && !released_; ++i) {
      int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) {
        ::close(fd);
        released_ = true;
        return;
      }
      if (errno != ENXIO) return;  // ENXIO: no reader yet
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

 private:
  std::string path_;
  std::string key_;
  bool released_ = false;
};

std::unique_ptr<UnderStorage> PosixWith(std::map<std::string, std::string> options) {
  auto ufs = NewPosixUfs(Uri{.scheme = Scheme::kFile}, UfsOptions{.options = std::move(options)});
  EXPECT_TRUE(ufs.ok()) << ufs.status().ToString();
  return ufs.ok() ? std::move(*ufs) : nullptr;
}

// A read of a file on a hung NFS server ends with an error naming
// the path after requestTimeout, instead of blocking the reader for ever.
TEST(PosixUfsDeadline, ReadOfAHungFileFailsWithinTheTimeout) {
  TempDir dir;
  HungFile hung(dir);
  auto ufs = PosixWith({{"requestTimeout", "500ms"}});
  ASSERT_NE(ufs, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  auto read = std::async(std::launch::async, [&] { return ufs->ReadRange(hung.key(), 0, 16); });
  // Without a deadline the read never returns: let it go after 30 s so the
  // test fails instead of hanging.
  if (read.wait_for(std::chrono::seconds(30)) != std::future_status::ready) hung.Release();
  auto r = read.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  ASSERT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  EXPECT_EQ(r.status().message(), "origin read of " + hung.path() + " did not finish within 0.5 s");
}

// Threads stuck in a hung origin are capped: past maxStuckCalls,
// calls fail at once (no new thread parks in the kernel), and once the server
// comes back the stuck calls drain and reads work again.
TEST(PosixUfsDeadline, StuckCallsAreCappedAndDrainWhenTheOriginRecovers) {
  TempDir dir;
  dir.Write("ok.txt", "fine");
  HungFile hung(dir);
  auto ufs = PosixWith({{"requestTimeout", "300ms"}, {"maxStuckCalls", "1"}});
  ASSERT_NE(ufs, nullptr);
  auto first = std::async(std::launch::async, [&] { return ufs->ReadRange(hung.key(), 0, 16); });
  if (first.wait_for(std::chrono::seconds(30)) != std::future_status::ready) hung.Release();
  EXPECT_EQ(first.get().status().code(), Code::kUnavailable);

  auto refused = ufs->ReadRange(dir.Key("ok.txt"), 0, 4);
  ASSERT_EQ(refused.status().code(), Code::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("refused, 1 earlier origin calls are still stuck"),
            std::string::npos)
      << refused.status().message();

  hung.Release();
  Result<std::string> again = Unavailable("not tried");
  for (int i = 0; i < 300 && !again.ok(); ++i) {
    again = ufs->ReadRange(dir.Key("ok.txt"), 0, 4);
    if (!again.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, "fine");
}

TEST(PosixUfsDeadline, BadDeadlineOptionsAreRejected) {
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"requestTimeout", "soon"}, {"maxStuckCalls", "0"}, {"maxStuckCalls", "x"}}) {
    auto ufs = NewPosixUfs(Uri{.scheme = Scheme::kFile}, UfsOptions{.options = {{k, v}}});
    ASSERT_FALSE(ufs.ok()) << k << "=" << v;
    EXPECT_NE(ufs.status().message().find(k), std::string::npos) << ufs.status().message();
  }
}

// Writes: a staged file lands under a temporary name and is
// renamed into place: readers see the old file or the whole new one.
TEST_F(PosixUfsTest, WriteReplacesTheFileWholeAndLeavesNoTemporaryName) {
  TempDir src, staged;
  src.Write("log/old.txt", "old contents");
  staged.Write("s", std::string(3 << 20, 'n') + "tail");
  int fd = ::open((staged.path() + "/s").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const uint64_t size = (3 << 20) + 4;
  auto info = ufs_->Write(src.Key("log/old.txt"), fd, size);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, size);
  auto back = ufs_->ReadRange(src.Key("log/old.txt"), 0, size + 1);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), size);
  EXPECT_EQ(back->substr(back->size() - 4), "tail");
  // A new file in a new directory.
  info = ufs_->Write(src.Key("ckpt/e1/model.pt"), fd, 10);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(*ufs_->ReadRange(src.Key("ckpt/e1/model.pt"), 0, 100), "nnnnnnnnnn");

  // A staged file shorter than claimed: the target keeps its old bytes and
  // no temporary file stays behind.
  info = ufs_->Write(src.Key("log/old.txt"), fd, size + 100);
  EXPECT_FALSE(info.ok());
  EXPECT_EQ(ufs_->ReadRange(src.Key("log/old.txt"), 0, size + 1)->size(), size);
  ::close(fd);
  int entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(src.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find(".granary-"), std::string::npos) << e.path();
  }
  EXPECT_EQ(entries, 5);  // log, log/old.txt, ckpt, ckpt/e1, ckpt/e1/model.pt

  EXPECT_TRUE(ufs_->Delete(src.Key("ckpt/e1/model.pt")).ok());
  EXPECT_FALSE(fs::exists(src.path() + "/ckpt/e1/model.pt"));
  EXPECT_TRUE(ufs_->Delete(src.Key("ckpt/e1/model.pt")).ok());  // gone already: fine
  EXPECT_EQ(ufs_->stats().write_requests, 3u);
}

TEST(HttpUfsWrite, AnHttpOriginIsReadOnly) {
  auto uri = ParseUri("http://127.0.0.1:9/data");
  ASSERT_TRUE(uri.ok());
  auto ufs = OpenUnderStorage(*uri, {});
  ASSERT_TRUE(ufs.ok()) << ufs.status().ToString();
  EXPECT_EQ((*ufs)->Write("data/x", 0, 1).status().code(), Code::kUnimplemented);
  EXPECT_EQ((*ufs)->Delete("data/x").code(), Code::kUnimplemented);
}

}  // namespace
}  // namespace granary
