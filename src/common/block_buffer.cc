#include "common/block_buffer.h"

#include <cstdlib>
#include <new>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace granary {
namespace {

// Idle aligned allocations by capacity. Lives forever (never destroyed, so a
// buffer released during static destruction still finds it).
class IdlePool {
 public:
  static IdlePool& Get() {
    static auto* pool = new IdlePool();
    return *pool;
  }
  void* Take(size_t capacity) {
    MutexLock lock(mu_);
    auto it = idle_.find(capacity);
    if (it == idle_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    idle_bytes_ -= capacity;
    return p;
  }
  void Give(void* p, size_t capacity) {
    {
      MutexLock lock(mu_);
      if (idle_bytes_ + capacity <= BlockBuffer::kIdleBytes) {
        idle_[capacity].push_back(p);
        idle_bytes_ += capacity;
        return;
      }
    }
    std::free(p);
  }
  size_t idle_bytes() {
    MutexLock lock(mu_);
    return idle_bytes_;
  }

 private:
  Mutex mu_;  // guards idle_, idle_bytes_; a leaf lock
  std::unordered_map<size_t, std::vector<void*>> idle_ GUARDED_BY(mu_);
  size_t idle_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace

std::shared_ptr<BlockBuffer> BlockBuffer::Allocate(size_t size) {
  const size_t capacity = size == 0 ? kAlign : (size + kAlign - 1) / kAlign * kAlign;
  void* p = IdlePool::Get().Take(capacity);
  if (p == nullptr) p = std::aligned_alloc(kAlign, capacity);
  if (p == nullptr) throw std::bad_alloc();
  auto b = std::shared_ptr<BlockBuffer>(new BlockBuffer());
  b->aligned_ = std::unique_ptr<char, BlockBufferRelease>(static_cast<char*>(p),
                                                          BlockBufferRelease{.capacity = capacity});
  b->data_ = b->aligned_.get();
  b->size_ = size;
  b->capacity_ = capacity;
  return b;
}

size_t BlockBuffer::IdleBytes() { return IdlePool::Get().idle_bytes(); }

void BlockBufferRelease::operator()(char* p) const { IdlePool::Get().Give(p, capacity); }

}  // namespace granary
