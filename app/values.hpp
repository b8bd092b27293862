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

// `v` rounded once into format `f` (format.hpp's encode_double).
inline uint32_t encode_value(Format f, double v) { return encode_double(f, v); }

// The element bytes of `codes` in format `f` (info(f).bytes each, little-endian).
inline std::vector<uint8_t> element_bytes(Format f, std::span<const uint32_t> codes) {
  const uint32_t esz = info(f).bytes;
  std::vector<uint8_t> out(codes.size() * esz);
  for (size_t i = 0; i < codes.size(); ++i) store_bits(f, out.data() + i * esz, codes[i]);
  return out;
}

}  // namespace prism::app
