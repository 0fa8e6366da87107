// CurlClient against a tiny in-process HTTP/1.1 server on loopback: header
// lowercasing, buffered bodies, bodies written into the caller's span, error
// documents, servers that ignore Range, refused connections, the in-flight
// bound, and origins that stall (accept and never answer, or answer
// one byte a second).
#include "ufs/curl_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "ufs/tiny_http_server_test_util.h"

namespace granary {
namespace {

using testing::Response;
using testing::TinyHttpServer;

const std::string kBody = "0123456789abcdefghijklmnopqrstuvwxyz";

TEST(CurlClient, SendBuffersBodyAndLowercasesHeaders) {
  TinyHttpServer server(
      [](const std::string&) { return Response(200, kBody, "X-Amz-Thing: v1\r\n"); });
  CurlClient http;
  auto r = http.Send(HttpRequest{.url = server.url("/obj")});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, kBody);
  EXPECT_EQ(r->body_bytes, kBody.size());
  EXPECT_EQ(r->headers["x-amz-thing"], "v1");
}

TEST(CurlClient, SendIntoWritesTheRangeIntoTheCallersBuffer) {
  std::atomic<bool> saw_range{false};
  TinyHttpServer server([&](const std::string& head) {
    saw_range = head.find("Range: bytes=10-14") != std::string::npos;
    return Response(206, kBody.substr(10, 5));
  });
  CurlClient http;
  std::string out(5, '\0');
  auto r = http.SendInto(HttpRequest{.url = server.url("/obj"), .range = ByteRange{10, 5}},
                         std::span<char>(out.data(), out.size()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(saw_range);
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(r->body_bytes, 5u);
  EXPECT_EQ(out, "abcde");
}

TEST(CurlClient, ServerIgnoringRangeStillYieldsTheRequestedWindow) {
  TinyHttpServer server([](const std::string&) { return Response(200, kBody); });
  CurlClient http;
  std::string out(4, '\0');
  auto r = http.SendInto(HttpRequest{.url = server.url("/obj"), .range = ByteRange{20, 4}},
                         std::span<char>(out.data(), out.size()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body_bytes, 4u);
  EXPECT_EQ(out, "klmn");
  // A window running past the end is short.
  std::string tail(10, '\0');
  r = http.SendInto(HttpRequest{.url = server.url("/obj"), .range = ByteRange{30, 10}},
                    std::span<char>(tail.data(), tail.size()));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body_bytes, 6u);
  EXPECT_EQ(tail.substr(0, 6), "uvwxyz");
}

TEST(CurlClient, ErrorStatusKeepsTheErrorDocumentOutOfTheCallersBuffer) {
  const std::string doc = "<Error><Code>NoSuchKey</Code></Error>";
  TinyHttpServer server([&](const std::string&) { return Response(404, doc); });
  CurlClient http;
  std::string out(8, '-');
  auto r = http.SendInto(HttpRequest{.url = server.url("/missing")},
                         std::span<char>(out.data(), out.size()));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, doc);
  EXPECT_EQ(r->body_bytes, 0u);
  EXPECT_EQ(out, "--------");
  EXPECT_FALSE(r->body_xxh3.has_value());
}

TEST(CurlClient, SendIntoHashesExactlyTheBytesItKeeps) {
  std::string object(3 << 20, '\0');  // many receive pieces
  uint64_t x = 42;
  for (char& c : object) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>(x >> 56);
  }
  const auto sum = [](std::string_view s) { return XXH3_64bits(s.data(), s.size()); };
  TinyHttpServer ranged(
      [&](const std::string&) { return Response(206, object.substr(100, 2 << 20)); });
  TinyHttpServer whole([&](const std::string&) { return Response(200, object); });
  CurlClient http;
  for (TinyHttpServer* server : {&ranged, &whole}) {
    std::string out(2 << 20, '\0');
    auto r =
        http.SendInto(HttpRequest{.url = server->url("/obj"), .range = ByteRange{100, out.size()}},
                      std::span<char>(out.data(), out.size()));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->body_bytes, out.size());
    ASSERT_EQ(out, object.substr(100, out.size()));
    ASSERT_TRUE(r->body_xxh3.has_value());
    EXPECT_EQ(*r->body_xxh3, sum(out));
  }
  // A window running past the end: the hash covers the short part only.
  std::string tail(1 << 20, '\0');
  auto r = http.SendInto(
      HttpRequest{.url = whole.url("/obj"), .range = ByteRange{object.size() - 1000, tail.size()}},
      std::span<char>(tail.data(), tail.size()));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->body_bytes, 1000u);
  ASSERT_TRUE(r->body_xxh3.has_value());
  EXPECT_EQ(*r->body_xxh3, sum(std::string_view(tail).substr(0, 1000)));
  // Send() buffers; it has no hash.
  auto buffered = http.Send(HttpRequest{.url = whole.url("/obj")});
  ASSERT_TRUE(buffered.ok());
  EXPECT_FALSE(buffered->body_xxh3.has_value());
}

TEST(CurlClient, PutSendsTheBody) {
  std::string seen;
  TinyHttpServer server([&](const std::string& head) {
    seen = head;
    return Response(200, "");
  });
  CurlClient http;
  auto r = http.Send(HttpRequest{.method = "PUT", .url = server.url("/k"), .body = "payload"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(seen.find("PUT /k HTTP/1.1"), std::string::npos);
  EXPECT_NE(seen.find("Content-Length: 7"), std::string::npos);
  EXPECT_TRUE(seen.ends_with("\r\n\r\npayload"));
}

TEST(CurlClient, RefusedConnectionIsUnavailableWithCurlsReason) {
  CurlClient http(CurlClientOptions{.connect_timeout = std::chrono::milliseconds(1000)});
  auto r = http.Send(HttpRequest{.url = "http://127.0.0.1:1/"});
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(), "Couldn't connect to server");
}

TEST(CurlClient, BadUrlIsInvalidArgument) {
  CurlClient http;
  EXPECT_EQ(http.Send(HttpRequest{.url = "ftp://x/"}).status().code(), Code::kInvalidArgument);
}

TEST(CurlClient, ManyThreadsShareABoundedClient) {
  TinyHttpServer server([](const std::string&) { return Response(200, kBody); });
  CurlClient http(CurlClientOptions{.max_in_flight = 2});
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        auto r = http.Send(HttpRequest{.url = server.url("/obj")});
        if (r.ok() && r->body == kBody) ok.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 80);
}

// A loopback server whose every connection stalls: kSilent reads the request
// and never answers; kTrickle sends the head of an HTTP response, then its
// body a byte every 250 ms (at most kTrickleBytes, over 50 s, then holds the
// connection). libcurl's low-speed check counts body bytes only. Each connection
// has its own thread.
class StallingServer {
 public:
  enum class Mode { kSilent, kTrickle };
  static constexpr int kTrickleBytes = 200;

  explicit StallingServer(Mode mode) : mode_(mode) {
    fd_ = testing::ListenOnLoopback(&port_);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~StallingServer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (int c : conns_) shutdown(c, SHUT_RDWR);
    }
    cv_.notify_all();
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    acceptor_.join();
    for (auto& t : handlers_) t.join();
    for (int c : conns_) close(c);
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Blocks until `n` connections have been accepted (or 60 s passed).
  bool WaitForConnections(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60),
                        [&] { return static_cast<int>(conns_.size()) >= n; });
  }

 private:
  void Accept() {
    for (;;) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::lock_guard lock(mu_);
      if (stopping_) {
        close(c);
        return;
      }
      conns_.push_back(c);
      handlers_.emplace_back([this, c] { Handle(c); });
      cv_.notify_all();
    }
  }
  void Handle(int c) {
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    if (mode_ == Mode::kTrickle && write(c, head.data(), head.size()) != ssize_t(head.size()))
      return;
    std::unique_lock lock(mu_);
    for (int i = 0; mode_ == Mode::kTrickle && i < kTrickleBytes && !stopping_; ++i) {
      lock.unlock();
      if (write(c, "x", 1) != 1) return;
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping_; });
    }
    cv_.wait(lock, [&] { return stopping_; });  // silent, or trickled out: hold the connection
  }

  const Mode mode_;
  int fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<int> conns_;
  std::vector<std::thread> handlers_;
};

using Clock = std::chrono::steady_clock;

// A response trickling in at a few bytes a second is below the
// default low-speed limit (1 KiB/s), so the request ends after low_speed_time
// instead of holding the caller for as long as the origin keeps dribbling.
// (The old limit, 1 byte/s, let 4 bytes/s through for as long as it lasted.)
TEST(CurlClient, TrickleOfAFewBytesPerSecondEndsAfterTheLowSpeedTime) {
  StallingServer server(StallingServer::Mode::kTrickle);
  CurlClient http(CurlClientOptions{.low_speed_time = std::chrono::seconds(2)});
  const auto t0 = Clock::now();
  auto r = http.Send(HttpRequest{.url = server.url("/obj")});
  const auto took = Clock::now() - t0;
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("Timeout was reached"), std::string::npos)
      << r.status().message();
  // The trickle lasts 50 s; the low-speed abort comes after about 2 s.
  EXPECT_LT(took, std::chrono::seconds(20));
}

// A server that accepts and never answers ends the request after
// request_timeout, with libcurl's reason.
TEST(CurlClient, ServerThatNeverAnswersEndsAfterTheRequestTimeout) {
  StallingServer server(StallingServer::Mode::kSilent);
  CurlClient http(
      CurlClientOptions{.request_timeout = std::chrono::milliseconds(1500), .low_speed_bytes = 0});
  const auto t0 = Clock::now();
  auto r = http.Send(HttpRequest{.url = server.url("/obj")});
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("Operation timed out"), std::string::npos)
      << r.status().message();
}

// While every request slot is held by a stuck transfer, the next
// caller gets an error naming the endpoint after slot_wait_timeout instead of
// queueing behind it; Abort() then ends the stuck transfer within seconds.
TEST(CurlClient, WaitForASlotIsBoundedAndAbortEndsAStuckTransfer) {
  StallingServer server(StallingServer::Mode::kSilent);
  CurlClient http(CurlClientOptions{.max_in_flight = 1,
                                    .request_timeout = std::chrono::seconds(60),
                                    .low_speed_time = std::chrono::seconds(60),
                                    .slot_wait_timeout = std::chrono::milliseconds(300)});
  auto stuck = std::async(std::launch::async,
                          [&] { return http.Send(HttpRequest{.url = server.url("/a")}); });
  ASSERT_TRUE(server.WaitForConnections(1));

  const auto t0 = Clock::now();
  auto second = http.Send(HttpRequest{.url = server.url("/b")});
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  const std::string msg = second.status().message();
  EXPECT_NE(msg.find(server.url("")), std::string::npos) << msg;
  EXPECT_NE(msg.find("no request slot free within 300 ms"), std::string::npos) << msg;

  const auto t1 = Clock::now();
  http.Abort();
  ASSERT_EQ(stuck.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_LT(Clock::now() - t1, std::chrono::seconds(20));
  EXPECT_EQ(stuck.get().status().code(), Code::kCancelled);
  // After Abort() every call fails at once.
  EXPECT_EQ(http.Send(HttpRequest{.url = server.url("/c")}).status().code(), Code::kCancelled);
}

TEST(CurlClient, DefaultsBoundEveryRequest) {
  const CurlClientOptions o;
  EXPECT_GT(o.request_timeout.count(), 0);
  EXPECT_GT(o.slot_wait_timeout.count(), 0);
  EXPECT_GT(o.low_speed_bytes, 1);  // a byte a second counts as stalled
}

}  // namespace
}  // namespace granary
