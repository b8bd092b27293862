// Exact integers for the Kulisch accumulator.
//
// Wide: a 384-bit two's-complement integer with immediate carries. It is the
// canonical form of a lane's exact value (in units of the input format's
// smallest subnormal, 2^unit_exp) used for partials, merging and rounding.
//
// Bank: the same range held as 5 signed 64-bit words of 60-bit digits with
// deferred carries (in the manner of Neal's xsum). Digit k weighs 2^(60k);
// every add puts at most 2^60 into each word it touches, so 4 adds fit in
// the 3 bits of headroom before carries must be settled (normalize();
// Bank::kAddsBeforeCarry shows the derivation).
// 5 x 60 = 300 bits covers FP32's 278 + ceil(log2 65535) = 294 signed bits
// in 40 bytes: a KulischWide lane (a hi and a lo double, a bank and two
// bytes) stays within 64 bytes. The bank takes only what the two doubles
// cannot, so settling carries every 4 of its adds costs little.
#pragma once

#include <bit>
#include <cstdint>

namespace prism {

struct Wide {
  static constexpr int kLimbs = 6;
  uint64_t limb[kLimbs] = {};

  bool is_zero() const {
    uint64_t o = 0;
    for (uint64_t l : limb) o |= l;
    return o == 0;
  }
  bool negative() const { return int64_t(limb[kLimbs - 1]) < 0; }

  void add(const Wide& o) {
    unsigned __int128 c = 0;
    for (int i = 0; i < kLimbs; ++i) {
      c += (unsigned __int128)limb[i] + o.limb[i];
      limb[i] = uint64_t(c);
      c >>= 64;
    }
  }
  void negate() {
    unsigned __int128 c = 1;
    for (auto& l : limb) {
      c += (unsigned __int128)(~l);
      l = uint64_t(c);
      c >>= 64;
    }
  }
  // Adds v * 2^shift, 0 <= shift < 64 * kLimbs.
  void add_shifted(int64_t v, int shift) {
    Wide t;
    const uint64_t ext = v < 0 ? ~uint64_t(0) : 0;
    const int k = shift / 64, o = shift % 64;
    const uint64_t lo = uint64_t(v) << o;
    const uint64_t hi = o ? (uint64_t(v) >> (64 - o)) | (ext << o) : ext;
    for (int i = k + 2; i < kLimbs; ++i) t.limb[i] = ext;
    t.limb[k] = lo;
    if (k + 1 < kLimbs) t.limb[k + 1] = hi;
    add(t);
  }
  // Magnitude as an unsigned value (valid while |value| < 2^383).
  Wide magnitude() const {
    Wide m = *this;
    if (negative()) m.negate();
    return m;
  }
  // Position of the most significant set bit of a non-negative value, -1 for zero.
  int msb() const {
    for (int i = kLimbs - 1; i >= 0; --i)
      if (limb[i]) return i * 64 + 63 - std::countl_zero(limb[i]);
    return -1;
  }
  int lsb() const {
    for (int i = 0; i < kLimbs; ++i)
      if (limb[i]) return i * 64 + std::countr_zero(limb[i]);
    return -1;
  }
  // 64 bits of a non-negative value starting at bit `pos` (pos may be negative).
  uint64_t bits_at(int pos) const {
    auto get = [&](int i) -> uint64_t { return i >= 0 && i < kLimbs ? limb[i] : 0; };
    if (pos < 0) return pos <= -64 ? 0 : get(0) << -pos;
    const int k = pos / 64, o = pos % 64;
    return o ? (get(k) >> o) | (get(k + 1) << (64 - o)) : get(k);
  }
  // True when any bit below `pos` is set in a non-negative value.
  bool any_below(int pos) const {
    for (int i = 0; i < kLimbs && i * 64 < pos; ++i) {
      const int n = pos - i * 64;
      const uint64_t m = n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
      if (limb[i] & m) return true;
    }
    return false;
  }
  bool operator==(const Wide& o) const {
    for (int i = 0; i < kLimbs; ++i)
      if (limb[i] != o.limb[i]) return false;
    return true;
  }
};

class Bank {
 public:
  static constexpr int kWords = 5;
  static constexpr int kDigitBits = 60;
  static constexpr int kWordBits = 64;  // int64_t
  // Adds a word takes before its carries must be settled, derived as xsum's
  // XSUM_SMALL_CARRY_TERMS is. After normalize() a word holds a digit in
  // [0, 2^kDigitBits) (the top word the sign part, smaller for any value in
  // range); each add() changes every word it touches by at most
  // 2^kDigitBits. So after N adds |word| <= (N + 1) * 2^kDigitBits, which a
  // signed word holds (2^(kWordBits - 1) - 1 at most) while
  // N + 1 < 2^(kWordBits - 1 - kDigitBits) = 2^3. The largest power of two
  // below that: N = 2^(kWordBits - 2 - kDigitBits) = 2^2 = 4.
  static constexpr int kAddsBeforeCarry = 1 << (kWordBits - 2 - kDigitBits);
  static constexpr int64_t kDigitMask = (int64_t(1) << kDigitBits) - 1;
  static_assert((__int128(kAddsBeforeCarry) + 1) << kDigitBits <= (__int128(1) << (kWordBits - 1)) - 1,
                "kAddsBeforeCarry adds (and the digit already there) fit a signed word");

  int64_t w[kWords];

  void clear() {
    for (auto& x : w) x = 0;
  }
  // Adds v * 2^shift (|v| < 2^63, shift >= 0), touching at most 3 words.
  // The caller counts adds and calls normalize() every kAddsBeforeCarry.
  void add(int64_t v, int shift) {
    constexpr __int128 kDigit = __int128(1) << kDigitBits;
    int k = shift / kDigitBits;
    __int128 t = (__int128)v << (shift % kDigitBits);
    for (; k < kWords - 1; ++k) {
      if (t >= -kDigit && t < kDigit) break;
      w[k] += int64_t(t & kDigitMask);
      t >>= kDigitBits;
    }
    w[k] += int64_t(t);
  }
  // Settles carries: words 0..3 become digits in [0, 2^60), word 4 takes the sign.
  void normalize() {
    for (int k = 0; k < kWords - 1; ++k) {
      const int64_t c = w[k] >> kDigitBits;
      w[k] &= kDigitMask;
      w[k + 1] += c;
    }
  }
  bool is_zero() const {
    int64_t o = 0;
    for (auto x : w) o |= x;
    return o == 0;
  }
  Wide to_wide() const {
    Wide r;
    for (int k = 0; k < kWords; ++k) r.add_shifted(w[k], k * kDigitBits);
    return r;
  }
};

}  // namespace prism
