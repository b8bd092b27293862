// PRISM wire protocol v1: Ethernet / IPv4 / UDP (port 20562 by default) /
// 32-byte header / payload. Header fields are big-endian; payload elements are
// little-endian. docs/PROTOCOL.md is the reference; this file mirrors it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "arith/op.hpp"

namespace prism::wire {

inline constexpr uint16_t kMagic = 0x5052;  // "PR"
inline constexpr uint8_t kVersion = 1;
inline constexpr uint16_t kDefaultPort = 20562;
inline constexpr size_t kHeaderSize = 32;
inline constexpr size_t kEthSize = 14, kVlanSize = 4, kIpv4MinSize = 20, kUdpSize = 8;
// Frames PRISM builds: Ethernet + IPv4 (no options) + UDP + header.
inline constexpr size_t kFrameOverhead = kEthSize + kIpv4MinSize + kUdpSize + kHeaderSize;  // 74
inline constexpr size_t kMaxFrame = 9018;  // jumbo: 9000-byte IP MTU + Ethernet header + 4 for a VLAN tag

enum class Kind : uint8_t { CONTRIB = 1, PARTIAL = 2, RESULT = 3, NACK = 4 };
enum class Encoding : uint8_t { DTYPE = 1, OUT_DTYPE = 2, KULISCH = 3 };

namespace hflag {
inline constexpr uint8_t RETRANSMIT = 1;
inline constexpr uint8_t LAST_CHUNK = 2;
inline constexpr uint8_t SIDEBAND = 4;  // count status bytes follow the elements (RESULT, PARTIAL encoding 2)
inline constexpr uint8_t ALL = 7;
}  // namespace hflag

// NACK reasons, carried in the status byte. Stable: never renumbered.
enum class NackReason : uint8_t {
  MALFORMED = 1,
  UNKNOWN_JOB = 2,
  NOT_A_MEMBER = 3,
  DESCRIPTOR_MISMATCH = 4,
  ACCUMULATOR_TOO_NARROW = 5,
  NO_FREE_SLOT = 6,
  RESULT_EXPIRED = 7,
};
const char* name(Kind);
const char* name(Encoding);
const char* name(NackReason);

// The header in host order.
struct Header {
  uint16_t magic = kMagic;
  uint8_t version = kVersion;
  Kind kind = Kind::CONTRIB;
  uint32_t job = 0;
  uint32_t op = 0;
  uint32_t chunk = 0;
  uint16_t sender = 0;
  uint16_t group = 1;
  uint16_t terms = 1;
  uint16_t count = 0;
  Format dtype = Format::FP32;
  Format out_dtype = Format::FP32;
  Policy policy = Policy::KULISCH_FIXED;
  Encoding encoding = Encoding::DTYPE;
  Transport transport = Transport::KULISCH;
  Exceptions exceptions = Exceptions::IEEE;
  uint8_t flags = 0;
  uint8_t status = 0;
};

// Writes the 32 header bytes.
void put_header(const Header& h, uint8_t* out);

// Fields that must agree across all packets of one (job, op, chunk).
inline bool same_descriptor(const Header& a, const Header& b) {
  return a.dtype == b.dtype && a.out_dtype == b.out_dtype && a.policy == b.policy && a.group == b.group &&
         a.transport == b.transport && a.exceptions == b.exceptions;
}

// A Kulisch partial's payload (encoding 3) starts with a fragment header:
// which lanes of the chunk the lane records that follow belong to.
inline constexpr size_t kFragmentHeader = 4;  // u16 first lane, u16 lanes in the whole chunk (big-endian)

}  // namespace prism::wire
