// Peer authentication steps (see auth.h).
#include "net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace granary::net {
namespace {

constexpr std::string_view kProofLabel = "granary-peer-v1";

Mac Hmac(std::string_view secret, const Nonce& first, const Nonce& second,
         std::string_view dataset) {
  std::string msg(kProofLabel);
  msg.append(reinterpret_cast<const char*>(first.data()), first.size());
  msg.append(reinterpret_cast<const char*>(second.data()), second.size());
  msg.append(dataset);
  Mac out{};
  unsigned int len = 0;
  ::HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  return out;
}

std::string ModeText(AuthMode m) {
  return m == AuthMode::kNone ? "without a shared secret (insecure)" : "with a shared secret";
}

}  // namespace

Result<Nonce> RandomNonce() {
  Nonce n{};
  if (::RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    return Internal("peer auth: the random number generator failed");
  }
  return n;
}

Mac ClientProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce,
                std::string_view dataset) {
  return Hmac(secret, server_nonce, client_nonce, dataset);
}

Mac ServerProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce,
                std::string_view dataset) {
  return Hmac(secret, client_nonce, server_nonce, dataset);
}

bool ProofsEqual(const Mac& a, const Mac& b) {
  return ::CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

HelloBody MakeHello(const AuthConfig& self, const Nonce& server_nonce) {
  return HelloBody{.version = kProtocolVersion,
                   .mode = self.mode(),
                   .server_nonce = server_nonce,
                   .node_id = self.node_id,
                   .dataset = self.dataset};
}

Status CheckHello(const HelloBody& hello, const AuthConfig& self, std::string_view peer) {
  const std::string p(peer);
  if (hello.version != kProtocolVersion) {
    return Corruption("peer " + p + " speaks peer protocol version " +
                      std::to_string(hello.version) + ", this node version " +
                      std::to_string(kProtocolVersion));
  }
  if (hello.mode != self.mode()) {
    return PermissionDenied("peer " + p + " runs " + ModeText(hello.mode) + ", this node " +
                            ModeText(self.mode()) + "; give both the same secret");
  }
  if (hello.dataset != self.dataset) {
    return InvalidArgument("peer " + p + " serves dataset " + hello.dataset +
                           ", this node dataset " + self.dataset);
  }
  return Status::Ok();
}

AuthBody MakeAuth(const AuthConfig& self, const HelloBody& hello, const Nonce& client_nonce) {
  AuthBody a{.mode = self.mode(),
             .client_nonce = client_nonce,
             .proof = {},
             .dataset = self.dataset,
             .node_id = self.node_id};
  if (self.mode() == AuthMode::kHmacSha256) {
    a.proof = ClientProof(self.secret, hello.server_nonce, client_nonce, self.dataset);
  }
  return a;
}

Result<AuthOkBody> CheckAuth(const AuthBody& auth, const AuthConfig& self,
                             const Nonce& server_nonce, std::string_view peer) {
  const std::string p(peer);
  if (auth.mode != self.mode()) {
    return PermissionDenied("peer " + p + " connects " + ModeText(auth.mode) + ", this node runs " +
                            ModeText(self.mode()));
  }
  if (auth.dataset != self.dataset) {
    return InvalidArgument("peer " + p + " serves dataset " + auth.dataset +
                           ", this node dataset " + self.dataset);
  }
  AuthOkBody ok;
  if (self.mode() == AuthMode::kNone) return ok;
  if (!ProofsEqual(auth.proof,
                   ClientProof(self.secret, server_nonce, auth.client_nonce, self.dataset))) {
    return PermissionDenied("peer " + p +
                            " failed authentication: its proof does not match this node's "
                            "shared secret");
  }
  ok.proof = ServerProof(self.secret, server_nonce, auth.client_nonce, self.dataset);
  return ok;
}

Status CheckAuthOk(const AuthOkBody& ok, const AuthConfig& self, const HelloBody& hello,
                   const Nonce& client_nonce, std::string_view peer) {
  if (self.mode() == AuthMode::kNone) return Status::Ok();
  if (ProofsEqual(ok.proof,
                  ServerProof(self.secret, hello.server_nonce, client_nonce, self.dataset))) {
    return Status::Ok();
  }
  return PermissionDenied("peer " + std::string(peer) +
                          " failed authentication: its proof does not match this node's shared "
                          "secret");
}

Result<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("peer secret file " + path, errno ? errno : EACCES);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return IoError("peer secret file " + path + ": read failed");
  std::string secret = buf.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return InvalidArgument("peer secret file " + path + " is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    GLOG_WARN("peer secret file {} is readable by group or others (mode {:o}); chmod 600 it", path,
              st.st_mode & 0777);
  }
  return secret;
}

}  // namespace granary::net
