// What the accumulator families share (lib/arith/accumulator*.cpp only):
// aligned lane arrays, the NaN tag that carries a lane's sideband, the
// rounding of specials and of exact values, and each family's constructor.
#pragma once

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "arith/accumulator.hpp"

namespace prism::acc {

// Cache-line aligned array that owns its memory.
template <class T>
class Lanes {
 public:
  explicit Lanes(size_t n) : n_(n) {
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    p_ = static_cast<T*>(std::aligned_alloc(64, bytes ? bytes : 64));
    if (!p_) throw std::bad_alloc();
  }
  ~Lanes() { std::free(p_); }
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  void fill(const T& v) {
    for (size_t i = 0; i < n_; ++i) p_[i] = v;
  }

 private:
  T* p_;
  size_t n_;
};

inline constexpr uint32_t kBlock = 256;  // lanes per kernel call (bounds the stack scratch)

// A lane's fast value: float or double. A lane that has seen a special holds
// a quiet NaN whose payload carries the sideband bits (x86 keeps a NaN
// operand's payload through later additions of finite values; the checked
// kernels route such lanes to the slow path anyway).
template <class T>
struct LaneBits {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  static constexpr Bits kTag = sizeof(T) == 4 ? Bits(0x7FD05200u) : Bits(0x7FF8505200000000ull);
  static constexpr Bits kNegZero = Bits(1) << (8 * sizeof(T) - 1);
  static T tag(uint8_t side_bits) { return std::bit_cast<T>(Bits(kTag | side_bits)); }
  // The sideband a lane holds: 0 for a number.
  static uint8_t side_of(T v) {
    if (!std::isnan(v)) return 0;
    const Bits b = std::bit_cast<Bits>(v);
    return (b & ~Bits(0xFF)) == kTag ? uint8_t(b & side::ALL) : side::NAN_INPUT;
  }
  static bool neg_zero(T v) { return std::bit_cast<Bits>(v) == kNegZero; }
  static T merge(T a, uint8_t sp) { return tag(uint8_t(side_of(a) | sp)); }
};

inline uint8_t special_side(const Decoded& x) {
  if (x.cls == FpClass::NaN) return side::NAN_INPUT;
  if (x.cls == FpClass::Inf) return x.neg ? side::NEG_INF : side::POS_INF;
  return 0;
}

// Result of a lane whose sideband holds a special; false when there is none.
inline bool special_result(uint8_t s, Format out, Exceptions ex, uint32_t* bits, uint8_t* fl) {
  const FormatInfo& fo = info(out);
  if (s & side::NAN_INPUT) {
    *bits = fo.canonical_nan;
    *fl |= flag::NAN_INPUT;
    return true;
  }
  const bool pos = s & side::POS_INF, neg = s & side::NEG_INF;
  if (pos && neg) {
    *bits = fo.canonical_nan;
    *fl |= flag::INVALID;
    return true;
  }
  if (pos || neg) {
    if (fo.has_inf) {
      *bits = fo.inf | (neg ? fo.sign_bit : 0);
    } else {
      *bits = overflow_bits(out, neg, ex);
      *fl |= flag::OVERFLOW;
    }
    return true;
  }
  return false;
}

inline Encoded encode_wide(Format out, Exceptions ex, const Wide& v, int unit, bool neg_zero) {
  if (v.is_zero()) return {zero_bits(out, neg_zero), false};
  const bool neg = v.negative();
  const Wide m = v.magnitude();
  const int pos = m.msb() - 63;
  const uint64_t top = m.bits_at(pos);
  const bool sticky = pos > 0 && m.any_below(pos);
  return encode_float(out, neg, top, unit + pos, sticky, ex);
}

inline Encoded encode_double(Format out, Exceptions ex, double d) {
  if (d == 0) return {zero_bits(out, std::signbit(d)), false};
  if (out == Format::FP32) {  // the hardware conversion rounds to nearest even, subnormals included
    const float f = float(d);
    if (std::isinf(f)) return {overflow_bits(out, d < 0, ex), true};
    return {float_bits(f), false};
  }
  int e;
  const double m = std::frexp(std::fabs(d), &e);
  return encode_float(out, d < 0, uint64_t(std::ldexp(m, 53)), e - 53, false, ex);
}

// A double's exact value as v * 2^shift with shift >= 0 in units of 2^unit.
// Read from the double's fields (no frexp/ldexp): v is the significand,
// shifted down where the double's exponent is below the unit.
inline void split_double(double d, int unit, int64_t* v, int* shift) {
  const uint64_t b = std::bit_cast<uint64_t>(d);
  const int field = int(b >> 52) & 0x7FF;
  int64_t mi = int64_t(b & ((uint64_t(1) << 52) - 1));
  if (field) mi |= int64_t(1) << 52;
  if (mi == 0) {
    *v = 0;
    *shift = 0;
    return;
  }
  int s = (field ? field : 1) - 1075 - unit;
  if (s < 0) {  // the low bits are zero: d is a multiple of 2^unit
    mi >>= -s;
    s = 0;
  }
  *v = (b >> 63) ? -mi : mi;
  *shift = s;
}

// Whether every finite one of n fp32 values (bits, little-endian) is a whole
// number of lane units 2^unit, as lanes_from_elements() requires (true for
// fp32's own unit, 2^-149). Cost: a few integer ops per lane.
inline bool fp32_whole_units(const uint8_t* e, uint32_t n, int unit) {
  if (unit <= -149) return true;
  uint32_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, e + size_t(i) * 4, 4);
    const int field = int(b >> 23) & 0xFF;
    const int need = unit - ((field ? field : 1) - 150);  // low significand bits that must be 0
    if (field == 0xFF || need <= 0) continue;
    const uint32_t sig = (b & 0x7FFFFFu) | (field ? 0x800000u : 0);
    bad |= need >= 24 ? sig : sig & ((1u << need) - 1);
  }
  return bad == 0;
}

// Exact conversion of a lane value to double; false when it needs more than 53 bits.
inline bool wide_to_double(const Wide& v, int unit, double* out) {
  if (v.is_zero()) {
    *out = 0;
    return true;
  }
  const Wide m = v.magnitude();
  const int lo = m.lsb(), hi = m.msb();
  if (hi - lo >= 53) return false;
  const double d = std::ldexp(double(m.bits_at(lo)), lo + unit);
  *out = v.negative() ? -d : d;
  return true;
}

// v (in units of 2^unit) as hi + lo: hi = v rounded to the nearest double
// (ties to even), lo = v - hi, when that rest is itself a double. False
// when v needs more (two doubles do not hold it).
inline bool wide_to_pair(const Wide& v, int unit, double* hi, double* lo) {
  *lo = 0;
  if (wide_to_double(v, unit, hi)) return true;
  const Wide m = v.magnitude();
  const int top = m.msb(), cut = top - 52;  // hi's last bit weighs 2^cut
  uint64_t t = m.bits_at(cut) & ((uint64_t(1) << 53) - 1);
  const bool half = m.bits_at(cut - 1) & 1, sticky = m.any_below(cut - 1);
  if (half && (sticky || (t & 1))) ++t;  // to nearest, ties to even (2^53 when it carries: still exact)
  Wide rest = m;
  rest.add_shifted(-int64_t(t), cut);
  double r;
  if (!wide_to_double(rest, unit, &r)) return false;
  const double h = std::ldexp(double(t), cut + unit);
  *hi = v.negative() ? -h : h;
  *lo = v.negative() ? -r : r;
  return true;
}

// Lanes of sums rounded into a narrow float format in one batch (round_f32;
// double lanes through round_f64, which rounds each sum once). False when a
// lane is a NaN, an infinity or overflows.
template <class T>
bool round_lanes(const Kernels& k, Format out, const T* lanes, uint32_t n, uint8_t* dst) {
  if constexpr (sizeof(T) == 4)
    return k.round_f32(out, lanes, n, dst);
  else
    return k.round_f64(out, lanes, n, dst);
}

// The families (one file each); make_accumulator() picks one.
// KULISCH_FIXED over a float format: the narrowest exact lane (accumulator_kulisch.cpp).
std::unique_ptr<Accumulator> make_kulisch(const OpDesc& d, const Kernels& k);
// FP32_ARRIVAL and FP32_BINOMIAL over a float format (accumulator_fp32.cpp).
std::unique_ptr<Accumulator> make_fp32_arrival(const OpDesc& d, const Kernels& k);
std::unique_ptr<Accumulator> make_fp32_binomial(const OpDesc& d, const Kernels& k);
// Integer inputs, every policy (accumulator_int.cpp).
std::unique_ptr<Accumulator> make_integer_sum(const OpDesc& d, const Kernels& k);

}  // namespace prism::acc
