// Steering by RSS on the UDP destination port alone (pipeline/steer.hpp):
// the key and DPDK's Toeplitz function against Microsoft's published RSS
// verification vector, the 16-bit port hash against a bit-by-bit Toeplitz
// written here, and the indirection table against the ownership rule.
#include <gtest/gtest.h>
#include <rte_thash.h>

#include <cstdint>
#include <set>

#include "steer.hpp"

using namespace prism::pipe;

namespace {

// Toeplitz as the Microsoft RSS specification defines it: for every set bit
// of the input (most significant first), XOR in the 32 key bits starting there.
uint32_t toeplitz(const uint8_t* key, const uint8_t* in, size_t n) {
  uint32_t h = 0;
  for (size_t bit = 0; bit < n * 8; ++bit) {
    if (!(in[bit / 8] & (0x80 >> (bit % 8)))) continue;
    uint32_t window = 0;
    for (size_t k = 0; k < 32; ++k) {
      const size_t kb = bit + k;
      window = window << 1 | ((key[kb / 8] >> (7 - kb % 8)) & 1);
    }
    h ^= window;
  }
  return h;
}

}  // namespace

// "Verifying the RSS hash calculation" (Microsoft): 66.9.149.187:2794 ->
// 161.142.100.80:1766, IPv4 with TCP ports, hash 0x51ccc178; IPv4 alone 0x323e8fc2.
TEST(Rss, KeyAndToeplitzMatchThePublishedVector) {
  uint32_t ip_only[2] = {RTE_IPV4(66, 9, 149, 187), RTE_IPV4(161, 142, 100, 80)};
  EXPECT_EQ(rte_softrss(ip_only, 2, kRssKey), 0x323e8fc2u);
  uint32_t with_ports[3] = {RTE_IPV4(66, 9, 149, 187), RTE_IPV4(161, 142, 100, 80), uint32_t(2794) << 16 | 1766};
  EXPECT_EQ(rte_softrss(with_ports, 3, kRssKey), 0x51ccc178u);
  const uint8_t bytes[12] = {66, 9, 149, 187, 161, 142, 100, 80, 2794 >> 8, 2794 & 0xff, 1766 >> 8, 1766 & 0xff};
  EXPECT_EQ(toeplitz(kRssKey, bytes, sizeof bytes), 0x51ccc178u) << "the reference Toeplitz here";
}

TEST(Rss, DestinationPortAloneIsTheWholeInput) {
  for (uint32_t port : {0u, 1u, 20562u, 20563u, 20625u, 65535u}) {
    const uint8_t in[2] = {uint8_t(port >> 8), uint8_t(port)};
    EXPECT_EQ(rss_hash_dst_port(kRssKey, uint16_t(port)), toeplitz(kRssKey, in, 2)) << port;
  }
}

// Each shard's port, hashed, indexes an entry that names its owner's queue;
// a shard is left to software only when an earlier shard of another queue
// took its entry.
TEST(Rss, TablePutsEachShardPortOnItsOwnersQueue) {
  for (uint16_t reta : {64, 128, 512})
    for (uint32_t lcores : {2u, 3u, 4u})
      for (uint32_t shards : {lcores, 2 * lcores, 64u}) {
        const SteerPlan plan{20562, shards, lcores, uint16_t(lcores)};
        const RssTable t = rss_table(kRssKey, reta, plan);
        ASSERT_EQ(t.reta.size(), reta);
        const std::set<uint32_t> left(t.unsteered.begin(), t.unsteered.end());
        for (uint32_t s = 0; s < shards; ++s) {
          const uint32_t e =
              toeplitz(kRssKey, std::array<uint8_t, 2>{uint8_t((20562 + s) >> 8), uint8_t(20562 + s)}.data(), 2) % reta;
          if (left.count(s)) {
            EXPECT_NE(t.reta[e], plan.queue_of(s)) << "shard " << s << " left out though its entry is its queue's";
          } else {
            EXPECT_EQ(t.reta[e], plan.queue_of(s)) << "shard " << s << ", " << lcores << " lcores, reta " << reta;
          }
        }
        EXPECT_LT(t.unsteered.size(), shards);
        for (uint16_t q : t.reta) EXPECT_LT(q, plan.queues);
      }
}

TEST(Steer, OwnersAndQueues) {
  const SteerPlan p{20562, 8, 3, 2};  // 3 lcores, a device with 2 queues
  EXPECT_EQ(p.owner(0), 0u);
  EXPECT_EQ(p.owner(4), 1u);
  EXPECT_EQ(p.owner(5), 2u);
  EXPECT_EQ(p.queue_of(5), 0u) << "lcore 2 has no queue: its shards land on queue 0 and are passed on";
  EXPECT_EQ(p.queue_of(4), 1u);
}
