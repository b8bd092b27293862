#include "arith/accumulator.hpp"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace prism {
namespace {

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

constexpr uint32_t kBlock = 256;  // lanes per kernel call (bounds the stack scratch)

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

uint8_t special_side(const Decoded& x) {
  if (x.cls == FpClass::NaN) return side::NAN_INPUT;
  if (x.cls == FpClass::Inf) return x.neg ? side::NEG_INF : side::POS_INF;
  return 0;
}

// Result of a lane whose sideband holds a special; false when there is none.
bool special_result(uint8_t s, Format out, Exceptions ex, uint32_t* bits, uint8_t* fl) {
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

Encoded encode_wide(Format out, Exceptions ex, const Wide& v, int unit, bool neg_zero) {
  if (v.is_zero()) return {zero_bits(out, neg_zero), false};
  const bool neg = v.negative();
  const Wide m = v.magnitude();
  const int pos = m.msb() - 63;
  const uint64_t top = m.bits_at(pos);
  const bool sticky = pos > 0 && m.any_below(pos);
  return encode_float(out, neg, top, unit + pos, sticky, ex);
}

Encoded encode_double(Format out, Exceptions ex, double d) {
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
inline void split_double(double d, int unit, int64_t* v, int* shift) {
  int e;
  const double m = std::frexp(d, &e);
  int64_t mi = int64_t(std::ldexp(m, 53));
  int s = e - 53 - unit;
  if (s < 0) {  // the low bits are zero: d is a multiple of 2^unit
    mi >>= -s;
    s = 0;
  }
  *v = mi;
  *shift = s;
}

// Exact conversion of a lane value to double; false when it needs more than 53 bits.
bool wide_to_double(const Wide& v, int unit, double* out) {
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

// ---------------------------------------------------------------------------
// KULISCH_FIXED, wide formats: a fast lane (double for fp32, float for bf16
// and fp16) that takes every addition it can do exactly, plus a bank of
// deferred-carry digits for the exact error of the rest.
template <class T>
class KulischWide final : public Accumulator {
  using LB = LaneBits<T>;
  static constexpr int kFastBits = sizeof(T) == 4 ? 24 : 53;

 public:
  KulischWide(const OpDesc& d, const Kernels& k)
      : Accumulator(d),
        k_(k),
        unit_(unit_exp(d.dtype)),
        budget_(kFastBits - info(d.dtype).p - ceil_log2(d.group)),
        special_field_((1u << info(d.dtype).ebits) - 1),
        fast_(d.lanes),
        bank_(d.lanes),
        adds_(d.lanes),
        dirty_(d.lanes) {
    dirty_.fill(1);  // the lanes are uninitialised: clear them all once
    reset();
  }

  // Cost: the fast lanes, and the banks of the lanes that used theirs (a
  // bank and its add count change only with dirty_ set).
  void reset() override {
    certified_ = true;
    lo_ = ~0u;
    hi_ = 0;
    fast_.fill(T(-0.0));
    if (any_dirty_) {
      for (uint32_t i = 0; i < d_.lanes; ++i)
        if (dirty_[i]) {
          bank_[i].clear();
          adds_[i] = 0;
        }
      dirty_.fill(0);
      any_dirty_ = false;
    }
  }

  size_t bytes_per_lane() const override { return sizeof(T) + sizeof(Bank) + sizeof(uint16_t) + 1; }

  // Cost: while every term of the op so far lies in an exponent window the
  // fast lane holds exactly (hi - lo + p + ceil(log2 R) <= 53 for a double,
  // 24 for a float, over the whole op, so every lane's sum is exact), a range
  // scan and a plain add per lane. Otherwise the checked add (add, two subs,
  // two compares per lane, a vector at a time); a lane whose sum would round
  // pays a TwoSum and one bank add instead.
  void add(const uint8_t* e, uint32_t) override {
    if (certified_) {
      uint32_t lo = lo_, hi = hi_;
      k_.exp_range(d_.dtype, e, d_.lanes, &lo, &hi);
      // A float lane must also keep the sum below its own overflow: hi + log2 R < 255.
      const bool in_range = sizeof(T) == 8 || hi + uint32_t(ceil_log2(d_.group)) < 255;
      if (hi < special_field_ && in_range && (lo > hi || int(hi) - int(lo) <= budget_)) {
        lo_ = lo;
        hi_ = hi;
        if constexpr (sizeof(T) == 4)
          k_.add_f32(d_.dtype, fast_.data(), e, d_.lanes);
        else
          k_.add_f64(d_.dtype, fast_.data(), e, d_.lanes);
        return;
      }
      certified_ = false;  // the window no longer proves exactness: check every add from here on
    }
    const uint32_t sz = info(d_.dtype).bytes;
    uint32_t left[kBlock];
    for (uint32_t b = 0; b < d_.lanes; b += kBlock) {
      const uint32_t n = std::min(kBlock, d_.lanes - b);
      uint32_t k;
      if constexpr (sizeof(T) == 4)
        k = k_.add_f32_checked(d_.dtype, fast_.data() + b, e + b * sz, n, left);
      else
        k = k_.add_f64_checked(d_.dtype, fast_.data() + b, e + b * sz, n, left);
      for (uint32_t j = 0; j < k; ++j) {
        const uint32_t lane = b + left[j];
        slow_add(lane, load_bits(d_.dtype, e + lane * sz));
      }
    }
  }

  bool add_exact(const LaneExact* in) override {
    certified_ = false;
    for (uint32_t i = 0; i < d_.lanes; ++i)
      if (!(in[i].side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF)) && !in[i].value.is_zero() &&
          in[i].value.magnitude().msb() >= Bank::kWords * Bank::kDigitBits - 4)
        return false;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const LaneExact& l = in[i];
      const uint8_t sp = l.side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF);
      if (sp || std::isnan(fast_[i])) {
        fast_[i] = LB::merge(fast_[i], sp);
        continue;
      }
      if (!(l.side & side::NEG_ZERO_ONLY)) fast_[i] += T(0);  // -0 stays only while every term is -0
      if (l.value.is_zero()) continue;
      Bank& bk = bank_[i];
      bk.normalize();
      const bool neg = l.value.negative();
      const Wide m = l.value.magnitude();  // < 2^296, checked above
      for (int pos = 0; pos <= m.msb(); pos += 32) {
        const int64_t piece = int64_t(m.bits_at(pos) & 0xFFFFFFFFu);
        if (piece) bk.add(neg ? -piece : piece, pos);
      }
      bk.normalize();
      adds_[i] = 0;
      dirty_[i] = 1;
      any_dirty_ = true;
    }
    return true;
  }

  bool state(LaneExact* out) const override {
    for (uint32_t i = 0; i < d_.lanes; ++i) out[i] = lane_state(i);
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    if (finalize_plain(out, flags)) return;
    if (finalize_mostly_plain(out, flags)) return;
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      uint32_t bits;
      const T f = fast_[i];
      if (std::isnan(f)) {
        special_result(LB::side_of(f), d_.out, d_.exceptions, &bits, &fl);
      } else if (!dirty_[i]) {  // every addition was exact: the fast lane is the sum
        const double v = double(f);
        const float fv = float(v);
        if (d_.out == Format::FP32 || double(fv) != v || !round_float_to(d_.out, fv, &bits)) {
          const Encoded en = encode_double(d_.out, d_.exceptions, v);
          bits = en.bits;
          if (en.overflow) fl |= flag::OVERFLOW;
        }
      } else {
        bits = round_lane(lane_state(i), unit_, d_.out, d_.exceptions, &fl);
      }
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  // FP32 out with every lane's sum in its fast lane (no bank used, no
  // special): the correctly rounded result is the hardware's RNE conversion
  // of each exact sum, subnormals included. A lane that overflows fp32 sends
  // the whole op down the per-lane path (its flag and the exceptions mode).
  bool finalize_plain(uint8_t* out, uint8_t* flags) const {
    if (d_.out != Format::FP32 || any_dirty_) return false;
    // Written straight into `out` (little-endian, as the wire): when a lane
    // turns out bad (a NaN-boxed special, an overflow), the per-lane path
    // rewrites every lane.
    static_assert(std::endian::native == std::endian::little);
    if constexpr (sizeof(T) == 8) {
      if (!k_.narrow_f64(fast_.data(), d_.lanes, reinterpret_cast<float*>(out))) return false;
    } else {
      uint32_t bad = 0;
      for (uint32_t i = 0; i < d_.lanes; ++i) {
        std::memcpy(out + size_t(i) * 4, &fast_[i], 4);
        bad |= (float_bits(fast_[i]) & 0x7F800000u) == 0x7F800000u;
      }
      if (bad) return false;
    }
    if (flags) std::memset(flags, 0, d_.lanes);
    return true;
  }

  // A narrow float result: every lane's fast value rounded in one batch
  // (right for the lanes that never left it), then the lanes that used their
  // bank rewritten one by one. False when the batch meets a NaN or an
  // overflow: the per-lane path does it all.
  bool finalize_mostly_plain(uint8_t* out, uint8_t* flags) const {
    if (d_.out == Format::FP32 || !is_float(d_.out) || !round_lanes(k_, d_.out, fast_.data(), d_.lanes, out))
      return false;
    if (flags) std::memset(flags, 0, d_.lanes);
    if (!any_dirty_) return true;
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      if (!dirty_[i]) continue;
      uint8_t fl = 0;
      store_bits(d_.out, out + i * osz, round_lane(lane_state(i), unit_, d_.out, d_.exceptions, &fl));
      if (flags) flags[i] = fl;
    }
    return true;
  }

  LaneExact lane_state(uint32_t i) const {
    LaneExact l;
    const T f = fast_[i];
    if (std::isnan(f)) {
      l.side = LB::side_of(f);
      return l;
    }
    l.side = LB::neg_zero(f) ? side::NEG_ZERO_ONLY : 0;
    if (dirty_[i]) l.value = bank_[i].to_wide();
    add_double_to_wide(l.value, double(f), unit_);
    return l;
  }

  void slow_add(uint32_t lane, uint32_t bits) {
    const Decoded x = decode(d_.dtype, bits);
    T& a = fast_[lane];
    if (const uint8_t sp = special_side(x); sp || std::isnan(a)) {
      a = LB::merge(a, sp);
      return;
    }
    const T b = T(std::ldexp(double(x.sig), x.exp) * (x.neg ? -1.0 : 1.0));  // exact: p <= the lane's precision
    const T s = a + b;
    if (std::isinf(s)) {  // beyond a float lane's range: both terms go to the bank
      to_bank(lane, a);
      to_bank(lane, b);
      a = T(0);  // +0: not every term was -0
      return;
    }
    const T bb = s - a;  // TwoSum: a + b == s + err exactly
    const T err = (a - (s - bb)) + (b - bb);
    a = s;
    to_bank(lane, err);
  }

  void to_bank(uint32_t lane, T v) {
    if (v == 0) return;
    int64_t m;
    int shift;
    split_double(double(v), unit_, &m, &shift);
    bank_[lane].add(m, shift);
    dirty_[lane] = 1;
    any_dirty_ = true;
    if (++adds_[lane] == Bank::kAddsBeforeCarry) {
      bank_[lane].normalize();
      adds_[lane] = 0;
    }
  }

  const Kernels& k_;
  int unit_;
  int budget_;              // exponent fields a window may span and keep the fast lane's sums exact
  uint32_t special_field_;  // the all-ones exponent field: Inf/NaN
  bool certified_;          // every add so far fell inside the window [lo_, hi_]
  uint32_t lo_, hi_;
  Lanes<T> fast_;
  Lanes<Bank> bank_;
  bool any_dirty_ = true;  // some lane's bank is in use (dirty_ has a 1)
  Lanes<uint16_t> adds_;
  Lanes<uint8_t> dirty_;
};

// ---------------------------------------------------------------------------
// KULISCH_FIXED, narrow formats: one float or double per lane, exact by
// construction: every term is a multiple of the format's unit and the sum of R
// terms needs W_mag + ceil(log2 R) bits, at most 24 (float) or 53 (double).
//
// Double lanes (fp16, e5m2) start each op as floats in the first half of the
// same memory, as KulischWide's fast lanes do: while every term of the op
// lies in an exponent window that a float holds exactly (hi - lo + p +
// ceil(log2 R) <= 24 over the whole op), the sums are exact in float lanes,
// at twice the lanes per vector. The first term outside the window widens
// the lanes to doubles in place, and the op goes on there.
template <class T>
class KulischNarrow final : public Accumulator {
  using LB = LaneBits<T>;
  static constexpr bool kHalves = sizeof(T) == 8;  // double lanes that can run as floats

 public:
  KulischNarrow(const OpDesc& d, const Kernels& k)
      : Accumulator(d),
        k_(k),
        unit_(unit_exp(d.dtype)),
        budget_(24 - info(d.dtype).p - ceil_log2(d.group)),
        special_field_((1u << info(d.dtype).ebits) - 1),
        screen_(d.dtype == Format::E4M3FNUZ || d.dtype == Format::E5M2FNUZ),
        fast_(d.lanes),
        left_(kHalves ? d.lanes : 0) {
    reset();
  }
  void reset() override {
    // Data wider than the window widens every op: after an op that did, the
    // next 16 start as doubles (one op in 17 pays the scan and the widening).
    if (outgrew_)
      skip_ = 16;
    else if (skip_)
      --skip_;
    outgrew_ = false;
    fresh_ = false;
    if (kHalves && budget_ >= 0 && !skip_) {
      halves_ = true;
      lo_ = ~0u;
      hi_ = 0;
      std::fill_n(floats(), d_.lanes, -0.0f);
    } else {
      halves_ = false;
      if constexpr (kHalves)
        fresh_ = true;  // the lanes' -0 start is written by the op's first add (or settle())
      else
        fast_.fill(T(-0.0));
    }
  }
  size_t bytes_per_lane() const override { return sizeof(T); }

  // Cost: a scan for specials and one exact add per lane (AVX2: 8 lanes per
  // float add, 4 per double add); double lanes running as floats scan the
  // exponent range instead. A packet with a special takes the per-lane path.
  void add(const uint8_t* e, uint32_t) override {
    if (halves_) {
      uint32_t lo = lo_, hi = hi_;
      k_.exp_range(d_.dtype, e, d_.lanes, &lo, &hi);
      if (hi < special_field_ && (lo > hi || int(hi) - int(lo) <= budget_) &&
          !(screen_ && k_.any_special(d_.dtype, e, d_.lanes))) {
        lo_ = lo;
        hi_ = hi;
        k_.add_f32(d_.dtype, floats(), e, d_.lanes);
        return;
      }
      outgrew_ = true;
      widen();
    }
    const uint32_t sz = info(d_.dtype).bytes;
    if constexpr (sizeof(T) == 8) {
      // One pass: the finite elements are added (a NaN lane, holding its
      // specials in its payload, stays that NaN), the specials merged here.
      // The op's first term is stored, not added to -0 (the same, one pass less).
      const uint32_t k = k_.add_f64_screened(d_.dtype, fast_.data(), e, d_.lanes, fresh_, left_.data());
      fresh_ = false;
      for (uint32_t j = 0; j < k; ++j) {
        const uint32_t i = left_[j];
        fast_[i] = LB::merge(fast_[i], special_side(decode(d_.dtype, load_bits(d_.dtype, e + i * sz))));
      }
      return;
    } else {
      if (!k_.any_special(d_.dtype, e, d_.lanes)) {
        k_.add_f32(d_.dtype, fast_.data(), e, d_.lanes);
        return;
      }
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const Decoded x = decode(d_.dtype, load_bits(d_.dtype, e + i * sz));
      T& a = fast_[i];
      if (const uint8_t sp = special_side(x); sp || std::isnan(a))
        a = LB::merge(a, sp);
      else
        a += T(std::ldexp(double(x.sig), x.exp) * (x.neg ? -1.0 : 1.0));
    }
  }

  bool add_exact(const LaneExact* in) override {
    widen();
    settle();
    std::vector<T> next(d_.lanes);
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const LaneExact& l = in[i];
      const uint8_t sp = l.side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF);
      const T a = fast_[i];
      if (sp || std::isnan(a)) {
        next[i] = LB::merge(a, sp);
        continue;
      }
      double bd;
      if (!wide_to_double(l.value, unit_, &bd) || double(T(bd)) != bd) return false;
      T b = T(bd);
      if (b == 0 && (l.side & side::NEG_ZERO_ONLY)) b = T(-0.0);
      const T s = a + b;
      if (s - a != b || s - b != a) return false;  // a partial too large to be genuine
      next[i] = s;
    }
    std::memcpy(fast_.data(), next.data(), d_.lanes * sizeof(T));
    return true;
  }

  bool state(LaneExact* out) const override {
    widen();
    settle();
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      LaneExact l;
      const T f = fast_[i];
      if (std::isnan(f)) {
        l.side = LB::side_of(f);
      } else {
        l.side = LB::neg_zero(f) ? side::NEG_ZERO_ONLY : 0;
        add_double_to_wide(l.value, double(f), unit_);
      }
      out[i] = l;
    }
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    settle();
    if (finalize_plain(out)) {
      if (flags) std::memset(flags, 0, d_.lanes);
      return;
    }
    widen();
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      uint32_t bits;
      if (std::isnan(fast_[i])) {
        special_result(LB::side_of(fast_[i]), d_.out, d_.exceptions, &bits, &fl);
      } else {
        // The exact sum; when fp32 holds it, the hardware's rounding (round_float_to).
        const double v = double(fast_[i]);
        const float fv = float(v);
        if (double(fv) == v && d_.out == Format::FP32) {
          bits = float_bits(fv);
        } else if (double(fv) != v || !round_float_to(d_.out, fv, &bits)) {
          const Encoded en = encode_double(d_.out, d_.exceptions, v);
          bits = en.bits;
          if (en.overflow) fl |= flag::OVERFLOW;
        }
      }
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  // The common case of a narrow float result: no lane a NaN or out of the
  // output's range. Then the result is the hardware's rounding of each sum
  // (the per-lane path's, in one batch).
  bool finalize_plain(uint8_t* out) const {
    if (halves_) {  // finite float sums, each exact
      if (d_.out == Format::FP32) {
        std::memcpy(out, floats(), size_t(d_.lanes) * 4);
        return true;
      }
      return is_float(d_.out) && k_.round_f32(d_.out, floats(), d_.lanes, out);
    }
    return d_.out != Format::FP32 && is_float(d_.out) && round_lanes(k_, d_.out, fast_.data(), d_.lanes, out);
  }
  // The float lanes in the first half of fast_'s memory (halves_ only).
  float* floats() const { return reinterpret_cast<float*>(const_cast<T*>(fast_.data())); }
  // Float lanes to doubles, in place: lane i's double covers floats 2i and
  // 2i+1, which lanes >= i held, so going down every float is read before
  // it is overwritten. A change of representation only (hence const).
  void widen() const {
    if (!halves_) return;
    auto* b = reinterpret_cast<unsigned char*>(floats());
    for (uint32_t i = d_.lanes; i-- > 0;) {
      float f;
      std::memcpy(&f, b + size_t(i) * 4, 4);
      const T v = T(f);
      std::memcpy(b + size_t(i) * sizeof(T), &v, sizeof(T));
    }
    halves_ = false;
  }
  // Double lanes of an op with no term yet are -0: written here when read.
  void settle() const {
    if (fresh_) {
      fast_.fill(T(-0.0));
      fresh_ = false;
    }
  }
  const Kernels& k_;
  int unit_;
  int budget_;              // exponent-field span the float lanes hold exactly (kHalves)
  uint32_t special_field_;  // the format's all-ones exponent field
  bool screen_;             // its NaN is not in that field (FNUZ: 0x80): scan for it
  uint32_t lo_ = ~0u, hi_ = 0;
  bool outgrew_ = false;  // this op's terms left the float window
  uint8_t skip_ = 0;      // ops still to start as doubles
  mutable bool halves_ = false;
  mutable bool fresh_ = false;  // double lanes, no term yet: not written (see settle())
  mutable Lanes<T> fast_;
  Lanes<uint32_t> left_;  // add()'s scratch: lanes whose element is a special
};

// ---------------------------------------------------------------------------
// Integer inputs, every policy: exact int64 sums.
class IntegerSum final : public Accumulator {
 public:
  IntegerSum(const OpDesc& d, const Kernels& k) : Accumulator(d), k_(k), acc_(d.lanes) { reset(); }
  void reset() override { acc_.fill(0); }
  size_t bytes_per_lane() const override { return sizeof(int64_t); }
  void add(const uint8_t* e, uint32_t) override { k_.add_i64(d_.dtype, acc_.data(), e, d_.lanes); }

  bool add_exact(const LaneExact* in) override {
    constexpr int64_t kLimit = int64_t(1) << 48;  // 65535 * 2^31 < 2^47
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      if (in[i].side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF)) return false;
      const Wide& v = in[i].value;
      if (!v.is_zero() && v.magnitude().msb() >= 48) return false;
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) acc_[i] += int64_t(in[i].value.limb[0]);
    (void)kLimit;
    return true;
  }

  bool state(LaneExact* out) const override {
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      out[i] = LaneExact{0, {}};
      out[i].value.add_shifted(acc_[i], 0);
    }
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      uint32_t bits;
      const int64_t v = acc_[i];
      if (d_.out == Format::INT32) {
        const int64_t c = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v;
        if (c != v) fl |= flag::OVERFLOW;
        bits = uint32_t(int32_t(c));
      } else {
        const uint64_t mag = v < 0 ? 0 - uint64_t(v) : uint64_t(v);
        const Encoded en = encode_float(d_.out, v < 0, mag, 0, false, d_.exceptions);
        bits = en.bits;
        if (en.overflow) fl |= flag::OVERFLOW;
      }
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  const Kernels& k_;
  Lanes<int64_t> acc_;
};

// ---------------------------------------------------------------------------
// FP32 arithmetic shared by FP32_ARRIVAL and FP32_BINOMIAL.
namespace f32 {
constexpr uint8_t kInfSeen = side::POS_INF | side::NEG_INF;

// Records what an input brings: a NaN, an infinity.
inline void note_input(float x, uint8_t& fl) {
  if (std::isnan(x)) fl |= side::NAN_INPUT;
  if (std::isinf(x)) fl |= x > 0 ? side::POS_INF : side::NEG_INF;
}

// a = fl32(a + x), keeping the exceptions IEEE arithmetic raises: INVALID
// when two non-NaN operands give NaN, OVERFLOW when two finite ones give Inf.
inline void add(float& a, float x, uint8_t& fl) {
  const float s = a + x;
  if (std::isnan(s) && !std::isnan(a) && !std::isnan(x)) fl |= side::INVALID;
  if (std::isinf(s) && std::isfinite(a) && std::isfinite(x)) fl |= side::OVERFLOW;
  a = s;
}

uint32_t result(float a, uint8_t fl, Format out, Exceptions ex, uint8_t* rfl) {
  const FormatInfo& fo = info(out);
  if (fl & side::NAN_INPUT) *rfl |= flag::NAN_INPUT;
  if (fl & side::INVALID) *rfl |= flag::INVALID;
  if (fl & side::OVERFLOW) *rfl |= flag::OVERFLOW;
  if (std::isnan(a)) return fo.canonical_nan;
  const bool neg = std::signbit(a);
  if (std::isinf(a)) {
    if (fl & kInfSeen) {  // an input infinity
      if (fo.has_inf) return fo.inf | (neg ? fo.sign_bit : 0);
      *rfl |= flag::OVERFLOW;
      return overflow_bits(out, neg, ex);
    }
    *rfl |= flag::OVERFLOW;  // a finite sum overflowed
    return overflow_bits(out, neg, ex);
  }
  if (out == Format::FP32) return float_bits(a);
  if (a == 0) return zero_bits(out, neg);
  int e;
  const float m = std::frexp(std::fabs(a), &e);
  const Encoded en = encode_float(out, neg, uint64_t(std::ldexp(m, 24)), e - 24, false, ex);
  if (en.overflow) *rfl |= flag::OVERFLOW;
  return en.bits;
}

// The common case of an FP32-policy result: no lane flagged, every sum
// finite and in the output's range. Then each result is the sum as it is
// (fp32 out: one copy; little-endian on the wire as in memory here) or its
// rounding by round_float_to(): no per-lane decisions. False when the
// per-lane path must run.
inline bool finalize_plain(const Kernels& k, const float* acc, const uint8_t* fl, uint32_t n, Format out, uint8_t* dst,
                           uint8_t* flags) {
  static_assert(std::endian::native == std::endian::little);
  if (!is_float(out)) return false;
  uint8_t any = 0;
  for (uint32_t i = 0; i < n; ++i) any |= fl[i];
  // A NaN or infinite sum (an all-ones exponent), by the kernels' screen: 32 lanes an AVX2 step.
  if (any || k.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(acc), n)) return false;
  if (out == Format::FP32)
    std::memcpy(dst, acc, size_t(n) * 4);
  else if (!k.round_f32(out, acc, n, dst))  // an overflow: the per-lane path flags it
    return false;
  if (flags) std::memset(flags, 0, n);
  return true;
}

// The FP32 policies' lane state (lossless, see Fp32Arrival::state()): the
// sideband holds the lane's flags as they are (NAN_INPUT, POS_INF/NEG_INF =
// input infinities seen, INVALID, OVERFLOW) and the value the sum when it is
// finite. A NaN sum is implied by NAN_INPUT or INVALID, an infinite one by a
// single input infinity; an infinity that only overflow explains is marked by
// OVERFLOW and a value of +-1 giving its sign.
inline float from_lane(const LaneExact& l, int unit, bool* ok) {
  const uint8_t s = l.side;
  if (s & (side::NAN_INPUT | side::INVALID)) return NAN;
  if ((s & side::POS_INF) && (s & side::NEG_INF)) return NAN;
  if (s & side::POS_INF) return INFINITY;
  if (s & side::NEG_INF) return -INFINITY;
  double d;
  if (!wide_to_double(l.value, unit, &d) || double(float(d)) != d) {
    *ok = false;
    return 0;
  }
  if (s & side::OVERFLOW) {
    if (d == 0) {
      *ok = false;  // an overflow marker must carry a sign
      return 0;
    }
    return d < 0 ? -INFINITY : INFINITY;
  }
  if (d == 0) return (s & side::NEG_ZERO_ONLY) ? -0.0f : 0.0f;
  return float(d);
}
}  // namespace f32

class Fp32Arrival final : public Accumulator {
 public:
  Fp32Arrival(const OpDesc& d, const Kernels& k)
      : Accumulator(d), k_(k), unit_(unit_exp(d.dtype)), acc_(d.lanes), fl_(d.lanes), left_(d.lanes) {
    flagged_ = true;  // the lanes are uninitialised: clear the flags once
    reset();
  }
  // Cost: nothing per lane for an fp32 op: its first term is copied in (the
  // lanes' -0 start is written only where an op needs it), and the flags are
  // cleared only after an op that raised one.
  void reset() override {
    fresh_ = true;
    if (flagged_) {
      fl_.fill(0);
      flagged_ = false;
    }
  }
  size_t bytes_per_lane() const override { return sizeof(float) + 1; }

  // Cost: one pass, one fp32 add per lane with the specials screened in it
  // (AVX2: 8 lanes per add); the op's first term is stored rather than added.
  // Only the lanes whose element is a NaN or an infinity take the per-lane path.
  void add(const uint8_t* e, uint32_t) override {
    const uint32_t k = k_.add_f32_screened(d_.dtype, acc_.data(), e, d_.lanes, fresh_, left_.data());
    fresh_ = false;
    if (k == 0) return;
    flagged_ = true;
    const uint32_t sz = info(d_.dtype).bytes;
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = left_[j];
      add_one(i, to_float(d_.dtype, load_bits(d_.dtype, e + i * sz)));
    }
  }

  bool add_exact(const LaneExact* in) override {
    settle();
    flagged_ = true;
    bool ok = true;
    std::vector<float> v(d_.lanes);
    for (uint32_t i = 0; i < d_.lanes && ok; ++i) v[i] = f32::from_lane(in[i], unit_, &ok);
    if (!ok) return false;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      // The partial's sum is one more fp32 term; its flags (input infinities
      // included) are the child's, not raised by this addition.
      if (std::isinf(acc_[i]) && !(fl_[i] & f32::kInfSeen)) fl_[i] |= side::OVERFLOW;
      fl_[i] |= in[i].side & (side::NAN_INPUT | f32::kInfSeen | side::INVALID | side::OVERFLOW);
      f32::add(acc_[i], v[i], fl_[i]);
    }
    return true;
  }

  bool state(LaneExact* out) const override {
    settle();
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      LaneExact l;
      const float a = acc_[i];
      uint8_t fl = fl_[i];
      if (std::isinf(a) && !(fl & f32::kInfSeen)) fl |= side::OVERFLOW;
      l.side = fl & (side::INVALID | side::OVERFLOW | side::NAN_INPUT | f32::kInfSeen);
      if (std::isinf(a) && !(fl & f32::kInfSeen)) {
        l.value.add_shifted(a < 0 ? -1 : 1, 0);  // an overflow's infinity: its sign
      } else if (!std::isfinite(a)) {
        // NaN or an input infinity: implied by the sideband
      } else {
        if (float_bits(a) == 0x80000000u) l.side |= side::NEG_ZERO_ONLY;
        add_double_to_wide(l.value, double(a), unit_);
      }
      out[i] = l;
    }
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    settle();
    if (f32::finalize_plain(k_, acc_.data(), fl_.data(), d_.lanes, d_.out, out, flags)) return;
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      const uint32_t bits = f32::result(acc_[i], fl_[i], d_.out, d_.exceptions, &fl);
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  void add_one(uint32_t i, float x) {
    // An infinity that no input brought came from an overflow in the vector path.
    if (std::isinf(acc_[i]) && !(fl_[i] & f32::kInfSeen)) fl_[i] |= side::OVERFLOW;
    f32::note_input(x, fl_[i]);
    f32::add(acc_[i], x, fl_[i]);
  }

  const Kernels& k_;
  int unit_;
  // An op with no term yet: its lanes are -0 (written on demand).
  void settle() const {
    if (fresh_) {
      acc_.fill(-0.0f);
      fresh_ = false;
    }
  }

  mutable Lanes<float> acc_;
  Lanes<uint8_t> fl_;
  Lanes<uint32_t> left_;  // add()'s scratch: the lanes whose element is a special
  mutable bool fresh_ = true;
  bool flagged_ = false;  // some flag byte may be set
};

// The seed's binomial reduce over contribution index: at step k, x_i <- x_i +
// x_{i+2^k} for every i that is a multiple of 2^(k+1) with i + 2^k < R. The
// tree is folded in as contributions arrive: a subtree's sum is formed as
// soon as both halves are complete (row adds across lanes), so finalize()
// only reads row 0. Memory: 4*R bytes per lane.
class Fp32Binomial final : public Accumulator {
 public:
  Fp32Binomial(const OpDesc& d, const Kernels& k)
      : Accumulator(d), k_(k), rows_(size_t(d.group) * d.lanes), fl_(d.lanes), level_(d.group) {
    reset();
  }
  void reset() override {
    fl_.fill(0);
    level_.fill(kAbsent);
    present_ = 0;
  }
  size_t bytes_per_lane() const override { return sizeof(float) * d_.group + 1; }

  // Cost: one conversion pass, then on average one fp32 row add per contribution.
  void add(const uint8_t* e, uint32_t index) override {
    if (index >= d_.group || level_[index] != kAbsent) return;  // out of range or a repeat: no effect
    float* row = this->row(index);
    if (!k_.any_special(d_.dtype, e, d_.lanes)) {
      std::fill(row, row + d_.lanes, -0.0f);  // -0 + x == x: the kernel converts exactly
      k_.add_f32(d_.dtype, row, e, d_.lanes);
    } else {
      const uint32_t sz = info(d_.dtype).bytes;
      for (uint32_t i = 0; i < d_.lanes; ++i) {
        row[i] = to_float(d_.dtype, load_bits(d_.dtype, e + i * sz));
        f32::note_input(row[i], fl_[i]);
      }
    }
    ++present_;
    climb(rows_.data(), level_.data(), fl_.data(), index);
  }
  bool add_exact(const LaneExact*) override { return false; }
  bool state(LaneExact*) const override { return false; }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    const uint32_t osz = info(d_.out).bytes;
    if (present_ != d_.group) return finalize_incomplete(out, flags);
    const float* x = rows_.data();
    if (f32::finalize_plain(k_, x, fl_.data(), d_.lanes, d_.out, out, flags)) return;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t rfl = 0;
      store_bits(d_.out, out + i * osz, f32::result(x[i], fl_[i], d_.out, d_.exceptions, &rfl));
      if (flags) flags[i] = rfl;
    }
  }

 private:
  static constexpr uint8_t kAbsent = 0xFF;
  float* row(uint32_t r) { return &rows_[size_t(r) * d_.lanes]; }

  // Folds row `r` (just arrived) upward while the sibling subtree at each
  // level is complete: the seed's x_i <- x_i + x_{i+2^k}.
  void climb(float* rows, uint8_t* level, uint8_t* fl, uint32_t r) const {
    const uint32_t L = d_.lanes;
    int k = 0;
    level[r] = 0;
    for (;;) {
      const uint32_t step = 1u << k;
      if (step >= d_.group) break;
      if (r & step) {  // r is the right half of (r - step)'s subtree
        const uint32_t left = r - step;
        if (level[left] == kAbsent || level[left] < k) break;
        add_rows(rows + size_t(left) * L, rows + size_t(r) * L, fl);
        r = left;
      } else if (r + step < d_.group) {
        if (level[r + step] == kAbsent || level[r + step] < k) break;
        add_rows(rows + size_t(r) * L, rows + size_t(r + step) * L, fl);
      }
      level[r] = uint8_t(++k);
    }
  }

  // dst = fl32(dst + src) lane by lane, with IEEE's flags.
  void add_rows(float* dst, const float* src, uint8_t* fl) const {
    const auto* sb = reinterpret_cast<const uint8_t*>(src);
    if (k_.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(dst), d_.lanes) ||
        k_.any_special(Format::FP32, sb, d_.lanes)) {
      for (uint32_t i = 0; i < d_.lanes; ++i) f32::add(dst[i], src[i], fl[i]);
      return;
    }
    k_.add_f32(Format::FP32, dst, sb, d_.lanes);
    if (k_.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(dst), d_.lanes))
      for (uint32_t i = 0; i < d_.lanes; ++i)
        if (std::isinf(dst[i])) fl[i] |= side::OVERFLOW;  // two finite operands gave Inf
  }

  // Missing contributions count as -0, the sum's neutral element: fold them
  // into a copy of the tree.
  void finalize_incomplete(uint8_t* out, uint8_t* flags) const {
    const uint32_t osz = info(d_.out).bytes;
    std::vector<float> rows(rows_.data(), rows_.data() + size_t(d_.group) * d_.lanes);
    std::vector<uint8_t> level(level_.data(), level_.data() + d_.group), fl(fl_.data(), fl_.data() + d_.lanes);
    for (uint32_t r = 0; r < d_.group; ++r) {
      if (level[r] != kAbsent) continue;
      std::fill(rows.begin() + size_t(r) * d_.lanes, rows.begin() + size_t(r + 1) * d_.lanes, -0.0f);
      climb(rows.data(), level.data(), fl.data(), r);
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t rfl = 0;
      store_bits(d_.out, out + i * osz, f32::result(rows[i], fl[i], d_.out, d_.exceptions, &rfl));
      if (flags) flags[i] = rfl;
    }
  }

  const Kernels& k_;
  Lanes<float> rows_;
  Lanes<uint8_t> fl_;
  Lanes<uint8_t> level_;  // per row: the level of the complete subtree it holds, kAbsent before it arrives
  uint32_t present_ = 0;
};

}  // namespace

void add_double_to_wide(Wide& w, double d, int unit) {
  if (d == 0) return;
  int64_t v;
  int shift;
  split_double(d, unit, &v, &shift);
  w.add_shifted(v, shift);
}

uint32_t round_lane(const LaneExact& l, int unit, Format out, Exceptions ex, uint8_t* flags) {
  uint32_t bits;
  if (special_result(l.side, out, ex, &bits, flags)) return bits;
  const Encoded en = encode_wide(out, ex, l.value, unit, l.side & side::NEG_ZERO_ONLY);
  if (en.overflow) *flags |= flag::OVERFLOW;
  return en.bits;
}

std::unique_ptr<Accumulator> make_accumulator(const OpDesc& d, const Kernels& k) {
  if (auto err = admission_error(d, kMaxWidth)) throw std::invalid_argument(*err);
  if (!is_float(d.dtype)) return std::make_unique<IntegerSum>(d, k);
  switch (d.policy) {
    case Policy::FP32_ARRIVAL: return std::make_unique<Fp32Arrival>(d, k);
    case Policy::FP32_BINOMIAL: return std::make_unique<Fp32Binomial>(d, k);
    case Policy::KULISCH_FIXED: break;
  }
  // The narrowest lane that holds every possible sum exactly.
  const FormatInfo& fi = info(d.dtype);
  const int bits = fi.emax - fi.emin + fi.p + ceil_log2(d.group);  // W_mag + ceil(log2 R)
  if (bits <= 24) return std::make_unique<KulischNarrow<float>>(d, k);
  if (bits <= 53) return std::make_unique<KulischNarrow<double>>(d, k);
  // bf16, fp16 beyond 8192 ranks: a float fast lane. (A double one keeps bf16 gradients out of
  // the bank, but its adds run 4 lanes a vector: measured slower at 1 KiB, R = 8.)
  if (fi.p <= 11) return std::make_unique<KulischWide<float>>(d, k);
  return std::make_unique<KulischWide<double>>(d, k);
}

}  // namespace prism
