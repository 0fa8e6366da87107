// ReadaheadWindows: a sequential reader's window grows while it keeps up,
// shrinks when readahead memory is short, random readers get none, parallel
// range readers of one object each get their own stream.
#include "cache/readahead.h"

#include <gtest/gtest.h>

#include "testing/fake_clock.h"

namespace granary {
namespace {

constexpr uint64_t kBlock = 4 << 20;
constexpr uint64_t kRead = 256 << 10;
constexpr uint64_t kSize = 128 * kBlock;

// Feeds reads of [from, to) in `step` pieces to `file`; returns the blocks
// the windows asked for, in order, and checks that each range continues the
// last (no block asked twice, none skipped).
std::vector<uint64_t> ReadSequentially(ReadaheadWindows& w, uint64_t file, uint64_t from,
                                       uint64_t to, uint64_t step) {
  std::vector<uint64_t> asked;
  for (uint64_t off = from; off < to; off += step) {
    auto r = w.OnRead(file, off, off + step, kSize, kBlock);
    for (uint64_t b = r.first; b < r.last; ++b) {
      EXPECT_TRUE(asked.empty() || b == asked.back() + 1) << "block " << b << " at " << off;
      asked.push_back(b);
    }
  }
  return asked;
}

TEST(ReadaheadWindowsTest, ASequentialReaderWindowDoublesPerBlockUpToTheMaximum) {
  testing::FakeClock clock;
  ReadaheadWindows w(ReadaheadOptions{.initial_blocks = 1, .max_blocks = 8}, &clock);
  // The first read at offset 0 starts a stream with the initial window:
  // bytes [256 KiB, 256 KiB + 1 block) span blocks 0 and 1.
  auto r = w.OnRead(1, 0, kRead, kSize, kBlock);
  EXPECT_EQ(r.first, 0u);
  EXPECT_EQ(r.last, 2u);
  std::vector<int> windows;
  uint64_t horizon = r.last;
  for (uint64_t off = kRead; off < 6 * kBlock; off += kRead) {
    r = w.OnRead(1, off, off + kRead, kSize, kBlock);
    if (!r.empty()) {
      EXPECT_EQ(r.first, horizon);  // never a block twice
      horizon = r.last;
    }
    const int window = w.WindowOf(1, off + kRead);
    if (off % kBlock == 0) windows.push_back(window);
    // Always `window` blocks of bytes ahead of the reader are asked for.
    EXPECT_EQ(horizon, (off + kRead + window * kBlock + kBlock - 1) / kBlock) << off;
  }
  // Entering blocks 1, 2, 3, 4, 5: 2, 4, 8, 8, 8.
  EXPECT_EQ(windows, (std::vector<int>{2, 4, 8, 8, 8}));
}

TEST(ReadaheadWindowsTest, ShrinkHalvesTheWindowAndAsksAgainForWhatWasRefused) {
  testing::FakeClock clock;
  ReadaheadWindows w(ReadaheadOptions{.initial_blocks = 1, .max_blocks = 16}, &clock);
  const auto asked = ReadSequentially(w, 7, 0, 8 * kBlock, kBlock);
  const uint64_t off = 8 * kBlock;
  EXPECT_EQ(w.WindowOf(7, off), 16);
  EXPECT_EQ(asked.back(), 8u + 16 - 1);
  // The engine could not start block 9 or any after it.
  w.Shrink(7, off, 9, kBlock);
  EXPECT_EQ(w.WindowOf(7, off), 8);
  for (int i = 0; i < 10; ++i) w.Shrink(7, off, 9, kBlock);
  EXPECT_EQ(w.WindowOf(7, off), 1);
  // Keeping up again grows it again, and the refused blocks are asked again.
  auto r = w.OnRead(7, off, off + kBlock, kSize, kBlock);
  EXPECT_EQ(w.WindowOf(7, off + kBlock), 2);
  EXPECT_EQ(r.first, 9u);
  EXPECT_EQ(r.last, 11u);
}

TEST(ReadaheadWindowsTest, ARandomReaderAlmostNeverGetsReadahead) {
  testing::FakeClock clock;
  ReadaheadWindows w(ReadaheadOptions{}, &clock);
  uint64_t x = 12345;
  int ranges = 0;
  for (int i = 0; i < 1000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t off = (1 + (x >> 33) % 500) * kRead;  // never 0: a reader starting a file
    if (!w.OnRead(3, off, off + kRead, kSize, kBlock).empty()) ++ranges;
  }
  // Only a read that lands exactly where an earlier one ended (by chance,
  // ~1.6 % here) earns a window.
  EXPECT_LT(ranges, 50);
}

TEST(ReadaheadWindowsTest, ParallelRangeReadersOfOneObjectEachKeepAStream) {
  testing::FakeClock clock;
  ReadaheadWindows w(ReadaheadOptions{.initial_blocks = 1, .max_blocks = 4, .streams_per_file = 8},
                     &clock);
  // Eight readers, each reading its own 16-block range in 1 MiB reads,
  // interleaved as parallel loaders would.
  constexpr uint64_t kPart = 16 * kBlock;
  constexpr uint64_t kStep = 1 << 20;
  std::vector<std::vector<uint64_t>> asked(8);
  for (uint64_t pos = 0; pos < 8 * kBlock; pos += kStep) {
    for (uint64_t reader = 0; reader < 8; ++reader) {
      const uint64_t off = reader * kPart + pos;
      auto r = w.OnRead(9, off, off + kStep, kSize, kBlock);
      for (uint64_t b = r.first; b < r.last; ++b) asked[reader].push_back(b);
    }
  }
  for (uint64_t reader = 0; reader < 8; ++reader) {
    // Each reader is followed from its second read on (the first one too at
    // offset 0): its own blocks, in order, up to 4 blocks past block 8.
    const uint64_t first = reader * 16;
    std::vector<uint64_t> want;
    for (uint64_t b = first; b < first + 12; ++b) want.push_back(b);
    EXPECT_EQ(asked[reader], want) << reader;
    EXPECT_EQ(w.WindowOf(9, reader * kPart + 8 * kBlock), 4) << reader;
  }
}

TEST(ReadaheadWindowsTest, ReadsArrivingOutOfOrderOrSkippingPushedBytesStayOneStream) {
  testing::FakeClock clock;
  ReadaheadWindows w(ReadaheadOptions{.initial_blocks = 1, .max_blocks = 4}, &clock);
  constexpr uint64_t kStep = 1 << 20;
  w.OnRead(5, 0, kStep, kSize, kBlock);
  // 2 MiB arrives before 1 MiB: one stream, still window 1.
  w.OnRead(5, 2 * kStep, 3 * kStep, kSize, kBlock);
  w.OnRead(5, kStep, 2 * kStep, kSize, kBlock);
  EXPECT_EQ(w.WindowOf(5, 3 * kStep), 1);
  // Blocks fetched ahead went to the page cache: the next read the engine
  // sees starts at the end of what was fetched ahead (block 1 ends at 8 MiB).
  auto r = w.OnRead(5, 2 * kBlock, 2 * kBlock + kStep, kSize, kBlock);
  EXPECT_EQ(w.WindowOf(5, 2 * kBlock + kStep), 2);
  EXPECT_EQ(r.first, 2u);
  EXPECT_EQ(r.last, 5u);
}

TEST(ReadaheadWindowsTest, IdleStreamsAndFinishedFilesAreForgotten) {
  testing::FakeClock clock;
  ReadaheadWindows w(ReadaheadOptions{.max_files = 2, .idle = std::chrono::seconds(5)}, &clock);
  // A reader that reaches the end leaves nothing behind.
  for (uint64_t off = 0; off < 2 * kBlock; off += kBlock) {
    w.OnRead(1, off, off + kBlock, 2 * kBlock, kBlock);
  }
  EXPECT_EQ(w.files(), 0u);
  // A stream left idle past `idle` is not continued.
  w.OnRead(2, 0, kRead, kSize, kBlock);
  clock.Advance(std::chrono::seconds(6));
  EXPECT_TRUE(w.OnRead(2, kRead, 2 * kRead, kSize, kBlock).empty());
  // At most max_files files are tracked.
  for (uint64_t f = 10; f < 20; ++f) w.OnRead(f, 0, kRead, kSize, kBlock);
  EXPECT_EQ(w.files(), 2u);
}

TEST(ReadaheadWindowsTest, NoReadaheadWhenTheMaximumIsZero) {
  ReadaheadWindows w(ReadaheadOptions{.max_blocks = 0});
  EXPECT_TRUE(w.OnRead(1, 0, kRead, kSize, kBlock).empty());
  EXPECT_TRUE(w.OnRead(1, kRead, 2 * kRead, kSize, kBlock).empty());
}

}  // namespace
}  // namespace granary
