// PeerHealth tests on a FakeClock: backoff length, doubling, cap, a single
// probe, reset on success, and in-flight failures not lengthening a backoff.
#include "cluster/peer_health.h"

#include <gtest/gtest.h>

#include "testing/fake_clock.h"

namespace granary::cluster {
namespace {

using std::chrono::milliseconds;

class PeerHealthTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
  PeerHealth health_{PeerHealthOptions{.clock = &clock_}};
};

TEST_F(PeerHealthTest, UnknownPeerIsUsable) {
  EXPECT_TRUE(health_.Usable("a"));
  EXPECT_TRUE(health_.Usable("a"));
  EXPECT_TRUE(health_.Failing().empty());
}

TEST_F(PeerHealthTest, FailureSkipsPeerFor500msThenAllowsOneProbe) {
  health_.RecordFailure("a");
  EXPECT_FALSE(health_.Usable("a"));
  EXPECT_TRUE(health_.Usable("b"));  // peers are independent
  clock_.Advance(milliseconds(499));
  EXPECT_FALSE(health_.Usable("a"));
  clock_.Advance(milliseconds(1));
  EXPECT_TRUE(health_.Usable("a"));   // the probe
  EXPECT_FALSE(health_.Usable("a"));  // everyone else keeps skipping it
  health_.RecordSuccess("a");
  EXPECT_TRUE(health_.Usable("a"));
  EXPECT_TRUE(health_.Usable("a"));
  EXPECT_TRUE(health_.Failing().empty());
}

TEST_F(PeerHealthTest, FailedProbesDoubleTheBackoffUpTo10s) {
  health_.RecordFailure("a");
  for (int expected_ms : {1000, 2000, 4000, 8000, 10000, 10000}) {
    clock_.Advance(health_.Failing()[0].backoff);
    ASSERT_TRUE(health_.Usable("a"));
    health_.RecordFailure("a");  // the probe failed
    EXPECT_EQ(health_.Failing()[0].backoff, milliseconds(expected_ms));
    clock_.Advance(milliseconds(expected_ms - 1));
    EXPECT_FALSE(health_.Usable("a"));
    clock_.Advance(milliseconds(1));
    EXPECT_EQ(health_.Failing()[0].remaining, milliseconds(0));
  }
}

TEST_F(PeerHealthTest, FailuresOfRequestsAlreadyInFlightDoNotLengthenTheBackoff) {
  health_.RecordFailure("a");
  for (int i = 0; i < 10; ++i) health_.RecordFailure("a");
  auto failing = health_.Failing();
  ASSERT_EQ(failing.size(), 1u);
  EXPECT_EQ(failing[0].node_id, "a");
  EXPECT_EQ(failing[0].backoff, milliseconds(500));
  EXPECT_EQ(failing[0].failures, 1);
  clock_.Advance(milliseconds(500));
  EXPECT_TRUE(health_.Usable("a"));
}

TEST_F(PeerHealthTest, AProbeThatNeverReportsAllowsAnotherAfterABackoff) {
  health_.RecordFailure("a");
  clock_.Advance(milliseconds(500));
  ASSERT_TRUE(health_.Usable("a"));
  clock_.Advance(milliseconds(499));
  EXPECT_FALSE(health_.Usable("a"));
  clock_.Advance(milliseconds(1));
  EXPECT_TRUE(health_.Usable("a"));
}

TEST_F(PeerHealthTest, SuccessResetsTheBackoffAndForgetDropsThePeer) {
  health_.RecordFailure("a");
  clock_.Advance(milliseconds(500));
  ASSERT_TRUE(health_.Usable("a"));
  health_.RecordFailure("a");  // backoff 1 s
  clock_.Advance(milliseconds(1000));
  ASSERT_TRUE(health_.Usable("a"));
  health_.RecordSuccess("a");
  health_.RecordFailure("a");  // a new streak starts at 500 ms
  EXPECT_EQ(health_.Failing()[0].backoff, milliseconds(500));
  health_.Forget("a");
  EXPECT_TRUE(health_.Usable("a"));
}

}  // namespace
}  // namespace granary::cluster
