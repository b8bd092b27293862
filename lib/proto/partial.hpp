// Lossless partials on the wire: the exact state of a chunk's lanes as lane
// records (proto/fragment.hpp cuts them into frames).
//
// Kulisch lane record (payload encoding 3), one per element, in lane order:
//   byte 0   sideband: bit0 NAN_INPUT, bit1 POS_INF, bit2 NEG_INF,
//            bit3 NEG_ZERO_ONLY, bit4 INVALID, bit5 OVERFLOW (fp32 policies),
//            bit6 reserved (0), bit7 sign of the value
//   byte 1   n: magnitude bytes that follow (0..47, n + offset <= 47)
//   byte 2   offset: the magnitude counts in units of 2^(8*offset) lane units
//   n bytes  magnitude, little-endian; first and last byte non-zero
// A lane unit is 2^unit_exp(dtype) (the input format's smallest subnormal;
// 1 for integers). A zero value has n = 0 and no sign; a special lane has n = 0.
// Only the bytes of the digit window in use travel: a typical fp32 gradient
// lane costs 3 + 4 bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "arith/lanes.hpp"
#include "arith/op.hpp"

namespace prism {

inline constexpr size_t kLaneHeader = 3;
inline constexpr size_t kMaxLaneBytes = kLaneHeader + 47;

size_t kulisch_lane_size(const LaneExact& l);
// Writes one lane record; `out` must hold kulisch_lane_size(l) bytes.
size_t encode_kulisch_lane(const LaneExact& l, uint8_t* out);
// Reads one lane record from [p, p + len); *used gets its size.
PartialError decode_kulisch_lane(const uint8_t* p, size_t len, LaneExact* out, size_t* used);

// Whole chunks: n lanes back to back.
size_t encode_kulisch_lanes(const LaneExact* lanes, uint32_t n, uint8_t* out);
PartialError decode_kulisch_lanes(const uint8_t* p, size_t len, uint32_t n, LaneExact* out, size_t* used);

// The same records for lanes whose exact state is a double (the common
// Kulisch state: a finite sum of at most 53 significant bits, no sideband but
// NEG_ZERO_ONLY, written as -0): v[i] is the lane's value itself, a whole
// number of lane units 2^unit. The bytes equal encode_kulisch_lanes() of
// those lanes, without building a Wide: a double's significand shifted by
// its exponent's low 3 bits fits 64 bits. Cost: ~15 ops per lane.
size_t encode_kulisch_lanes_f64(const double* v, uint32_t n, int unit, uint8_t* out);
// The reverse, when every record in [p, p + len) is such a lane (no special,
// n <= 8, at most 53 significant bits) and the n records fill exactly len
// bytes: writes the doubles (what decode_kulisch_lanes() gives, as values)
// and returns true. False otherwise, a malformed record included:
// decode_kulisch_lanes() then decides.
bool decode_kulisch_lanes_f64(const uint8_t* p, size_t len, uint32_t n, int unit, double* out);

}  // namespace prism
