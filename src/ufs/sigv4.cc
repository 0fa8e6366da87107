// SigV4 implementation: canonicalisation, SHA-256 and the HMAC key chain
// with OpenSSL's one-shot APIs. See sigv4.h.
#include "ufs/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>

namespace granary {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trims and collapses runs of spaces, as SigV4 canonical headers require.
std::string CanonicalValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// Sorted lowercase name -> comma-joined canonical values.
std::map<std::string, std::string> CanonicalHeaderMap(const SigV4Request& request) {
  std::map<std::string, std::string> m;
  for (const auto& [name, value] : request.headers) {
    std::string& slot = m[Lower(name)];
    if (!slot.empty()) slot.push_back(',');
    slot += CanonicalValue(value);
  }
  return m;
}

std::string Scope(const SigV4Scope& scope) {
  return scope.amz_date.substr(0, 8) + "/" + scope.region + "/" + scope.service + "/aws4_request";
}

}  // namespace

std::string ContentMd5(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  unsigned char b64[64];
  int n = EVP_EncodeBlock(b64, md, static_cast<int>(len));
  return std::string(reinterpret_cast<char*>(b64), static_cast<size_t>(n));
}

std::string Sha256Hex(std::string_view data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
  return Hex(out, sizeof(out));
}

std::string UriEncode(std::string_view text, bool encode_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  return out;
}

std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [k, v] : params) {
    k = UriEncode(k, true);
    v = UriEncode(v, true);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out.push_back('&');
    out += k + "=" + v;
  }
  return out;
}

std::string AmzDate(int64_t wall_nanos) {
  std::time_t secs = static_cast<std::time_t>(wall_nanos / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string SignedHeaders(const SigV4Request& request) {
  std::string out;
  for (const auto& [name, value] : CanonicalHeaderMap(request)) {
    if (!out.empty()) out.push_back(';');
    out += name;
  }
  return out;
}

std::string CanonicalRequest(const SigV4Request& request) {
  std::string out =
      request.method + "\n" + request.canonical_uri + "\n" + request.canonical_query + "\n";
  for (const auto& [name, value] : CanonicalHeaderMap(request)) out += name + ":" + value + "\n";
  out += "\n" + SignedHeaders(request) + "\n" + request.payload_hash;
  return out;
}

std::string StringToSign(const SigV4Request& request, const SigV4Scope& scope) {
  return "AWS4-HMAC-SHA256\n" + scope.amz_date + "\n" + Scope(scope) + "\n" +
         Sha256Hex(CanonicalRequest(request));
}

std::string Signature(const SigV4Request& request, const SigV4Scope& scope,
                      const AwsCredentials& credentials) {
  std::string key = Hmac("AWS4" + credentials.secret_access_key, scope.amz_date.substr(0, 8));
  key = Hmac(key, scope.region);
  key = Hmac(key, scope.service);
  key = Hmac(key, "aws4_request");
  std::string sig = Hmac(key, StringToSign(request, scope));
  return Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
}

std::string AuthorizationHeader(const SigV4Request& request, const SigV4Scope& scope,
                                const AwsCredentials& credentials) {
  return "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + Scope(scope) +
         ",SignedHeaders=" + SignedHeaders(request) +
         ",Signature=" + Signature(request, scope, credentials);
}

}  // namespace granary
