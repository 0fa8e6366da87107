#include "cache/readahead.h"

#include <algorithm>

namespace granary {

ReadaheadWindows::ReadaheadWindows(ReadaheadOptions options, Clock* clock)
    : options_(options), clock_(clock != nullptr ? clock : Clock::Real()) {}

bool ReadaheadWindows::Continues(const Stream& s, uint64_t offset, uint64_t block_size) {
  if (s.window == 0) return offset == s.next;
  const uint64_t horizon = std::max(s.next, s.ahead * block_size);
  return offset <= horizon + block_size && offset + block_size >= s.next;
}

ReadaheadWindows::Stream* ReadaheadWindows::Find(File& f, uint64_t offset, uint64_t block_size) {
  for (Stream& s : f.streams) {
    if (Continues(s, offset, block_size)) return &s;
  }
  return nullptr;
}

void ReadaheadWindows::Forget(std::unordered_map<uint64_t, File>::iterator it) {
  lru_.erase(it->second.lru);
  files_.erase(it);
}

ReadaheadWindows::Range ReadaheadWindows::OnRead(uint64_t file, uint64_t offset, uint64_t end,
                                                 uint64_t size, uint64_t block_size) {
  if (options_.max_blocks <= 0 || block_size == 0 || end <= offset) return {};
  const Clock::TimePoint now = clock_->Now();
  MutexLock lock(mu_);
  auto it = files_.find(file);
  if (it == files_.end()) {
    if (end >= size) return {};  // read whole in one call: nothing to follow
    if (files_.size() >= options_.max_files && !lru_.empty()) Forget(files_.find(lru_.back()));
    lru_.push_front(file);
    it = files_.emplace(file, File{.streams = {}, .lru = lru_.begin()}).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  File& f = it->second;
  std::erase_if(f.streams, [&](const Stream& s) { return now - s.last_read > options_.idle; });

  Stream* s = Find(f, offset, block_size);
  if (s == nullptr) {
    if (f.streams.size() >= static_cast<size_t>(std::max(1, options_.streams_per_file))) {
      // The least recently read stream makes room.
      auto oldest = std::min_element(
          f.streams.begin(), f.streams.end(),
          [](const Stream& a, const Stream& b) { return a.last_read < b.last_read; });
      f.streams.erase(oldest);
    }
    // A reader starting at the beginning is taken to read on; any other
    // read must be continued once before it earns a window.
    f.streams.push_back(Stream{.next = end,
                               .window = offset == 0 ? std::max(1, options_.initial_blocks) : 0,
                               .last_read = now});
    s = &f.streams.back();
  } else {
    if (s->window == 0) {
      s->window = std::max(1, options_.initial_blocks);
    } else if (end > s->next && s->next > 0 &&
               (end - 1) / block_size != (s->next - 1) / block_size) {
      // The reader entered a new block: it keeps up, so look further ahead.
      s->window = std::min(options_.max_blocks, s->window * 2);
    }
    s->next = std::max(s->next, end);
    s->last_read = now;
  }
  if (s->next >= size) {
    // The stream reached the end of the file: nothing more to fetch for it.
    f.streams.erase(f.streams.begin() + (s - f.streams.data()));
    if (f.streams.empty()) Forget(it);
    return {};
  }
  if (s->window == 0) return {};
  const uint64_t blocks = (size + block_size - 1) / block_size;
  const uint64_t ahead_end =
      std::min(size, s->next + static_cast<uint64_t>(s->window) * block_size);
  Range r{.first = std::max(s->next / block_size, s->ahead),
          .last = std::min(blocks, (ahead_end + block_size - 1) / block_size)};
  if (r.empty()) return {};
  s->ahead = r.last;
  return r;
}

void ReadaheadWindows::Shrink(uint64_t file, uint64_t end, uint64_t from, uint64_t block_size) {
  MutexLock lock(mu_);
  auto it = files_.find(file);
  if (it == files_.end()) return;
  Stream* s = Find(it->second, end, block_size);
  if (s == nullptr) return;
  s->window = std::max(1, s->window / 2);
  s->ahead = std::min(s->ahead, from);
}

int ReadaheadWindows::WindowOf(uint64_t file, uint64_t next) const {
  MutexLock lock(mu_);
  auto it = files_.find(file);
  if (it == files_.end()) return 0;
  for (const Stream& s : it->second.streams) {
    if (s.next == next) return s.window;
  }
  return 0;
}

size_t ReadaheadWindows::files() const {
  MutexLock lock(mu_);
  return files_.size();
}

}  // namespace granary
