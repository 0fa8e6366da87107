// Process helpers for the benchmark-tool smoke tests: run a program to
// completion with its output captured, or keep one running in the background
// (RAII: stopped by PID on destruction, also when a test fails).
//
// Thread safety: each object is used by one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "granary/status.h"

namespace granary::bench_test {

struct RunResult {
  int exit_code = -1;  // exit status; 128+N when killed by signal N
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs argv[0] with `argv`, stdin /dev/null; kills it after `deadline`.
RunResult RunProgram(const std::vector<std::string>& argv,
                     std::chrono::seconds deadline = std::chrono::seconds(120));

// A child process whose stdout first line has been read (e.g. a port).
class Background {
 public:
  // Starts argv and waits (up to 30 s) for the first line on its stdout.
  // Unavailable naming the program when it exits or stays silent.
  static Result<std::unique_ptr<Background>> Start(const std::vector<std::string>& argv);
  ~Background();  // SIGTERM, bounded wait, SIGKILL; always reaps
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  const std::string& first_line() const { return first_line_; }
  // Sends SIGTERM and waits for the exit status (or SIGKILL after 10 s).
  int Stop();

 private:
  Background(pid_t pid, std::string first_line) : pid_(pid), first_line_(std::move(first_line)) {}
  pid_t pid_;
  std::string first_line_;
};

// A fresh directory under /tmp, removed on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace granary::bench_test
