#include "format/format.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace prism {
Decoded decode(Format f, uint32_t bits) {
  const FormatInfo& fi = info(f);
  if (f == Format::INT8) {
    const int8_t v = int8_t(bits);
    return {v == 0 ? FpClass::Zero : FpClass::Normal, v < 0, uint32_t(v < 0 ? -int(v) : int(v)), 0};
  }
  if (f == Format::INT32) {
    const int32_t v = int32_t(bits);
    const uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
    return {v == 0 ? FpClass::Zero : FpClass::Normal, v < 0, mag, 0};
  }
  const bool neg = (bits & fi.sign_bit) != 0;
  const uint32_t e = (bits >> fi.mbits) & ((1u << fi.ebits) - 1);
  const uint32_t m = bits & ((1u << fi.mbits) - 1);
  const uint32_t emask = (1u << fi.ebits) - 1;
  switch (fi.nan_style) {
    case NanStyle::IEEE:
      if (e == emask) return {m ? FpClass::NaN : FpClass::Inf, neg, 0, 0};
      break;
    case NanStyle::FN:
      if (e == emask && m == (1u << fi.mbits) - 1) return {FpClass::NaN, neg, 0, 0};
      break;
    case NanStyle::FNUZ:
      if (bits == fi.sign_bit) return {FpClass::NaN, true, 0, 0};
      break;
    case NanStyle::None: break;
  }
  if (e == 0) {
    if (m == 0) return {FpClass::Zero, neg, 0, 0};
    return {FpClass::Subnormal, neg, m, fi.unit_exp};
  }
  return {FpClass::Normal, neg, m | (1u << fi.mbits), int(e) - fi.bias - fi.mbits};
}

bool is_special(Format f, uint32_t bits) {
  const FpClass c = decode(f, bits).cls;
  return c == FpClass::NaN || c == FpClass::Inf;
}

bool round_float_to(Format f, float a, uint32_t* bits) {
  const FormatInfo& fi = info(f);
  const uint32_t ab = float_bits(a);
  const bool neg = ab >> 31;
  if (f == Format::BF16) {  // fp32's exponent range: RNE on the bits, subnormals included
    const uint32_t r = (ab + 0x7FFFu + ((ab >> 16) & 1u)) >> 16;
    if ((r & 0x7F80u) == 0x7F80u) return false;  // overflowed to the infinity
    *bits = r;
    return true;
  }
  static const auto kMax = [] {
    std::array<float, 16> m{};
    for (uint8_t c = 1; c <= 9; ++c)
      if (const auto g = format_from_code(c); g && info(*g).is_float) m[c] = to_float(*g, info(*g).max_finite);
    return m;
  }();
  const int m = fi.mbits;
  const int e = int((ab >> 23) & 0xFF) - 127;  // fp32 subnormals read as -127: below every format's emin
  const int qe = std::max(e, fi.emin) - m;     // the format's quantum at a
  if (qe + 23 + 127 > 254) return false;       // far beyond every narrow format's range
  const float s = bits_float(uint32_t(qe + 23 + 127) << 23 | 0x400000u);  // 1.5 * 2^(qe+23): ulp 2^qe
  const float r = (a + s) - s;  // a rounded to a multiple of 2^qe, ties to even
  if (r == 0) {
    *bits = zero_bits(f, neg);
    return true;
  }
  if (std::fabs(r) > kMax[uint8_t(f)]) return false;
  const uint32_t rb = float_bits(r);
  const int er = int((rb >> 23) & 0xFF) - 127;
  const uint32_t sign = neg ? fi.sign_bit : 0;
  if (er >= fi.emin) {
    *bits = sign | uint32_t(er + fi.bias) << m | ((rb >> (23 - m)) & ((1u << m) - 1));
  } else {
    const int shift = 23 - m + (fi.emin - er);
    *bits = sign | ((0x800000u | (rb & 0x7FFFFFu)) >> shift);
  }
  return true;
}

uint32_t zero_bits(Format f, bool neg) {
  const FormatInfo& fi = info(f);
  return neg && fi.has_neg_zero ? fi.sign_bit : 0;
}

uint32_t overflow_bits(Format f, bool neg, Exceptions ex) {
  const FormatInfo& fi = info(f);
  const uint32_t s = neg ? fi.sign_bit : 0;
  if (ex == Exceptions::SATURATE) return fi.max_finite | s;
  return fi.has_inf ? (fi.inf | s) : fi.canonical_nan;
}

Encoded encode_float(Format f, bool neg, uint64_t mag, int exp, bool sticky, Exceptions ex) {
  const FormatInfo& fi = info(f);
  if (mag == 0) {
    // Only a sticky remainder below an all-zero window: far below the smallest subnormal.
    return {zero_bits(f, neg), false};
  }
  const int msb = 63 - std::countl_zero(mag);
  const int top = msb + exp;                             // value in [2^top, 2^(top+1))
  int q = (top > fi.emin ? top : fi.emin) - (fi.p - 1);  // exponent of the result's last bit
  const int shift = q - exp;
  uint64_t n;
  if (shift <= 0) {
    n = mag << -shift;  // exact: n < 2^p
  } else {
    uint64_t rem;
    bool half, above;
    if (shift >= 65) {
      n = 0;
      half = false;
      above = false;
      rem = 1;  // strictly below half a quantum: rounds down
    } else if (shift == 64) {
      n = 0;
      rem = mag;
      half = rem == (uint64_t(1) << 63) && !sticky;
      above = rem > (uint64_t(1) << 63) || (rem == (uint64_t(1) << 63) && sticky);
    } else {
      n = mag >> shift;
      rem = mag & ((uint64_t(1) << shift) - 1);
      const uint64_t h = uint64_t(1) << (shift - 1);
      half = rem == h && !sticky;
      above = rem > h || (rem == h && sticky);
    }
    if (above || (half && (n & 1))) ++n;
  }
  if (n == (uint64_t(1) << fi.p)) {  // rounding carried into a new binade
    n >>= 1;
    ++q;
  }
  if (n == 0) return {zero_bits(f, neg), false};
  const uint32_t s = neg ? fi.sign_bit : 0;
  uint32_t magbits;
  if (n < (uint64_t(1) << (fi.p - 1))) {
    magbits = uint32_t(n);  // subnormal: exponent field 0
  } else {
    const int e = q + fi.p - 1;
    if (e > fi.emax) return {overflow_bits(f, neg, ex), true};
    magbits = (uint32_t(e + fi.bias) << fi.mbits) | uint32_t(n & ((uint64_t(1) << fi.mbits) - 1));
  }
  if (magbits > fi.max_finite) return {overflow_bits(f, neg, ex), true};
  return {magbits | s, false};
}

float to_float(Format f, uint32_t bits) {
  if (f == Format::FP32) return bits_float(bits);
  if (f == Format::BF16) return bits_float(bits << 16);
  const Decoded d = decode(f, bits);
  switch (d.cls) {
    case FpClass::NaN: return bits_float(0x7FC00000);
    case FpClass::Inf: return d.neg ? -INFINITY : INFINITY;
    case FpClass::Zero: return d.neg ? -0.0f : 0.0f;
    case FpClass::Subnormal:
    case FpClass::Normal: {
      const float v = std::ldexp(float(d.sig), d.exp);  // exact: sig < 2^24, result in fp32 range
      return d.neg ? -v : v;
    }
  }
  __builtin_unreachable();  // decode() gives one of the five classes
}

}  // namespace prism
