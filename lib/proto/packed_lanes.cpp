#include "proto/packed_lanes.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace prism {
namespace {

static_assert(std::endian::native == std::endian::little);

constexpr uint64_t kSignBit = uint64_t(1) << 63;
constexpr uint64_t kMant = (uint64_t(1) << 52) - 1;

// 2^e as a double, for -1022 <= e <= 1023.
double pow2(int e) { return std::bit_cast<double>(uint64_t(e + 1023) << 52); }

size_t encode_raw(const double* v, uint32_t n, uint8_t* out) {
  out[0] = kRawDoubles;
  std::memcpy(out + 1, v, size_t(n) * 8);
  return 1 + size_t(n) * 8;
}

// One sub-block (n <= kPackedSub).
size_t encode_sub(const Kernels& k, const double* v, uint32_t n, uint8_t* out) {
  bool neg_zero = false;
  const uint64_t top = k.scan_f64(v, n, &neg_zero);
  if (top >= (uint64_t(0x7FF) << 52)) return 0;  // a NaN or an infinity
  if (neg_zero) return encode_raw(v, n, out);
  if (top == 0) {
    out[0] = 0;
    return 1;
  }
  // Every lane as an integer at the scale that puts the largest one's top
  // bit at bit 50 (its value in [2^50, 2^51)): v * 2^(1073 - fmax). A lane
  // with bits below that scale's bit 0 means a span beyond 51 bits: raw
  // doubles (as for a scale beyond a double's range, which no partial of a
  // format PRISM takes needs).
  const int fmax = std::max(int(top >> 52), 1), s = 1073 - fmax;
  if (s < -1022 || s > 1023) return encode_raw(v, n, out);
  int64_t x[kPackedSub];
  uint64_t any = 0;
  if (k.fix_f64(v, n, pow2(s), x, &any)) return encode_raw(v, n, out);
  // The top lane's magnitude is in [2^50, 2^51) (a subnormal top: below):
  // 51 bits and a sign, less the trailing zeros every lane shares.
  const int tz = std::countr_zero(any);
  const int w = (52 - tz + 7) / 8;
  const int lo = tz - s;
  out[0] = uint8_t(w);
  out[1] = uint8_t(uint16_t(int16_t(lo)));
  out[2] = uint8_t(uint16_t(int16_t(lo)) >> 8);
  k.pack_i64(x, n, tz, uint32_t(w), out + kPackedSubHeader);
  return kPackedSubHeader + size_t(n) * size_t(w);
}

// Whether a finite double is a whole number of units 2^unit.
bool whole_units(double d, int unit) {
  const uint64_t b = std::bit_cast<uint64_t>(d);
  const int field = int(b >> 52) & 0x7FF;
  const uint64_t mant = (b & kMant) | (field ? uint64_t(1) << 52 : 0);
  if (mant == 0) return true;
  return std::max(field, 1) - 1075 + std::countr_zero(mant) >= unit;
}

}  // namespace

size_t encode_packed_lanes(const double* v, uint32_t n, uint8_t* out, const Kernels& k) {
  size_t at = 0;
  for (uint32_t b = 0; b < n; b += kPackedSub) {
    const size_t used = encode_sub(k, v + b, std::min(kPackedSub, n - b), out + at);
    if (!used) return 0;
    at += used;
  }
  return at;
}

bool decode_packed_lanes(const uint8_t* p, size_t len, uint32_t n, int unit, double* out, const Kernels& k,
                         double* bound) {
  size_t at = 0;
  int top = -1100;  // bound's exponent
  for (uint32_t b = 0; b < n; b += kPackedSub) {
    const uint32_t m = std::min(kPackedSub, n - b);
    double* o = out + b;
    if (at >= len) return false;
    const uint8_t w = p[at];
    if (w == 0) {
      std::fill_n(o, m, 0.0);
      at += 1;
      continue;
    }
    if (w == kRawDoubles) {
      if (len - at - 1 < size_t(m) * 8) return false;
      std::memcpy(o, p + at + 1, size_t(m) * 8);
      // Finite (the largest magnitude's bits below an infinity's, a NaN's
      // above), and whole units: a double of 2^(unit + 52) or more always is,
      // so only a sub-block holding a smaller one is checked lane by lane.
      bool neg_zero = false;
      const uint64_t big = k.scan_f64(o, m, &neg_zero);
      if (big >= 0x7FF0000000000000ull) return false;
      if (big) top = std::max(top, int(big >> 52) - 1022);  // 2^top above it (a subnormal's field 0 too)
      const double small = std::ldexp(1.0, unit + 52);
      bool any_small = false;
      for (uint32_t i = 0; i < m; ++i) any_small |= std::fabs(o[i]) < small;
      if (any_small)
        for (uint32_t i = 0; i < m; ++i)
          if (!whole_units(o[i], unit)) return false;
      at += 1 + size_t(m) * 8;
      continue;
    }
    if (w > 8 || len - at < kPackedSubHeader + size_t(m) * w) return false;
    const int lo = int16_t(uint16_t(p[at + 1] | p[at + 2] << 8));
    if (lo < unit || lo + 64 > 1023) return false;
    const double scale = pow2(lo);
    top = std::max(top, lo + 8 * w - 1);  // |x| <= 2^(8w - 1)
    const uint8_t* d = p + at + kPackedSubHeader;
    const size_t room = len - at - kPackedSubHeader;  // readable bytes from d
    // Lanes with 8 (16) readable bytes from their start: all but the message's last few.
    const uint32_t fast = room >= 8 ? std::min<uint32_t>(m, uint32_t((room - 8) / w + 1)) : 0;
    const uint32_t vec = room >= 16 ? std::min<uint32_t>(m, uint32_t((room - 16) / w + 1)) : 0;
    uint32_t i = 0;
    if (w <= 6) {
      k.unfix_f64(d, vec, w, scale, o);
      i = vec;
    }
    const int up = 64 - 8 * w;
    uint64_t wide = 0;  // lanes beyond 53 significant bits (w >= 7)
    for (; i < m; ++i) {
      uint64_t raw = 0;
      if (i < fast)
        std::memcpy(&raw, d + size_t(i) * w, 8);  // the bytes beyond the lane's w shift out
      else
        for (int b2 = 0; b2 < w; ++b2) raw |= uint64_t(d[size_t(i) * w + b2]) << (8 * b2);
      const int64_t x = int64_t(raw << up) >> up;  // sign-extended
      if (w >= 7) {
        const uint64_t mag = x < 0 ? 0 - uint64_t(x) : uint64_t(x);
        if (mag && 64 - std::countl_zero(mag) - std::countr_zero(mag) > 53) wide = 1;
      }
      o[i] = double(x) * scale;
    }
    if (wide) return false;
    at += kPackedSubHeader + size_t(m) * w;
  }
  if (bound) *bound = std::ldexp(1.0, top + 1);
  return at == len;
}

}  // namespace prism
