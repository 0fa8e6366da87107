// Control socket and metrics, end to end over real sockets with an in-process
// engine (no FUSE): bad requests get clear errors and the server keeps
// serving; loads stream progress; /metrics parses and its counters move.
#include "daemon/control_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstdio>
#include <fstream>
#include <future>

#include "control/control.h"
#include "granary/client.h"
#include "testing/dataset_fixture.h"

namespace granary {
namespace {

using nlohmann::json;

class ControlTest : public DatasetFixture {
 protected:
  void StartServices(std::string metrics_addr = "") {
    for (int c = 0; c < 5; ++c) {
      for (int i = 0; i < 20; ++i)
        Put("train/n" + std::to_string(c) + "/" + std::to_string(i) + ".JPEG", 2000 + i);
    }
    Open();
    auto s =
        DaemonServices::Start(engine_, ServicesOptions{.run_dir = (dir_ / "run").string(),
                                                       .mountpoint = (dir_ / "mnt").string(),
                                                       .metrics_addr = std::move(metrics_addr)});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    services_ = std::move(*s);
  }
  void TearDown() override {
    services_.reset();
    DatasetFixture::TearDown();
  }

  std::unique_ptr<ControlClient> Client() {
    auto c = ControlClient::Connect(services_->socket_path());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<DaemonServices> services_;
};

// Sends raw text on a fresh connection and returns the reply line.
json SendRaw(const std::string& path, const std::string& text) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  std::string reply;
  char c;
  while (::recv(fd, &c, 1, 0) == 1 && c != '\n') reply += c;
  ::close(fd);
  return json::parse(reply, nullptr, false);
}

TEST_F(ControlTest, SocketIsOwnerOnly) {
  StartServices();
  struct stat st {};
  ASSERT_EQ(::stat(services_->socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(services_->socket_path(),
            DaemonSocketPath((dir_ / "run").string(), (dir_ / "mnt").string()));
  // Clients built before the one socket find it under its old name.
  std::string old_name = services_->socket_path();
  old_name.replace(old_name.size() - 5, 5, ".api.sock");
  auto attached = granary::Client::Attach(old_name);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_EQ((*attached)->Info().files, sizes_.size());
  attached->reset();
  services_.reset();  // gone with the daemon
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::is_symlink(old_name, ec));
}

TEST_F(ControlTest, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  StartServices();
  const std::string& path = services_->socket_path();
  json r = SendRaw(path, "this is not json\n");
  EXPECT_FALSE(r["ok"].get<bool>());
  EXPECT_NE(r["error"].get<std::string>().find("malformed"), std::string::npos);
  r = SendRaw(path, std::string("\x00\xff\xfe{{{\n", 7));
  EXPECT_FALSE(r["ok"].get<bool>());
  r = SendRaw(path, R"({"v":2,"op":"status"})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("version 2"), std::string::npos);
  // "v" is optional (the client API's requests carry none).
  r = SendRaw(path, R"({"op":"status"})"
                    "\n");
  EXPECT_TRUE(r["ok"].get<bool>()) << r.dump();
  r = SendRaw(path, R"({"v":1,"op":"explode"})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("unknown op 'explode'"), std::string::npos);
  // A drain is a cluster member's: a single node says so and keeps serving.
  r = SendRaw(path, R"({"v":1,"op":"drain"})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("not part of a cluster"), std::string::npos);
  r = SendRaw(path, R"({"v":1,"op":"load","threads":"many"})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("bad request"), std::string::npos);
  // A non-string op once crashed the daemon.
  r = SendRaw(path, R"({"v":1,"op":7})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("\"op\" must be a string"), std::string::npos);
  // A huge thread count once started that many threads.
  r = SendRaw(path, R"({"v":1,"op":"load","threads":100000000})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("threads must be 1.."), std::string::npos)
      << r.dump();
  r = SendRaw(path, R"({"v":1,"op":"load","list_file":"/nonexistent/list.txt"})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("/nonexistent/list.txt"), std::string::npos);
  r = SendRaw(path, R"({"v":1,"op":"sync"})"
                    "\n");
  EXPECT_NE(r["error"].get<std::string>().find("sync"), std::string::npos);

  // The same connection stays usable after an error.
  auto c = Client();
  ASSERT_TRUE(c->Send(json{{"v", 7}}).ok());
  auto bad = c->Receive();
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE((*bad)["ok"].get<bool>());
  auto st = ControlCall(path, {{"v", 1}, {"op", "status"}});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)["status"]["ufs_files"].get<uint64_t>(), sizes_.size());
}

TEST_F(ControlTest, LoadStreamsProgressThenResult) {
  StartServices();
  std::string list = (dir_ / "train_list.txt").string();
  std::ofstream(list) << "train/n0/1.JPEG 0\ntrain/n4/19.JPEG 4\ntrain/n9/0.JPEG 9\n";
  auto c = Client();
  ASSERT_TRUE(
      c->Send({{"v", 1}, {"op", "load"}, {"list_file", list}, {"threads", 4}, {"progress", true}})
          .ok());
  json last;
  for (;;) {
    auto line = c->Receive();
    ASSERT_TRUE(line.ok()) << line.status().ToString();
    ASSERT_TRUE((*line)["ok"].get<bool>()) << line->dump();
    if (line->value("done", false)) {
      last = *line;
      break;
    }
    EXPECT_TRUE(line->contains("progress"));
  }
  LoadResult r = LoadResultFromJson(last["load"]);
  EXPECT_EQ(r.files_requested, 2u);
  EXPECT_EQ(r.files_cached, 2u);
  EXPECT_EQ(r.missing, 1u);
  EXPECT_EQ(r.missing_paths, std::vector<std::string>{"train/n9/0.JPEG"});
  EXPECT_FALSE(last["load"]["complete"].get<bool>());
  auto st = ControlCall(services_->socket_path(), {{"v", 1}, {"op", "status"}});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)["status"]["cached_files"].get<uint64_t>(), 2u);
}

TEST_F(ControlTest, SecondConcurrentLoadIsRefusedAndDisconnectCancels) {
  StartServices();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ufs_->SetReadHook([released](std::string_view, uint64_t) {
    released.wait();
    return Status::Ok();
  });
  auto first = Client();
  ASSERT_TRUE(first->Send({{"v", 1}, {"op", "load"}, {"threads", 2}, {"progress", true}}).ok());
  auto progress = first->Receive();  // the load is running once progress arrives
  ASSERT_TRUE(progress.ok());
  EXPECT_TRUE((*progress)["progress"]["running"].get<bool>());
  auto second = ControlCall(services_->socket_path(), {{"v", 1}, {"op", "load"}});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("already running"), std::string::npos);
  auto st = ControlCall(services_->socket_path(), {{"v", 1}, {"op", "status"}});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)["status"]["phase"], "Loading");
  auto job = services_->loads().current();
  ASSERT_TRUE(job);
  first.reset();  // Ctrl-C: the client goes away
  // Wait (bounded) for the server to notice while every fetch is still blocked.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!job->cancelled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_TRUE(job->cancelled());
  release.set_value();
  LoadResult r = job->Wait();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.complete());
  // Not running any more: a new (background) load is accepted.
  auto bg = ControlCall(services_->socket_path(), {{"v", 1}, {"op", "load"}, {"background", true}});
  ASSERT_TRUE(bg.ok()) << bg.status().ToString();
  EXPECT_TRUE((*bg)["started"].get<bool>());
  EXPECT_TRUE(services_->loads().current()->Wait().complete());
}

std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{.sin_family = AF_INET, .sin_port = htons(static_cast<uint16_t>(port))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_GT(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// The value of the sample line starting with `prefix`, or -1.
double SampleValue(const std::string& text, const std::string& prefix) {
  size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  size_t sp = text.find("} ", at);
  return std::stod(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
}

// A python3 that has prometheus_client (Debian's python3-prometheus-client), or "".
std::string PythonWithPrometheus() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    std::string cmd = std::string(py) + " -c 'import prometheus_client.parser' 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

TEST_F(ControlTest, MetricsParseAndCountersMove) {
  StartServices("127.0.0.1:0");
  int port = std::stoi(services_->metrics_addr().substr(services_->metrics_addr().rfind(':') + 1));
  std::string before = HttpGet(port, "/metrics");
  ASSERT_NE(before.find("200 OK"), std::string::npos);
  EXPECT_NE(HttpGet(port, "/nope").find("404"), std::string::npos);
  EXPECT_EQ(SampleValue(before, "granary_origin_requests_total{"), 0);

  auto job = services_->loads().Start({.threads = 4});
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE((*job)->Wait().complete());
  std::string after = HttpGet(port, "/metrics");
  EXPECT_EQ(SampleValue(after, "granary_origin_requests_total{"), 100);
  EXPECT_EQ(SampleValue(after, "granary_origin_request_duration_seconds_count{"), 100);
  EXPECT_EQ(SampleValue(after, "granary_load_files_done{"), 100);
  EXPECT_GT(SampleValue(after, "granary_cache_used_bytes{"), 0);

  // An attached client reads cached files without asking the daemon; its
  // reads are counted once it reports them (at the latest when it closes).
  {
    auto attached = granary::Client::Attach(services_->socket_path());
    ASSERT_TRUE(attached.ok()) << attached.status().ToString();
    for (int i = 0; i < 10; ++i) {
      auto got = (*attached)->ReadWhole("train/n1/" + std::to_string(i) + ".JPEG");
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->size(), 2000u + i);
    }
  }
  after = HttpGet(port, "/metrics");
  EXPECT_EQ(SampleValue(after, "granary_api_direct_reads_total{"), 10);
  EXPECT_EQ(SampleValue(after, "granary_api_opens_total{"), 0);

  std::string py = PythonWithPrometheus();
  if (py.empty()) GTEST_SKIP() << "python3-prometheus-client is not installed";
  std::string body = after.substr(after.find("\r\n\r\n") + 4);
  std::string file = (dir_ / "metrics.txt").string();
  std::ofstream(file) << body;
  std::string script =
      "import sys\n"
      "from prometheus_client.parser import text_string_to_metric_families as p\n"
      "fams = {f.name: f for f in p(open(sys.argv[1]).read())}\n"
      "h = fams['granary_origin_request_duration_seconds']\n"
      "assert h.type == 'histogram', h.type\n"
      "c = [s for s in h.samples if s.name.endswith('_count')][0].value\n"
      "assert c == 100, c\n"
      "r = fams['granary_origin_requests']\n"
      "assert r.type == 'counter' and r.samples[0].value == 100\n"
      "print(len(fams))\n";
  std::string script_file = (dir_ / "parse.py").string();
  std::ofstream(script_file) << script;
  std::string cmd = py + " " + script_file + " " + file;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << body;
}

// Found while writing fuzz/control_request_fuzz.cc: a float "threads" was
// converted to int64 unchecked (undefined for 1e300), and a deeply nested "v"
// was dumped into the version error one recursion per level.
TEST(ControlRequestTest, FloatThreadsAreClampedAndNestedVersionsNamed) {
  auto huge = ParseControlRequest(R"({"v":1,"op":"load","threads":1e300})");
  ASSERT_TRUE(huge.ok()) << huge.status().ToString();
  EXPECT_EQ(huge->load.threads, kMaxLoadThreads + 1);  // refused later as out of range
  auto negative = ParseControlRequest(R"({"v":1,"op":"load","threads":-1e300})");
  ASSERT_TRUE(negative.ok());
  EXPECT_EQ(negative->load.threads, -1);
  auto fraction = ParseControlRequest(R"({"v":1,"op":"load","threads":2.5,"background":true})");
  ASSERT_TRUE(fraction.ok());
  EXPECT_EQ(fraction->load.threads, 2);
  EXPECT_TRUE(fraction->background);

  const size_t depth = 200000;
  auto nested = ParseControlRequest(R"({"op":"status","v":)" + std::string(depth, '[') +
                                    std::string(depth, ']') + "}");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("unsupported protocol version array"), std::string::npos)
      << nested.status().message();
  auto bad_background = ParseControlRequest(R"({"v":1,"op":"load","background":"yes"})");
  ASSERT_FALSE(bad_background.ok());
  EXPECT_NE(bad_background.status().message().find("bad request fields"), std::string::npos);
}

}  // namespace
}  // namespace granary
