#include "proto/neighbor.hpp"

#include <algorithm>
#include <cstring>

namespace prism::wire {
namespace {

constexpr uint16_t kEtherArp = 0x0806, kEtherIpv4 = 0x0800, kEtherVlan = 0x8100;
constexpr size_t kArpSize = 28;
constexpr uint8_t kIcmp = 1, kEchoRequest = 8, kEchoReply = 0;

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, uint16_t(v >> 16));
  put16(p + 2, uint16_t(v));
}
bool is_broadcast(const uint8_t* m) {
  return std::all_of(m, m + 6, [](uint8_t b) { return b == 0xFF; });
}

// Who-has `ip`? -> `ip` is-at `mac`, to the asker.
bool arp(uint8_t* f, uint8_t* a, size_t room, const Mac& mac, uint32_t ip) {
  if (room < kArpSize) return false;
  // Ethernet (1) / IPv4 (0x0800), 6-byte and 4-byte addresses, a request (1).
  if (be16(a) != 1 || be16(a + 2) != kEtherIpv4 || a[4] != 6 || a[5] != 4 || be16(a + 6) != 1) return false;
  if (be32(a + 24) != ip) return false;
  if (!is_broadcast(f) && std::memcmp(f, mac.data(), 6) != 0) return false;
  uint8_t asker_mac[6], asker_ip[4];
  std::memcpy(asker_mac, a + 8, 6);
  std::memcpy(asker_ip, a + 14, 4);
  put16(a + 6, 2);  // a reply
  std::memcpy(a + 8, mac.data(), 6);
  put32(a + 14, ip);
  std::memcpy(a + 18, asker_mac, 6);
  std::memcpy(a + 24, asker_ip, 4);
  std::memcpy(f, asker_mac, 6);
  std::memcpy(f + 6, mac.data(), 6);
  return true;
}

// An echo request to `ip` -> the echo reply, addresses swapped.
bool echo(uint8_t* f, uint8_t* h, size_t room, const Mac& mac, uint32_t ip) {
  if (room < kIpv4MinSize || (h[0] >> 4) != 4) return false;
  const size_t ihl = size_t(h[0] & 0x0F) * 4, total = be16(h + 2);
  if (ihl < kIpv4MinSize || total < ihl + 8 || total > room || h[9] != kIcmp) return false;
  if ((be16(h + 6) & 0x3FFF) != 0) return false;  // a fragment (MF or an offset)
  if (be32(h + 16) != ip || std::memcmp(f, mac.data(), 6) != 0) return false;
  uint8_t* icmp = h + ihl;
  const size_t icmp_len = total - ihl;
  if (icmp[0] != kEchoRequest || icmp[1] != 0) return false;
  if (ipv4_checksum(h, ihl) != 0 || ones_sum(icmp, icmp_len) != 0xFFFF) return false;
  // ICMP: type 8 -> 0; the checksum follows by RFC 1624 (HC' = ~(~HC + ~m + m')).
  const uint16_t old_word = be16(icmp), new_word = uint16_t(kEchoReply << 8);
  icmp[0] = kEchoReply;
  uint32_t sum = uint16_t(~be16(icmp + 2)) + uint16_t(~old_word) + new_word;
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  put16(icmp + 2, uint16_t(~sum));
  // IPv4: from us to the asker, a fresh TTL, the header checksum again.
  const uint32_t asker = be32(h + 12);
  put32(h + 12, ip);
  put32(h + 16, asker);
  h[8] = 64;
  put16(h + 10, 0);
  put16(h + 10, ipv4_checksum(h, ihl));
  uint8_t asker_mac[6];
  std::memcpy(asker_mac, f + 6, 6);
  std::memcpy(f, asker_mac, 6);
  std::memcpy(f + 6, mac.data(), 6);
  return true;
}

}  // namespace

LocalReply answer_local(uint8_t* frame, size_t len, const Mac& mac, uint32_t ip) {
  if (len < kEthSize) return LocalReply::NONE;
  size_t at = 12;
  uint16_t type = be16(frame + at);
  if (type == kEtherVlan) {
    if (len < kEthSize + kVlanSize) return LocalReply::NONE;
    at += kVlanSize;
    type = be16(frame + at);
  }
  uint8_t* l3 = frame + at + 2;
  const size_t room = len - (at + 2);
  if (type == kEtherArp) return arp(frame, l3, room, mac, ip) ? LocalReply::ARP : LocalReply::NONE;
  if (type == kEtherIpv4) return echo(frame, l3, room, mac, ip) ? LocalReply::ICMP_ECHO : LocalReply::NONE;
  return LocalReply::NONE;
}

}  // namespace prism::wire
