// The backing-id journal of FuseDispatcher: what a successor daemon needs to
// keep answering OPENs of nodes the kernel has backing files (or
// userspace-read opens) attached to. See OpenBackingJournal in fuse_dispatch.h.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "common/mutex.h"
#include "fuse/fuse_dispatch.h"

namespace granary {

void FuseDispatcher::JournalBacking(const std::string& line) {
  if (journal_fd_ < 0) return;
  // One write(2) per line on an O_APPEND file: lines never interleave.
  if (::write(journal_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) &&
      !journal_warned_.exchange(true)) {
    GLOG_WARN(
        "fuse: backing journal: {}; a restarted daemon may fail opens of files open "
        "in passthrough now",
        strerror(errno));
  }
}

Status FuseDispatcher::OpenBackingJournal(const std::string& path, bool restore) {
  struct Entry {
    uint64_t ino;
    std::string path;
  };
  std::unordered_map<int32_t, Entry> live;  // by backing id
  // Userspace-read opens outstanding per node: compacted counts, and the
  // requests (by unique: a resent one counts once) that opened or closed one.
  std::unordered_map<uint64_t, int64_t> user_opens;
  std::unordered_set<uint64_t> seen_opens, seen_closes;
  if (restore) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string op;
      int64_t id = 0;
      if (line.starts_with("+ ")) {
        uint64_t ino = 0;
        fields >> op >> ino >> id;
        std::string rest;
        std::getline(fields, rest);
        if (!fields.fail() && id > 0 && id <= INT32_MAX && rest.size() > 1 && ino > 0) {
          live[static_cast<int32_t>(id)] = Entry{.ino = ino, .path = rest.substr(1)};
        }
      } else if (line.starts_with("- ")) {
        fields >> op >> id;
        live.erase(static_cast<int32_t>(id));
      } else if (line.size() > 2 && line[1] == ' ' &&
                 (line[0] == 'u' || line[0] == 'c' || line[0] == 'U')) {
        uint64_t ino = 0, arg = 0;
        fields >> op >> ino >> arg;
        if (fields.fail() || ino == 0) continue;
        arg &= ~FUSE_UNIQUE_RESEND;  // one request, however often it was sent
        if (op == "U") {
          user_opens[ino] += static_cast<int64_t>(arg);
        } else if (op == "u" && seen_opens.insert(arg).second) {
          ++user_opens[ino];
        } else if (op == "c" && seen_closes.insert(arg).second) {
          --user_opens[ino];
        }
      }
    }
  }
  // The ids still registered, compacted into a new file renamed over the
  // old one: a crash now leaves one or the other, whole.
  std::string text;
  for (auto& [id, e] : live) {
    text += "+ " + std::to_string(e.ino) + " " + std::to_string(id) + " " + e.path + "\n";
  }
  for (auto& [ino, count] : user_opens) {
    if (count > 0) text += "U " + std::to_string(ino) + " " + std::to_string(count) + "\n";
  }
  const std::string tmp = path + ".tmp";
  int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return ErrnoStatus("fuse: backing journal " + tmp, errno);
  const bool written = ::write(out, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(out);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus("fuse: backing journal " + path, written ? errno : err);
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("fuse: backing journal " + path, errno);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  journal_fd_ = fd;
  for (auto& [id, e] : live) {
    Shard& s = ShardOf(e.ino);
    {
      MutexLock lock(s.mu);
      Node& n = s.nodes[e.ino];
      n.backing_id = id;
      n.backing_path = e.path;
      n.passthrough_opens = kUnknownOpens;
    }
    backing_ids_open_.fetch_add(1, std::memory_order_relaxed);
  }
  for (auto& [ino, count] : user_opens) {
    if (count <= 0) continue;
    Shard& s = ShardOf(ino);
    MutexLock lock(s.mu);
    s.nodes[ino].userspace_opens = static_cast<uint32_t>(std::min<int64_t>(count, UINT32_MAX));
  }
  if (!live.empty()) GLOG_INFO("fuse: {} passthrough backing ids taken over", live.size());
  return Status::Ok();
}

}  // namespace granary
