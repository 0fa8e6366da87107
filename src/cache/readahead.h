// ReadaheadWindows: which blocks of a large object to fetch ahead of its
// readers (docs/architecture.md).
//
// Per file it tracks up to `streams_per_file` sequential streams -- a whole-
// file reader is one, a checkpoint loader reading eight ranges at once is
// eight -- each with the offset its next read should start at and a window of
// blocks to keep fetched ahead of it. A stream is born by a read at offset 0
// (a reader starting a file) or by a second read that continues the first;
// a read that continues no stream starts a candidate, so a random reader gets
// no readahead. While a stream's reader keeps up (each read that enters a new
// block), its window doubles from `initial_blocks` up to `max_blocks`; when
// the engine runs short of readahead memory it halves the window of the
// stream it could not serve (Shrink), never below one block.
//
// Reads of one stream may arrive slightly out of order (the kernel sends
// several READs of a file at once and FUSE threads answer them in parallel),
// and may skip what was fetched ahead (the mount put those bytes into the
// page cache, so the kernel asks for none of them): a read from one block
// before a stream's expected offset up to one block past what it had
// fetched ahead continues it.
//
// Memory: at most `max_files` files are tracked; past it the least recently
// read one is forgotten (its stream re-forms on its next two reads). A stream
// not read for `idle` is forgotten too.
//
// Thread safety: every method is thread-safe (one mutex, a leaf lock held
// only inside these calls).
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

namespace granary {

struct ReadaheadOptions {
  // Window of a stream when it is recognised (blocks).
  int initial_blocks = 1;
  // The window doubles up to this many blocks (0 = no readahead at all).
  int max_blocks = 16;
  // Sequential streams tracked per file (parallel range readers of one object).
  int streams_per_file = 8;
  // Files tracked at most; the least recently read is forgotten first.
  size_t max_files = 65536;
  // A stream not read for this long is forgotten.
  Clock::Duration idle = std::chrono::seconds(30);
};

class ReadaheadWindows {
 public:
  // Blocks [first, last) to have fetched ahead; empty when first == last.
  struct Range {
    uint64_t first = 0;
    uint64_t last = 0;
    bool empty() const { return first >= last; }
  };

  // `clock` (borrowed, must outlive this; null = the real clock).
  explicit ReadaheadWindows(ReadaheadOptions options, Clock* clock = nullptr);

  // A read of [offset, end) of file `file` (an object of `size` bytes, cut in
  // blocks of `block_size`) has been served. Returns the blocks its stream
  // now wants fetched ahead that no earlier call returned (clipped to the
  // file): empty for a read that is not (yet) part of a sequential stream,
  // that reached the end, or whose window is already requested.
  Range OnRead(uint64_t file, uint64_t offset, uint64_t end, uint64_t size, uint64_t block_size);

  // The engine could not fetch ahead for the stream whose reader is at `end`
  // of `file` (readahead memory is short) from block `from` on: halves its
  // window (>= 1 block) and forgets that blocks from `from` were requested.
  void Shrink(uint64_t file, uint64_t end, uint64_t from, uint64_t block_size);

  // The window (blocks) of the stream of `file` whose next read starts at
  // `next`, or 0 when there is none. For tests and status.
  int WindowOf(uint64_t file, uint64_t next) const;

  // Files tracked now.
  size_t files() const;

 private:
  struct Stream {
    uint64_t next = 0;   // where its next read is expected to start
    uint64_t ahead = 0;  // blocks below this were returned by OnRead
    int window = 0;      // blocks; 0 = a candidate, not yet sequential
    Clock::TimePoint last_read;
  };
  struct File {
    std::vector<Stream> streams;
    std::list<uint64_t>::iterator lru;  // its place in lru_
  };
  static bool Continues(const Stream& s, uint64_t offset, uint64_t block_size);
  // The stream of `f` that a read at `offset` continues, or null.
  Stream* Find(File& f, uint64_t offset, uint64_t block_size);
  void Forget(std::unordered_map<uint64_t, File>::iterator it) REQUIRES(mu_);

  const ReadaheadOptions options_;
  Clock* const clock_;
  mutable Mutex mu_;  // guards files_, lru_; a leaf lock
  std::unordered_map<uint64_t, File> files_ GUARDED_BY(mu_);
  std::list<uint64_t> lru_ GUARDED_BY(mu_);  // most recently read first
};

}  // namespace granary
