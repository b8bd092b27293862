// Frames larger than the port that took them (the switch's OVERSIZE drop):
// wire::max_frame and wire::truncated on frames written byte by byte here
// (Ethernet, optional 802.1Q tag, IPv4 with its total length), as a GSO
// super-packet arrives when a receive buffer (net_af_packet's 2 KiB ring
// frame) cut it short; wire::clamp_to_frame, which makes its head readable;
// and the drop table's row and NACK rule for it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "proto/packet.hpp"
#include "switch/drop.hpp"

namespace {

using Bytes = std::vector<uint8_t>;

// An Ethernet frame of `bytes` bytes holding IPv4/UDP whose IP total length
// is `ip_total` (what the sender built; the frame may hold less), with one
// VLAN tag when `vlan`.
Bytes frame(size_t bytes, uint16_t ip_total, bool vlan = false) {
  Bytes f(bytes, 0);
  size_t at = 12;
  if (vlan) {
    f[at] = 0x81, f[at + 1] = 0x00, f[at + 2] = 0x00, f[at + 3] = 0x05;
    at += 4;
  }
  f[at] = 0x08, f[at + 1] = 0x00;  // IPv4
  at += 2;
  f[at] = 0x45;  // version 4, IHL 5
  f[at + 2] = uint8_t(ip_total >> 8), f[at + 3] = uint8_t(ip_total);
  f[at + 9] = 17;  // UDP
  return f;
}

TEST(Oversize, MaxFrameIsTheMtuWithEthernetAndOneTag) {
  EXPECT_EQ(prism::wire::max_frame(1500), 1518u);
  EXPECT_EQ(prism::wire::max_frame(9000), 9018u);
}

TEST(Oversize, AGsoSuperPacketCutShortIsTruncated) {
  // FACTS.md: a 61,642-byte frame crossed the veth; a 2048-byte ring frame kept about 1,990 of it.
  const Bytes f = frame(1990, uint16_t(61642 - 14));
  EXPECT_TRUE(prism::wire::truncated(f));
  EXPECT_TRUE(prism::wire::truncated(frame(1990, 3000, true)));
  // One byte short is as truncated as 60 KB short.
  EXPECT_TRUE(prism::wire::truncated(frame(14 + 1000 - 1, 1000)));
}

TEST(Oversize, AWholeFrameIsNot) {
  EXPECT_FALSE(prism::wire::truncated(frame(14 + 1400, 1400)));
  EXPECT_FALSE(prism::wire::truncated(frame(18 + 1400, 1400, true)));
  // Ethernet padding behind a short IP packet (a 60-byte minimum frame) is no truncation.
  EXPECT_FALSE(prism::wire::truncated(frame(60, 28)));
}

TEST(Oversize, OnlyIpv4FramesAreJudged) {
  Bytes arp = frame(60, 0xFFFF);
  arp[12] = 0x08, arp[13] = 0x06;
  EXPECT_FALSE(prism::wire::truncated(arp));
  Bytes v6 = frame(60, 0xFFFF);
  v6[14] = 0x65;  // version 6
  EXPECT_FALSE(prism::wire::truncated(v6));
  for (size_t n = 0; n < 18; ++n) EXPECT_FALSE(prism::wire::truncated(Bytes(n, 0xFF))) << n;
}

uint16_t be16(const Bytes& f, size_t at) { return uint16_t(f[at] << 8 | f[at + 1]); }

TEST(Oversize, ClampingMakesTheLengthsWhatTheFrameHolds) {
  Bytes f = frame(1990, uint16_t(61642 - 14));
  f[14 + 20 + 4] = 0xF0, f[14 + 20 + 5] = 0xBA;  // the sender's UDP length: 61608
  ASSERT_TRUE(prism::wire::clamp_to_frame(f));
  EXPECT_EQ(be16(f, 14 + 2), 1990 - 14);            // IP total length
  EXPECT_EQ(be16(f, 14 + 20 + 4), 1990 - 14 - 20);  // UDP length
  EXPECT_FALSE(prism::wire::truncated(f));
  Bytes v = frame(1990, 3000, true);
  ASSERT_TRUE(prism::wire::clamp_to_frame(v));
  EXPECT_EQ(be16(v, 18 + 2), 1990 - 18);
  EXPECT_EQ(be16(v, 18 + 20 + 4), 1990 - 18 - 20);
}

TEST(Oversize, ClampingLeavesOtherFramesAlone) {
  const Bytes whole = frame(14 + 1400, 1400);
  Bytes f = whole;
  EXPECT_FALSE(prism::wire::clamp_to_frame(f));
  EXPECT_EQ(f, whole);
  Bytes tcp = frame(1990, 3000);
  tcp[14 + 9] = 6;
  const Bytes tcp0 = tcp;
  EXPECT_FALSE(prism::wire::clamp_to_frame(tcp));
  EXPECT_EQ(tcp, tcp0);
  Bytes headless = frame(14 + 24, 3000);  // IPv4 whole, UDP header not
  EXPECT_FALSE(prism::wire::clamp_to_frame(headless));
}

TEST(Oversize, TheDropIsNamedDocumentedAndNackedAsMalformed) {
  using prism::sw::Drop;
  EXPECT_STREQ(prism::name(Drop::OVERSIZE), "oversize");
  const std::string doc = prism::sw::kDrops[size_t(Drop::OVERSIZE)].doc;
  EXPECT_NE(doc.find("MTU"), std::string::npos) << doc;
  EXPECT_NE(doc.find("tx-udp-segmentation"), std::string::npos) << doc;
  // To a registered sender only (Verdict::nack needs its member): what libprism takes to stop sending GSO.
  EXPECT_EQ(prism::sw::nack_for(Drop::OVERSIZE), prism::wire::NackReason::MALFORMED);
}

}  // namespace
