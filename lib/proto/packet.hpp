// Parsing and building PRISM frames from byte spans. No DPDK: the pipeline
// hands this the mbuf's data, tests hand it pcap records.
//
// parse() checks everything a receiver must before a packet may touch state:
// Ethernet (optionally one 802.1Q tag), IPv4 header and lengths and checksum,
// UDP length and checksum (when not zero) and port, then the PRISM header's
// codes and the payload length the header implies. Every refusal has its own
// reason; parse() never reads outside the span.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>

#include "proto/wire.hpp"

namespace prism::wire {

enum class Refusal : uint8_t {
  OK = 0,
  SHORT_FRAME,    // shorter than Ethernet + IPv4 + UDP
  NOT_IPV4,       // EtherType (after an optional VLAN tag) is not IPv4
  IP_BAD_HEADER,  // IP version not 4 or IHL < 5
  IP_BAD_LENGTH,  // IP total length disagrees with the frame
  IP_BAD_CHECKSUM,
  IP_FRAGMENT,  // MF set or fragment offset non-zero
  NOT_UDP,
  UDP_BAD_LENGTH,
  UDP_BAD_CHECKSUM,
  WRONG_PORT,    // UDP destination port is not PRISM's
  SHORT_HEADER,  // UDP payload shorter than the 32-byte header
  BAD_MAGIC,
  BAD_VERSION,
  BAD_KIND,
  BAD_DTYPE,
  BAD_OUT_DTYPE,
  BAD_POLICY,
  BAD_ENCODING,  // unknown code, or one the kind may not use
  BAD_TRANSPORT,
  BAD_EXCEPTIONS,
  BAD_FLAGS,        // reserved flag bits set
  BAD_GROUP,        // group 0
  BAD_TERMS,        // terms 0, above group, or wrong for the kind
  BAD_COUNT,        // count 0 (data kinds) or non-zero (NACK, QUERY, STATUS, job kinds)
  PAYLOAD_LENGTH,   // payload bytes disagree with count and encoding
  BAD_FRAGMENT,     // Kulisch partial fragment header out of range
  BAD_PARTIAL,      // a lane record is malformed
  BAD_NACK_REASON,  // a NACK whose status is not a known reason
  BAD_STATUS,       // status bits a kind must leave 0 (CONTRIB, PARTIAL, QUERY: all; RESULT: bits 3-7; STATUS: 1-7)
  BAD_SIDEBAND,     // a sideband byte with bits 3-7 set
  kCount
};
inline constexpr Entry<Refusal> kRefusals[] = {
    {Refusal::OK, "ok", "parsed: every check passed"},
    {Refusal::SHORT_FRAME, "short_frame", "shorter than Ethernet + IPv4 + UDP"},
    {Refusal::NOT_IPV4, "not_ipv4", "the EtherType (after an optional VLAN tag) is not IPv4"},
    {Refusal::IP_BAD_HEADER, "ip_bad_header", "IP version not 4, or IHL below 5"},
    {Refusal::IP_BAD_LENGTH, "ip_bad_length", "the IP total length disagrees with the frame"},
    {Refusal::IP_BAD_CHECKSUM, "ip_bad_checksum", "the IPv4 header checksum is wrong"},
    {Refusal::IP_FRAGMENT, "ip_fragment", "an IP fragment (MF set or a non-zero offset)"},
    {Refusal::NOT_UDP, "not_udp", "the IP protocol is not UDP"},
    {Refusal::UDP_BAD_LENGTH, "udp_bad_length", "the UDP length disagrees with the IP length"},
    {Refusal::UDP_BAD_CHECKSUM, "udp_bad_checksum", "the UDP checksum is wrong"},
    {Refusal::WRONG_PORT, "wrong_port", "the UDP destination port is not the receiver's"},
    {Refusal::SHORT_HEADER, "short_header", "the UDP payload is shorter than the 32-byte header"},
    {Refusal::BAD_MAGIC, "bad_magic", "the header does not start with \"PR\""},
    {Refusal::BAD_VERSION, "bad_version", "a protocol version other than 1"},
    {Refusal::BAD_KIND, "bad_kind", "an unknown kind code"},
    {Refusal::BAD_DTYPE, "bad_dtype", "an unknown dtype code"},
    {Refusal::BAD_OUT_DTYPE, "bad_out_dtype", "an unknown out_dtype code"},
    {Refusal::BAD_POLICY, "bad_policy", "an unknown policy code"},
    {Refusal::BAD_ENCODING, "bad_encoding", "an unknown encoding, or one the kind may not use"},
    {Refusal::BAD_TRANSPORT, "bad_transport", "an unknown transport code"},
    {Refusal::BAD_EXCEPTIONS, "bad_exceptions", "an unknown exceptions code"},
    {Refusal::BAD_FLAGS, "bad_flags", "reserved flag bits set, or a flag the kind may not use"},
    {Refusal::BAD_GROUP, "bad_group", "group 0"},
    {Refusal::BAD_TERMS, "bad_terms", "terms 0, above group, or wrong for the kind"},
    {Refusal::BAD_COUNT, "bad_count", "count 0 (data kinds) or non-zero (NACK, QUERY, STATUS, job kinds)"},
    {Refusal::PAYLOAD_LENGTH, "payload_length",
     "the payload's bytes disagree with count and encoding (a NACK's: with its reason)"},
    {Refusal::BAD_FRAGMENT, "bad_fragment", "a Kulisch partial's fragment header is out of range"},
    {Refusal::BAD_PARTIAL, "bad_partial", "a lane record is malformed"},
    {Refusal::BAD_NACK_REASON, "bad_nack_reason", "a NACK whose status is not a known reason"},
    {Refusal::BAD_STATUS, "bad_status",
     "status bits the kind must leave 0 (CONTRIB, PARTIAL, QUERY: all; RESULT: bits 3-7; STATUS: bits 1-7)"},
    {Refusal::BAD_SIDEBAND, "bad_sideband", "a sideband byte with bits 3-7 set"},
};
static_assert(std::size(kRefusals) == size_t(Refusal::kCount), "every Refusal has a row in kRefusals");
constexpr std::span<const Entry<Refusal>> entries(Refusal) { return kRefusals; }
static_assert(codes_in_order<Refusal>(0), "counters index refusals by their code");
// Refusals index counter arrays: the name is one array read.
inline const char* name(Refusal r) { return size_t(r) < size_t(Refusal::kCount) ? kRefusals[size_t(r)].name : "?"; }

using Mac = std::array<uint8_t, 6>;
// Equal MACs, as one 4-byte and one 2-byte compare (std::array's == calls memcmp).
inline bool same_mac(const Mac& a, const Mac& b) {
  uint32_t a4, b4;
  uint16_t a2, b2;
  std::memcpy(&a4, a.data(), 4);
  std::memcpy(&b4, b.data(), 4);
  std::memcpy(&a2, a.data() + 4, 2);
  std::memcpy(&b2, b.data() + 4, 2);
  return ((a4 ^ b4) | uint32_t(a2 ^ b2)) == 0;
}

struct Endpoint {
  Mac mac{};
  uint32_t ip = 0;  // host order
  uint16_t port = 0;
};

struct Parsed {
  Endpoint src, dst;
  uint16_t vlan = 0;  // VLAN id, 0 when untagged
  Header h;
  const uint8_t* payload =
      nullptr;             // elements (encodings 1, 2), lane records (3), a NACK OP_ABANDONED's or STATUS's bitmap
  size_t payload_len = 0;  // without the sideband and the fragment header
  const uint8_t* sideband = nullptr;  // count status bytes when flags has SIDEBAND
  uint16_t first_lane = 0;            // encoding 3: first lane of this fragment
  uint16_t chunk_lanes = 0;           // encoding 3: lanes in the whole chunk; else count
  bool partial_checksum = false;      // kernel_link: the UDP checksum was left to an offload (not verified)
  bool no_checksum = false;           // the UDP checksum field was 0: the sender gave none (RFC 768)
};

// Parses one frame into *out (partly filled when refused: the source endpoint
// is valid for refusals after WRONG_PORT). `port` is the UDP destination ports of the receiver: the
// switch's (20562 by default, one per shard), or a rank's own port for RESULTs and NACKs.
// `check_partial` walks every lane record of a Kulisch partial (BAD_PARTIAL).
// `sums_verified`: the receiving device has already verified the IPv4 header
// and UDP checksums (a NIC's RX checksum offload reported both good), so
// they are not summed again; every other check still runs, and a UDP
// checksum field of 0 is still none (out->no_checksum: some NICs report it
// good).
// `kernel_link`: the frame came through a Linux interface (net_af_packet,
// net_tap), where a sender on the same host may leave the UDP checksum to an
// offload that never runs (CHECKSUM_PARTIAL: the field holds only the folded
// sum of the pseudo-header). Such a checksum is taken as not given, as a
// checksum of 0 is, and out->partial_checksum says so; a wrong one is still
// UDP_BAD_CHECKSUM.
// The UDP destination ports a receiver takes: a switch takes one per reducer
// shard (udp_port, udp_port + 1, ...: proto/steer.hpp), a rank its own one.
struct PortRange {
  uint16_t first;
  uint16_t count = 1;
  PortRange(uint16_t port, uint16_t n = 1) : first(port), count(n) {}  // NOLINT: a port is a range of one
  bool has(uint16_t p) const { return uint16_t(p - first) < count; }
};
Refusal parse(std::span<const uint8_t> frame, PortRange port, Parsed* out, bool check_partial = true,
              bool sums_verified = false, bool kernel_link = false);

// Frames too large for the port they came in on (the switch's OVERSIZE drop),
// typically a UDP GSO super-packet a Linux sender's interface did not segment:
// - the largest frame an interface of IP MTU `mtu` sends: Ethernet header and
//   one VLAN tag on top (the CRC is not in the frame);
// - truncated(): an IPv4 frame whose total length is more than the frame
//   holds, as when a receive buffer smaller than the frame cut it short
//   (net_af_packet's ring frames do, without a flag). parse() refuses it as
//   IP_BAD_LENGTH; this says which of that reason's two cases it is.
inline constexpr size_t max_frame(unsigned mtu) { return size_t(mtu) + kEthSize + kVlanSize; }
bool truncated(std::span<const uint8_t> frame);
// Rewrites a truncated() IPv4/UDP frame's IP total length and UDP length to
// what the frame holds, so that parse() reads its headers and its first PRISM
// header (give it sums_verified: its checksums no longer hold); the switch
// tells a registered sender whose frame it was. False, and nothing written,
// when the frame is not truncated or its IPv4 and UDP headers are not whole.
bool clamp_to_frame(std::span<uint8_t> frame);

// The same checks from the PRISM header on, for a UDP payload a socket
// received (the kernel has checked IPv4 and UDP): src, dst and vlan are left
// zero. SHORT_HEADER when it is shorter than the header.
Refusal parse_message(std::span<const uint8_t> message, Parsed* out, bool check_partial = true);

// A JOIN's or JOINED's header (PROTOCOL.md, Sessions) for `job` of `group`
// ranks: no descriptor (every code 0), terms and count 0; the caller sets op
// (the nonce), chunk, sender and status.
Header session_header(Kind kind, uint32_t job, uint16_t group);

// Job pools (PROTOCOL.md, "Job pools"): the four headers, each with no
// descriptor, count 0 and no flags or status.
// ALLOC: rank `asker` asks pool `pool` (the pool's first job id) for a job of
// `group` ranks, with a random non-zero `nonce` (op).
Header alloc_header(uint32_t pool, uint32_t nonce, uint16_t asker, uint16_t group);
// ALLOCATED: the answer: `job` allocated for `nonce`, chunk = the pool id,
// sender = the switch id, terms = the switch's shard count; the body is allocated_body().
Header allocated_header(uint32_t job, uint32_t nonce, uint32_t pool, uint16_t switch_id, uint16_t group,
                        uint16_t shards);
// LEAVE: `rank` leaves pooled `job`; `nonce` is the one it JOINed with; group 0.
Header leave_header(uint32_t job, uint32_t nonce, uint16_t rank);
// LEFT: the LEAVE of `rank` answered; terms = the ranks still bound.
Header left_header(uint32_t job, uint32_t nonce, uint16_t rank, uint16_t group, uint16_t still_bound);
// ALLOCATED's 8-byte body: the pool's slot_quota and idle_timeout_ms (big-endian u32 each).
struct AllocatedBody {
  uint32_t slot_quota = 0;
  uint32_t idle_timeout_ms = 0;
};
std::array<uint8_t, kAllocatedBody> allocated_body(const AllocatedBody& b);
// The body of a parsed ALLOCATED; nothing for another kind or length.
std::optional<AllocatedBody> allocated_body(const Parsed& p);

// Queries (PROTOCOL.md, Queries). QUERY: the header of the CONTRIB `contrib`
// (job, op, chunk, sender = the rank, group and descriptor) with kind QUERY,
// terms 1, count 0, flags and status 0; it has no body.
Header query_header(const Header& contrib);
// STATUS: the answer to `query`: its job, op, chunk, group and descriptor;
// sender = `switch_id`, count 0, flags 0, status qstatus::HELD or MISSING,
// terms = the contributions the chunk's slot has received (0 with no slot).
// Its body, optional, is the bitmap (abandoned_bitmap_bytes(group) bytes) of
// this switch's members that have not contributed.
Header status_header(const Header& query, uint16_t switch_id, bool held, uint16_t terms);

// Bytes a payload of `count` elements takes for a data encoding (1 or 2).
inline size_t element_bytes(const Header& h) {
  return size_t(h.count) * info(h.encoding == Encoding::DTYPE ? h.dtype : h.out_dtype).bytes;
}

// Builds a frame: Ethernet / IPv4 (DF, TTL 64, checksum) / UDP (checksum) /
// header / body (payload, then sideband when flags has SIDEBAND; for encoding
// 3 the body starts with the fragment header). Returns the frame length, or 0
// when it would exceed `cap`. The IPv4 identification field is `ip_id`.
size_t build(uint8_t* buf, size_t cap, const Endpoint& src, const Endpoint& dst, const Header& h,
             std::span<const uint8_t> body, uint16_t ip_id = 0);

// The same frame split in two for a fan-out that shares one body: writes
// only the headers (kFrameOverhead bytes) for a body of `body_len` bytes whose
// one's-complement sum is `body_sum` (body_sum16()), so each copy's UDP
// checksum costs 42 bytes of summing instead of the whole body.
uint32_t body_sum16(std::span<const uint8_t> body);
// The folded one's-complement sum of the big-endian 16-bit words of p[0, len)
// (an odd last byte is padded with zero), as IPv4 and UDP checksums use it.
// AVX2 where the CPU has it (see arith/kernels.hpp's dispatch); the portable
// sum is there for tests to compare with.
uint16_t ones_sum(const uint8_t* p, size_t len);
uint16_t ones_sum_portable(const uint8_t* p, size_t len);
size_t build_headers(uint8_t* buf, size_t cap, const Endpoint& src, const Endpoint& dst, const Header& h,
                     size_t body_len, uint32_t body_sum, uint16_t ip_id = 0);

// What every copy of a fan-out shares: the header's 32 bytes and the
// one's-complement sum of header and body. With it, each copy's Ethernet,
// IPv4 and UDP headers and both checksums cost arithmetic on a few fields
// and no pass over memory (RFC 1071: the sum is additive).
struct SharedPart {
  uint8_t header[kHeaderSize];
  uint32_t sum;  // header + body, unfolded
  size_t body_len;
};
SharedPart share(const Header& h, size_t body_len, uint32_t body_sum);
// What one destination's Ethernet, IPv4 and UDP headers keep from frame to
// frame: their bytes with the lengths, the IPv4 id and both checksums left
// zero, and the one's-complement sums of the constant words (unfolded), so a
// fan-out makes them once per destination, not once per frame.
struct HeaderTemplate {
  uint8_t bytes[kEthSize + kIpv4MinSize + kUdpSize];
  uint32_t ip_sum;   // the IPv4 header's constant words
  uint32_t udp_sum;  // the pseudo-header's and UDP header's: addresses, protocol, ports
};
HeaderTemplate header_template(const Endpoint& src, const Endpoint& dst);
// Writes one copy's kFrameOverhead header bytes (what build_headers() writes).
// False, writing nothing, when the IPv4 length would not fit in 16 bits.
bool put_headers(uint8_t* buf, const HeaderTemplate& t, const SharedPart& s, uint16_t ip_id);
bool put_headers(uint8_t* buf, const Endpoint& src, const Endpoint& dst, const SharedPart& s, uint16_t ip_id);

// Internet checksum helpers (RFC 1071), exposed for tests.
uint16_t ipv4_checksum(const uint8_t* ip_header, size_t len);
uint16_t udp_checksum(uint32_t src_ip, uint32_t dst_ip, const uint8_t* udp, size_t udp_len);

}  // namespace prism::wire
