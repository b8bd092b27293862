// StallClock (lib/util/stall_clock.hpp): the switch's clock leaves out gaps
// between readings longer than the stall bound, and only those.
#include <gtest/gtest.h>

#include "util/stall_clock.hpp"

namespace {

using prism::StallClock;

TEST(StallClock, ReadingsCloserThanTheBoundAreTheCounterItself) {
  StallClock c(100);
  uint64_t raw = 5000;
  for (int i = 0; i < 1000; ++i) {
    raw += 1 + uint64_t(i % 100);  // gaps 1..100: none longer than the bound
    EXPECT_EQ(c.at(raw), raw);
  }
  EXPECT_EQ(c.stalls(), 0u);
  EXPECT_EQ(c.skipped(), 0u);
}

TEST(StallClock, AGapLongerThanTheBoundIsLeftOutWhole) {
  StallClock c(100);
  EXPECT_EQ(c.at(1000), 1000u);
  EXPECT_EQ(c.at(1050), 1050u);
  EXPECT_EQ(c.at(1050 + 101), 1050u);  // 101 ticks not running: the clock stood still
  EXPECT_EQ(c.at(1151 + 30), 1080u);   // and runs on from there
  EXPECT_EQ(c.at(1181 + 5000), 1080u);
  EXPECT_EQ(c.at(6181 + 100), 1180u);  // exactly the bound: counted
  EXPECT_EQ(c.stalls(), 2u);
  EXPECT_EQ(c.skipped(), 5101u);
  EXPECT_EQ(c.longest(), 5000u);
  EXPECT_EQ(c.view(7000), 7000u - 5101u);  // another thread's view by the same stalls
}

TEST(StallClock, TheClockNeverGoesBackAndDeadlinesKeepTheirDistance) {
  // A deadline 300 ticks after an op opened, with a stall of 10 000 in between:
  // it passes 300 ticks of running time after the opening, not at the wake.
  StallClock c(50);
  uint64_t raw = 1, prev = 0, opened = 0;
  for (int i = 0; i < 200; ++i) {
    raw += (i == 20) ? 10000 : 10;
    const uint64_t t = c.at(raw);
    EXPECT_GE(t, prev);
    prev = t;
    if (i == 10) opened = t;
    if (i == 40) EXPECT_EQ(t - opened, 10u * 29);  // 29 running steps of 10 since step 10 (step 20 left out)
  }
  EXPECT_EQ(c.stalls(), 1u);
}

}  // namespace
