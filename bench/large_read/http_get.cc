#include "large_read/http_get.h"

#include <curl/curl.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <vector>

namespace granary::bench {
namespace {

// One connection: a curl handle with its URL-independent options set.
class Connection {
 public:
  explicit Connection(const GetOptions& o) : handle_(curl_easy_init()) {
    curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle_, CURLOPT_BUFFERSIZE,
                     static_cast<long>(std::min<size_t>(o.buffer_bytes, CURL_MAX_READ_SIZE)));
    curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, &Connection::OnData);
    curl_easy_setopt(handle_, CURLOPT_WRITEDATA, this);
    if (!o.access_key.empty()) {
      sigv4_ = "aws:amz:" + o.region + ":s3";
      curl_easy_setopt(handle_, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(handle_, CURLOPT_USERNAME, o.access_key.c_str());
      curl_easy_setopt(handle_, CURLOPT_PASSWORD, o.secret_key.c_str());
      headers_ = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
  }
  ~Connection() {
    curl_easy_cleanup(handle_);
    curl_slist_free_all(headers_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // GETs url (range "" = all of it), handing each arrived piece to sink;
  // "" on HTTP 200/206, else the error.
  template <typename Sink>
  std::string Get(const std::string& url, const std::string& range, Sink sink) {
    sink_ = std::move(sink);
    curl_easy_setopt(handle_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(handle_, CURLOPT_RANGE, range.empty() ? nullptr : range.c_str());
    CURLcode rc = curl_easy_perform(handle_);
    long code = 0;
    curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK) return std::string("GET ") + url + ": " + curl_easy_strerror(rc);
    if (code != (range.empty() ? 200 : 206)) return "GET " + url + ": HTTP " + std::to_string(code);
    return "";
  }

 private:
  static size_t OnData(char* p, size_t size, size_t n, void* self) {
    auto* c = static_cast<Connection*>(self);
    return c->sink_(p, size * n) ? size * n : 0;  // 0 makes curl fail the transfer
  }

  CURL* handle_;
  curl_slist* headers_ = nullptr;
  std::string sigv4_;
  std::function<bool(const char*, size_t)> sink_;
};

class ObjectGetter {
 public:
  explicit ObjectGetter(GetOptions o) : o_(std::move(o)) {
    const int slots = o_.range_bytes == 0 ? 1 : o_.parallel;
    for (int i = 0; i < slots; ++i) {
      conns_.push_back(std::make_unique<Connection>(o_));
      if (o_.range_bytes > 0) bufs_.emplace_back(o_.range_bytes);
    }
  }

  FileOutcome operator()(const ManifestEntry& e) {
    const auto t0 = std::chrono::steady_clock::now();
    FileOutcome out{.path = e.path};
    const std::string url = o_.endpoint + "/" + o_.bucket + "/" + o_.prefix + e.path;
    StreamChecksum sum;
    out.error = o_.range_bytes == 0 ? Whole(url, &sum, &out) : Ranged(url, e.bytes, &sum, &out);
    if (out.error.empty()) out.error = Verify(e, out.bytes, sum);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }

 private:
  std::string Whole(const std::string& url, StreamChecksum* sum, FileOutcome* out) {
    ++out->requests;
    return conns_[0]->Get(url, "", [&](const char* p, size_t n) {
      sum->Update(p, n);
      out->bytes += n;
      return true;
    });
  }

  // Chunk i goes to slot i % parallel; a slot is reused once its chunk is checksummed.
  std::string Ranged(const std::string& url, uint64_t size, StreamChecksum* sum, FileOutcome* out) {
    struct Flight {
      std::future<std::string> done;
      size_t slot;
      uint64_t len;
      std::shared_ptr<uint64_t> got;
    };
    std::deque<Flight> inflight;
    uint64_t next = 0;
    size_t chunk = 0;
    auto launch = [&] {
      const uint64_t len = std::min<uint64_t>(o_.range_bytes, size - next);
      const size_t slot = chunk++ % conns_.size();
      auto got = std::make_shared<uint64_t>(0);
      const std::string range = std::to_string(next) + "-" + std::to_string(next + len - 1);
      char* dst = bufs_[slot].data();
      Connection* c = conns_[slot].get();
      inflight.push_back({std::async(std::launch::async,
                                     [c, url, range, dst, len, got] {
                                       return c->Get(url, range, [&](const char* p, size_t n) {
                                         if (*got + n > len) return false;
                                         std::memcpy(dst + *got, p, n);
                                         *got += n;
                                         return true;
                                       });
                                     }),
                          slot, len, got});
      next += len;
      ++out->requests;
    };
    while (inflight.size() < conns_.size() && next < size) launch();
    std::string error;
    while (!inflight.empty()) {
      Flight f = std::move(inflight.front());
      inflight.pop_front();
      std::string e = f.done.get();
      if (error.empty() && !e.empty()) error = e;
      if (error.empty() && *f.got != f.len) {
        error =
            "range returned " + std::to_string(*f.got) + " of " + std::to_string(f.len) + " bytes";
      }
      if (!error.empty()) continue;  // drain what is in flight, launch nothing more
      sum->Update(bufs_[f.slot].data(), f.len);
      out->bytes += f.len;
      if (next < size) launch();
    }
    return error;
  }

  const GetOptions o_;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::vector<std::vector<char>> bufs_;  // one per slot, ranged mode only
};

}  // namespace

std::string ValidateGet(const GetOptions& o) {
  if (o.endpoint.empty() || o.bucket.empty()) return "--endpoint and --bucket are required";
  if (o.buffer_bytes == 0) return "--read-kib must be > 0";
  if (o.range_bytes > 0 && (o.parallel < 1 || o.parallel > 64)) return "--parallel must be 1..64";
  return "";
}

FileWorker MakeObjectGetter(const GetOptions& o) {
  return [g = std::make_shared<ObjectGetter>(o)](const ManifestEntry& e) { return (*g)(e); };
}

}  // namespace granary::bench
