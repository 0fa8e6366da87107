// Test helper (s3_unit_test): a one-connection-at-a-time HTTP/1.1 server on
// loopback whose handler maps the raw request (head and body) to a raw
// response. Not for production code.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace granary::testing {

// A listening TCP socket on 127.0.0.1 at a port the kernel picks (*port).
inline int ListenOnLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, 64), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

// One-connection-at-a-time HTTP server: `handler` maps the raw request (head,
// and the body a Content-Length announced) to a full raw response.
// Connections are closed after each response.
class TinyHttpServer {
 public:
  explicit TinyHttpServer(std::function<std::string(const std::string&)> handler)
      : handler_(std::move(handler)) {
    fd_ = ListenOnLoopback(&port_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TinyHttpServer() {
    stopping_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  void Serve() {
    while (!stopping_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        head.append(buf, n);
      }
      // Read a request body announced by Content-Length before answering.
      size_t cl = head.find("Content-Length: ");
      size_t body_start = head.find("\r\n\r\n");
      if (cl != std::string::npos && body_start != std::string::npos) {
        size_t want = std::stoul(head.substr(cl + 16));
        while (head.size() - (body_start + 4) < want) {
          ssize_t n = read(c, buf, sizeof(buf));
          if (n <= 0) break;
          head.append(buf, n);
        }
      }
      std::string resp = handler_(head);
      size_t off = 0;
      while (off < resp.size()) {
        ssize_t n = write(c, resp.data() + off, resp.size() - off);
        if (n <= 0) break;
        off += n;
      }
      close(c);
    }
  }

  std::function<std::string(const std::string&)> handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

inline std::string Response(int code, const std::string& body, const std::string& extra = "") {
  return "HTTP/1.1 " + std::to_string(code) +
         " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n" +
         extra + "\r\n" + body;
}

}  // namespace granary::testing
