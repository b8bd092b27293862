// The switch's one ingress decision: what happens to a frame once the parser
// has looked at it. Admitted (to the reducer shard that owns its op chunk),
// or dropped for one named reason, and answered with a NACK only when its
// source is exactly a registered member or child (MAC, IP, UDP port and the
// switch port it is attached to): PROTOCOL.md's promise that a switch never
// reflects traffic. The pipeline's RX stage and the unit tests both call
// this; nothing else decides.
#pragma once

#include <cstdint>
#include <optional>

#include "proto/packet.hpp"
#include "switch/directory.hpp"

namespace prism::sw {

struct Verdict {
  const Job* job = nullptr;
  // Admitted: the member or child that sent it (null for the parent's RESULT).
  // Refused: the registered member a NACK goes to (null: no NACK).
  const Member* member = nullptr;
  bool from_parent = false;
  std::optional<Drop> drop;  // why it was refused; empty when admitted
  // Pool messages (PROTOCOL.md, Job pools): the pool of an ALLOC or of a
  // pooled job; `to_source`: a refusal is answered to the packet's source on
  // `in_port` (rate-limited), which is no registered member; admitted, the
  // JOIN of a rank not bound yet, to be bound by the job's shard.
  const Pool* pool = nullptr;
  bool to_source = false;
  bool bind = false;
  uint16_t in_port = 0;
  // A pooled job's generation when ingress judged the packet (0 for a declared
  // job): its binding belonged to that tenant. The reducer takes the packet
  // only while the job is still in that generation (SECURITY-REVIEW F1).
  uint32_t pool_gen = 0;
  bool admitted() const { return !drop; }
  // The NACK this refusal gets, if any (to `member`, or to the source).
  std::optional<wire::NackReason> nack() const {
    return drop && (member || to_source) ? nack_for(*drop) : std::nullopt;
  }
};

// What a parser refusal means for the switch: not PRISM traffic at all
// (NOT_FOR_US), or PRISM traffic that is broken (MALFORMED); and whether its
// source address can be believed (the refusal came after the UDP checks).
struct RefusalClass {
  Drop drop;
  bool source_checked;
};
RefusalClass classify(wire::Refusal r);

// `refusal` is what wire::parse() returned for `p`; `in_port` the switch port
// the frame came in on. Checks, for an admitted packet: the job exists, the
// sender is who it says it is (the MAC, IP and UDP port registered for that
// id, on the port it is attached to), and the kind is one this switch takes
// from it: CONTRIB (and its QUERY) from a member rank, PARTIAL from a child, RESULT and
// JOINED from the parent, JOIN from a member rank or a child (forwarding its
// ranks' JOINs); for a pool (PROTOCOL.md, Job pools), ALLOC from a source in
// its ranges, and JOIN, LEAVE, CONTRIB and QUERY to a pooled job by its bindings.
Verdict ingress(const Directory& dir, wire::Refusal refusal, const wire::Parsed& p, uint16_t in_port);

// The NACK frame for a refused packet: it echoes the packet's header fields,
// with the reason in `status`, from the switch's endpoint on `to`'s port to
// `to`'s registered address. The only NACK builder.
struct Out;
Out nack(const Directory& dir, const wire::Parsed& p, wire::NackReason why, const Member& to);
// The same for an op the switch gives up on with no packet in hand: it
// echoes the op's descriptor `op` (its first packet's header).
Out nack(const Directory& dir, const wire::Header& op, wire::NackReason why, const Member& to);
// A refused pool message's NACK to its source (`src` on switch port `port`):
// it echoes the packet's job, op (the nonce), sender and group, with
// descriptor bytes 0 (PROTOCOL.md, Job pools).
Out nack_to_source(const Directory& dir, const wire::Header& echoed, wire::NackReason why, const wire::Endpoint& src,
                   uint16_t port);
// Sends a refused packet's NACK to `out` when its verdict has one; true if it
// did. A NACK to a source goes through `limit` (one per source per 100 ms;
// what is over is counted in the pool's nacks_limited).
class Sink;
class NackLimiter;
bool answer(const Directory& dir, const Verdict& v, const wire::Parsed& p, Sink& out, NackLimiter* limit = nullptr,
            uint64_t now_ns = 0);

}  // namespace prism::sw
