// MetricsServer: where it listens and what a scrape returns.
#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace granary {
namespace {

// The host part of the address the server says it bound.
std::string BoundHostOf(const MetricsServer& server) {
  return server.address().substr(0, server.address().rfind(':'));
}

bool Connects(const char* ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

TEST(MetricsServerTest, AnAddressWithoutAHostListensOnLoopbackOnly) {
  auto server = MetricsServer::Start(":0", [] { return std::string("granary_up 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ(BoundHostOf(**server), "127.0.0.1");
  EXPECT_TRUE(Connects("127.0.0.1", (*server)->port()));
  // A wildcard (0.0.0.0) listener would accept on every local address;
  // 127.0.0.2 is local but not the one named.
  EXPECT_FALSE(Connects("127.0.0.2", (*server)->port()))
      << "the metrics port answers on an address other than 127.0.0.1";
}

TEST(MetricsServerTest, BadAddressesNameTheAddress) {
  for (const char* bad : {"9100", "127.0.0.1:", "127.0.0.1:notaport"}) {
    auto server = MetricsServer::Start(bad, [] { return std::string(); });
    ASSERT_FALSE(server.ok()) << bad;
    EXPECT_NE(server.status().message().find(bad), std::string::npos) << server.status().ToString();
  }
}

}  // namespace
}  // namespace granary
