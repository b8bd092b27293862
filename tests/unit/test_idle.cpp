// The adaptive polling policy (pipeline/idle.hpp) on a clock given by the
// test: busy never sleeps; adaptive sleeps an eighth (IdleBackoff::kShare) of
// the time idle so far, never more than the configured bound, and the first
// pass that moves a packet makes it busy again (the next idle period starts
// from nothing).
#include <gtest/gtest.h>

#include "idle.hpp"

namespace {

using prism::Polling;
using prism::pipe::IdleBackoff;
constexpr uint64_t k = IdleBackoff::kShare;

TEST(IdleBackoff, BusyNeverSleeps) {
  IdleBackoff b(Polling::BUSY, 250);
  for (uint64_t t = 0; t < 10000000; t += 997) ASSERT_EQ(b.after_pass(0, t), 0u);
}

TEST(IdleBackoff, AdaptiveSleepsAShareOfTheIdleTimeUpToTheBound) {
  static_assert(k == 8, "docs/CONFIG.md says an eighth");
  IdleBackoff b(Polling::ADAPTIVE, 1000);
  EXPECT_EQ(b.after_pass(5, 100), 0u);          // traffic
  EXPECT_EQ(b.after_pass(0, 200), 0u);          // the first empty pass starts the idle period
  EXPECT_EQ(b.after_pass(0, 200 + k - 1), 0u);  // under a microsecond's sleep
  EXPECT_EQ(b.after_pass(0, 200 + k), 1u);
  EXPECT_EQ(b.after_pass(0, 200 + 100 * k), 100u);
  EXPECT_EQ(b.after_pass(0, 200 + 1000 * k - 1), 999u);
  EXPECT_EQ(b.after_pass(0, 200 + 1000 * k), 1000u);
  EXPECT_EQ(b.after_pass(0, 60000000), 1000u);  // a minute idle: still the bound
}

TEST(IdleBackoff, APacketMakesItBusyAgain) {
  IdleBackoff b(Polling::ADAPTIVE, 250);
  b.after_pass(0, 0);
  EXPECT_EQ(b.after_pass(0, 1000000), 250u);
  EXPECT_EQ(b.after_pass(3, 1000001), 0u);
  EXPECT_EQ(b.after_pass(0, 1000010), 0u);  // a new idle period
  EXPECT_EQ(b.after_pass(0, 1000010 + 10 * k), 10u);
}

TEST(IdleBackoff, ABoundOfOneMicrosecond) {
  IdleBackoff b(Polling::ADAPTIVE, 1);
  b.after_pass(0, 0);
  for (uint64_t t = k; t < 100000; t += 1000) EXPECT_EQ(b.after_pass(0, t), 1u);
}

}  // namespace
