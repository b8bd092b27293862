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
  bool admitted() const { return !drop; }
  // The NACK this refusal gets, if any (to `member`).
  std::optional<wire::NackReason> nack() const { return drop && member ? nack_for(*drop) : std::nullopt; }
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
// from it: CONTRIB from a member rank, PARTIAL from a child, RESULT and
// JOINED from the parent, JOIN from a member rank or a child (forwarding its
// ranks' JOINs).
Verdict ingress(const Directory& dir, wire::Refusal refusal, const wire::Parsed& p, uint16_t in_port);

// The NACK frame for a refused packet: it echoes the packet's header fields,
// with the reason in `status`, from the switch's endpoint on `to`'s port to
// `to`'s registered address. The only NACK builder.
struct Out;
Out nack(const Directory& dir, const wire::Parsed& p, wire::NackReason why, const Member& to);
// The same for an op the switch gives up on with no packet in hand: it
// echoes the op's descriptor `op` (its first packet's header).
Out nack(const Directory& dir, const wire::Header& op, wire::NackReason why, const Member& to);
// Sends a refused packet's NACK to `out` when its verdict has one; true if it did.
class Sink;
bool answer(const Directory& dir, const Verdict& v, const wire::Parsed& p, Sink& out);

}  // namespace prism::sw
