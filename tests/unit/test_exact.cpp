// Exact integers: Wide (384-bit two's complement) and Bank (deferred-carry
// 60-bit digits), checked against the sign-magnitude bignum of ref.hpp.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "arith/exact.hpp"
#include "ref.hpp"

namespace {

using prism::Bank;
using prism::Wide;
using ref::Big;

constexpr int kWideBits = 64 * Wide::kLimbs;  // 384

Wide wide_of(const Big& b) {  // b mod 2^384
  Wide w;
  const auto l = ref::to_limbs6(b);
  for (int i = 0; i < Wide::kLimbs; ++i) w.limb[i] = l[size_t(i)];
  return w;
}
Big big_of(const Wide& w) { return ref::from_limbs(w.limb, Wide::kLimbs); }
// The value of x modulo 2^384 read as signed: what a Wide holding x must read back as.
Big wrap(const Big& x) { return big_of(wide_of(x)); }

// A random signed value with at most `bits` magnitude bits, often with long runs of 0s or 1s.
Big random_big(ref::Rng& rng, int bits) {
  Big m;
  const int n = int(rng() % uint64_t(bits + 1));
  for (int i = 0; i < n; i += 64) {
    uint64_t w = rng();
    switch (rng() % 4) {
      case 0: w = 0; break;
      case 1: w = ~uint64_t(0); break;
      default: break;
    }
    const int take = std::min(64, n - i);
    if (take < 64) w &= (uint64_t(1) << take) - 1;
    m += Big::from_mag(w).shl(i);
  }
  return (rng() & 1) ? -m : m;
}

// ---------------------------------------------------------------- Wide

TEST(Wide, DefaultIsZero) {
  Wide w;
  EXPECT_TRUE(w.is_zero());
  EXPECT_FALSE(w.negative());
  EXPECT_EQ(w.msb(), -1);
  EXPECT_EQ(w.lsb(), -1);
  EXPECT_TRUE(big_of(w).is_zero());
}

TEST(Wide, AddMatchesBignumModulo2To384) {
  ref::Rng rng(10);
  for (int i = 0; i < 20000; ++i) {
    const Big a = random_big(rng, 383), b = random_big(rng, 383);
    Wide w = wide_of(a);
    w.add(wide_of(b));
    ASSERT_EQ(big_of(w), wrap(a + b)) << a.str() << " + " << b.str();
    ASSERT_EQ(w.is_zero(), wrap(a + b).is_zero());
    ASSERT_EQ(w.negative(), wrap(a + b).negative());
  }
  // Carries that run through every limb.
  Wide all_ones = wide_of(Big(-1));
  all_ones.add(wide_of(Big(1)));
  EXPECT_TRUE(all_ones.is_zero());
  Wide top = wide_of(Big::pow2(383) - Big(1));  // largest positive
  top.add(wide_of(Big(1)));
  EXPECT_TRUE(top.negative());
  EXPECT_EQ(big_of(top), -Big::pow2(383));
}

TEST(Wide, NegateAndMagnitude) {
  ref::Rng rng(11);
  for (int i = 0; i < 20000; ++i) {
    const Big a = random_big(rng, 382);
    Wide w = wide_of(a);
    const Wide m = w.magnitude();
    ASSERT_EQ(big_of(m), a.abs()) << a.str();
    ASSERT_FALSE(m.negative());
    w.negate();
    ASSERT_EQ(big_of(w), -a) << a.str();
    w.negate();
    ASSERT_EQ(big_of(w), a);
  }
  Wide z;
  z.negate();
  EXPECT_TRUE(z.is_zero());
  // |v| < 2^383: the extremes of the documented range.
  const Big edge = Big::pow2(383) - Big(1);
  EXPECT_EQ(big_of(wide_of(edge).magnitude()), edge);
  EXPECT_EQ(big_of(wide_of(-edge).magnitude()), edge);
}

TEST(Wide, AddShiftedMatchesBignumForEveryShift) {
  ref::Rng rng(12);
  const std::vector<int64_t> specials = {
      0, 1, -1, INT64_MAX, INT64_MIN, INT64_MIN + 1, int64_t(1) << 62, -(int64_t(1) << 62)};
  for (int shift = 0; shift < kWideBits; ++shift) {
    std::vector<int64_t> vs = specials;
    for (int k = 0; k < 12; ++k) vs.push_back(int64_t(rng()) >> (rng() % 64));
    for (int64_t v : vs) {
      const Big base = random_big(rng, 380);
      Wide w = wide_of(base);
      w.add_shifted(v, shift);
      ASSERT_EQ(big_of(w), wrap(base + Big::term(v, shift))) << "v=" << v << " shift=" << shift;
      Wide z;
      z.add_shifted(v, shift);
      ASSERT_EQ(big_of(z), wrap(Big::term(v, shift))) << "v=" << v << " shift=" << shift;
    }
  }
}

TEST(Wide, MsbAndLsbOfNonNegativeValues) {
  for (int b = 0; b < kWideBits - 1; ++b) {
    const Wide w = wide_of(Big::pow2(b));
    EXPECT_EQ(w.msb(), b);
    EXPECT_EQ(w.lsb(), b);
    const Wide below = wide_of(Big::pow2(b + 1) - Big(1));  // bits 0..b set
    EXPECT_EQ(below.msb(), b);
    EXPECT_EQ(below.lsb(), 0);
  }
  ref::Rng rng(13);
  for (int i = 0; i < 20000; ++i) {
    const Big a = random_big(rng, 383).abs();
    const Wide w = wide_of(a);
    ASSERT_EQ(w.msb(), a.bitlen() - 1) << a.str();
    ASSERT_EQ(w.lsb(), a.lowest_bit()) << a.str();
  }
}

TEST(Wide, BitsAtAndAnyBelowMatchBignum) {
  ref::Rng rng(14);
  for (int i = 0; i < 3000; ++i) {
    const Big a = random_big(rng, 383).abs();
    const Wide w = wide_of(a);
    for (int k = 0; k < 8; ++k) {
      const int pos = -70 + int(rng() % 480);  // -70 .. 409, beyond both ends
      ASSERT_EQ(w.bits_at(pos), a.bits64(pos)) << a.str() << " pos " << pos;
      ASSERT_EQ(w.any_below(pos), a.any_below(pos)) << a.str() << " pos " << pos;
    }
    for (int pos : {-64, -63, -1, 0, 1, 63, 64, 65, 127, 128, 319, 320, 321, 383, 384, 400}) {
      ASSERT_EQ(w.bits_at(pos), a.bits64(pos)) << a.str() << " pos " << pos;
      ASSERT_EQ(w.any_below(pos), a.any_below(pos)) << a.str() << " pos " << pos;
    }
  }
}

TEST(Wide, EqualityComparesEveryLimb) {
  ref::Rng rng(15);
  for (int i = 0; i < 2000; ++i) {
    const Big a = random_big(rng, 383);
    const Wide w = wide_of(a);
    EXPECT_TRUE(w == wide_of(a));
    const int bit = int(rng() % kWideBits);
    Wide v = w;
    v.limb[bit / 64] ^= uint64_t(1) << (bit % 64);
    EXPECT_FALSE(w == v) << "bit " << bit;
  }
}

// ---------------------------------------------------------------- Bank

Bank empty_bank() {
  Bank b;
  b.clear();
  return b;
}

// The contract of one add: at most 3 words change, each by at most 2^kDigitBits.
void check_one_add(Bank& bank, Big& want, int64_t v, int shift) {
  const Bank before = bank;
  bank.add(v, shift);
  want += Big::term(v, shift);
  int touched = 0;
  for (int k = 0; k < Bank::kWords; ++k) {
    const __int128 d = (__int128)bank.w[k] - before.w[k];
    if (d != 0) ++touched;
    ASSERT_LE(d < 0 ? -d : d, (__int128)1 << Bank::kDigitBits) << "word " << k << " v=" << v << " shift=" << shift;
  }
  ASSERT_LE(touched, 3) << "v=" << v << " shift=" << shift;
}

// Random v with |v| < 2^63 and a shift that keeps v * 2^shift inside 2^(296 - headroom).
std::pair<int64_t, int> random_term(ref::Rng& rng, int top_bit) {
  const int shift = int(rng() % uint64_t(top_bit));
  const int room = std::min(63, top_bit - shift);              // bits v may use
  int64_t v = int64_t(rng() >> (64 - room));                   // 0 .. 2^room - 1
  if (rng() % 8 == 0) v = int64_t((uint64_t(1) << room) - 1);  // all ones: the widest spill
  if (rng() & 1) v = -v;
  return {v, shift};
}

TEST(Bank, SingleAddsMatchBignum) {
  ref::Rng rng(20);
  for (int i = 0; i < 20000; ++i) {
    Bank b = empty_bank();
    Big want;
    const auto [v, shift] = random_term(rng, 290);
    check_one_add(b, want, v, shift);
    ASSERT_EQ(big_of(b.to_wide()), want) << "v=" << v << " shift=" << shift;
    ASSERT_EQ(b.is_zero(), want.is_zero());
  }
}

TEST(Bank, ExtremeShiftsAndValues) {
  const int64_t kMax = INT64_MAX;
  for (int shift : {0, 1, 13, 49, 50, 51, 59, 60, 61, 99, 100, 119, 120, 149, 150, 179, 180, 199, 200, 230, 236}) {
    for (int64_t v : {int64_t(1), int64_t(-1), kMax, -kMax, kMax >> 13, -(kMax >> 13), int64_t(1) << 50,
                      -(int64_t(1) << 50), (int64_t(1) << 50) - 1, -((int64_t(1) << 50) - 1)}) {
      Bank b = empty_bank();
      Big want;
      check_one_add(b, want, v, shift);
      ASSERT_EQ(big_of(b.to_wide()), want) << "v=" << v << " shift=" << shift;
      b.normalize();
      ASSERT_EQ(big_of(b.to_wide()), want) << "after normalize, v=" << v << " shift=" << shift;
    }
  }
  // Small values at the top of the 300-bit range: +-2^298 and its neighbours.
  for (int shift = 237; shift <= 298; ++shift) {
    const int64_t v = shift == 298 ? 1 : int64_t(1) << std::min(62, 298 - shift);
    for (int64_t s : {v, -v, v - 1, -(v - 1)}) {
      Bank b = empty_bank();
      Big want;
      check_one_add(b, want, s, shift);
      b.normalize();
      ASSERT_EQ(big_of(b.to_wide()), want) << "v=" << s << " shift=" << shift;
    }
  }
}

TEST(Bank, NormalizeSettlesDigitsAndKeepsTheValue) {
  ref::Rng rng(21);
  for (int i = 0; i < 2000; ++i) {
    Bank b = empty_bank();
    Big want;
    const int n = 1 + int(rng() % 200);
    for (int k = 0; k < n; ++k) {
      const auto [v, shift] = random_term(rng, 240);
      b.add(v, shift);
      want += Big::term(v, shift);
      if ((k + 1) % Bank::kAddsBeforeCarry == 0) b.normalize();  // the contract
    }
    b.normalize();
    for (int k = 0; k < Bank::kWords - 1; ++k) {
      ASSERT_GE(b.w[k], 0) << "digit " << k;
      ASSERT_LT(b.w[k], int64_t(1) << Bank::kDigitBits) << "digit " << k;
    }
    ASSERT_EQ(b.w[Bank::kWords - 1] < 0, want.negative());
    ASSERT_EQ(big_of(b.to_wide()), want);
    ASSERT_EQ(b.is_zero(), want.is_zero());
    // The digits are the value's base-2^kDigitBits expansion: recompute them independently.
    Big back;
    for (int k = Bank::kWords; k-- > 0;) back = back.shl(Bank::kDigitBits) + Big(b.w[k]);
    ASSERT_EQ(back, want);
  }
}

// More adds than kAddsBeforeCarry, with normalize() every kAddsBeforeCarry
// adds as the contract asks: the headroom must hold in the worst case.
TEST(Bank, LongSequencesWithNormalizeAsContracted) {
  // The headroom derivation, independently: (N + 1) digits' worth fits a signed word.
  ASSERT_LT((__int128(Bank::kAddsBeforeCarry) + 1) << Bank::kDigitBits, __int128(1) << 63);
  ASSERT_GE((__int128(2 * Bank::kAddsBeforeCarry) + 1) << Bank::kDigitBits, __int128(1) << 63);
  ref::Rng rng(22);
  for (int trial = 0; trial < 12; ++trial) {
    Bank b = empty_bank();
    Big want;
    int since = 0;
    const int adds = 3 * Bank::kAddsBeforeCarry + int(rng() % 1000);
    const int mode = trial % 4;
    for (int k = 0; k < adds; ++k) {
      int64_t v;
      int shift;
      switch (mode) {
        case 0:  // worst spill, all positive: every word gains ~2^kDigitBits per add
          v = INT64_MAX;
          shift = Bank::kDigitBits - 1 + Bank::kDigitBits * int(rng() % 3);
          break;
        case 1:  // worst spill, all negative
          v = -INT64_MAX;
          shift = Bank::kDigitBits - 1 + Bank::kDigitBits * int(rng() % 3);
          break;
        case 2:  // one fixed position, alternating signs rarely: heavy growth of one digit
          v = (k % 97 == 0) ? -INT64_MAX : INT64_MAX;
          shift = 100;
          break;
        default: {
          const auto t = random_term(rng, 220);
          v = t.first;
          shift = t.second;
        }
      }
      b.add(v, shift);
      want += Big::term(v, shift);
      if (++since == Bank::kAddsBeforeCarry) {
        ASSERT_EQ(big_of(b.to_wide()), want) << "before normalize, trial " << trial << " add " << k;
        b.normalize();
        since = 0;
        ASSERT_EQ(big_of(b.to_wide()), want) << "after normalize, trial " << trial << " add " << k;
      }
    }
    ASSERT_EQ(big_of(b.to_wide()), want) << "trial " << trial;
    b.normalize();
    ASSERT_EQ(big_of(b.to_wide()), want) << "trial " << trial;
  }
}

TEST(Bank, CancellationToZeroAndClear) {
  ref::Rng rng(23);
  for (int i = 0; i < 500; ++i) {
    Bank b = empty_bank();
    std::vector<std::pair<int64_t, int>> terms;
    for (int k = 0; k < 50; ++k) terms.push_back(random_term(rng, 280));
    int since = 0;
    auto add = [&](int64_t v, int s) {
      b.add(v, s);
      if (++since == Bank::kAddsBeforeCarry) b.normalize(), since = 0;  // the contract
    };
    for (auto [v, s] : terms) add(v, s);
    std::shuffle(terms.begin(), terms.end(), rng);
    for (auto [v, s] : terms) add(-v, s);
    EXPECT_TRUE(big_of(b.to_wide()).is_zero());
    b.normalize();
    EXPECT_TRUE(b.is_zero()) << "normalized zero must be all-zero words";
    b.add(5, 7);
    EXPECT_FALSE(b.is_zero());
    b.clear();
    EXPECT_TRUE(b.is_zero());
    EXPECT_TRUE(b.to_wide().is_zero());
  }
}

}  // namespace
