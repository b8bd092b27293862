// The adaptive polling policy (pipeline/idle.hpp) without a clock: busy never
// sleeps; adaptive sleeps only after IdleBackoff::kEmptyPasses empty passes,
// 1 us first, doubling to the configured bound and never above it, and the
// first pass that moves a packet makes it busy again.
#include <gtest/gtest.h>

#include <vector>

#include "idle.hpp"

namespace {

using prism::Polling;
using prism::pipe::IdleBackoff;

TEST(IdleBackoff, BusyNeverSleeps) {
  IdleBackoff b(Polling::BUSY, 250);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(b.after_pass(0), 0u);
}

TEST(IdleBackoff, AdaptiveGrowsToTheBoundAfterARunOfEmptyPasses) {
  IdleBackoff b(Polling::ADAPTIVE, 250);
  for (uint32_t i = 0; i < IdleBackoff::kEmptyPasses; ++i) ASSERT_EQ(b.after_pass(0), 0u) << i;
  std::vector<uint32_t> got;
  for (int i = 0; i < 12; ++i) got.push_back(b.after_pass(0));
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128, 250, 250, 250, 250}));
}

TEST(IdleBackoff, APacketMakesItBusyAgain) {
  IdleBackoff b(Polling::ADAPTIVE, 1000);
  for (int i = 0; i < 200; ++i) b.after_pass(0);
  EXPECT_EQ(b.after_pass(0), 1000u);
  EXPECT_EQ(b.after_pass(3), 0u);
  for (uint32_t i = 0; i < IdleBackoff::kEmptyPasses; ++i) ASSERT_EQ(b.after_pass(0), 0u) << i;
  EXPECT_EQ(b.after_pass(0), 1u);
}

TEST(IdleBackoff, ABoundOfOneMicrosecond) {
  IdleBackoff b(Polling::ADAPTIVE, 1);
  for (uint32_t i = 0; i < IdleBackoff::kEmptyPasses; ++i) b.after_pass(0);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.after_pass(0), 1u);
}

}  // namespace
