// Auth step tests: proofs, the handshake decisions, ReadSecretFile.
#include "net/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace granary::net {
namespace {

constexpr char kSecret[] = "correct-horse-battery-staple";

AuthConfig Node(std::string secret, std::string dataset = "ds", std::string id = "node") {
  return AuthConfig{
      .secret = std::move(secret), .dataset = std::move(dataset), .node_id = std::move(id)};
}

// Runs the three steps; returns the first failure.
Status Handshake(const AuthConfig& server, const AuthConfig& client) {
  Nonce sn = *RandomNonce(), cn = *RandomNonce();
  HelloBody hello = MakeHello(server, sn);
  AuthBody auth = MakeAuth(client, hello, cn);
  auto ok = CheckAuth(auth, server, sn, "client:1");
  if (!ok.ok()) return ok.status();
  RETURN_IF_ERROR(CheckHello(hello, client, "server:1"));
  return CheckAuthOk(*ok, client, hello, cn, "server:1");
}

TEST(AuthTest, NoncesAreFresh) { EXPECT_NE(*RandomNonce(), *RandomNonce()); }

TEST(AuthTest, ProofsBindSecretNoncesDatasetAndDirection) {
  Nonce a = *RandomNonce(), b = *RandomNonce();
  Mac p = ClientProof(kSecret, a, b, "ds");
  EXPECT_TRUE(ProofsEqual(p, ClientProof(kSecret, a, b, "ds")));
  EXPECT_FALSE(ProofsEqual(p, ClientProof("other", a, b, "ds")));
  EXPECT_FALSE(ProofsEqual(p, ClientProof(kSecret, a, b, "ds2")));
  EXPECT_FALSE(ProofsEqual(p, ClientProof(kSecret, b, a, "ds")));
  EXPECT_FALSE(ProofsEqual(p, ServerProof(kSecret, a, b, "ds")));
}

TEST(AuthTest, SameSecretSucceeds) {
  EXPECT_TRUE(Handshake(Node(kSecret), Node(kSecret)).ok());
  EXPECT_TRUE(Handshake(Node(""), Node("")).ok());
}

TEST(AuthTest, WrongSecretIsRefusedWithoutNamingIt) {
  Status s = Handshake(Node(kSecret), Node("wrong-secret-value"));
  EXPECT_EQ(s.code(), Code::kPermissionDenied);
  EXPECT_EQ(s.message().find(kSecret), std::string::npos);
  EXPECT_EQ(s.message().find("wrong-secret-value"), std::string::npos);
}

TEST(AuthTest, ServerWithoutTheSecretIsRefusedByTheClient) {
  Nonce sn = *RandomNonce(), cn = *RandomNonce();
  AuthConfig client = Node(kSecret);
  HelloBody hello = MakeHello(client, sn);  // an impostor claiming secure mode
  AuthOkBody forged{.proof = ClientProof(kSecret, sn, cn, "ds")};  // a replayed client proof
  EXPECT_EQ(CheckAuthOk(forged, client, hello, cn, "s").code(), Code::kPermissionDenied);
}

TEST(AuthTest, SecureAndInsecureRefuseEachOther) {
  EXPECT_EQ(Handshake(Node(kSecret), Node("")).code(), Code::kPermissionDenied);
  EXPECT_EQ(Handshake(Node(""), Node(kSecret)).code(), Code::kPermissionDenied);
  Status s = CheckHello(MakeHello(Node(""), {}), Node(kSecret), "10.0.0.2:7070");
  EXPECT_NE(s.message().find("insecure"), std::string::npos) << s.ToString();
}

TEST(AuthTest, DatasetMismatch) {
  Status s = CheckHello(MakeHello(Node("", "A"), {}), Node("", "B"), "10.0.0.2:7070");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "peer 10.0.0.2:7070 serves dataset A, this node dataset B");
  EXPECT_EQ(Handshake(Node("", "A"), Node("", "B")).code(), Code::kInvalidArgument);
}

TEST(AuthTest, VersionMismatch) {
  HelloBody hello = MakeHello(Node(""), {});
  hello.version = 3;
  Status s = CheckHello(hello, Node(""), "p:1");
  EXPECT_NE(s.message().find("speaks peer protocol version 3, this node version 2"),
            std::string::npos)
      << s.ToString();
}

class SecretFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& content, mode_t mode = 0600) {
    std::ofstream(path_, std::ios::binary) << content;
    ::chmod(path_.c_str(), mode);
    return path_;
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  std::string path_ = ::testing::TempDir() + "/peer_secret_" + std::to_string(::getpid());
};

TEST_F(SecretFileTest, TrimsTrailingNewline) {
  EXPECT_EQ(*ReadSecretFile(Write(std::string(kSecret) + "\n")), kSecret);
  EXPECT_EQ(*ReadSecretFile(Write(std::string(kSecret) + "\r\n")), kSecret);
  EXPECT_EQ(*ReadSecretFile(Write(kSecret, 0644)), kSecret);  // only warns
}

TEST_F(SecretFileTest, EmptyIsRefused) {
  Status s = ReadSecretFile(Write("\n")).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(path_), std::string::npos);
}

TEST_F(SecretFileTest, MissingNamesThePath) {
  Status s = ReadSecretFile(path_ + ".missing").status();
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find(path_ + ".missing"), std::string::npos);
}

}  // namespace
}  // namespace granary::net
