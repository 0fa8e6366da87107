// plain_http: the baseline a peer data plane is judged against — a plain
// sendfile(2) HTTP/1.1 file server and a plain GET client (libcurl), each with
// nothing Granary does (no cache, no checksums, no authentication), so that
// cluster_bench.py can put "what the same link and the same CPUs give a plain
// file server" beside its remote-hit rows.
//
//   plain_http serve --root DIR --listen IP:PORT [--threads N]
//       GET /<path relative to DIR> -> 200 with Content-Length and the file's
//       bytes sent by sendfile(2) (no user-space copy); 404 when there is no
//       such regular file; 403 for a path with a ".." segment; 400 for a
//       request it does not parse; 405 for any other method. Keep-alive
//       (HTTP/1.1 default; HTTP/1.0 only with "Connection: keep-alive").
//       Prints one line with its pid and the address it listens on; on
//       SIGTERM or SIGINT prints what it served and exits 0.
//   plain_http get --base http://IP:PORT [--base ...] --list FILE --threads N
//       [--seconds-limit S] [--seed K] [--recv-kib K]
//       FILE: one "PATH SIZE [BASE_INDEX]" per line (BASE_INDEX: which --base,
//       default 0). The list is shuffled (--seed); N threads, each with its
//       own reused curl easy handle (keep-alive connections to every base),
//       take the next entry and GET it whole into a reused buffer; a file
//       counts as read when the status is 200 and Content-Length, the bytes
//       received and SIZE agree, else as an error. Prints one JSON line: files,
//       bytes, seconds, img_s, mb_s, errors, the process's own CPU seconds
//       over the run (getrusage: user, sys, total) and CPU ms per file. Exit 1
//       when any file failed.
//
// Threads: serve runs one thread per connection (at most --threads at once;
// further connections wait in the listen backlog), an accept thread, and the
// main thread waiting for the signal; connection threads share only the
// served-request counters (atomics). get's threads share the next-entry
// index, the counters (atomics) and the first error (under a mutex).
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <semaphore>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace granary::plain_http {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "plain_http: %s\n", message.c_str());
  std::exit(2);
}

std::string ErrnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

// ---------------------------------------------------------------------------
// serve

// Requests answered and body bytes sent, over all connections.
std::atomic<uint64_t> g_served_files{0};
std::atomic<uint64_t> g_served_bytes{0};
std::atomic<uint64_t> g_refused{0};

bool SendAll(int fd, std::string_view data, int flags) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), flags | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The whole file, from offset 0, by sendfile(2); false when the connection
// failed or the file ended early (its framing is then broken: close it).
bool SendFile(int sock, int file, off_t size) {
  off_t offset = 0;
  while (offset < size) {
    ssize_t n = sendfile(sock, file, &offset, static_cast<size_t>(size - offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
  }
  return true;
}

bool SendStatus(int sock, const char* status, bool close_after) {
  std::string head = std::string("HTTP/1.1 ") + status + "\r\nContent-Length: 0\r\n" +
                     (close_after ? "Connection: close\r\n" : "") + "\r\n";
  return SendAll(sock, head, 0);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path below the root that a request target names ("/a/b.JPEG?x" ->
// "a/b.JPEG"), percent-decoded; "" when it is malformed (400).
std::string DecodeTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') return "";
  target = target.substr(0, target.find('?'));
  std::string out;
  for (size_t i = 1; i < target.size(); ++i) {
    if (target[i] != '%') {
      out += target[i];
      continue;
    }
    if (i + 2 >= target.size()) return "";
    int hi = HexValue(target[i + 1]), lo = HexValue(target[i + 2]);
    if (hi < 0 || lo < 0) return "";
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  if (out.find('\0') != std::string::npos) return "";
  return out;
}

// True when a path has a ".." segment (or is absolute, which openat would
// resolve outside the root).
bool EscapesRoot(std::string_view path) {
  if (!path.empty() && path[0] == '/') return true;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (path.substr(start, end - start) == "..") return true;
    start = end + 1;
  }
  return false;
}

bool HeaderIs(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  return true;
}

bool ContainsToken(std::string_view value, std::string_view token) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find(token) != std::string::npos;
}

// Answers one request head (request line and headers, without the blank
// line); false when the connection must close afterwards.
bool Answer(int sock, int root, std::string_view head) {
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) {
    SendStatus(sock, "400 Bad Request", true);
    return false;
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  bool keep_alive = version == "HTTP/1.1";
  bool has_body = false;
  while (eol != std::string_view::npos) {
    size_t next = head.find("\r\n", eol + 2);
    size_t len = next == std::string_view::npos ? head.npos : next - eol - 2;
    std::string_view h = head.substr(eol + 2, len);
    if (HeaderIs(h, "connection")) {
      if (ContainsToken(h, "close")) keep_alive = false;
      if (ContainsToken(h, "keep-alive")) keep_alive = true;
    }
    if (HeaderIs(h, "content-length") || HeaderIs(h, "transfer-encoding")) has_body = true;
    eol = next;
  }
  if (has_body) {  // a GET carries none; do not try to skip one
    SendStatus(sock, "400 Bad Request", true);
    return false;
  }
  if (method != "GET") return SendStatus(sock, "405 Method Not Allowed", !keep_alive) && keep_alive;
  std::string path = DecodeTarget(target);
  if (path.empty()) {
    g_refused.fetch_add(1, std::memory_order_relaxed);
    return SendStatus(sock, target == "/" ? "404 Not Found" : "400 Bad Request", !keep_alive) &&
           keep_alive;
  }
  if (EscapesRoot(path)) {
    g_refused.fetch_add(1, std::memory_order_relaxed);
    return SendStatus(sock, "403 Forbidden", !keep_alive) && keep_alive;
  }
  int fd = openat(root, path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) close(fd);
    g_refused.fetch_add(1, std::memory_order_relaxed);
    return SendStatus(sock, "404 Not Found", !keep_alive) && keep_alive;
  }
  std::string response =
      "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
      "Content-Length: " +
      std::to_string(st.st_size) + "\r\n" + (keep_alive ? "" : "Connection: close\r\n") + "\r\n";
  // MSG_MORE: the head leaves in the same segment as the first body bytes.
  bool ok =
      SendAll(sock, response, st.st_size > 0 ? MSG_MORE : 0) && SendFile(sock, fd, st.st_size);
  close(fd);
  if (ok) {
    g_served_files.fetch_add(1, std::memory_order_relaxed);
    g_served_bytes.fetch_add(static_cast<uint64_t>(st.st_size), std::memory_order_relaxed);
  }
  return ok && keep_alive;
}

// Serves one connection until the client closes it or a request says close.
void ServeConnection(int sock, int root) {
  constexpr size_t kMaxHead = 16 << 10;
  std::string in;
  char chunk[16 << 10];
  for (;;) {
    size_t end = in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (in.size() > kMaxHead) {
        SendStatus(sock, "431 Request Header Fields Too Large", true);
        break;
      }
      ssize_t n = recv(sock, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      in.append(chunk, static_cast<size_t>(n));
      continue;
    }
    bool again = Answer(sock, root, std::string_view(in).substr(0, end));
    in.erase(0, end + 4);  // a pipelined next request stays
    if (!again) break;
  }
  close(sock);
}

sockaddr_in ParseAddress(const std::string& listen) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) Die("--listen wants IP:PORT, got " + listen);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, listen.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    Die("--listen: not an IPv4 address: " + listen);
  }
  int port = std::atoi(listen.c_str() + colon + 1);
  if (port < 0 || port > 65535) Die("--listen: bad port in " + listen);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

int Serve(const std::string& root_dir, const std::string& listen_at, int max_connections) {
  int root = open(root_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) Die(ErrnoText("open " + root_dir));
  sockaddr_in addr = ParseAddress(listen_at);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Die(ErrnoText("bind " + listen_at));
  }
  if (listen(lfd, 1024) != 0) Die(ErrnoText("listen"));
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));

  // Every thread started from here on inherits the blocked signals; the main
  // thread takes them with sigwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::printf("plain_http serve: pid %d listening on %s:%d root %s\n", getpid(), ip,
              ntohs(addr.sin_port), root_dir.c_str());
  std::fflush(stdout);

  auto slots = std::make_shared<std::counting_semaphore<>>(max_connections);
  std::thread([lfd, root, slots] {
    for (;;) {
      slots->acquire();
      int sock = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (sock < 0) {
        int err = errno;
        slots->release();
        if (err == EMFILE || err == ENFILE) {  // out of descriptors: let connections close
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        if (err == EINTR || err == ECONNABORTED) continue;
        return;
      }
      int nodelay = 1;
      setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof(nodelay));
      std::thread([sock, root, slots] {
        ServeConnection(sock, root);
        slots->release();
      }).detach();
    }
  }).detach();

  int sig = 0;
  sigwait(&stop, &sig);
  std::printf("plain_http serve: signal %d: served %llu files, %llu bytes, refused %llu\n", sig,
              static_cast<unsigned long long>(g_served_files.load()),
              static_cast<unsigned long long>(g_served_bytes.load()),
              static_cast<unsigned long long>(g_refused.load()));
  std::fflush(stdout);
  _exit(0);  // connection threads are detached and may be mid-request
}

// ---------------------------------------------------------------------------
// get

struct Entry {
  std::string path;
  uint64_t size = 0;
  size_t base = 0;  // index into --base
};

std::vector<Entry> ReadList(const std::string& file, size_t bases) {
  std::ifstream in(file);
  if (!in) Die(ErrnoText("open " + file));
  std::vector<Entry> out;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream fields(line);
    Entry e;
    if (!(fields >> e.path >> e.size)) {
      Die(file + ":" + std::to_string(n) + ": want PATH SIZE [BASE_INDEX]");
    }
    if (!(fields >> e.base)) e.base = 0;
    if (e.base >= bases)
      Die(file + ":" + std::to_string(n) + ": no --base number " + std::to_string(e.base));
    out.push_back(std::move(e));
  }
  if (out.empty()) Die(file + ": no entries");
  return out;
}

struct GetRun {
  std::vector<std::string> bases;
  std::vector<Entry> entries;
  int threads = 16;
  double seconds_limit = 0;
  long recv_bytes = 256 << 10;
  std::chrono::steady_clock::time_point start;

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> files{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> errors{0};
  std::mutex error_mu;  // guards first_error
  std::string first_error;

  void Fail(const std::string& what) {
    errors.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(error_mu);
    if (first_error.empty()) first_error = what;
  }
};

// The reused body buffer of one thread and the bytes of the current response.
struct Sink {
  std::vector<char> buffer;
  size_t received = 0;

  static size_t OnData(char* p, size_t size, size_t n, void* self) {
    auto* s = static_cast<Sink*>(self);
    size_t len = size * n;
    if (s->received + len > s->buffer.size()) s->buffer.resize((s->received + len) * 2);
    std::memcpy(s->buffer.data() + s->received, p, len);
    s->received += len;
    return len;
  }
};

void GetWorker(GetRun& run) {
  CURL* h = curl_easy_init();
  Sink sink;
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, run.recv_bytes);
  curl_easy_setopt(h, CURLOPT_MAXCONNECTS, static_cast<long>(run.bases.size() + 1));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Sink::OnData);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  std::string url;
  for (;;) {
    if (run.seconds_limit > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - run.start).count() >=
            run.seconds_limit) {
      break;
    }
    size_t i = run.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= run.entries.size()) break;
    const Entry& e = run.entries[i];
    if (sink.buffer.size() < e.size) sink.buffer.resize(e.size);
    sink.received = 0;
    url = run.bases[e.base] + "/" + e.path;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_off_t length = -1;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (rc != CURLE_OK) {
      run.Fail("GET " + url + ": " + curl_easy_strerror(rc));
    } else if (code != 200) {
      run.Fail("GET " + url + ": HTTP " + std::to_string(code));
    } else if (length != static_cast<curl_off_t>(sink.received) || sink.received != e.size) {
      run.Fail("GET " + url + ": Content-Length " + std::to_string(length) + ", received " +
               std::to_string(sink.received) + ", listed " + std::to_string(e.size));
    } else {
      run.files.fetch_add(1, std::memory_order_relaxed);
      run.bytes.fetch_add(e.size, std::memory_order_relaxed);
    }
  }
  curl_easy_cleanup(h);
}

double CpuSeconds(const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; }

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int Get(GetRun& run, const std::string& list, uint64_t seed) {
  for (std::string& b : run.bases) {
    while (!b.empty() && b.back() == '/') b.pop_back();
  }
  run.entries = ReadList(list, run.bases.size());
  std::shuffle(run.entries.begin(), run.entries.end(), std::mt19937_64(seed));
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) Die("curl_global_init failed");

  rusage ru0{}, ru1{};
  getrusage(RUSAGE_SELF, &ru0);
  run.start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < run.threads; ++t) workers.emplace_back(GetWorker, std::ref(run));
  for (std::thread& w : workers) w.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.start).count();
  getrusage(RUSAGE_SELF, &ru1);

  double user = CpuSeconds(ru1.ru_utime) - CpuSeconds(ru0.ru_utime);
  double sys = CpuSeconds(ru1.ru_stime) - CpuSeconds(ru0.ru_stime);
  uint64_t files = run.files.load(), bytes = run.bytes.load(), errors = run.errors.load();
  bool complete = files + errors == run.entries.size();
  std::printf(
      "{\"files\": %llu, \"bytes\": %llu, \"seconds\": %.4f, \"img_s\": %.1f, \"mb_s\": %.2f, "
      "\"errors\": %llu, \"listed\": %zu, \"complete\": %s, \"threads\": %d, \"cpu_s\": %.4f, "
      "\"user_s\": %.4f, \"sys_s\": %.4f, \"cpu_ms_per_file\": %.4f, \"first_error\": %s}\n",
      static_cast<unsigned long long>(files), static_cast<unsigned long long>(bytes), secs,
      files / secs, bytes / secs / 1e6, static_cast<unsigned long long>(errors), run.entries.size(),
      complete ? "true" : "false", run.threads, user + sys, user, sys,
      files ? 1e3 * (user + sys) / files : 0.0, JsonString(run.first_error).c_str());
  std::fflush(stdout);
  curl_global_cleanup();
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace granary::plain_http

int main(int argc, char** argv) {
  using namespace granary::plain_http;
  CLI::App app{"plain_http: a plain sendfile HTTP file server and a plain GET client"};
  app.require_subcommand(1);

  std::string root, listen;
  int max_connections = 256;
  CLI::App* serve = app.add_subcommand("serve", "serve the files under --root over HTTP/1.1");
  serve->add_option("--root", root, "directory whose files are served")->required();
  serve->add_option("--listen", listen, "IP:PORT to listen on (port 0: any)")->required();
  serve
      ->add_option("--threads", max_connections,
                   "connections served at once (a thread each); more wait to be accepted")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));

  GetRun run;
  std::string list;
  uint64_t seed = 1;
  long recv_kib = 256;
  CLI::App* get = app.add_subcommand("get", "GET every listed file once, in shuffled order");
  get->add_option("--base", run.bases, "http://IP:PORT (repeat: BASE_INDEX picks one)")->required();
  get->add_option("--list", list, "file of PATH SIZE [BASE_INDEX] lines")->required();
  get->add_option("--threads", run.threads, "threads, one keep-alive curl handle each")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  get->add_option("--seconds-limit", run.seconds_limit, "stop taking files after S s (0: none)")
      ->capture_default_str();
  get->add_option("--seed", seed, "shuffle seed")->capture_default_str();
  get->add_option("--recv-kib", recv_kib, "curl's receive buffer (CURLOPT_BUFFERSIZE), KiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 10240));

  CLI11_PARSE(app, argc, argv);
  if (serve->parsed()) return Serve(root, listen, max_connections);
  run.recv_bytes = recv_kib << 10;
  return Get(run, list, seed);
}
