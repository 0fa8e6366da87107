// Peer authentication: HMAC-SHA256 mutual challenge-response over the
// kHello / kAuth / kAuthOk exchange (docs/format-peer.md, "Handshake").
//
//   server → kHello  {version, mode, server nonce, node id, dataset}
//   client → kAuth   {mode, client nonce, ClientProof, dataset, node id}
//   server → kAuthOk {ServerProof}            (or kError, then it closes)
//
// ClientProof = HMAC(secret, "granary-peer-v1" | server nonce | client nonce | dataset)
// ServerProof = HMAC(secret, "granary-peer-v1" | client nonce | server nonce | dataset)
//
// Each side proves it knows the secret against the other side's fresh nonce,
// so neither proof can be replayed. Insecure mode is an empty secret on both
// ends (proofs are zero); a secure node refuses an insecure one and vice versa.
// The functions here are the pure steps; the server and client do the I/O.
//
// Invariants: the secret never appears in a log line or an error message;
// proofs are compared in constant time (CRYPTO_memcmp).
//
// Thread safety: pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "granary/status.h"
#include "net/messages.h"

namespace granary::net {

// The identity and secret one node authenticates with.
struct AuthConfig {
  std::string secret;   // "" = insecure
  std::string dataset;  // dataset id this node serves
  std::string node_id;  // this node's id
  AuthMode mode() const { return secret.empty() ? AuthMode::kNone : AuthMode::kHmacSha256; }
};

// 32 bytes from OpenSSL's CSPRNG. Internal if the generator fails.
Result<Nonce> RandomNonce();

Mac ClientProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce,
                std::string_view dataset);
Mac ServerProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce,
                std::string_view dataset);
// Constant-time equality.
bool ProofsEqual(const Mac& a, const Mac& b);

// Server: the kHello for a new connection.
HelloBody MakeHello(const AuthConfig& self, const Nonce& server_nonce);

// Client: checks a server's kHello against this node (version, auth mode,
// dataset). Errors name `peer`: Corruption for a version mismatch,
// PermissionDenied for an auth mode mismatch, InvalidArgument for a dataset mismatch.
Status CheckHello(const HelloBody& hello, const AuthConfig& self, std::string_view peer);

// Client: the kAuth answering `hello`.
AuthBody MakeAuth(const AuthConfig& self, const HelloBody& hello, const Nonce& client_nonce);

// Server: verifies a client's kAuth; returns the kAuthOk to send. Errors
// (PermissionDenied, InvalidArgument) are sent back in a kError frame.
Result<AuthOkBody> CheckAuth(const AuthBody& auth, const AuthConfig& self,
                             const Nonce& server_nonce, std::string_view peer);

// Client: verifies the server's kAuthOk. PermissionDenied if its proof is wrong.
Status CheckAuthOk(const AuthOkBody& ok, const AuthConfig& self, const HelloBody& hello,
                   const Nonce& client_nonce, std::string_view peer);

// Reads a shared secret from `path`, dropping trailing newlines. Errors name
// the path (never the content): unreadable file, empty secret. Warns when the
// file is readable by group or others.
Result<std::string> ReadSecretFile(const std::string& path);

}  // namespace granary::net
