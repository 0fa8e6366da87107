// BlockBuffer: aligned, rounded-up memory for O_DIRECT, reused after release;
// adopted strings are not copied.
#include "common/block_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace granary {
namespace {

TEST(BlockBufferTest, AllocateIsAlignedAndRoundedUpForDirectIo) {
  auto b = BlockBuffer::Allocate(10'000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % BlockBuffer::kAlign, 0u);
  EXPECT_EQ(b->size(), 10'000u);
  EXPECT_EQ(b->capacity(), 12'288u);
  EXPECT_EQ(b->view().size(), 10'000u);
}

TEST(BlockBufferTest, ReleasedMemoryIsReusedForTheSameCapacity) {
  const size_t kSize = 4 << 20;
  const char* first = nullptr;
  {
    auto b = BlockBuffer::Allocate(kSize);
    first = b->data();
  }
  auto again = BlockBuffer::Allocate(kSize);
  EXPECT_EQ(again->data(), first);
}

TEST(BlockBufferTest, IdleMemoryStaysUnderItsBound) {
  const size_t kSize = 8 << 20;
  const size_t n = BlockBuffer::kIdleBytes / kSize + 8;
  const size_t others = BlockBuffer::IdleBytes();  // idle buffers of other sizes (earlier tests)
  std::vector<std::shared_ptr<BlockBuffer>> many;
  for (size_t i = 0; i < n; ++i) many.push_back(BlockBuffer::Allocate(kSize));
  many.clear();  // more than kIdleBytes released: the rest goes back to the system
  EXPECT_LE(BlockBuffer::IdleBytes(), BlockBuffer::kIdleBytes);
  EXPECT_GT(BlockBuffer::IdleBytes() + kSize, BlockBuffer::kIdleBytes);
  for (size_t i = 0; i < n; ++i) many.push_back(BlockBuffer::Allocate(kSize));
  EXPECT_EQ(BlockBuffer::IdleBytes(), others);  // every idle buffer of this size was taken again
}

TEST(BlockBufferTest, AdoptKeepsTheBytesWithoutCopying) {
  std::string s(1000, 'x');
  const char* p = s.data();
  auto b = BlockBuffer::Adopt(std::move(s));
  EXPECT_EQ(b->data(), p);
  EXPECT_EQ(b->view(), std::string(1000, 'x'));
  auto c = BlockBuffer::Copy("hello");
  EXPECT_EQ(c->view(), "hello");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data()) % BlockBuffer::kAlign, 0u);
}

}  // namespace
}  // namespace granary
