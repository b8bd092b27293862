// Independent reference arithmetic for the unit tests of lib/format and lib/arith.
//
// Nothing in this header calls the library. Formats are described from their
// definitions (BRIEF.md, "Arithmetic"; docs/ARITHMETIC.md), decoding uses the
// textbook formula (1 + m/2^mbits) * 2^(e - bias) evaluated in long double,
// exact values are sign-magnitude big integers of 32-bit words, and the
// expected results of the reducers follow the rules of the brief written out
// directly (specials first, then the exact sum, then one rounding).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace ref {

// ------------------------------------------------------------------ Big
// Sign and magnitude; the magnitude is little-endian 32-bit words with no
// zero word on top. Zero has no words and no sign.
class Big {
 public:
  Big() = default;
  Big(int64_t v) {  // NOLINT: implicit on purpose, Big x = 5;
    neg_ = v < 0;
    set_mag64(v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v));
  }
  static Big from_mag(uint64_t m, bool neg = false) {
    Big b;
    b.set_mag64(m);
    b.neg_ = neg && !b.is_zero();
    return b;
  }
  static Big pow2(int k) {
    Big b;
    b.w_.assign(size_t(k / 32 + 1), 0);
    b.w_[size_t(k / 32)] = 1u << (k % 32);
    return b;
  }
  // v * 2^shift, shift >= 0.
  static Big term(int64_t v, int shift) { return Big(v).shl(shift); }

  bool is_zero() const { return w_.empty(); }
  bool negative() const { return neg_; }
  const std::vector<uint32_t>& words() const { return w_; }

  int bitlen() const { return w_.empty() ? 0 : int(w_.size()) * 32 - std::countl_zero(w_.back()); }
  bool bit(int i) const {
    if (i < 0 || size_t(i / 32) >= w_.size()) return false;
    return (w_[size_t(i / 32)] >> (i % 32)) & 1u;
  }
  // Any magnitude bit below position i.
  bool any_below(int i) const {
    for (int k = 0; k < i && size_t(k / 32) < w_.size(); k += 32) {
      const int n = std::min(32, i - k);
      const uint32_t m = n == 32 ? ~0u : (1u << n) - 1;
      if (w_[size_t(k / 32)] & m) return true;
    }
    return false;
  }
  int lowest_bit() const {
    for (size_t k = 0; k < w_.size(); ++k)
      if (w_[k]) return int(k) * 32 + std::countr_zero(w_[k]);
    return -1;
  }
  // Magnitude bits [pos, pos + 64), one at a time.
  uint64_t bits64(int pos) const {
    uint64_t r = 0;
    for (int i = 0; i < 64; ++i)
      if (bit(pos + i)) r |= uint64_t(1) << i;
    return r;
  }
  uint64_t low64() const {
    uint64_t r = 0;
    if (w_.size() > 0) r |= w_[0];
    if (w_.size() > 1) r |= uint64_t(w_[1]) << 32;
    return r;
  }

  Big abs() const {
    Big r = *this;
    r.neg_ = false;
    return r;
  }
  Big operator-() const {
    Big r = *this;
    r.neg_ = !r.is_zero() && !neg_;
    return r;
  }
  Big shl(int k) const {
    if (is_zero() || k == 0) return *this;
    Big r;
    r.neg_ = neg_;
    const size_t ws = size_t(k / 32);
    const int bs = k % 32;
    r.w_.assign(w_.size() + ws + 1, 0);
    for (size_t i = 0; i < w_.size(); ++i) {
      const uint64_t v = uint64_t(w_[i]) << bs;
      r.w_[i + ws] |= uint32_t(v);
      r.w_[i + ws + 1] |= uint32_t(v >> 32);
    }
    r.trim();
    return r;
  }
  // The magnitude shifted right by k (truncated), sign kept.
  Big shr_mag(int k) const {
    const size_t ws = size_t(k / 32);
    const int bs = k % 32;
    if (ws >= w_.size()) return Big();
    Big r;
    r.neg_ = neg_;
    r.w_.assign(w_.size() - ws, 0);
    for (size_t i = ws; i < w_.size(); ++i) {
      uint64_t v = w_[i] >> bs;
      if (bs && i + 1 < w_.size()) v |= uint64_t(w_[i + 1]) << (32 - bs);
      r.w_[i - ws] = uint32_t(v);
    }
    r.trim();
    return r;
  }

  Big& operator+=(const Big& o) {
    if (o.is_zero()) return *this;
    if (is_zero()) return *this = o;
    if (neg_ == o.neg_) {
      add_mag(w_, o.w_);
    } else {
      const int c = cmp_words(w_, o.w_);
      if (c == 0) {
        w_.clear();
        neg_ = false;
      } else if (c > 0) {
        sub_mag(w_, o.w_);
      } else {
        std::vector<uint32_t> t = o.w_;
        sub_mag(t, w_);
        w_ = std::move(t);
        neg_ = o.neg_;
      }
    }
    trim();
    return *this;
  }
  Big& operator-=(const Big& o) { return *this += -o; }
  friend Big operator+(Big a, const Big& b) { return a += b; }
  friend Big operator-(Big a, const Big& b) { return a -= b; }
  friend bool operator==(const Big& a, const Big& b) { return a.neg_ == b.neg_ && a.w_ == b.w_; }
  friend bool operator!=(const Big& a, const Big& b) { return !(a == b); }

  static int cmp_mag(const Big& a, const Big& b) { return cmp_words(a.w_, b.w_); }
  int cmp(const Big& o) const {  // signed comparison
    if (neg_ != o.neg_) return neg_ ? -1 : 1;
    const int c = cmp_words(w_, o.w_);
    return neg_ ? -c : c;
  }

  std::string str() const {
    if (is_zero()) return "0";
    static const char* kHex = "0123456789abcdef";
    std::string s;
    for (size_t i = w_.size(); i-- > 0;)
      for (int n = 7; n >= 0; --n) s += kHex[(w_[i] >> (4 * n)) & 15];
    s.erase(0, s.find_first_not_of('0'));
    return (neg_ ? "-0x" : "0x") + s;
  }

 private:
  void set_mag64(uint64_t m) {
    w_.clear();
    if (m) w_.push_back(uint32_t(m));
    if (m >> 32) w_.push_back(uint32_t(m >> 32));
  }
  void trim() {
    while (!w_.empty() && w_.back() == 0) w_.pop_back();
    if (w_.empty()) neg_ = false;
  }
  static int cmp_words(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
    for (size_t i = a.size(); i-- > 0;)
      if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
  }
  static void add_mag(std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    uint64_t c = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      c += uint64_t(a[i]) + (i < b.size() ? b[i] : 0);
      a[i] = uint32_t(c);
      c >>= 32;
    }
    if (c) a.push_back(uint32_t(c));
  }
  static void sub_mag(std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {  // a >= b
    int64_t borrow = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      int64_t d = int64_t(a[i]) - (i < b.size() ? int64_t(b[i]) : 0) - borrow;
      borrow = d < 0;
      if (d < 0) d += int64_t(1) << 32;
      a[i] = uint32_t(d);
    }
  }

  bool neg_ = false;
  std::vector<uint32_t> w_;
};

inline std::ostream& operator<<(std::ostream& os, const Big& b) { return os << b.str(); }

// Two's-complement 64-bit limbs of b modulo 2^(64*n) (prism::Wide's layout).
inline std::array<uint64_t, 6> to_limbs6(const Big& b) {
  std::array<uint64_t, 6> l{};
  const auto& w = b.words();
  for (size_t i = 0; i < w.size() && i < 12; ++i) l[i / 2] |= uint64_t(w[i]) << (32 * (i % 2));
  if (b.negative()) {  // ~m + 1
    bool carry = true;
    for (auto& x : l) {
      x = ~x;
      if (carry) carry = ++x == 0;
    }
  }
  return l;
}
// The signed value of n two's-complement 64-bit limbs.
inline Big from_limbs(const uint64_t* limb, int n) {
  const bool neg = int64_t(limb[n - 1]) < 0;
  std::vector<uint64_t> m(limb, limb + n);
  if (neg) {
    bool carry = true;
    for (auto& x : m) {
      x = ~x;
      if (carry) carry = ++x == 0;
    }
  }
  Big r;
  for (int i = n; i-- > 0;) r = r.shl(64) + Big::from_mag(m[size_t(i)]);
  return neg ? -r : r;
}

// ------------------------------------------------------------------ formats
enum class Nan { IEEE, FN, FNUZ, None };

// A format as its definition states it; everything else is derived here.
struct Fmt {
  const char* name;
  uint8_t code;
  int bytes;
  int ebits, mbits, bias;
  Nan nan;
  uint32_t cnan;  // the canonical NaN PRISM outputs (BRIEF.md)

  bool is_float() const { return nan != Nan::None; }
  bool has_inf() const { return nan == Nan::IEEE; }
  bool has_neg_zero() const { return nan == Nan::IEEE || nan == Nan::FN; }
  int bits() const { return 8 * bytes; }
  uint32_t mask() const { return bytes == 4 ? 0xFFFFFFFFu : (1u << bits()) - 1; }
  uint32_t sign_bit() const { return 1u << (bits() - 1); }
  int p() const { return mbits + 1; }
  uint32_t field_ones() const { return (1u << ebits) - 1; }
  // Largest exponent field that holds finite numbers.
  uint32_t top_field() const { return nan == Nan::IEEE ? field_ones() - 1 : field_ones(); }
  int emin() const { return 1 - bias; }
  int emax() const { return int(top_field()) - bias; }
  // Largest finite mantissa field at top_field(): FN spends all-ones on NaN.
  uint32_t top_mant() const { return nan == Nan::FN ? (1u << mbits) - 2 : (1u << mbits) - 1; }
  uint32_t max_code() const {
    if (!is_float()) return bytes == 1 ? 0x7F : 0x7FFFFFFF;
    return top_field() << mbits | top_mant();
  }
  uint64_t max_sig() const { return (uint64_t(1) << mbits) | top_mant(); }  // max = max_sig * 2^max_exp()
  int max_exp() const { return emax() - mbits; }
  uint32_t inf_code() const { return has_inf() ? field_ones() << mbits : 0; }
  int unit() const { return is_float() ? emin() - mbits : 0; }  // exponent of the smallest subnormal
};

inline void PrintTo(const Fmt& f, std::ostream* os) { *os << f.name; }  // gtest's parameter printing

inline constexpr Fmt kFP32{"fp32", 1, 4, 8, 23, 127, Nan::IEEE, 0x7FC00000u};
inline constexpr Fmt kFP16{"fp16", 2, 2, 5, 10, 15, Nan::IEEE, 0x7E00};
inline constexpr Fmt kBF16{"bf16", 3, 2, 8, 7, 127, Nan::IEEE, 0x7FC0};
inline constexpr Fmt kE4M3FN{"e4m3fn", 4, 1, 4, 3, 7, Nan::FN, 0x7F};
inline constexpr Fmt kE4M3FNUZ{"e4m3fnuz", 5, 1, 4, 3, 8, Nan::FNUZ, 0x80};
inline constexpr Fmt kE5M2{"e5m2", 6, 1, 5, 2, 15, Nan::IEEE, 0x7E};
inline constexpr Fmt kE5M2FNUZ{"e5m2fnuz", 7, 1, 5, 2, 16, Nan::FNUZ, 0x80};
inline constexpr Fmt kINT8{"int8", 8, 1, 0, 0, 0, Nan::None, 0};
inline constexpr Fmt kINT32{"int32", 9, 4, 0, 0, 0, Nan::None, 0};

inline constexpr Fmt kAll[] = {kFP32, kFP16, kBF16, kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ, kINT8, kINT32};
inline constexpr Fmt kFloats[] = {kFP32, kFP16, kBF16, kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ};
inline constexpr Fmt kFp8[] = {kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ};
inline const Fmt& fmt(uint8_t code) { return kAll[code - 1]; }

// ------------------------------------------------------------------ decoding
enum class Cls { Zero, Subnormal, Normal, Inf, NaN };

struct Value {
  Cls cls;
  bool neg;
  long double v;  // the exact value (signed; -0.0L for -0; +-inf; NaN)
};

// The textbook reading of a code: fields, then (1 + m/2^mbits) * 2^(e - bias).
inline Value classify(const Fmt& f, uint32_t code) {
  if (f.nan == Nan::None) {
    const long double v = f.bytes == 1 ? (long double)int8_t(uint8_t(code)) : (long double)int32_t(code);
    return {v == 0 ? Cls::Zero : Cls::Normal, v < 0, v};
  }
  const bool s = (code >> (f.bits() - 1)) & 1;
  const uint32_t e = (code >> f.mbits) & f.field_ones();
  const uint32_t m = code & ((1u << f.mbits) - 1);
  const long double sign = s ? -1.0L : 1.0L;
  if (f.nan == Nan::FNUZ && code == f.sign_bit()) return {Cls::NaN, s, NAN};
  if (f.nan == Nan::IEEE && e == f.field_ones()) {
    if (m) return {Cls::NaN, s, NAN};
    return {Cls::Inf, s, sign * INFINITY};
  }
  if (f.nan == Nan::FN && e == f.field_ones() && m == (1u << f.mbits) - 1) return {Cls::NaN, s, NAN};
  const long double frac = (long double)m / (long double)(1u << f.mbits);
  if (e == 0) {
    if (m == 0) return {Cls::Zero, s, sign * 0.0L};
    return {Cls::Subnormal, s, sign * std::ldexp(frac, 1 - f.bias)};
  }
  return {Cls::Normal, s, sign * std::ldexp(1.0L + frac, int(e) - f.bias)};
}

inline bool is_nan_code(const Fmt& f, uint32_t c) { return classify(f, c).cls == Cls::NaN; }
inline bool is_inf_code(const Fmt& f, uint32_t c) { return classify(f, c).cls == Cls::Inf; }
inline bool is_special_code(const Fmt& f, uint32_t c) { return is_nan_code(f, c) || is_inf_code(f, c); }

// An exact finite value as +-sig * 2^exp with sig odd (sig = 0 for zero).
struct Exact {
  bool neg;
  uint64_t sig;
  int exp;
};
inline Exact exact_of(long double v) {
  Exact x{std::signbit(v), 0, 0};
  if (v == 0) return x;
  int e;
  const long double f = std::frexp(std::fabs(v), &e);  // [0.5, 1), 64 significant bits at most
  x.sig = uint64_t(std::ldexp(f, 64));
  x.exp = e - 64;
  const int tz = std::countr_zero(x.sig);
  x.sig >>= tz;
  x.exp += tz;
  return x;
}

// ------------------------------------------------------------------ rounding
struct Rounded {
  uint32_t bits;
  bool overflow;
  bool inexact;
};

inline uint32_t zero_code(const Fmt& f, bool neg) { return neg && f.has_neg_zero() ? f.sign_bit() : 0; }
inline uint32_t too_big_code(const Fmt& f, bool neg, bool saturate) {
  const uint32_t s = neg ? f.sign_bit() : 0;
  if (saturate) return f.max_code() | s;
  return f.has_inf() ? (f.inf_code() | s) : f.cnan;
}

// Rounds +-mag * 2^exp (mag >= 0) to the float format f: nearest, ties to
// even, as if the exponent range were unbounded above; a result above the
// largest finite value is an overflow.
inline Rounded round_to(const Fmt& f, bool neg, const Big& mag_in, int exp, bool saturate) {
  const Big mag = mag_in.abs();
  if (mag.is_zero()) return {zero_code(f, neg), false, false};
  const int top = mag.bitlen() - 1 + exp;     // 2^top <= |x| < 2^(top+1)
  int q = std::max(top, f.emin()) - f.mbits;  // weight of the result's last bit
  Big n;
  bool inexact = false;
  if (exp >= q) {
    n = mag.shl(exp - q);
  } else {
    const int d = q - exp;
    const Big below = mag.shr_mag(d);                    // the neighbour below, in units of 2^q
    const Big rest = mag - below.shl(d);                 // what lies between it and |x|
    const int c = Big::cmp_mag(rest, Big::pow2(d - 1));  // against half a unit
    inexact = !rest.is_zero();
    n = (c > 0 || (c == 0 && below.bit(0))) ? below + Big(1) : below;
  }
  if (n == Big::pow2(f.p())) {  // carried into the next binade
    n = Big::pow2(f.mbits);
    ++q;
  }
  if (n.is_zero()) return {zero_code(f, neg), false, true};
  const uint64_t N = n.low64();
  if (q > f.max_exp() || (q == f.max_exp() && N > f.max_sig())) return {too_big_code(f, neg, saturate), true, true};
  uint32_t field = 0, mant = uint32_t(N);
  if (N >= (uint64_t(1) << f.mbits)) {
    field = uint32_t(q + f.mbits + f.bias);
    mant = uint32_t(N - (uint64_t(1) << f.mbits));
  }
  return {(neg ? f.sign_bit() : 0) | field << f.mbits | mant, false, inexact};
}

// ------------------------------------------------------------------ flags
// RESULT status bits (BRIEF.md wire protocol, byte 31) and lane sideband bits (partial.hpp, docs).
inline constexpr uint8_t kOverflow = 1, kInvalid = 2, kNanInput = 4;
inline constexpr uint8_t kSideNan = 1, kSidePosInf = 2, kSideNegInf = 4, kSideNegZeroOnly = 8, kSideInvalid = 16,
                         kSideOverflow = 32;

struct Out {
  uint32_t bits;
  uint8_t flags;
};

// ------------------------------------------------------------------ exact lane sums
// One lane's inputs: specials seen, and the exact sum kept as signed column
// sums of significands by weight 2^(unit + k).
class LaneRef {
 public:
  explicit LaneRef(const Fmt& in) : in_(in) {}
  void add(uint32_t code) {
    const Value v = classify(in_, code);
    switch (v.cls) {
      case Cls::NaN:
        nan_ = true;
        all_neg_zero_ = false;
        return;
      case Cls::Inf:
        (v.neg ? ninf_ : pinf_) = true;
        all_neg_zero_ = false;
        return;
      case Cls::Zero:
        if (!v.neg || !in_.is_float()) all_neg_zero_ = false;
        return;
      default: break;
    }
    all_neg_zero_ = false;
    const Exact x = exact_of(v.v);
    const int k = x.exp - in_.unit();
    if (size_t(k) >= col_.size()) col_.resize(size_t(k) + 1, 0);
    col_[size_t(k)] += x.neg ? -int64_t(x.sig) : int64_t(x.sig);
  }
  Big sum() const {  // in units of 2^unit
    Big s;
    for (size_t k = 0; k < col_.size(); ++k)
      if (col_[k]) s += Big::term(col_[k], int(k));
    return s;
  }
  bool nan() const { return nan_; }
  bool pinf() const { return pinf_; }
  bool ninf() const { return ninf_; }
  bool all_neg_zero() const { return all_neg_zero_; }
  // The sideband an exact lane state carries (value is 0 when a special is set).
  uint8_t side() const {
    return uint8_t((nan_ ? kSideNan : 0) | (pinf_ ? kSidePosInf : 0) | (ninf_ ? kSideNegInf : 0) |
                   (all_neg_zero_ && in_.is_float() ? kSideNegZeroOnly : 0));
  }

 private:
  const Fmt& in_;
  bool nan_ = false, pinf_ = false, ninf_ = false, all_neg_zero_ = true;
  std::vector<int64_t> col_;
};

// KULISCH_FIXED's result for a lane, straight from the rules of the brief.
// `sum` is in units of 2^unit; `all_neg_zero` says every input was -0.
inline Out kulisch_result(bool nan, bool pinf, bool ninf, bool all_neg_zero, const Big& sum, int unit, const Fmt& out,
                          bool saturate) {
  if (nan) return {out.cnan, kNanInput};
  if (pinf && ninf) return {out.cnan, kInvalid};
  if (pinf || ninf) {
    if (out.has_inf()) return {out.inf_code() | (ninf ? out.sign_bit() : 0), 0};
    return {too_big_code(out, ninf, saturate), kOverflow};
  }
  if (!out.is_float()) {  // int32: saturate
    const Big lo = Big(INT32_MIN), hi = Big(INT32_MAX);
    if (sum.cmp(hi) > 0) return {0x7FFFFFFFu, kOverflow};
    if (sum.cmp(lo) < 0) return {0x80000000u, kOverflow};
    int64_t v = int64_t(sum.low64());
    if (sum.negative()) v = -v;
    return {uint32_t(int32_t(v)), 0};
  }
  if (sum.is_zero()) return {zero_code(out, all_neg_zero), 0};
  const Rounded r = round_to(out, sum.negative(), sum.abs(), unit, saturate);
  return {r.bits, uint8_t(r.overflow ? kOverflow : 0)};
}
inline Out kulisch_result(const LaneRef& l, int unit, const Fmt& out, bool saturate) {
  return kulisch_result(l.nan(), l.pinf(), l.ninf(), l.all_neg_zero(), l.sum(), unit, out, saturate);
}

// ------------------------------------------------------------------ fp32 policies
inline float to_f32(const Fmt& f, uint32_t code) {
  const Value v = classify(f, code);
  if (v.cls == Cls::NaN) return std::numeric_limits<float>::quiet_NaN();
  return float(v.v);  // exact: every format here fits in binary32
}

// IEEE binary32 additions with the flags the brief asks for.
struct F32Flags {
  bool nan_in = false, inf_in = false, invalid = false, overflow = false;
  void input(float x) {
    if (std::isnan(x)) nan_in = true;
    if (std::isinf(x)) inf_in = true;
  }
  float add(float a, float x) {
    volatile float s = a + x;
    const float r = s;
    if (std::isnan(r) && !std::isnan(a) && !std::isnan(x)) invalid = true;
    if (std::isinf(r) && std::isfinite(a) && std::isfinite(x)) overflow = true;
    return r;
  }
};

// The fp32 result `a` as the output element, rule by rule.
inline Out fp32_result(float a, const F32Flags& fl, const Fmt& out, bool saturate) {
  uint8_t flags = uint8_t((fl.nan_in ? kNanInput : 0) | (fl.invalid ? kInvalid : 0) | (fl.overflow ? kOverflow : 0));
  if (std::isnan(a)) return {out.cnan, flags};
  const bool neg = std::signbit(a);
  if (std::isinf(a)) {
    if (fl.inf_in && out.has_inf()) return {out.inf_code() | (neg ? out.sign_bit() : 0), flags};
    return {too_big_code(out, neg, saturate), uint8_t(flags | kOverflow)};
  }
  if (a == 0) return {zero_code(out, neg), flags};
  const Exact x = exact_of(a);
  const Rounded r = round_to(out, neg, Big::from_mag(x.sig), x.exp, saturate);
  return {r.bits, uint8_t(flags | (r.overflow ? kOverflow : 0))};
}

// An fp32 policy's sum before the output rounding.
struct F32Sum {
  float acc;
  F32Flags fl;
  Out result(const Fmt& out, bool saturate) const { return fp32_result(acc, fl, out, saturate); }
};

// FP32_ARRIVAL: the first term as it is, then fl32(acc + x) in order.
inline F32Sum fp32_arrival(const std::vector<float>& xs_in_order) {
  F32Sum s{0, {}};
  for (size_t i = 0; i < xs_in_order.size(); ++i) {
    s.fl.input(xs_in_order[i]);
    s.acc = i == 0 ? xs_in_order[i] : s.fl.add(s.acc, xs_in_order[i]);
  }
  return s;
}

// FP32_BINOMIAL: seed 000's order over rank index.
inline F32Sum fp32_binomial(std::vector<float> x) {
  F32Sum s{0, {}};
  for (float v : x) s.fl.input(v);
  const size_t R = x.size();
  for (size_t step = 1; step < R; step *= 2)
    for (size_t i = 0; i + step < R; i += 2 * step) x[i] = s.fl.add(x[i], x[i + step]);
  s.acc = x[0];
  return s;
}

// ------------------------------------------------------------------ bytes
inline void store_le(uint8_t* p, int bytes, uint32_t v) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint32_t load_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
inline std::vector<uint8_t> pack(const Fmt& f, const std::vector<uint32_t>& codes) {
  std::vector<uint8_t> b(codes.size() * size_t(f.bytes));
  for (size_t i = 0; i < codes.size(); ++i) store_le(&b[i * size_t(f.bytes)], f.bytes, codes[i]);
  return b;
}

// ------------------------------------------------------------------ test data
using Rng = std::mt19937_64;

inline uint32_t random_finite(const Fmt& f, Rng& rng) {
  for (;;) {
    const uint32_t c = uint32_t(rng()) & f.mask();
    if (!is_special_code(f, c)) return c;
  }
}
inline uint32_t negate_code(const Fmt& f, uint32_t c) {
  if (!f.is_float()) {
    const int64_t v = f.bytes == 1 ? int64_t(int8_t(uint8_t(c))) : int64_t(int32_t(c));
    return uint32_t(-v) & f.mask();  // callers avoid INT_MIN
  }
  if (f.nan == Nan::FNUZ && (c & ~f.sign_bit()) == 0) return 0;  // +0 has no negative
  return c ^ f.sign_bit();
}
inline uint32_t nan_code(const Fmt& f, Rng& rng) {  // any NaN encoding, payloads and signs included
  for (;;) {
    uint32_t c;
    switch (f.nan) {
      case Nan::IEEE: c = (f.field_ones() << f.mbits) | (uint32_t(rng()) & ((1u << f.mbits) - 1)); break;
      case Nan::FN: c = f.max_code() + 1; break;
      default: return f.sign_bit();
    }
    if (rng() & 1) c |= f.sign_bit();
    if (is_nan_code(f, c)) return c;
  }
}
inline uint32_t min_subnormal(const Fmt&) { return 1; }

enum class Kind { Gradient, FullRange, Cancel, Subnormal, Specials, Extreme, Ties, BankStress };
inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Gradient: return "gradient";
    case Kind::FullRange: return "full-range";
    case Kind::Cancel: return "cancellation";
    case Kind::Subnormal: return "subnormal";
    case Kind::Specials: return "specials";
    case Kind::Extreme: return "extreme";
    case Kind::Ties: return "ties";
    case Kind::BankStress: return "bank-stress";
  }
  return "?";
}
inline constexpr Kind kKinds[] = {Kind::Gradient, Kind::FullRange, Kind::Cancel, Kind::Subnormal,
                                  Kind::Specials, Kind::Extreme,   Kind::Ties};

// data[r][lane]: the element that contribution r brings to `lane`.
using Data = std::vector<std::vector<uint32_t>>;

inline uint32_t int_code(const Fmt& f, int64_t v) { return uint32_t(v) & f.mask(); }
inline int64_t int_min(const Fmt& f) { return f.bytes == 1 ? -128 : INT32_MIN; }
inline int64_t int_max(const Fmt& f) { return f.bytes == 1 ? 127 : INT32_MAX; }

inline uint32_t gradient_code(const Fmt& f, Rng& rng) {
  if (!f.is_float()) {
    const int64_t v = int64_t(rng() % 201) - 100;
    return int_code(f, v);
  }
  if (rng() % 64 == 0) return (rng() & 1) && f.has_neg_zero() ? f.sign_bit() : 0;
  const int lo = std::max(1, f.bias - 12), hi = std::min(int(f.top_field()), f.bias + 1);
  for (;;) {
    const uint32_t e = uint32_t(lo + int(rng() % uint64_t(hi - lo + 1)));
    const uint32_t c = (e << f.mbits) | (uint32_t(rng()) & ((1u << f.mbits) - 1)) | ((rng() & 1) ? f.sign_bit() : 0);
    if (!is_special_code(f, c)) return c;
  }
}
inline uint32_t subnormal_code(const Fmt& f, Rng& rng) {
  if (!f.is_float()) return int_code(f, int64_t(rng() % 7) - 3);
  uint32_t c = uint32_t(rng()) & ((1u << f.mbits) - 1);
  if (c == 0) c = 1;
  if (rng() & 1) c |= f.sign_bit();
  return c;
}

// The code of +2^e in a float format, or ~0u when 2^e is not a value of it.
inline uint32_t pow2_code(const Fmt& f, int e) {
  if (e < f.unit() || e > f.emax()) return ~0u;
  if (e < f.emin()) return 1u << (e - f.unit());  // subnormal
  return uint32_t(e + f.bias) << f.mbits;
}

// Inputs of the given kind; `lanes` elements per contribution, R contributions.
// Specials and Extreme give each lane a flavour (lane % 8) so that every rule of
// the brief is met: NaN, +Inf, -Inf, both, all -0, +-0 mixed, overflow, plain.
inline Data make_data(const Fmt& f, Kind kind, uint32_t R, uint32_t lanes, uint64_t seed) {
  Rng rng(seed);
  Data d(R, std::vector<uint32_t>(lanes));
  const bool fl = f.is_float();
  for (uint32_t i = 0; i < lanes; ++i) {
    std::vector<uint32_t> col(R);
    switch (kind) {
      case Kind::Gradient:
        for (auto& c : col) c = gradient_code(f, rng);
        break;
      case Kind::FullRange:
        for (auto& c : col) c = random_finite(f, rng);
        if (!fl && i % 3 == 0)  // wide ints: also small ones so that sums stay in range
          for (auto& c : col) c = int_code(f, int64_t(rng() % 2001) - 1000);
        break;
      case Kind::Subnormal:
        for (auto& c : col) c = subnormal_code(f, rng);
        break;
      case Kind::Cancel: {
        const uint32_t pairs = (R - 1) / 2;
        for (uint32_t k = 0; k < pairs; ++k) {
          uint32_t x = random_finite(f, rng);
          if (!fl && classify(f, x).v == (long double)int_min(f)) x = 0;  // -INT_MIN does not exist
          col[2 * k] = x;
          col[2 * k + 1] = negate_code(f, x);
        }
        for (uint32_t k = 2 * pairs; k < R; ++k) col[k] = subnormal_code(f, rng);  // the tiny survivors
        std::shuffle(col.begin(), col.end(), rng);
        break;
      }
      case Kind::Specials: {
        for (auto& c : col) c = random_finite(f, rng);
        const uint32_t at = uint32_t(rng() % R), at2 = uint32_t(rng() % R);
        if (!fl) break;
        switch (i % 8) {
          case 0: col[at] = nan_code(f, rng); break;
          case 1: col[at] = f.has_inf() ? f.inf_code() : nan_code(f, rng); break;
          case 2: col[at] = f.has_inf() ? f.inf_code() | f.sign_bit() : nan_code(f, rng); break;
          case 3:
            if (f.has_inf()) {
              col[at] = f.inf_code();
              col[at2] = f.inf_code() | f.sign_bit();  // at == at2 leaves -Inf alone
            }
            break;
          case 4:
            for (auto& c : col) c = zero_code(f, true);
            break;
          case 5:
            for (auto& c : col) c = (rng() & 1) ? zero_code(f, true) : 0;
            break;
          case 6:
            col[at] = nan_code(f, rng);
            if (f.has_inf()) col[at2] = f.inf_code() | ((rng() & 1) ? f.sign_bit() : 0);
            break;
          default:  // x, -x pairs (and a -0): an exact zero from non-zero terms, which is +0
            for (uint32_t k = 0; k + 1 < R; k += 2) col[k + 1] = negate_code(f, col[k]);
            if (R % 2) col[R - 1] = zero_code(f, true);
            std::shuffle(col.begin(), col.end(), rng);
            break;
        }
        break;
      }
      case Kind::Ties: {
        // 2^a + 2^(a-p) is a tie for a p-bit output; one tiny term after
        // cancelling pairs decides it. An accumulator that loses the tiny
        // term rounds to even instead.
        for (auto& c : col) c = random_finite(f, rng);
        if (!fl) break;
        static constexpr int kOutP[] = {24, 11, 8, 4, 3};
        const int p = kOutP[i % 5];
        const int j = int(rng() % 4);
        const int lo = f.unit() + p + 1 + j, hi = std::min(f.emax(), 15);
        if (lo > hi) break;  // this input format cannot make such a tie
        const int a = lo + int(rng() % uint64_t(hi - lo + 1));
        const bool neg = rng() & 1;
        const uint32_t s = neg ? f.sign_bit() : 0;
        col[0] = pow2_code(f, a) | s;
        if (R > 1) col[1] = pow2_code(f, a - p) | s;
        if (R > 2) col[2] = pow2_code(f, a - p - 1 - j) | ((rng() & 1) ? f.sign_bit() : 0);
        for (uint32_t k = 3; k + 1 < R; k += 2) {
          col[k] = random_finite(f, rng);
          col[k + 1] = negate_code(f, col[k]);
        }
        if (R > 3 && R % 2 == 0) col[R - 1] = 0;
        std::shuffle(col.begin(), col.end(), rng);
        break;
      }
      case Kind::BankStress: {
        // One large term, then many whose significands fall entirely below a
        // double's precision next to it: every one of them is a rounding error
        // that a double-plus-bank accumulator must keep, all at one digit
        // position on even lanes (the worst case for deferred carries).
        for (auto& c : col) c = random_finite(f, rng);
        if (!fl) break;
        const int big = f.emax() - 10;
        const int top_small = big - 56 - f.mbits;   // exponent of the small terms' leading bit
        if (top_small - f.mbits < f.emin()) break;  // the format's range is too narrow for this
        const uint32_t mant = (1u << f.mbits) - 1;
        // Even lanes put each term's leading bit at the top of a 50-bit digit
        // (prism::Bank's digit size) so that every add brings nearly 2^50.
        int fixed_e = top_small;
        while ((fixed_e - f.unit()) % 50 != 49) --fixed_e;
        for (uint32_t k = 0; k < R; ++k) {
          const int e = i % 2 == 0 ? fixed_e : top_small - int(rng() % uint64_t(top_small - f.emin() + 1));
          col[k] = uint32_t(e + f.bias) << f.mbits | (i % 2 == 0 ? mant : (uint32_t(rng()) & mant));
          if (i % 4 == 3 && (rng() & 1)) col[k] |= f.sign_bit();
        }
        col[rng() % R] = pow2_code(f, big) | (i % 4 == 1 ? f.sign_bit() : 0);
        break;
      }
      case Kind::Extreme: {
        const uint32_t mx = fl ? f.max_code() : int_code(f, int_max(f));
        const uint32_t mn = fl ? f.max_code() | f.sign_bit() : int_code(f, int_min(f));
        switch (i % 6) {
          case 0:
            for (auto& c : col) c = mx;
            break;
          case 4:  // the largest sum there is, plus the smallest unit: needs every bit
          case 5:
            for (auto& c : col) c = i % 6 == 4 ? mx : mn;
            col[rng() % R] = fl ? min_subnormal(f) | ((rng() & 1) ? f.sign_bit() : 0) : int_code(f, 1);
            break;
          case 1:
            for (auto& c : col) c = mn;
            break;
          case 2:
            for (uint32_t k = 0; k < R; ++k) col[k] = k % 2 ? mn : mx;
            if (fl) col[rng() % R] = subnormal_code(f, rng);
            break;
          default:
            for (auto& c : col) {
              switch (rng() % 4) {
                case 0: c = mx; break;
                case 1: c = mn; break;
                case 2: c = fl ? min_subnormal(f) | ((rng() & 1) ? f.sign_bit() : 0) : int_code(f, 1); break;
                default: c = random_finite(f, rng);
              }
            }
        }
        break;
      }
    }
    for (uint32_t r = 0; r < R; ++r) d[r][i] = col[r];
  }
  return d;
}

}  // namespace ref
