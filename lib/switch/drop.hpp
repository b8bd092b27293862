// Why the switch drops a packet: one reason per drop, one counter per
// reason, and the NACK (if any) that tells a registered sender about it.
// The table is the only place the reasons are listed: telemetry, the
// summary, docs and tests take their names from it.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>

#include "proto/wire.hpp"
#include "util/closed_set.hpp"

namespace prism::sw {

using ::prism::name;

enum class Drop : uint8_t {
  MALFORMED,
  NOT_FOR_US,
  UNKNOWN_SOURCE,
  UNKNOWN_JOB,
  NOT_A_MEMBER,
  SPOOFED,
  WRONG_KIND,
  NOT_ALLOWED,
  DESCRIPTOR_MISMATCH,
  TOO_NARROW,
  NO_FREE_SLOT,
  DUPLICATE,
  RESULT_EXPIRED,
  LATE,
  ABANDONED,
  BAD_PARTIAL,
  STALE_RESULT,
  NO_CHECKSUM,
  POOL_FULL,
  GROUP_TOO_LARGE,
  OUT_OF_POOL,
  RANK_TAKEN,
  OVERSIZE,
  TOO_LARGE,
  NO_MEMORY,
  OVER_BUDGET,
  RATE_LIMITED,
  OVER_RATE,
  STOPPING,
  kCount
};

inline constexpr Entry<Drop> kDrops[] = {
    {Drop::MALFORMED, "malformed", "PRISM traffic the parser refused (its own reason is counted too)"},
    {Drop::NOT_FOR_US, "not_for_us",
     "not IPv4/UDP to the switch's port, or addressed to another station's MAC or IP: ignored, not an error"},
    {Drop::UNKNOWN_SOURCE, "unknown_source", "a valid packet from an address no job registers"},
    {Drop::UNKNOWN_JOB, "unknown_job", "the job id is not configured on this switch"},
    {Drop::NOT_A_MEMBER, "not_a_member", "the sender id is not a member (or child) of the job"},
    {Drop::SPOOFED, "spoofed", "the sender id belongs to another address, or came in on another port"},
    {Drop::WRONG_KIND, "wrong_kind", "a kind this switch does not take from that sender (e.g. a NACK)"},
    {Drop::NOT_ALLOWED, "not_allowed", "a format or policy the job does not allow"},
    {Drop::DESCRIPTOR_MISMATCH, "descriptor_mismatch", "disagrees with the op's descriptor or is not a valid op"},
    {Drop::TOO_NARROW, "too_narrow", "the exact sum needs a wider accumulator than kulisch_width"},
    {Drop::NO_FREE_SLOT, "no_free_slot", "the slot table or the job's slot_quota is full"},
    {Drop::DUPLICATE, "duplicate", "a contributor (or a partial's fragment) already counted"},
    {Drop::RESULT_EXPIRED, "result_expired", "a retransmission for a result no longer retained"},
    {Drop::LATE, "late", "a contribution (not a retransmission) for an op that has completed"},
    {Drop::ABANDONED, "abandoned", "a contribution or retransmission for an op chunk abandoned after op_timeout_ms"},
    {Drop::BAD_PARTIAL, "bad_partial", "a partial that cannot be merged exactly"},
    {Drop::STALE_RESULT, "stale_result",
     "a parent's RESULT, or another switch's OP_ABANDONED, for no op waiting for it"},
    {Drop::NO_CHECKSUM, "no_checksum",
     "sent without a UDP checksum (0) to a job that requires one (its udp_checksum: optional accepts it)"},
    {Drop::POOL_FULL, "pool_full", "an ALLOC to a pool whose every job id is taken"},
    {Drop::GROUP_TOO_LARGE, "group_too_large", "an ALLOC for a group above the pool's max_group"},
    {Drop::OUT_OF_POOL, "out_of_pool",
     "a pool message from a source outside the pool's ranges, or on a port the pool does not list"},
    {Drop::RANK_TAKEN, "rank_taken", "a JOIN, LEAVE or CONTRIB for a pooled job's rank bound to another address"},
    {Drop::OVERSIZE, "oversize",
     "a frame larger than the port's MTU, or cut short on the way in (its IP total length is more than the frame "
     "holds): a GSO super-packet that was not segmented (turn off tx-udp-segmentation on the sender's interface, "
     "docs/REAL_INTERFACES.md); a registered sender is told NACK MALFORMED"},
    {Drop::TOO_LARGE, "too_large",
     "an op chunk whose RESULT would not fit the switch's MTU, or whose accumulator would exceed the per-slot "
     "memory bound (NACK chunk_too_large)"},
    {Drop::NO_MEMORY, "no_memory",
     "the switch could not allocate what the packet needed: refused (NACK no_free_slot, retry later), the switch "
     "runs on"},
    {Drop::OVER_BUDGET, "over_budget",
     "a QUERY or RETRANSMIT asking for a retained RESULT (or a STATUS's bitmap) beyond the bytes its member has "
     "sent this shard: not sent, so that no member gets more bytes back than it sends (docs/SECURITY.md)"},
    {Drop::RATE_LIMITED, "rate_limited",
     "an ALLOC beyond its source IP's rate (4 a second, bursts of 8), dropped before any id is looked at; or one "
     "whose ALLOCATED would be more bytes than the source sent (an ALLOC without its padding: answered when it "
     "asks again)"},
    {Drop::OVER_RATE, "over_rate",
     "a packet of a job beyond its configured peak rate (jobs[].rate, pools[].rate: trTCM red), dropped at RX "
     "before any reducer work; its sender's timers send again"},
    {Drop::STOPPING, "stopping", "a new op, JOIN or ALLOC while the switch was stopping (SIGTERM)"},
};
static_assert(std::size(kDrops) == size_t(Drop::kCount), "every Drop has a row in kDrops");
constexpr std::span<const Entry<Drop>> entries(Drop) { return kDrops; }

// The NACK that answers a drop, when the packet's source is a registered
// member, or, for a pool message, its source on a pool's port (a NACK never
// goes anywhere else); none for drops a sender cannot act on, and never for
// a spoofed sender id (that would reflect traffic).
constexpr std::optional<wire::NackReason> nack_for(Drop d) {
  using R = wire::NackReason;
  switch (d) {
    case Drop::MALFORMED:
    case Drop::OVERSIZE:  // to a registered sender, named by the frame's head: it sends GSO this path cannot carry
    case Drop::NO_CHECKSUM:
    case Drop::BAD_PARTIAL: return R::MALFORMED;
    case Drop::UNKNOWN_JOB: return R::UNKNOWN_JOB;
    case Drop::NOT_A_MEMBER: return R::NOT_A_MEMBER;
    case Drop::NOT_ALLOWED:
    case Drop::DESCRIPTOR_MISMATCH: return R::DESCRIPTOR_MISMATCH;
    case Drop::TOO_NARROW: return R::ACCUMULATOR_TOO_NARROW;
    case Drop::NO_FREE_SLOT: return R::NO_FREE_SLOT;
    case Drop::RESULT_EXPIRED: return R::RESULT_EXPIRED;
    case Drop::ABANDONED: return R::OP_ABANDONED;
    case Drop::POOL_FULL: return R::POOL_FULL;
    case Drop::GROUP_TOO_LARGE: return R::GROUP_TOO_LARGE;
    case Drop::OUT_OF_POOL: return R::OUT_OF_POOL;
    case Drop::RANK_TAKEN: return R::RANK_TAKEN;
    case Drop::TOO_LARGE: return R::CHUNK_TOO_LARGE;
    case Drop::STOPPING: return R::SWITCH_STOPPING;
    case Drop::OVER_BUDGET:
    case Drop::RATE_LIMITED:
    case Drop::OVER_RATE: return std::nullopt;
    case Drop::NO_MEMORY: return R::NO_FREE_SLOT;
    case Drop::NOT_FOR_US:
    case Drop::UNKNOWN_SOURCE:
    case Drop::SPOOFED:
    case Drop::WRONG_KIND:
    case Drop::DUPLICATE:
    case Drop::LATE:
    case Drop::STALE_RESULT:
    case Drop::kCount: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace prism::sw
