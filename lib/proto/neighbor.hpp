// The switch as an endpoint on its ports: it answers ARP requests for a
// port's IPv4 address and ICMP echo requests sent to it, so a kernel host
// resolves the switch and can ping it like any neighbour (no static ARP
// entries). Replies are made in place, in the request's own buffer: the
// pipeline sends that buffer back out of the port it came in on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/packet.hpp"

namespace prism::wire {

enum class LocalReply : uint8_t { NONE, ARP, ICMP_ECHO };

// When `frame` (len bytes: Ethernet, optionally one 802.1Q tag) is an ARP
// request for `ip` (Ethernet/IPv4, broadcast or to `mac`) or an ICMP echo
// request to `ip` at `mac` (IPv4 header and ICMP checksums good, not a
// fragment), rewrites it into the reply from (`mac`, `ip`) to the asker and
// says which; otherwise leaves it untouched and returns NONE. The reply is
// the request's length: ARP padding and the echo's data are kept.
LocalReply answer_local(uint8_t* frame, size_t len, const Mac& mac, uint32_t ip);

}  // namespace prism::wire
