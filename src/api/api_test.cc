// The native client API against a real local origin (a directory): the
// in-process client, an attached client through Serve()'s socket, the
// descriptor passing, eviction under a held descriptor, the prefetcher's
// order and window, and the errors a caller branches on.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "api/server.h"
#include "api/service.h"
#include "dataset/dataset.h"
#include "granary/client.h"

namespace granary {
namespace {

namespace fs = std::filesystem;

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary-api-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (int i = 0; i < 40; ++i) {
      std::string rel = "train/c" + std::to_string(i % 4) + "/img" + std::to_string(i) + ".jpg";
      files_[rel] = Bytes(1000 + 977 * i, i);
    }
    files_["big.bin"] = Bytes(5 * 1024 * 1024 + 123, 99);  // several 1 MiB blocks
    files_["empty"] = "";
    for (const auto& [rel, data] : files_) {
      fs::create_directories(fs::path(Src() + "/" + rel).parent_path());
      std::ofstream(Src() + "/" + rel, std::ios::binary) << data;
    }
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Src() const { return dir_ + "/src"; }
  std::string Cache() const { return dir_ + "/cache"; }
  OpenOptions Opts() const {
    OpenOptions o;
    o.cache_dirs = {Cache() + ":1G"};
    return o;
  }
  void ExpectAllEqual(Client& c) {
    for (const auto& [rel, data] : files_) {
      auto got = c.ReadWhole(rel);
      ASSERT_TRUE(got.ok()) << rel << ": " << got.status().ToString();
      EXPECT_EQ(*got == data, true) << rel;
    }
  }

  Result<std::unique_ptr<Dataset>> OpenDataset(bool store_background = true) {
    DatasetOptions d;
    d.source = Src();
    d.cache_dirs = {TierLevel{.path = Cache(), .quota = 1ull << 30}};
    d.store_background = store_background;
    return Dataset::Open(std::move(d));
  }

  // A dataset over Src() served on an attach socket as a daemon serves it;
  // the server, the service and the dataset stop when it is destroyed (after
  // the clients a test made later).
  struct Served {
    std::unique_ptr<Dataset> ds;
    std::unique_ptr<ApiService> service;
    std::unique_ptr<ApiServer> server;
    std::string dir;  // the socket's
    CacheEngine& engine() { return ds->engine(); }
    const std::string& socket() const { return server->socket_path(); }
    ~Served() {
      server.reset();
      service.reset();
      if (ds) EXPECT_TRUE(ds->Close().ok());
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  };
  std::unique_ptr<Served> Serve(bool store_background = true) {
    auto ds = OpenDataset(store_background);
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    if (!ds.ok()) return nullptr;
    auto s = std::make_unique<Served>();
    s->ds = std::move(*ds);
    s->service = std::make_unique<ApiService>(&s->ds->engine());
    char tmpl[] = "/tmp/granary-api-sock-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return nullptr;
    s->dir = tmpl;
    auto started = ApiServer::Start(s->service.get(), /*control=*/nullptr, s->dir + "/api.sock");
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (!started.ok()) return nullptr;
    s->server = std::move(*started);
    return s;
  }

  // `c` reads `rel` whole and gets the origin's bytes.
  bool ReadsRight(Client& c, const std::string& rel) {
    auto got = c.ReadWhole(rel);
    return got.ok() && *got == files_[rel];
  }

  std::string dir_;
  std::map<std::string, std::string> files_;
};

TEST_F(ApiTest, InProcessReadsEqualTheOriginAndStatListComeFromTheSnapshot) {
  auto c = Client::Open(Src(), Opts());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectAllEqual(**c);
  ExpectAllEqual(**c);  // the second time from the descriptor cache

  // Ranges, the end of the file, past the end.
  const std::string& big = files_["big.bin"];
  std::string buf(3000, '\0');
  auto n = (*c)->ReadAt("/big.bin", 1024 * 1024 - 1000, std::span<char>(buf.data(), buf.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3000u);
  EXPECT_EQ(buf, big.substr(1024 * 1024 - 1000, 3000));
  n = (*c)->ReadAt("big.bin", big.size() - 10, std::span<char>(buf.data(), buf.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 10u);
  n = (*c)->ReadAt("big.bin", big.size() + 5, std::span<char>(buf.data(), buf.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  auto st = (*c)->Stat("train/c1/img5.jpg");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, files_["train/c1/img5.jpg"].size());
  EXPECT_FALSE(st->is_dir);
  EXPECT_EQ(st->path, "train/c1/img5.jpg");
  auto top = (*c)->List("");
  ASSERT_TRUE(top.ok());
  ASSERT_EQ(top->size(), 3u);  // big.bin, empty, train
  EXPECT_EQ((*top)[2].path, "train");
  EXPECT_TRUE((*top)[2].is_dir);
  auto all = (*c)->List("train", true);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 40u);
  for (const FileInfo& f : *all) EXPECT_EQ(files_.count(f.path), 1u) << f.path;
  DatasetInfo info = (*c)->Info();
  EXPECT_EQ(info.files, files_.size());
  EXPECT_FALSE(info.attached);
}

TEST_F(ApiTest, ErrorsNameThePathAndCarryTheCodeACallerBranchesOn) {
  auto c = Client::Open(Src(), Opts());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->ReadWhole("train/nope.jpg");
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("train/nope.jpg"), std::string::npos);
  EXPECT_EQ((*c)->ReadWhole("train").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->ReadWhole("train/../big.bin").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->List("big.bin").status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Prefetch({"train/c0/img0.jpg"}, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Prefetch({"missing"}, 4).code(), Code::kNotFound);

  // An origin that does not exist, a bad cache dir quota.
  EXPECT_FALSE(Client::Open(dir_ + "/no-such-dir", Opts()).ok());
  OpenOptions bad = Opts();
  bad.cache_dirs = {Cache() + ":lots"};
  auto b = Client::Open(Src(), bad);
  EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
  EXPECT_NE(b.status().message().find(":lots"), std::string::npos);
  // The cache dir is locked by the first client.
  EXPECT_FALSE(Client::Open(Src(), Opts()).ok());
  // Attach to nothing.
  EXPECT_EQ(Client::Attach(dir_ + "/nothing").status().code(), Code::kNotFound);
}

TEST_F(ApiTest, AttachedThroughServeReadsByDescriptorAndSeesTheSameCache) {
  auto owner = Client::Open(Src(), Opts());
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  auto sock = (*owner)->Serve();
  ASSERT_TRUE(sock.ok()) << sock.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(sock->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  AttachOptions ao;
  ao.connections = 2;
  ao.max_open_files = 3;  // fewer than the files: descriptors are dropped and reopened
  auto c = Client::Attach(*sock, ao);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Info().attached);
  // Many threads through two connections.
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&] {
      for (const auto& [rel, data] : files_) {
        auto got = (*c)->ReadWhole(rel);
        if (!got.ok() || *got != data) ++bad;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  // What the attached client fetched is in the owner's cache.
  auto status = (*owner)->StatusJson();
  ASSERT_TRUE(status.ok());
  auto j = nlohmann::json::parse(*status);
  EXPECT_EQ(j["cached_files"].get<uint64_t>(), files_.size())
      << *status;  // the empty one counts as cached

  auto st2 = (*c)->Stat("train/c2");
  ASSERT_TRUE(st2.ok());
  EXPECT_TRUE(st2->is_dir);
  EXPECT_EQ((*c)->ReadWhole("nope").status().code(), Code::kNotFound);
  EXPECT_EQ((*c)->Serve().status().code(), Code::kUnimplemented);
  auto load = (*c)->Load("");
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->files_cached, load->files_requested);
}

template <typename F>
bool WaitUntil(F f, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

// The rule docs/api.md states: a descriptor a client holds keeps reading the
// right bytes after the object is evicted and even re-cached at the same path.
TEST_F(ApiTest, ADescriptorHeldAcrossEvictionStillReadsTheRightBytes) {
  auto served = Serve(/*store_background=*/false);
  ASSERT_TRUE(served);
  CacheEngine& engine = served->engine();
  auto c = Client::Attach(served->socket());
  ASSERT_TRUE(c.ok()) << c.status().ToString();

  const std::string rel = "train/c3/img7.jpg";
  auto first = (*c)->ReadWhole(rel);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(*first, files_[rel]);
  auto snap = engine.snapshot();
  uint64_t ino = *snap->FindPath(rel);
  auto path = engine.CachedFilePath(*snap, ino);
  ASSERT_TRUE(path.ok());
  struct stat before {};
  ASSERT_EQ(::stat(path->c_str(), &before), 0);

  ASSERT_TRUE(engine.store().Remove(engine.KeyOf(*snap, *snap->Get(ino))).ok());
  EXPECT_FALSE(engine.IsCached(*snap, ino));
  auto again = (*c)->ReadWhole(rel);  // the held descriptor: the unlinked file
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, files_[rel]);

  // Cached again (a new file at the same path): the old descriptor still reads right.
  // (A Fetch right after the drop can join the finished flight that cached
  // it the first time and return at once: fetch until a new file is complete.)
  ASSERT_TRUE(WaitUntil([&] {
    auto refetched = engine.Fetch(snap, ino);
    return refetched.ok() && *refetched && engine.IsCached(*snap, ino);
  }));
  auto third = (*c)->ReadWhole(rel);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(*third, files_[rel]);
  ASSERT_TRUE((*c)->Refresh().ok());
  auto fourth = (*c)->ReadWhole(rel);
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(*fourth, files_[rel]);
}

// An attached client opens the complete cache files of small files itself
// (resolving paths in the daemon's snapshot) instead of asking the daemon for
// each, over more files than it keeps descriptors for, and tells the daemon
// about those reads in batches (the prefetcher's position moves).
TEST_F(ApiTest, AttachedClientOpensCachedFilesItselfAndTellsTheDaemon) {
  auto served = Serve();
  ASSERT_TRUE(served);
  ApiService& service = *served->service;
  std::vector<std::string> order;
  for (const auto& [rel, data] : files_)
    if (rel.starts_with("train/")) order.push_back(rel);

  // Asking the daemon: every file's first read is an open.
  AttachOptions asking;
  asking.direct = false;
  auto a = Client::Attach(served->socket(), asking);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (const std::string& rel : order) ASSERT_TRUE(ReadsRight(**a, rel)) << rel;
  EXPECT_EQ(service.counters().opens, order.size());
  a->reset();

  // Direct: the cached files are read without an open, by 8 threads, with
  // descriptors for 3 files only (each file opened again and again).
  AttachOptions direct;
  direct.connections = 2;
  direct.max_open_files = 3;
  auto c = Client::Attach(served->socket(), direct);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  ASSERT_TRUE((*c)->Prefetch(order, 4).ok());
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&] {
      for (const std::string& rel : order) {
        auto got = (*c)->ReadWhole(rel);
        if (!got.ok() || *got != files_[rel]) ++bad;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(service.counters().opens, order.size());  // none since the first client's
  EXPECT_EQ((*c)->PrefetchStatus().position, order.size());
  EXPECT_GE(service.counters().direct_reads, order.size());
  // Into the caller's memory, sized by the file; a buffer too short is refused.
  std::vector<char> mine;
  const std::string& img = files_["train/c1/img5.jpg"];
  auto into = (*c)->ReadWholeInto("train/c1/img5.jpg", [&](uint64_t n) {
    mine.resize(n);
    return std::span<char>(mine);
  });
  ASSERT_TRUE(into.ok()) << into.status().ToString();
  EXPECT_EQ(*into, img.size());
  EXPECT_TRUE(std::string(mine.begin(), mine.end()) == img);
  EXPECT_EQ((*c)->ReadWholeInto("train/c1/img5.jpg",
                                [&](uint64_t n) { return std::span<char>(mine).first(n - 1); })
                .status()
                .code(),
            Code::kInvalidArgument);
  // A file over one block is a sparse cache file: the daemon hands it out.
  EXPECT_TRUE(ReadsRight(**c, "big.bin"));
  EXPECT_EQ(service.counters().opens, order.size() + 1);
  EXPECT_EQ((*c)->ReadWhole("train/none.jpg").status().code(), Code::kNotFound);
}

// A cache file left by an earlier run is read without the daemon only once
// the daemon verified it in this run: a file damaged while no daemon ran is
// caught by the daemon's checksum and fetched again, never handed out.
TEST_F(ApiTest, ACacheFileFromAnEarlierRunIsReadDirectlyOnlyOnceVerified) {
  const std::string damaged = "train/c2/img6.jpg", intact = "train/c3/img7.jpg";
  std::string damaged_path;
  {
    auto ds = OpenDataset();
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    CacheEngine& engine = (*ds)->engine();
    auto snap = engine.snapshot();
    for (const std::string& rel : {damaged, intact}) {
      auto fetched = engine.Fetch(snap, *snap->FindPath(rel));
      ASSERT_TRUE(fetched.ok() && *fetched) << rel;
    }
    auto path = engine.CachedFilePath(*snap, *snap->FindPath(damaged));
    ASSERT_TRUE(path.ok());
    damaged_path = *path;
    ASSERT_TRUE((*ds)->Close().ok());
  }
  {  // One byte flipped, the size kept.
    std::fstream f(damaged_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put(static_cast<char>(files_[damaged][10] ^ 0x5a));
  }
  auto served = Serve();
  ASSERT_TRUE(served);
  ApiService& service = *served->service;
  auto c = Client::Attach(served->socket());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(ReadsRight(**c, damaged));
  EXPECT_TRUE(ReadsRight(**c, intact));
  EXPECT_EQ(service.counters().opens, 2u);  // both asked the daemon
  EXPECT_EQ(served->engine().store().stats().checksum_failures, 1u);
  // Verified (and the damaged one fetched again) in this run: a new client
  // reads both without the daemon, once the fetched copy is admitted (the
  // first read may have been served before it was).
  CacheEngine& engine = served->engine();
  auto snap = engine.snapshot();
  ASSERT_TRUE(WaitUntil([&] { return engine.IsCached(*snap, *snap->FindPath(damaged)); }));
  c->reset();
  c = Client::Attach(served->socket());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(ReadsRight(**c, damaged));
  EXPECT_TRUE(ReadsRight(**c, intact));
  EXPECT_EQ(service.counters().opens, 2u);
}

// After `granary sync` a client reading without the daemon reads a file
// changed at the origin in its new version, and learns the new version from
// its next batch of reads: it maps the new snapshot and reads the new
// version's cache file without the daemon too.
TEST_F(ApiTest, AClientReadingWithoutTheDaemonFollowsASync) {
  auto served = Serve();
  ASSERT_TRUE(served);
  ApiService& service = *served->service;
  const std::string changed = "train/c0/img4.jpg", other = "train/c1/img5.jpg";
  auto warm = Client::Attach(served->socket());
  ASSERT_TRUE(warm.ok());
  ASSERT_TRUE(ReadsRight(**warm, changed));  // its version 1 is cached
  ASSERT_TRUE(ReadsRight(**warm, other));
  auto c = Client::Attach(served->socket());  // maps version 1
  ASSERT_TRUE(c.ok());

  // The origin changes (new size: a new etag) and the dataset syncs.
  files_[changed] = Bytes(4321, 77);
  std::ofstream(Src() + "/" + changed, std::ios::binary | std::ios::trunc) << files_[changed];
  auto sync = served->ds->Sync();
  ASSERT_TRUE(sync.ok()) << sync.status().ToString();
  ASSERT_EQ(served->engine().snapshot()->version(), 2u);

  auto fresh = Client::Attach(served->socket());  // maps version 2
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(ReadsRight(**fresh, changed));  // its version 2 is cached
  const uint64_t opens = service.counters().opens;
  ASSERT_TRUE(ReadsRight(**c, other));  // without the daemon, from version 1
  (*c)->PrefetchStatus();               // sends the batch: the reply names version 2
  EXPECT_TRUE(ReadsRight(**c, changed));
  EXPECT_EQ(service.counters().opens, opens);
}

TEST_F(ApiTest, PrefetchFetchesInTheGivenOrderAndStaysWithinTheWindow) {
  auto c = Client::Open(Src(), Opts());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::string> order;
  for (const auto& [rel, data] : files_)
    if (rel.starts_with("train/")) order.push_back(rel);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  ASSERT_TRUE((*c)->Prefetch(order, 5).ok());
  // Nobody reads: exactly the first `window` files of the order get fetched.
  ASSERT_TRUE(WaitUntil([&] { return (*c)->PrefetchStatus().fetched >= 5; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  PrefetchProgress p = (*c)->PrefetchStatus();
  EXPECT_EQ(p.fetched, 5u);
  EXPECT_EQ(p.queued, order.size());
  auto status = [&] { return nlohmann::json::parse(*(*c)->StatusJson()); };
  EXPECT_EQ(status()["cached_files"].get<uint64_t>(), 5u + 1);  // + the empty file
  // Reading the order moves the window; every read is right, and the files
  // past the window were fetched by the prefetcher, ahead of their reader.
  for (size_t i = 0; i < order.size(); ++i) {
    auto got = (*c)->ReadWhole(order[i]);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, files_[order[i]]);
    if (i + 5 < order.size()) {
      ASSERT_TRUE(WaitUntil([&] {
        return (*c)->PrefetchStatus().fetched >= std::min(order.size(), i + 6);
      })) << "after reading "
          << i + 1 << " files";
    }
  }
  p = (*c)->PrefetchStatus();
  EXPECT_EQ(p.fetched, order.size());
  EXPECT_EQ(p.position, order.size());
  // A second epoch over a warm cache fetches nothing.
  ASSERT_TRUE((*c)->Prefetch(order, 5).ok());
  ASSERT_TRUE(WaitUntil([&] { return (*c)->PrefetchStatus().skipped >= 5; }));
  EXPECT_EQ((*c)->PrefetchStatus().fetched, order.size());
}

TEST_F(ApiTest, LoadWarmsEverythingAndStatusMatchesTheCli) {
  auto c = Client::Open(Src(), Opts());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->Load("train");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_requested, 40u);
  EXPECT_EQ(r->files_cached, 40u);
  EXPECT_EQ((*c)->Load("nope").status().code(), Code::kInvalidArgument);
  auto j = nlohmann::json::parse(*(*c)->StatusJson());
  EXPECT_EQ(j["cached_files"].get<uint64_t>(), 40u + 1);  // + the empty file
  EXPECT_EQ(j["ufs_files"].get<uint64_t>(), files_.size());
}

}  // namespace
}  // namespace granary
