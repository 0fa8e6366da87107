// RetryPolicy and Retry(): waits grow, are capped and jittered, attempts are
// bounded, and only kUnavailable is retried. FakeClock records every sleep.
#include "common/retry.h"

#include <gtest/gtest.h>

#include "testing/fake_clock.h"

namespace granary {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

const RetryPolicy kPolicy{
    .max_attempts = 6, .base_delay = milliseconds(10), .max_delay = milliseconds(50)};

TEST(Retry, CeilingDoublesThenCaps) {
  EXPECT_EQ(kPolicy.Ceiling(0), milliseconds(10));
  EXPECT_EQ(kPolicy.Ceiling(1), milliseconds(20));
  EXPECT_EQ(kPolicy.Ceiling(2), milliseconds(40));
  EXPECT_EQ(kPolicy.Ceiling(3), milliseconds(50));
  EXPECT_EQ(kPolicy.Ceiling(60), milliseconds(50));  // no overflow for large attempts
}

TEST(Retry, UnavailableIsRetriedUntilAttemptsRunOutWithBoundedJitteredWaits) {
  testing::FakeClock clock;
  std::mt19937_64 rng(42);
  int calls = 0;
  RetryOutcome outcome;
  Status s = Retry(
      kPolicy, &clock, rng,
      [&] {
        ++calls;
        return Unavailable("Couldn't connect to server");
      },
      &outcome);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(outcome.attempts, 6);
  auto sleeps = clock.sleeps();
  ASSERT_EQ(sleeps.size(), 5u);  // no sleep after the last attempt
  for (size_t i = 0; i < sleeps.size(); ++i) {
    EXPECT_GE(sleeps[i], nanoseconds(0));
    EXPECT_LE(sleeps[i], kPolicy.Ceiling(static_cast<int>(i))) << "wait " << i;
  }
}

TEST(Retry, JitterSpreadsWaitsAcrossTheWholeRange) {
  std::mt19937_64 rng(7);
  nanoseconds lo = milliseconds(50), hi{0};
  for (int i = 0; i < 1000; ++i) {
    auto d = kPolicy.Backoff(3, rng);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_LT(lo, milliseconds(5));   // full jitter reaches near zero...
  EXPECT_GT(hi, milliseconds(45));  // ...and near the cap
}

TEST(Retry, SuccessAfterTransientFailuresReturnsTheValue) {
  testing::FakeClock clock;
  std::mt19937_64 rng(1);
  int calls = 0;
  Result<int> r = Retry(kPolicy, &clock, rng, [&]() -> Result<int> {
    if (++calls < 3) return Unavailable("HTTP 503 SlowDown");
    return 7;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(clock.sleeps().size(), 2u);
}

TEST(Retry, NonRetryableErrorsReturnAtOnce) {
  for (Status err : {NotFound("no such key"), PermissionDenied("403 AccessDenied"),
                     InvalidArgument("bad"), IoError("disk")}) {
    testing::FakeClock clock;
    std::mt19937_64 rng(1);
    int calls = 0;
    Status s = Retry(kPolicy, &clock, rng, [&] {
      ++calls;
      return err;
    });
    EXPECT_EQ(s, err);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(clock.sleeps().empty());
  }
}

// An origin whose every attempt runs into a 100 s timeout must not be
// retried for maxAttempts x 100 s; no attempt starts after max_elapsed.
TEST(Retry, TimedOutAttemptsStopOnceMaxElapsedHasPassed) {
  testing::FakeClock clock;
  std::mt19937_64 rng(42);
  RetryPolicy policy{.max_attempts = 100,
                     .base_delay = milliseconds(10),
                     .max_delay = milliseconds(50),
                     .max_elapsed = seconds(250)};
  const auto start = clock.Now();
  RetryOutcome outcome;
  Status s = Retry(
      policy, &clock, rng,
      [&] {
        clock.Advance(seconds(100));
        return Unavailable("Timeout was reached");
      },
      &outcome);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(outcome.attempts, 3);  // started at about 0, 100 and 200 s
  EXPECT_LT(clock.Now() - start, seconds(250) + seconds(100) + seconds(1));
}

TEST(Retry, ValidateNamesTheBadField) {
  EXPECT_NE(RetryPolicy{.max_attempts = 0}.Validate().message().find("maxAttempts"),
            std::string::npos);
  EXPECT_TRUE(RetryPolicy{}.Validate().ok());
}

}  // namespace
}  // namespace granary
