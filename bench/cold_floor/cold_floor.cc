// cold_floor: the CPU a cache daemon spends per cold object (~110 KB image) on
// the two things it cannot avoid: receiving one HTTP GET response and writing
// one cache file. Answers "can one GET plus one ext4 file per object cost
// <= 0.25 ms of CPU here, and which way of doing each part is cheapest?".
//
// Each mode runs for --seconds and prints one row: objects, objects/s, this
// process's CPU per object (getrusage(RUSAGE_SELF) user+sys delta, also split),
// the whole machine's busy CPU per object (/proc/stat delta: includes the
// origin server, kernel writeback threads and anything else running) and
// context switches (voluntary+involuntary) per object. Modes:
//   curl-threads   --in-flight threads, each with its own reused easy handle
//                  (what the product does today: a thread per request)
//   curl-multi     one thread, one multi handle driving --in-flight easy handles
//   socket-epoll   one thread, --in-flight keep-alive sockets on epoll, minimal
//                  HTTP/1.1 (the TCP floor reference, not product code)
//   file-direct    open(XX/name.tmp, O_EXCL|O_DIRECT), pwrite, ftruncate,
//                  rename, close
//   file-buffered  the same without O_DIRECT
//   file-tmpfile   open(XX, O_TMPFILE|O_DIRECT), pwrite, ftruncate, linkat
//   get+file       curl-multi GET, then the file-direct write of each body
// Objects are <url-base>0 .. <url-base>N-1, all --object-size bytes; GETs pick
// them at random. Files go to 256 fan-out directories under --dir (marked
// FS_TOPDIR_FL first, as the product's store does), each with a fresh name;
// the tree is removed at the end unless --keep.
//
// Usage (bench/cold_floor/run.sh starts a local nginx and passes flags on):
//   granary_cold_floor --url-base http://127.0.0.1:PORT/obj/ --objects 2000
//       --dir /var/tmp/cold-floor [--object-size 112640] [--seconds 5]
//       [--in-flight 16] [--modes curl-multi,file-direct,...] [--keep]
//
// Files: cold_floor.cc (measurement, libcurl modes, report, main),
// cache_file.cc (the file modes), socket_epoll.cc (socket-epoll),
// cold_floor.h (what they share).
//
// Threads: curl-threads runs --in-flight worker threads that share only an
// atomic object counter, the error log and the window; every other mode runs
// on the main thread alone.
#include "cold_floor.h"

#include <curl/curl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string_view>
#include <thread>

namespace granary::cold_floor {

void Die(const std::string& message) {
  std::fprintf(stderr, "cold_floor: %s\n", message.c_str());
  std::exit(1);
}

std::string ErrnoText(const char* op, const std::string& what, int err) {
  return std::string(op) + " " + what + ": " + std::strerror(err) + " (errno " +
         std::to_string(err) + ")";
}

std::string BadResponseText(long status, size_t bytes, size_t want) {
  return "HTTP status " + std::to_string(status) + ", " + std::to_string(bytes) +
         " bytes (want 200, " + std::to_string(want) + ")";
}

AlignedBuffer NewAligned(size_t size) {
  char* p = static_cast<char*>(std::aligned_alloc(kAlign, RoundUp(size)));
  if (p == nullptr) Die("out of memory for a " + std::to_string(size) + "-byte buffer");
  return AlignedBuffer(p);
}

void ErrorLog::Report(const std::string& object, const std::string& what) {
  uint64_t n = count_.fetch_add(1) + 1;
  if (n > kPrintedErrorsPerMode) return;
  std::lock_guard<std::mutex> lock(print_mu_);
  std::fprintf(stderr, "%s: object %s: %s%s\n", mode_.c_str(), object.c_str(), what.c_str(),
               n == kPrintedErrorsPerMode ? " (further errors counted, not printed)" : "");
}

namespace {

constexpr double kBudgetMs = 0.25;  // the CPU per object the answer is judged by

uint64_t MachineBusyTicks() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};  // user nice system idle iowait irq softirq steal (guest is in user)
  stat >> cpu;
  for (uint64_t& x : v) stat >> x;
  if (!stat || cpu != "cpu") Die("cannot parse /proc/stat");
  return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

Usage TakeUsage() {
  Usage u;
  if (::getrusage(RUSAGE_SELF, &u.self) != 0) Die(ErrnoText("getrusage", "self", errno));
  u.machine_busy_ticks = MachineBusyTicks();
  u.at = Clock::now();
  return u;
}

double Ms(const timeval& tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }

}  // namespace

void Window::Open(double seconds) {
  before_ = TakeUsage();
  deadline_ = before_.at +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

Row Window::Close(const std::string& mode, uint64_t objects, uint64_t errors) const {
  Usage after = TakeUsage();
  const rusage &a = after.self, &b = before_.self;
  return Row{
      .mode = mode,
      .objects = objects,
      .errors = errors,
      .seconds = std::chrono::duration<double>(after.at - before_.at).count(),
      .user_ms = Ms(a.ru_utime) - Ms(b.ru_utime),
      .sys_ms = Ms(a.ru_stime) - Ms(b.ru_stime),
      .machine_ms = (after.machine_busy_ticks - before_.machine_busy_ticks) * 1e3 /
                    static_cast<double>(::sysconf(_SC_CLK_TCK)),
      .context_switches =
          static_cast<uint64_t>((a.ru_nvcsw - b.ru_nvcsw) + (a.ru_nivcsw - b.ru_nivcsw)),
  };
}

namespace {

// ---------------------------------------------------------------- libcurl

// One reusable GET: an easy handle writing into its own aligned buffer.
struct Transfer {
  CURL* easy = nullptr;
  AlignedBuffer body;
  size_t capacity = 0;
  size_t length = 0;
  uint64_t object = 0;
};

size_t CopyBody(char* ptr, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  if (t->length + n > t->capacity) return 0;  // larger than an object: curl fails the transfer
  std::memcpy(t->body.get() + t->length, ptr, n);
  t->length += n;
  return n;
}

std::unique_ptr<Transfer> NewTransfer(const Flags& f) {
  auto t = std::make_unique<Transfer>();
  t->easy = curl_easy_init();
  if (t->easy == nullptr) Die("curl_easy_init failed");
  t->body = NewAligned(f.object_size);
  t->capacity = RoundUp(f.object_size);
  curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, CopyBody);
  curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(t->easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
  return t;
}

void AimTransfer(const Flags& f, Transfer& t, uint64_t object) {
  t.object = object;
  t.length = 0;
  std::string url = f.url_base + std::to_string(object);
  curl_easy_setopt(t.easy, CURLOPT_URL, url.c_str());  // curl copies the string
}

// Whether a finished transfer got the whole object; reports it to `log` if not.
bool CheckTransfer(const Flags& f, const Transfer& t, CURLcode rc, ErrorLog& log) {
  std::string object = std::to_string(t.object);
  if (rc != CURLE_OK) {
    log.Report(object, "curl error " + std::to_string(rc) + " (" + curl_easy_strerror(rc) + ")");
    return false;
  }
  long status = 0;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200 || t.length != f.object_size) {
    log.Report(object, BadResponseText(status, t.length, f.object_size));
    return false;
  }
  return true;
}

Row RunCurlThreads(const Flags& f) {
  ErrorLog log("curl-threads");
  std::vector<std::unique_ptr<Transfer>> transfers;
  for (int i = 0; i < f.in_flight; ++i) transfers.push_back(NewTransfer(f));
  std::atomic<uint64_t> ok{0};
  Window w;
  w.Open(f.seconds);
  std::vector<std::thread> threads;
  for (int i = 0; i < f.in_flight; ++i) {
    threads.emplace_back([&f, &log, &ok, &w, t = transfers[i].get(), seed = i] {
      std::mt19937_64 rng(seed);
      std::uniform_int_distribution<uint64_t> pick(0, f.objects - 1);
      uint64_t mine = 0;
      while (!w.Expired()) {
        AimTransfer(f, *t, pick(rng));
        mine += CheckTransfer(f, *t, curl_easy_perform(t->easy), log) ? 1 : 0;
      }
      ok.fetch_add(mine);
    });
  }
  for (auto& th : threads) th.join();
  Row row = w.Close("curl-threads", ok.load(), log.count());
  for (auto& t : transfers) curl_easy_cleanup(t->easy);
  return row;
}

// Keeps --in-flight transfers busy on one multi handle until `w` expires,
// driving it with curl_multi_perform + curl_multi_poll (not the socket-action
// API). Calls `on_body` for each complete object; counts it when that returns
// true. Returns the count. Main thread only.
uint64_t RunMulti(const Flags& f, const Window& w, ErrorLog& log,
                  const std::function<bool(Transfer&)>& on_body) {
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) Die("curl_multi_init failed");
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, static_cast<long>(f.in_flight));
  std::vector<std::unique_ptr<Transfer>> transfers;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> pick(0, f.objects - 1);
  for (int i = 0; i < f.in_flight; ++i) {
    transfers.push_back(NewTransfer(f));
    AimTransfer(f, *transfers.back(), pick(rng));
    curl_multi_add_handle(multi, transfers.back()->easy);
  }
  uint64_t ok = 0;
  int running = f.in_flight;
  while (running > 0) {
    CURLMcode mc = curl_multi_perform(multi, &running);
    if (mc != CURLM_OK) Die(std::string("curl_multi_perform: ") + curl_multi_strerror(mc));
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
      CURLcode rc = msg->data.result;
      curl_multi_remove_handle(multi, t->easy);  // invalidates msg
      if (CheckTransfer(f, *t, rc, log) && on_body(*t)) ++ok;
      if (w.Expired()) continue;
      AimTransfer(f, *t, pick(rng));
      curl_multi_add_handle(multi, t->easy);
      ++running;
    }
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  }
  for (auto& t : transfers) curl_easy_cleanup(t->easy);
  curl_multi_cleanup(multi);
  return ok;
}

Row RunCurlMulti(const Flags& f) {
  ErrorLog log("curl-multi");
  Window w;
  w.Open(f.seconds);
  uint64_t ok = RunMulti(f, w, log, [](Transfer&) { return true; });
  return w.Close("curl-multi", ok, log.count());
}

Row RunGetAndFile(const Flags& f) {
  ErrorLog log("get+file");
  CacheFileWriter writer(f.dir, FileMethod::kDirect, FreshTag());
  uint64_t seq = 0;
  Window w;
  w.Open(f.seconds);
  uint64_t ok = RunMulti(
      f, w, log, [&](Transfer& t) { return writer.Write(seq++, t.body.get(), t.length, log); });
  return w.Close("get+file", ok, log.count());
}

// ---------------------------------------------------------------- report

// A mode: its name, whether it GETs and whether it writes files, and its runner.
struct Mode {
  const char* name = "";
  bool gets = false;    // needs --url-base
  bool writes = false;  // needs --dir
  std::function<Row(const Flags&)> run;
};

const std::vector<Mode>& AllModes() {
  static const std::vector<Mode> modes = {
      {.name = "curl-threads", .gets = true, .run = RunCurlThreads},
      {.name = "curl-multi", .gets = true, .run = RunCurlMulti},
      {.name = "socket-epoll", .gets = true, .run = RunSocketEpoll},
      {.name = "file-direct",
       .writes = true,
       .run = [](const Flags& f) { return RunFileMode(f, "file-direct", FileMethod::kDirect); }},
      {.name = "file-buffered",
       .writes = true,
       .run =
           [](const Flags& f) { return RunFileMode(f, "file-buffered", FileMethod::kBuffered); }},
      {.name = "file-tmpfile",
       .writes = true,
       .run = [](const Flags& f) { return RunFileMode(f, "file-tmpfile", FileMethod::kTmpfile); }},
      {.name = "get+file", .gets = true, .writes = true, .run = RunGetAndFile},
  };
  return modes;
}

double CpuPerObject(const Row& r) { return r.objects ? (r.user_ms + r.sys_ms) / r.objects : 0; }

void PrintRow(const Row& r) {
  double per = r.objects ? 1.0 / r.objects : 0;
  std::printf("| %-13s | %8llu | %6llu | %9.0f | %10.4f | %11.4f | %10.4f | %18.4f | %9.2f |\n",
              r.mode.c_str(), static_cast<unsigned long long>(r.objects),
              static_cast<unsigned long long>(r.errors), r.objects / r.seconds, CpuPerObject(r),
              r.user_ms * per, r.sys_ms * per, r.machine_ms * per, r.context_switches * per);
  std::fflush(stdout);
}

void PrintHeader() {
  std::printf(
      "| mode          |  objects | errors | objects/s | CPU ms/obj | user ms/obj | sys ms/obj "
      "| machine CPU ms/obj | ctxsw/obj |\n"
      "|---------------|---------:|-------:|----------:|-----------:|------------:|-----------:"
      "|-------------------:|----------:|\n");
}

// The cheapest row among `names` by CPU per object, or nullptr.
const Row* Cheapest(const std::vector<Row>& rows, std::initializer_list<std::string_view> names) {
  const Row* best = nullptr;
  for (const Row& r : rows) {
    bool listed = false;
    for (auto n : names) listed |= r.mode == n;
    if (listed && r.objects > 0 && (!best || CpuPerObject(r) < CpuPerObject(*best))) best = &r;
  }
  return best;
}

void PrintVerdict(const std::vector<Row>& rows) {
  auto verdict = [](double ms) { return ms <= kBudgetMs ? "within" : "OVER"; };
  std::printf("\nbudget %.2f ms of CPU per object (this process; RUSAGE_SELF):\n", kBudgetMs);
  const Row* get = Cheapest(rows, {"curl-threads", "curl-multi"});
  const Row* floor = Cheapest(rows, {"socket-epoll"});
  const Row* file = Cheapest(rows, {"file-direct", "file-tmpfile"});
  if (get)
    std::printf("  cheapest libcurl GET: %s %.4f ms\n", get->mode.c_str(), CpuPerObject(*get));
  if (floor) std::printf("  TCP floor (socket-epoll): %.4f ms\n", CpuPerObject(*floor));
  if (file) {
    std::printf("  cheapest O_DIRECT file write: %s %.4f ms\n", file->mode.c_str(),
                CpuPerObject(*file));
  }
  if (get && file) {
    double sum = CpuPerObject(*get) + CpuPerObject(*file);
    std::printf("  cheapest GET + cheapest write: %.4f ms -> %s budget\n", sum, verdict(sum));
  }
  if (const Row* both = Cheapest(rows, {"get+file"})) {
    std::printf("  get+file measured: %.4f ms -> %s budget\n", CpuPerObject(*both),
                verdict(CpuPerObject(*both)));
  }
}

void PrintNotes() {
  std::printf(
      "\nnotes: CPU = getrusage(RUSAGE_SELF) user+sys of this process. machine CPU = /proc/stat\n"
      "busy delta over all CPUs: it includes the origin server, kernel writeback threads and\n"
      "anything else running. file-buffered's writeback runs in kernel threads and is NOT in\n"
      "its CPU column (only in machine CPU, if it happened within the window).\n");
}

std::vector<const Mode*> SelectModes(const Flags& f) {
  std::vector<const Mode*> chosen;
  for (const Mode& m : AllModes()) {
    bool wanted = f.modes.empty();
    for (const auto& name : f.modes) wanted |= name == m.name;
    if (wanted) chosen.push_back(&m);
  }
  for (const auto& name : f.modes) {
    bool known = false;
    for (const Mode& m : AllModes()) known |= name == m.name;
    if (!known) Die("unknown mode '" + name + "'");
  }
  for (const Mode* m : chosen) {
    if (m->gets && f.url_base.empty()) Die(std::string(m->name) + " needs --url-base");
    if (m->writes && f.dir.empty()) Die(std::string(m->name) + " needs --dir");
  }
  return chosen;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"cold_floor: CPU per cold object of one HTTP GET and one cache-file write"};
  app.add_option("--url-base", f.url_base, "objects are <url-base>0 .. <url-base>N-1");
  app.add_option("--objects", f.objects, "objects under url-base")->capture_default_str();
  app.add_option("--object-size", f.object_size, "bytes per object")->capture_default_str();
  app.add_option("--in-flight", f.in_flight, "concurrent GETs")->capture_default_str();
  app.add_option("--seconds", f.seconds, "seconds per mode")->capture_default_str();
  app.add_option("--dir", f.dir, "scratch directory for the file modes (on the cache disk)");
  app.add_option("--modes", f.modes, "comma list of modes (default: all)")->delimiter(',');
  app.add_flag("--keep", f.keep, "keep the files written under --dir");
  CLI11_PARSE(app, argc, argv);
  if (f.objects < 1 || f.object_size < 1 || f.in_flight < 1 || f.seconds <= 0) {
    Die("--objects, --object-size, --in-flight and --seconds must be positive");
  }
  std::vector<const Mode*> modes = SelectModes(f);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) Die("curl_global_init failed");
  bool writes = false;
  for (const Mode* m : modes) writes |= m->writes;
  bool created = writes && PrepareScratch(f.dir);
  std::printf("%zu-byte objects, %d in flight, %.1f s per mode, %u CPUs\n", f.object_size,
              f.in_flight, f.seconds, std::thread::hardware_concurrency());
  PrintHeader();
  std::vector<Row> rows;
  for (const Mode* m : modes) {
    rows.push_back(m->run(f));
    PrintRow(rows.back());
  }
  if (writes && !f.keep) RemoveScratch(f.dir, created);
  std::printf("\n");
  PrintHeader();
  uint64_t errors = 0;
  for (const Row& r : rows) {
    PrintRow(r);
    errors += r.errors;
  }
  PrintVerdict(rows);
  PrintNotes();
  curl_global_cleanup();
  return errors == 0 ? 0 : 3;
}

}  // namespace
}  // namespace granary::cold_floor

int main(int argc, char** argv) { return granary::cold_floor::Main(argc, argv); }
