// Smoke tests of the benchmark tools gen_imagenet and granary_reader, run as
// the user runs them (separate processes): a small generated set is a valid,
// deterministic PaddleClas tree of decodable JPEGs with ImageNet-like sizes,
// and the reader reads all of it every epoch.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "bench_process.h"

namespace granary::bench_test {
namespace {

namespace fs = std::filesystem;
constexpr int kCount = 300;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(ReadFile(path)); }

RunResult Generate(const std::string& out, int count, int seed, int threads,
                   const std::string& json = "") {
  std::vector<std::string> argv = {GEN_IMAGENET_PATH,
                                   "--count",
                                   std::to_string(count),
                                   "--seed",
                                   std::to_string(seed),
                                   "--out",
                                   out,
                                   "--threads",
                                   std::to_string(threads),
                                   "--quiet"};
  if (!json.empty()) argv.insert(argv.end(), {"--json", json});
  return RunProgram(argv);
}

// Every regular file under `root`, relative path -> bytes.
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), root).string()] = ReadFile(e.path());
  }
  return files;
}

class GenImagenetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    RunResult r = Generate(dir_->path() + "/a", kCount, 7, 2, dir_->path() + "/gen.json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Root() { return dir_->path() + "/a"; }
  static ScratchDir* dir_;
};
ScratchDir* GenImagenetTest::dir_ = nullptr;

TEST_F(GenImagenetTest, WritesTheRequestedCountWithImageNetLikeSizes) {
  nlohmann::json j = ReadJson(dir_->path() + "/gen.json");
  EXPECT_EQ(j["count"], kCount);
  EXPECT_EQ(j["classes"], kCount);  // default min(1000, count)
  // ImageNet: mean ~110 KB, median ~90-100 KB. 300 samples: generous bounds.
  EXPECT_GT(j["mean_bytes"].get<double>(), 85'000);
  EXPECT_LT(j["mean_bytes"].get<double>(), 135'000);
  EXPECT_GT(j["median_bytes"].get<double>(), 75'000);
  EXPECT_LT(j["median_bytes"].get<double>(), 115'000);
  EXPECT_GT(j["p99_bytes"].get<double>(), j["median_bytes"].get<double>() * 2);
}

TEST_F(GenImagenetTest, TrainListMatchesTheTreeInPaddleClasFormat) {
  std::istringstream list(ReadFile(Root() + "/train_list.txt"));
  std::regex line_re(R"(train/(n\d{8})/(n\d{8})_\d+\.JPEG (\d+))");
  std::map<std::string, int> label_of;
  std::string line;
  int lines = 0;
  while (std::getline(list, line)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << line;
    EXPECT_EQ(m[1], m[2]) << line;
    EXPECT_TRUE(fs::is_regular_file(Root() + "/" + line.substr(0, line.find(' ')))) << line;
    auto [it, fresh] = label_of.emplace(m[1], std::stoi(m[3]));
    EXPECT_EQ(it->second, std::stoi(m[3])) << "one label per class: " << line;
    ++lines;
  }
  EXPECT_EQ(lines, kCount);
  int rank = 0;  // labels are the sorted-wnid ranks, like torchvision's ImageFolder
  for (const auto& [wnid, label] : label_of) EXPECT_EQ(label, rank++) << wnid;
}

TEST_F(GenImagenetTest, FilesDecodeWithLibjpegTurbo) {
  tjhandle h = tjInitDecompress();
  ASSERT_NE(h, nullptr);
  int checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(Root() + "/train")) {
    if (!e.is_regular_file() || checked++ % 10 != 0) continue;
    std::string jpeg = ReadFile(e.path());
    auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
    int w = 0, hgt = 0, sub = 0, cs = 0;
    ASSERT_EQ(tjDecompressHeader3(h, data, jpeg.size(), &w, &hgt, &sub, &cs), 0) << e.path();
    EXPECT_GE(w, 16);
    EXPECT_GE(hgt, 16);
    std::vector<unsigned char> rgb(static_cast<size_t>(w) * hgt * 3);
    EXPECT_EQ(tjDecompress2(h, data, jpeg.size(), rgb.data(), w, 0, hgt, TJPF_RGB, 0), 0)
        << e.path() << ": " << tjGetErrorStr2(h);
  }
  tjDestroy(h);
  EXPECT_EQ(checked, kCount);
}

TEST_F(GenImagenetTest, VerifyModeAcceptsTheTreeAndFlagsDamage) {
  RunResult ok = RunProgram({GEN_IMAGENET_PATH, "--verify", Root()});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("duplicates   0"), std::string::npos) << ok.out;

  ScratchDir copy;
  fs::copy(Root(), copy.path(), fs::copy_options::recursive);
  std::string victim = copy.path() + "/train_list.txt";
  std::string first = ReadFile(victim).substr(0, ReadFile(victim).find(' '));
  std::ofstream(copy.path() + "/" + first, std::ios::trunc) << "not a jpeg";
  RunResult bad = RunProgram({GEN_IMAGENET_PATH, "--verify", copy.path()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find(first + ": does not decode"), std::string::npos) << bad.out;
}

TEST_F(GenImagenetTest, SameSeedSameBytesWhateverTheThreadCount) {
  ScratchDir again;
  ASSERT_EQ(Generate(again.path(), kCount, 7, 1).exit_code, 0);
  EXPECT_TRUE(Snapshot(Root()) == Snapshot(again.path()));

  ScratchDir other;
  ASSERT_EQ(Generate(other.path(), 20, 8, 2).exit_code, 0);
  ScratchDir same_count;
  ASSERT_EQ(Generate(same_count.path(), 20, 7, 2).exit_code, 0);
  EXPECT_FALSE(Snapshot(other.path()) == Snapshot(same_count.path()));
}

TEST_F(GenImagenetTest, BadFlagsGetAClearError) {
  RunResult r = RunProgram({GEN_IMAGENET_PATH, "--count", "0", "--out", "/tmp/unused-granary-gen"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--count 0"), std::string::npos) << r.err;
  RunResult both = RunProgram({GEN_IMAGENET_PATH, "--count", "5"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("--out"), std::string::npos) << both.err;
}

TEST_F(GenImagenetTest, ReaderReadsEveryFileEachEpoch) {
  ScratchDir out;
  std::string json = out.path() + "/reader.json";
  RunResult r = RunProgram(
      {READER_PATH, Root() + "/train", "--epochs", "2", "--threads", "4", "--json", json});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = ReadJson(json);
  ASSERT_EQ(j["epochs"].size(), 2u);
  uint64_t total = ReadJson(dir_->path() + "/gen.json")["total_bytes"];
  for (const auto& e : j["epochs"]) {
    EXPECT_EQ(e["files"], kCount);
    EXPECT_EQ(e["bytes"], total);
    EXPECT_EQ(e["errors"], 0);
    EXPECT_GT(e["images_per_s"].get<double>(), 0);
    EXPECT_GE(e["p99_us"].get<double>(), e["p50_us"].get<double>());
  }
}

TEST_F(GenImagenetTest, ReaderFollowsTheListAndDecodes) {
  ScratchDir out;
  std::string json = out.path() + "/reader.json";
  RunResult r = RunProgram({READER_PATH, "--list", Root() + "/train_list.txt", "--decode",
                            "--threads", "2", "--max-files", "60", "--json", json});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json e = ReadJson(json)["epochs"][0];
  EXPECT_EQ(e["files"], 60);
  EXPECT_EQ(e["errors"], 0);
}

TEST_F(GenImagenetTest, ReaderCountsFilesThatFail) {
  ScratchDir copy;
  fs::copy(Root() + "/train", copy.path(), fs::copy_options::recursive);
  std::string broken;
  for (const auto& e : fs::recursive_directory_iterator(copy.path())) {
    if (e.is_regular_file()) broken = e.path();
  }
  std::ofstream(broken, std::ios::trunc) << "garbage";
  RunResult r = RunProgram({READER_PATH, copy.path(), "--decode", "--threads", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(broken), std::string::npos) << r.out;
}

}  // namespace
}  // namespace granary::bench_test
