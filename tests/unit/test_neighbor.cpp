// The switch as an endpoint: ARP and ICMP echo replies made in place, checked
// field by field against RFC 826 / RFC 792 layouts written out here, with an
// RFC 1071 checksum computed by a plain loop of the test's own.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "proto/neighbor.hpp"

using namespace prism;
using namespace prism::wire;

namespace {

const Mac kMe = {0x02, 0, 0, 0, 0xff, 0x01};
const Mac kAsker = {0x02, 0, 0, 0x01, 0, 0x07};
constexpr uint32_t kMyIp = 0x0A000101, kAskerIp = 0x0A000107;  // 10.0.1.1, 10.0.1.7

void put16(std::vector<uint8_t>& f, size_t at, uint16_t v) {
  f[at] = uint8_t(v >> 8);
  f[at + 1] = uint8_t(v);
}
void put32(std::vector<uint8_t>& f, size_t at, uint32_t v) {
  put16(f, at, uint16_t(v >> 16));
  put16(f, at + 2, uint16_t(v));
}
uint16_t get16(const std::vector<uint8_t>& f, size_t at) { return uint16_t(f[at] << 8 | f[at + 1]); }
uint32_t get32(const std::vector<uint8_t>& f, size_t at) { return uint32_t(get16(f, at)) << 16 | get16(f, at + 2); }
// RFC 1071, the obvious way: the complement of the folded sum of 16-bit words.
uint16_t rfc1071(const uint8_t* p, size_t n) {
  uint32_t s = 0;
  for (size_t i = 0; i + 1 < n; i += 2) s += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) s += uint32_t(p[n - 1] << 8);
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return uint16_t(~s);
}

// Ethernet broadcast / ARP request (RFC 826) who-has `target` tell the asker, padded to 60 bytes.
std::vector<uint8_t> arp_request(uint32_t target, const uint8_t* dst_mac = nullptr) {
  std::vector<uint8_t> f(60, 0);
  for (int i = 0; i < 6; ++i) f[i] = dst_mac ? dst_mac[i] : 0xFF;
  std::memcpy(&f[6], kAsker.data(), 6);
  put16(f, 12, 0x0806);
  put16(f, 14, 1);       // htype Ethernet
  put16(f, 16, 0x0800);  // ptype IPv4
  f[18] = 6, f[19] = 4;
  put16(f, 20, 1);  // request
  std::memcpy(&f[22], kAsker.data(), 6);
  put32(f, 28, kAskerIp);
  put32(f, 38, target);
  return f;
}

// Ethernet / IPv4 (20 bytes) / ICMP echo request (RFC 792), id 0x1234, seq 7, `data` bytes of payload.
std::vector<uint8_t> echo_request(uint32_t to, size_t data = 56) {
  std::vector<uint8_t> f(14 + 20 + 8 + data, 0);
  std::memcpy(&f[0], kMe.data(), 6);
  std::memcpy(&f[6], kAsker.data(), 6);
  put16(f, 12, 0x0800);
  f[14] = 0x45;
  put16(f, 16, uint16_t(20 + 8 + data));
  put16(f, 18, 0xBEEF);
  put16(f, 20, 0x4000);  // DF
  f[22] = 17;            // TTL
  f[23] = 1;             // ICMP
  put32(f, 26, kAskerIp);
  put32(f, 30, to);
  put16(f, 24, rfc1071(&f[14], 20));
  f[34] = 8;
  put16(f, 38, 0x1234);
  put16(f, 40, 7);
  for (size_t i = 0; i < data; ++i) f[42 + i] = uint8_t(i * 7 + 1);
  put16(f, 36, rfc1071(&f[34], 8 + data));
  return f;
}

}  // namespace

TEST(Neighbor, ArpRequestForOurAddressIsAnsweredInPlace) {
  for (const uint8_t* dst : {static_cast<const uint8_t*>(nullptr), kMe.data()}) {  // broadcast, or unicast to us
    auto f = arp_request(kMyIp, dst);
    ASSERT_EQ(answer_local(f.data(), f.size(), kMe, kMyIp), LocalReply::ARP);
    EXPECT_EQ(std::vector<uint8_t>(f.begin(), f.begin() + 6), std::vector<uint8_t>(kAsker.begin(), kAsker.end()));
    EXPECT_EQ(std::vector<uint8_t>(f.begin() + 6, f.begin() + 12), std::vector<uint8_t>(kMe.begin(), kMe.end()));
    EXPECT_EQ(get16(f, 12), 0x0806);
    EXPECT_EQ(get16(f, 14), 1);
    EXPECT_EQ(get16(f, 16), 0x0800);
    EXPECT_EQ(get16(f, 20), 2) << "opcode: reply";
    EXPECT_EQ(std::memcmp(&f[22], kMe.data(), 6), 0) << "sender hardware address: ours";
    EXPECT_EQ(get32(f, 28), kMyIp);
    EXPECT_EQ(std::memcmp(&f[32], kAsker.data(), 6), 0) << "target hardware address: the asker's";
    EXPECT_EQ(get32(f, 38), kAskerIp);
    EXPECT_EQ(f.size(), 60u);
  }
}

TEST(Neighbor, OtherArpIsLeftAlone) {
  const uint8_t other_mac[6] = {0x02, 9, 9, 9, 9, 9};
  std::vector<std::vector<uint8_t>> cases = {arp_request(kMyIp + 1), arp_request(kMyIp, other_mac)};
  auto reply = arp_request(kMyIp);
  put16(reply, 20, 2);  // a reply (gratuitous or not) is never answered
  cases.push_back(reply);
  auto ipv6 = arp_request(kMyIp);
  put16(ipv6, 16, 0x86DD);
  cases.push_back(ipv6);
  auto short_arp = arp_request(kMyIp);
  short_arp.resize(14 + 27);
  cases.push_back(short_arp);
  for (auto& f : cases) {
    const auto before = f;
    EXPECT_EQ(answer_local(f.data(), f.size(), kMe, kMyIp), LocalReply::NONE);
    EXPECT_EQ(f, before) << "a frame not answered was changed";
  }
}

TEST(Neighbor, EchoRequestToOurAddressGetsAValidReply) {
  for (size_t data : {0, 1, 56, 1400}) {
    auto f = echo_request(kMyIp, data);
    const auto req = f;
    ASSERT_EQ(answer_local(f.data(), f.size(), kMe, kMyIp), LocalReply::ICMP_ECHO) << data;
    EXPECT_EQ(std::memcmp(&f[0], kAsker.data(), 6), 0);
    EXPECT_EQ(std::memcmp(&f[6], kMe.data(), 6), 0);
    EXPECT_EQ(get32(f, 26), kMyIp);
    EXPECT_EQ(get32(f, 30), kAskerIp);
    EXPECT_EQ(f[23], 1);
    EXPECT_EQ(rfc1071(&f[14], 20), 0) << "IPv4 header checksum";
    EXPECT_EQ(f[34], 0) << "type: echo reply";
    EXPECT_EQ(f[35], 0);
    EXPECT_EQ(rfc1071(&f[34], f.size() - 34), 0) << "ICMP checksum";
    // Identifier, sequence and data come back as they went.
    EXPECT_EQ(std::vector<uint8_t>(f.begin() + 38, f.end()), std::vector<uint8_t>(req.begin() + 38, req.end()));
  }
}

TEST(Neighbor, EchoRequestsNotForUsOrBrokenAreLeftAlone) {
  std::vector<std::vector<uint8_t>> cases;
  cases.push_back(echo_request(kMyIp + 1));  // another address
  auto bad_sum = echo_request(kMyIp);
  bad_sum[50] ^= 1;  // data changed, ICMP checksum now wrong
  cases.push_back(bad_sum);
  auto bad_ip = echo_request(kMyIp);
  bad_ip[22] ^= 1;  // TTL changed, header checksum now wrong
  cases.push_back(bad_ip);
  auto frag = echo_request(kMyIp);
  put16(frag, 20, 0x2000);  // more fragments
  put16(frag, 24, 0);
  put16(frag, 24, rfc1071(&frag[14], 20));
  cases.push_back(frag);
  auto reply = echo_request(kMyIp);
  reply[34] = 0;  // an echo reply is not answered
  put16(reply, 36, 0);
  put16(reply, 36, rfc1071(&reply[34], reply.size() - 34));
  cases.push_back(reply);
  auto other_mac = echo_request(kMyIp);
  other_mac[5] ^= 0x10;
  cases.push_back(other_mac);
  auto truncated = echo_request(kMyIp);
  truncated.resize(truncated.size() - 10);  // IPv4 total length now past the frame
  cases.push_back(truncated);
  for (auto& f : cases) {
    const auto before = f;
    EXPECT_EQ(answer_local(f.data(), f.size(), kMe, kMyIp), LocalReply::NONE);
    EXPECT_EQ(f, before);
  }
}

TEST(Neighbor, OneVlanTagIsKept) {
  auto f = arp_request(kMyIp);
  f.insert(f.begin() + 12, {0x81, 0x00, 0x00, 0x05});  // 802.1Q, VLAN 5
  ASSERT_EQ(answer_local(f.data(), f.size(), kMe, kMyIp), LocalReply::ARP);
  EXPECT_EQ(get16(f, 12), 0x8100);
  EXPECT_EQ(get16(f, 14), 5);
  EXPECT_EQ(get16(f, 24), 2);
}
