// Element values for PRISM's tools (prism-gen's scenarios, prism-bench's
// data): a double rounded into a format's code, and codes stored as the
// little-endian element bytes a payload carries.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "format/format.hpp"

namespace prism::app {

// `v` rounded once into format `f`: to nearest (ties away from zero for the
// integer formats, the format's own rounding for the float ones), saturating
// at the largest finite magnitude (an integer format's at +-(2^(bits-1) - 1),
// symmetric, so a negated value is representable too).
inline uint32_t encode_value(Format f, double v) {
  if (f == Format::INT8) return uint32_t(uint8_t(int8_t(std::clamp(std::llround(v), -127LL, 127LL))));
  if (f == Format::INT32) return uint32_t(int32_t(std::clamp(std::llround(v), -2147483647LL, 2147483647LL)));
  if (v == 0) return zero_bits(f, std::signbit(v));
  int e;
  const double m = std::frexp(std::fabs(v), &e);
  return encode_float(f, v < 0, uint64_t(std::ldexp(m, 53)), e - 53, false, Exceptions::SATURATE).bits;
}

// The element bytes of `codes` in format `f` (info(f).bytes each, little-endian).
inline std::vector<uint8_t> element_bytes(Format f, std::span<const uint32_t> codes) {
  const uint32_t esz = info(f).bytes;
  std::vector<uint8_t> out(codes.size() * esz);
  for (size_t i = 0; i < codes.size(); ++i) store_bits(f, out.data() + i * esz, codes[i]);
  return out;
}

}  // namespace prism::app
