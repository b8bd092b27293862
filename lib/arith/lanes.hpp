// Exact lanes and elements: whether a chunk's exact state is exactly a
// vector of some format (AUTO transport's question), and elements as exact
// lanes (a rounded partial merged into a Kulisch sum). The wire's encoding
// of exact lanes as lane records is proto/partial.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "arith/op.hpp"

namespace prism {

// Why exact lanes could not be read: from lane records (proto/partial.hpp)
// or from elements (lanes_from_elements).
enum class PartialError : uint8_t {
  None = 0,
  Truncated,        // the bytes end inside a lane record
  BadLength,        // n or offset place the magnitude beyond 384 bits
  NonCanonical,     // a zero first or last magnitude byte, or a sign on zero
  ReservedBits,     // bit 6 of the sideband set
  SpecialValue,     // a special or NEG_ZERO_ONLY lane that carries a magnitude
  Unrepresentable,  // an element that is not a whole number of lane units
};
const char* describe(PartialError e);

// AUTO's question: is every lane exactly a value of `out` (finite, no
// sideband but NEG_ZERO_ONLY where `out` has -0)? If so, writes the elements.
bool lanes_fit_format(const LaneExact* lanes, uint32_t n, int unit, Format out, uint8_t* elems);

// The reverse: elements of `f` (a rounded partial) as exact lanes in units of 2^unit.
PartialError lanes_from_elements(Format f, const uint8_t* elems, uint32_t n, int unit, LaneExact* out);

}  // namespace prism
