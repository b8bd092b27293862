// What prism-bench's subcommands share: gradient-like test data and the
// CPU's name (values and JSON quoting come from values.hpp and json.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/format.hpp"
#include "json.hpp"
#include "values.hpp"

namespace prism::bench {

// ---------------------------------------------------------------------------
// Gradient-like data: per element a magnitude 2^u, u uniform in the format's
// window below, drawn once; each rank's value is that magnitude times N(0,1).
// So the R values of one element share roughly an exponent window, as real
// gradients do, while different elements spread over the window.

struct Window {
  double lo, hi;  // log2 of the per-element magnitude
};
inline Window magnitude_window(Format f) {
  switch (f) {
    case Format::FP32:
    case Format::BF16: return {-20, -6};  // ~1e-6 .. 1.5e-2: raw gradients
    case Format::FP16: return {-12, -2};  // scaled into fp16's range, some subnormals
    case Format::E4M3FN:
    case Format::E4M3FNUZ: return {-6, 2};  // scaled fp8, some subnormals
    case Format::E5M2:
    case Format::E5M2FNUZ: return {-10, 2};
    case Format::INT8: return {2, 5};     // quantised: |x| mostly < 127 (clipped)
    case Format::INT32: return {10, 24};  // fixed-point gradients
  }
  return {0, 0};
}

using app::encode_value;

// R packets of `elements` elements each, rank r's packet at r * elements * bytes.
// `spread` >= 0 replaces the window's width, keeping its centre.
inline std::vector<uint8_t> make_packets(Format f, uint32_t ranks, uint32_t elements, uint64_t seed, double spread) {
  const uint32_t sz = info(f).bytes;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(f));
  Window w = magnitude_window(f);
  if (spread >= 0) {
    const double mid = (w.lo + w.hi) / 2;
    w = {mid - spread / 2, mid + spread / 2};
  }
  std::uniform_real_distribution<double> u(w.lo, std::max(w.hi, std::nextafter(w.lo, 1e9)));
  std::normal_distribution<double> z(0.0, 1.0);
  std::vector<double> mag(elements);
  for (auto& m : mag) m = std::exp2(u(rng));
  std::vector<uint8_t> p(size_t(ranks) * elements * sz);
  for (uint32_t r = 0; r < ranks; ++r)
    for (uint32_t i = 0; i < elements; ++i) {
      const uint32_t bits = encode_value(f, mag[i] * z(rng));
      if (is_special(f, bits))
        throw std::logic_error(std::string("internal: generated a special ") + name(f) + " value");
      store_bits(f, p.data() + (size_t(r) * elements + i) * sz, bits);
    }
  return p;
}

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) {
        std::string m = line.substr(c + 1);
        m.erase(0, m.find_first_not_of(" \t"));
        return m;
      }
    }
  return "unknown";
}

using app::json_str;

}  // namespace prism::bench
