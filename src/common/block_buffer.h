// BlockBuffer: the bytes of one cache block in memory.
//
// Allocate() gives memory aligned to kAlign (what O_DIRECT needs: the store
// writes a block it admits straight from it to the cache disk, and reads a
// block from the disk straight into it) and rounded up to a multiple of it,
// without zeroing it: whoever allocates a buffer fills it before sharing it.
// Freed memory is kept for the next Allocate of the same capacity (up to
// kIdleBytes in all), so a stream of blocks reuses pages instead of having
// the kernel fault in and zero fresh ones for every block.
// Adopt() wraps bytes that arrived as a std::string (a peer's reply) without
// copying them; they are not aligned, so the store copies them once more for
// O_DIRECT.
//
// Thread safety: a buffer is written by one thread before it is published
// (BlockData, a shared_ptr to const), then only read, by any thread.
// Allocate and the release of a buffer may run on any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace granary {

// Gives Allocate's memory back to the pool of idle buffers (block_buffer.cc).
struct BlockBufferRelease {
  size_t capacity = 0;
  void operator()(char* p) const;
};

class BlockBuffer {
 public:
  // Alignment (and size granularity) of Allocate()'s memory.
  static constexpr size_t kAlign = 4096;
  // Freed memory kept for reuse at most, every capacity together.
  static constexpr size_t kIdleBytes = 128ull << 20;

  // `size` bytes, not initialised, aligned to kAlign; the memory behind
  // data() extends to capacity() = size rounded up to kAlign. Throws
  // std::bad_alloc when memory is exhausted, as `new` does.
  static std::shared_ptr<BlockBuffer> Allocate(size_t size);
  // Takes `bytes` over (no copy).
  static std::shared_ptr<BlockBuffer> Adopt(std::string bytes) {
    auto b = std::shared_ptr<BlockBuffer>(new BlockBuffer());
    b->adopted_ = std::move(bytes);
    b->data_ = b->adopted_.data();
    b->size_ = b->capacity_ = b->adopted_.size();
    return b;
  }
  // Bytes of freed memory kept for reuse now (<= kIdleBytes).
  static size_t IdleBytes();
  // An aligned copy of `bytes`.
  static std::shared_ptr<BlockBuffer> Copy(std::string_view bytes) {
    auto b = Allocate(bytes.size());
    if (!bytes.empty()) std::memcpy(b->data(), bytes.data(), bytes.size());
    return b;
  }

  BlockBuffer(const BlockBuffer&) = delete;
  BlockBuffer& operator=(const BlockBuffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // Bytes writable at data() (>= size(); Allocate: a multiple of kAlign).
  size_t capacity() const { return capacity_; }
  std::string_view view() const { return {data_, size_}; }
  std::span<char> span() { return {data_, size_}; }

  // The XXH3-64 of view(), when whoever filled the buffer already computed it
  // (the origin connector hashes bytes as they arrive; a peer's block comes
  // with the checksum its frame was verified against): the store records it
  // instead of reading the block from memory again. Set before publishing.
  const std::optional<uint64_t>& xxh3() const { return xxh3_; }
  void set_xxh3(std::optional<uint64_t> sum) { xxh3_ = sum; }

 private:
  BlockBuffer() = default;
  std::unique_ptr<char, BlockBufferRelease> aligned_;  // Allocate's memory, or null
  std::string adopted_;                                // Adopt's bytes
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::optional<uint64_t> xxh3_;
};

// The bytes of one block, shared read-only by every reader that waited for them.
using BlockData = std::shared_ptr<const BlockBuffer>;

}  // namespace granary
