// Packed lanes: the exact lanes of a partial whose every lane is a double (a
// finite sum of at most 53 significant bits, a whole number of lane units
// 2^unit, -0 for a lane whose every term was -0: the common Kulisch state),
// in sub-blocks of kPackedSub lanes, each at its own fixed-point scale. What
// travels is each sub-block's dynamic range, not the format's: fp32
// gradients summed over 2..8 ranks take 5 bytes a lane (lane records: 3 + 4..6).
//
// Sub-block (the last one may be shorter), back to back:
//   byte 0     w: 1..8 bytes a lane; 0: every lane +0 (nothing follows);
//              kRawDoubles: each lane's double, 8 bytes little-endian
//   bytes 1-2  (w 1..8) lo, int16 little-endian: lane value = x * 2^lo
//   then       the lanes: (w 1..8) x as w bytes, little-endian two's
//              complement; (kRawDoubles) the double's bits
// The encoder takes the largest lo that holds the sub-block (its lanes'
// lowest set bit) and the fewest bytes for the largest magnitude at that
// scale; a sub-block whose lanes span more than 63 bits, or with a -0, goes
// as raw doubles. A decoder checks every sub-block: lo at or above the lane
// unit, x of at most 53 significant bits, raw doubles finite and whole
// units; anything else is malformed.
//
// Cost: the encoder reads the sub-block twice (scale, then bytes), ~6
// integer ops a lane; the decoder ~5 a lane (a load, two shifts, a
// conversion, a multiply).
#pragma once

#include <cstddef>
#include <cstdint>

#include "arith/kernels.hpp"

namespace prism {

inline constexpr uint32_t kPackedSub = 256;
inline constexpr uint8_t kRawDoubles = 0xFF;
inline constexpr size_t kPackedSubHeader = 3;

// The most bytes n lanes take packed, and the room an encoder needs (its
// stores are up to 16 bytes wide: 16 of slack).
inline size_t max_packed_bytes(uint32_t n) {
  return size_t(n) * 8 + size_t((n + kPackedSub - 1) / kPackedSub) * kPackedSubHeader;
}
inline size_t packed_room(uint32_t n) { return max_packed_bytes(n) + 16; }

// Writes v[0..n) packed to out (packed_room(n) bytes); returns the bytes
// written, or 0 when a lane is a NaN or an infinity (no packed form).
size_t encode_packed_lanes(const double* v, uint32_t n, uint8_t* out, const Kernels& k = best_kernels());

// Reads n lanes from [p, p + len) into out; false when the bytes are not n
// lanes packed as above for lane unit 2^unit (malformed, short, or bytes left over).
// *bound (when not null) gets a power of two above every |out[i]|.
bool decode_packed_lanes(const uint8_t* p, size_t len, uint32_t n, int unit, double* out,
                         const Kernels& k = best_kernels(), double* bound = nullptr);

}  // namespace prism
