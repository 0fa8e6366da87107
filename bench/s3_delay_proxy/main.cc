// s3_delay_proxy: puts honest "remote storage" latency and bandwidth in front
// of a local S3 server (see proxy.h).
//
//   s3_delay_proxy --upstream 127.0.0.1:5000 --delay 10ms --bandwidth 100MiB/s
//                  --port 0 --stats-file /tmp/proxy.json
//
// On start it prints the port it listens on, alone on the first stdout line.
// Counters: GET http://127.0.0.1:<port>/__proxy_stats (or /__proxy_stats/reset);
// with --stats-file they are also written every --stats-interval and on
// SIGTERM/SIGINT, after which the proxy exits 0.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <thread>

#include "common/units.h"
#include "s3_delay_proxy/proxy.h"

namespace {

// Writes the counters to `path` atomically (temp file + rename).
void WriteStats(const std::string& path, const granary::bench::ProxyStats& s) {
  if (path.empty()) return;
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << s.ToJson() << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  granary::bench::ProxyOptions opt;
  std::string delay = "0ms", bandwidth = "0", stats_file, interval = "1s";
  CLI::App app{"s3_delay_proxy: per-request delay and bandwidth cap in front of an S3 server"};
  app.add_option("--upstream", opt.upstream, "S3 server: host:port or http://host:port")
      ->required();
  app.add_option("--listen", opt.listen_host, "address to listen on")->default_val("127.0.0.1");
  app.add_option("--port", opt.port, "port to listen on (0 = any free port)")->default_val(0);
  app.add_option("--delay", delay, "added before each request is forwarded (e.g. 10ms)");
  app.add_option("--bandwidth", bandwidth,
                 "response bytes/s over all connections, e.g. 100MiB/s "
                 "(0 = unlimited)");
  app.add_option("--stats-file", stats_file, "write counters (JSON) here periodically and at exit");
  app.add_option("--stats-interval", interval, "how often --stats-file is rewritten");
  CLI11_PARSE(app, argc, argv);

  auto d = granary::ParseDuration(delay);
  std::string bw =
      bandwidth.ends_with("/s") ? bandwidth.substr(0, bandwidth.size() - 2) : bandwidth;
  auto b = granary::ParseSize(bw);
  auto every = granary::ParseDuration(interval);
  if (!d.ok() || !b.ok() || !every.ok() || every->count() <= 0) {
    std::fprintf(stderr, "s3_delay_proxy: %s\n",
                 !d.ok()   ? ("--delay: " + d.status().message()).c_str()
                 : !b.ok() ? ("--bandwidth: " + b.status().message()).c_str()
                           : ("--stats-interval: bad value '" + interval + "'").c_str());
    return 1;
  }
  opt.delay = std::chrono::duration_cast<std::chrono::microseconds>(*d);
  opt.bandwidth = *b;

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto proxy = granary::bench::DelayProxy::Create(opt);
  if (!proxy.ok()) {
    std::fprintf(stderr, "s3_delay_proxy: %s\n", proxy.status().ToString().c_str());
    return 1;
  }
  auto port = (*proxy)->Start();
  if (!port.ok()) {
    std::fprintf(stderr, "s3_delay_proxy: %s\n", port.status().ToString().c_str());
    return 1;
  }
  std::printf("%d\n", *port);
  std::fflush(stdout);

  timespec tick{};
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(*every).count();
  tick.tv_sec = ns / 1'000'000'000;
  tick.tv_nsec = ns % 1'000'000'000;
  for (;;) {
    int sig = sigtimedwait(&stop, nullptr, stats_file.empty() ? nullptr : &tick);
    WriteStats(stats_file, (*proxy)->Stats());
    if (sig == SIGTERM || sig == SIGINT) break;
  }
  // Connections may be mid-request; the process ends without waiting for them.
  std::fflush(stdout);
  _exit(0);
}
