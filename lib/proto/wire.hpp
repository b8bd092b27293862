// PRISM wire protocol v1: Ethernet / IPv4 / UDP (port 20562 by default) /
// 32-byte header / payload. Header fields are big-endian; payload elements are
// little-endian. docs/PROTOCOL.md is the reference; this file mirrors it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>

#include "arith/op.hpp"
#include "util/closed_set.hpp"

namespace prism::wire {

inline constexpr uint16_t kMagic = 0x5052;  // "PR"
inline constexpr uint8_t kVersion = 1;
inline constexpr uint16_t kDefaultPort = 20562;
inline constexpr size_t kHeaderSize = 32;
inline constexpr size_t kEthSize = 14, kVlanSize = 4, kIpv4MinSize = 20, kUdpSize = 8;
// Frames PRISM builds: Ethernet + IPv4 (no options) + UDP + header.
inline constexpr size_t kFrameOverhead = kEthSize + kIpv4MinSize + kUdpSize + kHeaderSize;  // 74
inline constexpr size_t kMaxFrame = 9018;  // jumbo: 9000-byte IP MTU + Ethernet header + 4 for a VLAN tag

enum class Kind : uint8_t {
  CONTRIB = 1,
  PARTIAL = 2,
  RESULT = 3,
  NACK = 4,
  JOIN = 5,
  JOINED = 6,
  ALLOC = 7,
  ALLOCATED = 8,
  LEAVE = 9,
  LEFT = 10,
  QUERY = 11,
  STATUS = 12
};
inline constexpr size_t kKindCount = 12;
inline constexpr Entry<Kind> kKinds[] = {
    {Kind::CONTRIB, "CONTRIB", "a rank's contribution (rank to switch)"},
    {Kind::PARTIAL, "PARTIAL", "a leaf switch's partial sum (switch to parent)"},
    {Kind::RESULT, "RESULT", "the reduced result (switch to ranks, or parent to child switch)"},
    {Kind::NACK, "NACK", "a refusal, with its reason in the status byte (switch to a registered sender)"},
    {Kind::JOIN, "JOIN", "a rank joins its job's session, with a nonce of its own (rank to switch, leaf to parent)"},
    {Kind::JOINED, "JOINED",
     "the session's state for a joining rank: ranks joined, COMPLETE and the first op number (switch to rank)"},
    {Kind::ALLOC, "ALLOC", "a rank asks a job pool for a free job id for a group of R ranks (rank to switch)"},
    {Kind::ALLOCATED, "ALLOCATED",
     "the job id a pool gave, with the switch's shard count, slot quota and idle timeout (switch to the asker)"},
    {Kind::LEAVE, "LEAVE", "a rank of a pooled job leaves it (rank to switch)"},
    {Kind::LEFT, "LEFT", "a LEAVE answered: the ranks still bound (switch to rank)"},
    {Kind::QUERY, "QUERY",
     "a rank asks whether the switch holds its contribution to a chunk: the CONTRIB's header, no body (rank to "
     "switch)"},
    {Kind::STATUS, "STATUS",
     "a QUERY answered: HELD or MISSING, the contributions received and the bitmap of members still lacking "
     "(switch to the asking rank)"},
};
static_assert(std::size(kKinds) == kKindCount, "every Kind has a row in kKinds");
constexpr std::span<const Entry<Kind>> entries(Kind) { return kKinds; }
static_assert(codes_in_order<Kind>(1), "parse() range-checks the kind code");

enum class Encoding : uint8_t { DTYPE = 1, OUT_DTYPE = 2, KULISCH = 3 };
inline constexpr size_t kEncodingCount = 3;
inline constexpr Entry<Encoding> kEncodings[] = {
    {Encoding::DTYPE, "dtype", "elements of the op's input format (CONTRIB)"},
    {Encoding::OUT_DTYPE, "out_dtype", "elements of the op's output format (RESULT, rounded PARTIAL)"},
    {Encoding::KULISCH, "kulisch", "a fragment header and exact lane records (lossless PARTIAL)"},
};
static_assert(std::size(kEncodings) == kEncodingCount, "every Encoding has a row in kEncodings");
constexpr std::span<const Entry<Encoding>> entries(Encoding) { return kEncodings; }
static_assert(codes_in_order<Encoding>(1), "parse() range-checks the encoding code");

// ALLOCATED's body (PROTOCOL.md, Job pools): the pool's slot_quota and
// idle_timeout_ms, each a big-endian u32.
inline constexpr size_t kAllocatedBody = 8;

// STATUS's status byte (PROTOCOL.md, Queries): whether the switch holds the
// asking rank's contribution to the chunk. Any other value is BAD_STATUS.
namespace qstatus {
inline constexpr uint8_t MISSING = 0;  // not held: re-send the CONTRIB now
inline constexpr uint8_t HELD = 1;     // held; the switch waits for the ranks the bitmap names
}  // namespace qstatus

// JOINED's status bits.
namespace jstatus {
inline constexpr uint8_t COMPLETE = 1;  // every rank of the job has joined: chunk is the session's first op
}  // namespace jstatus

namespace hflag {
inline constexpr uint8_t RETRANSMIT = 1;
inline constexpr uint8_t LAST_CHUNK = 2;
inline constexpr uint8_t SIDEBAND = 4;  // count status bytes follow the elements (RESULT, PARTIAL encoding 2)
inline constexpr uint8_t ALL = 7;
}  // namespace hflag

// NACK reasons, carried in the status byte. Stable: never renumbered. Each
// doc says what the reason means and what the sender should do about it
// (the switch logs it, the rank library prints it).
enum class NackReason : uint8_t {
  MALFORMED = 1,
  UNKNOWN_JOB = 2,
  NOT_A_MEMBER = 3,
  DESCRIPTOR_MISMATCH = 4,
  ACCUMULATOR_TOO_NARROW = 5,
  NO_FREE_SLOT = 6,
  RESULT_EXPIRED = 7,
  OP_ABANDONED = 8,
  POOL_FULL = 9,
  GROUP_TOO_LARGE = 10,
  OUT_OF_POOL = 11,
  RANK_TAKEN = 12,
  CHUNK_TOO_LARGE = 13,
  SWITCH_STOPPING = 14,
};
inline constexpr size_t kNackReasonCount = 14;
inline constexpr Entry<NackReason> kNackReasons[] = {
    {NackReason::MALFORMED, "malformed",
     "the packet's header or body is invalid: fix the sender (it is a bug), do not resend it as it is"},
    {NackReason::UNKNOWN_JOB, "unknown_job",
     "the job id is not configured on this switch: check the job id against the switch's configuration"},
    {NackReason::NOT_A_MEMBER, "not_a_member",
     "the sender id is not a member (or child) of the job: check the rank against the job's members"},
    {NackReason::DESCRIPTOR_MISMATCH, "descriptor_mismatch",
     "the descriptor disagrees with the op's or is not allowed for the job: send every chunk of an op with the "
     "same dtype, out_dtype, policy, group, transport and exceptions, from the job's formats and policies"},
    {NackReason::ACCUMULATOR_TOO_NARROW, "accumulator_too_narrow",
     "an exact sum of this format at this group size needs a wider accumulator than the switch's kulisch_width: "
     "use another policy or format, fewer ranks, or raise kulisch_width"},
    {NackReason::NO_FREE_SLOT, "no_free_slot",
     "the job's slot quota or the switch's slot table is full: retry later (after a back-off)"},
    {NackReason::RESULT_EXPIRED, "result_expired",
     "a retransmission for a completed op whose result is no longer retained: the result is lost, restart the op "
     "under a new op id (or raise retention_ms and retention_mib)"},
    {NackReason::OP_ABANDONED, "op_abandoned",
     "the op chunk was abandoned after op_timeout_ms because a contributor never sent (or died), so it cannot "
     "complete: fail the collective, and restart it, if at all, under new op numbers (terms says how many "
     "contributions had arrived; a body, when present, is a bitmap of this switch's members that had not)"},
    {NackReason::POOL_FULL, "pool_full",
     "every job id of the pool is taken: retry later (after a back-off), or ask the switch's operator for a larger "
     "pool"},
    {NackReason::GROUP_TOO_LARGE, "group_too_large",
     "the group is larger than the pool's max_group: use fewer ranks, or a pool that admits more"},
    {NackReason::OUT_OF_POOL, "out_of_pool",
     "the source address is outside the pool's ranges, or came in on a switch port the pool does not list: run the "
     "rank on an address the pool admits"},
    {NackReason::RANK_TAKEN, "rank_taken",
     "that rank of the job is already bound to another address (a second process with the same rank, or a spoof): "
     "give every process its own rank, and let a restarted rank come back from the address it joined from"},
    {NackReason::CHUNK_TOO_LARGE, "chunk_too_large",
     "the op chunk needs more than the switch gives one chunk: its RESULT, sideband included (count x (width of "
     "out_dtype + 1) + 60 bytes), must fit the switch's MTU, and its accumulator the switch's per-slot memory "
     "(FP32_BINOMIAL keeps 4 bytes per rank and element): send smaller chunks (docs/PROTOCOL.md, Sizes)"},
    {NackReason::SWITCH_STOPPING, "switch_stopping",
     "the switch is stopping (its operator asked it to, SIGTERM): it takes no new op, JOIN or ALLOC and gives up "
     "the ops still in flight after stop_timeout_ms: fail the collective, and run the job again once the switch "
     "is back"},
};
static_assert(std::size(kNackReasons) == kNackReasonCount, "every NackReason has a row in kNackReasons");
constexpr std::span<const Entry<NackReason>> entries(NackReason) { return kNackReasons; }
static_assert(codes_in_order<NackReason>(1), "parse() range-checks the reason code");

// A NACK OP_ABANDONED's body, when it has one: a bitmap of the switch's
// members whose contribution had not arrived, bit (r % 8) of byte (r / 8)
// set for rank r missing, one bit per rank of the group. A STATUS's body is
// the same bitmap (the members still lacking); so is a JOINED's (the ranks joined).
constexpr size_t abandoned_bitmap_bytes(uint16_t group) { return (size_t(group) + 7) / 8; }

inline const char* name(Kind k) { return prism::name<Kind>(k); }
inline const char* name(Encoding e) { return prism::name<Encoding>(e); }
inline const char* name(NackReason r) { return prism::name<NackReason>(r); }

// Byte offsets of the header's fields (docs/PROTOCOL.md's table).
namespace off {
inline constexpr size_t magic = 0, version = 2, kind = 3, job = 4, op = 8, chunk = 12, sender = 16, group = 18,
                        terms = 20, count = 22, dtype = 24, out_dtype = 25, policy = 26, encoding = 27, transport = 28,
                        exceptions = 29, flags = 30, status = 31;
static_assert(status + 1 == kHeaderSize, "the header's last field ends the header");
}  // namespace off

// Byte offsets in a frame PRISM builds (Ethernet without a VLAN tag, IPv4
// without options, UDP, the header, the body): what build() writes, and
// what tools that patch a built frame in place may rewrite.
namespace frame {
inline constexpr size_t eth_dst = 0, eth_src = 6, ethertype = 12;
inline constexpr size_t ip = kEthSize;  // IPv4 header
inline constexpr size_t ip_version_ihl = ip + 0, ip_total_length = ip + 2, ip_id = ip + 4, ip_flags_fragment = ip + 6,
                        ip_ttl = ip + 8, ip_protocol = ip + 9, ip_checksum = ip + 10, ip_src = ip + 12,
                        ip_dst = ip + 16;
inline constexpr size_t udp = ip + kIpv4MinSize;  // UDP header
inline constexpr size_t udp_src_port = udp + 0, udp_dst_port = udp + 2, udp_length = udp + 4, udp_checksum = udp + 6;
inline constexpr size_t header = udp + kUdpSize;  // the PRISM header
inline constexpr size_t body = header + kHeaderSize;
static_assert(body == kFrameOverhead, "a built frame's body follows its 74 bytes of headers");
// A header field in a built frame: frame::at(off::dtype).
constexpr size_t at(size_t header_offset) { return header + header_offset; }
}  // namespace frame

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
  PartialTransport transport = PartialTransport::KULISCH;
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

// A slot's packets also agree on whether their chunk is the op's last: ranks
// whose counts differ by whole chunks disagree there, and nowhere else
// (SECURITY-REVIEW F6). A QUERY carries no flags and is not compared.
inline bool same_extent(const Header& a, const Header& b) { return ((a.flags ^ b.flags) & hflag::LAST_CHUNK) == 0; }

// A Kulisch partial's payload (encoding 3) starts with a fragment header:
// which lanes of the chunk the lane records that follow belong to.
inline constexpr size_t kFragmentHeader = 4;  // u16 first lane, u16 lanes in the whole chunk (big-endian)

}  // namespace prism::wire
