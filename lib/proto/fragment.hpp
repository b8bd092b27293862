// Kulisch partials on the wire (encoding 3): a chunk's lane records cut into
// fragments that each fit one frame, and their reassembly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "proto/partial.hpp"
#include "proto/packet.hpp"

namespace prism::wire {

struct Fragment {
  uint16_t first = 0;         // first lane of the chunk in this fragment
  uint16_t count = 0;         // lane records in it (the header's count)
  std::vector<uint8_t> body;  // fragment header + lane records
};

// Cuts the records of `lanes` (a whole chunk, n lanes) into fragments whose
// body is at most `max_body` bytes (>= kFragmentHeader + kMaxLaneBytes), in
// lane order.
std::vector<Fragment> kulisch_fragments(const LaneExact* lanes, uint32_t n, size_t max_body);

// The largest body a frame of `mtu` IP bytes carries after the IPv4, UDP and PRISM headers.
inline size_t max_body(size_t mtu) { return mtu - kIpv4MinSize - kUdpSize - kHeaderSize; }

// Decodes a parsed encoding-3 packet's records into lanes[first .. first+count).
// `lanes` holds the whole chunk (p.chunk_lanes entries).
PartialError decode_fragment(const Parsed& p, LaneExact* lanes);

}  // namespace prism::wire
