// Pairs (arith/kernels.hpp: add_pairs, add_f32_pairs, normalize_pairs,
// narrow_pairs): a Kulisch lane held as two doubles hi + lo. Every kernel set
// is checked against exact arithmetic done here in ref.hpp's bignum: an add
// either keeps hi + lo equal to the exact sum or leaves the lane untouched
// and says so; normalising keeps the value and leaves hi the value rounded;
// narrowing gives the fp32 of the exact value rounded once (ref::round_to),
// ties, subnormal results, -0 and overflow included.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "arith/kernels.hpp"
#include "ref.hpp"

namespace {

using ref::Big;

constexpr int kLow = -1100;  // below every double's last bit: the common scale

// The exact value of a finite double as an integer times 2^kLow.
Big big_of(double d) {
  if (d == 0) return Big();
  int e;
  const double m = std::frexp(std::fabs(d), &e);  // |d| = m 2^e
  const auto sig = int64_t(std::ldexp(m, 53));    // exact: 53 bits
  const Big b = Big(sig).shl(e - 53 - kLow);
  return d < 0 ? Big() - b : b;
}

// A double of `bits` significant bits whose top bit weighs 2^top, either sign.
double lane(std::mt19937_64& g, int bits, int top) {
  const uint64_t sig = (g() >> (64 - bits)) | (uint64_t(1) << (bits - 1));
  const double v = std::ldexp(double(sig), top - bits + 1);
  return (g() & 1) ? -v : v;
}

// Wide-data-like states and terms: hi over 60 binades, lo below hi's last
// place (or 0), terms fp32 values over the same range.
struct Case {
  std::vector<double> hi, lo, v;
};
Case wide_case(std::mt19937_64& g, uint32_t n) {
  Case c;
  c.hi.resize(n);
  c.lo.resize(n);
  c.v.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const int top = int(g() % 60) - 30;
    c.hi[i] = lane(g, 53, top);
    c.lo[i] = (g() % 3) ? 0.0 : lane(g, 1 + int(g() % 40), top - 54 - int(g() % 20));
    c.v[i] = double(float(lane(g, 24, int(g() % 60) - 30)));
    if (i % 97 == 5) c.lo[i] = lane(g, 53, top - 54);  // a full lo: lo + err rounds
    if (i % 89 == 7) c.v[i] = -c.hi[i];                // cancellation
  }
  return c;
}

TEST(Pairs, AddKeepsTheExactSumOrLeavesTheLane) {
  std::mt19937_64 g(11);
  const uint32_t n = 2003;
  const Case c = wide_case(g, n);
  for (const prism::Kernels* k : prism::kernel_sets()) {
    SCOPED_TRACE(k->name);
    for (bool floats : {false, true}) {
      std::vector<double> hi = c.hi, lo = c.lo;
      std::vector<uint32_t> left(n);
      bool low = false;
      uint32_t kept;
      if (floats) {
        std::vector<uint8_t> e(size_t(n) * 4 + 1);  // unaligned: a message's payload
        for (uint32_t i = 0; i < n; ++i) {
          const float f = float(c.v[i]);
          std::memcpy(&e[1 + size_t(i) * 4], &f, 4);
        }
        kept = k->add_f32_pairs(hi.data(), lo.data(), e.data() + 1, n, left.data(), &low);
      } else {
        kept = k->add_pairs(hi.data(), lo.data(), c.v.data(), n, left.data(), &low);
      }
      std::vector<bool> is_left(n);
      for (uint32_t j = 0; j < kept; ++j) is_left[left[j]] = true;
      std::vector<double> v = c.v;  // the terms as the kernel saw them
      if (floats)
        for (double& x : v) x = double(float(x));
      uint32_t into_lo = 0;
      for (uint32_t i = 0; i < n; ++i) {
        if (is_left[i]) {
          EXPECT_EQ(std::bit_cast<uint64_t>(hi[i]), std::bit_cast<uint64_t>(c.hi[i])) << "lane " << i;
          EXPECT_EQ(std::bit_cast<uint64_t>(lo[i]), std::bit_cast<uint64_t>(c.lo[i])) << "lane " << i;
          // Left only when two doubles cannot take it this way: the add's
          // exact error (worked out in the bignum) plus lo is not a double.
          const double s = c.hi[i] + v[i];
          const Big err = big_of(c.hi[i]) + big_of(v[i]) - big_of(s);
          const Big want_lo = big_of(c.lo[i]) + err;
          const double err_d = (c.hi[i] - (s - (s - c.hi[i]))) + (v[i] - (s - c.hi[i]));
          ASSERT_TRUE(big_of(err_d) == err) << "lane " << i;
          EXPECT_FALSE(big_of(c.lo[i] + err_d) == want_lo) << "lane " << i << " was left though its error fits lo";
          continue;
        }
        ASSERT_TRUE(big_of(hi[i]) + big_of(lo[i]) == big_of(c.hi[i]) + big_of(c.lo[i]) + big_of(v[i])) << "lane " << i;
        EXPECT_EQ(hi[i], c.hi[i] + v[i]) << "lane " << i << ": hi takes the add rounded";
        into_lo += lo[i] != c.lo[i];
      }
      EXPECT_EQ(low, into_lo > 0);
      EXPECT_GT(into_lo, 100u) << "too few adds with an error to test that path";
      EXPECT_GT(kept, 5u) << "too few lanes left to test that path";
    }
  }
}

TEST(Pairs, AddLeavesSpecialsAndOverflows) {
  for (const prism::Kernels* k : prism::kernel_sets()) {
    SCOPED_TRACE(k->name);
    const double nan = std::bit_cast<double>(0x7FF8000000000123ull);  // a NaN lane's payload
    std::vector<double> hi = {nan, 1.0, 1e308, 2.0, -0.0, nan, 3.0, 4.0};
    std::vector<double> lo(8, 0.0);
    const std::vector<double> v = {1.0, INFINITY, 1e308, NAN, -0.0, 0.0, -INFINITY, 0.5};
    std::vector<uint32_t> left(8);
    bool low = false;
    const uint32_t kept = k->add_pairs(hi.data(), lo.data(), v.data(), 8, left.data(), &low);
    ASSERT_EQ(kept, 6u);
    const uint32_t want[] = {0, 1, 2, 3, 5, 6};
    for (uint32_t j = 0; j < 6; ++j) EXPECT_EQ(left[j], want[j]);
    EXPECT_EQ(std::bit_cast<uint64_t>(hi[0]), 0x7FF8000000000123ull);
    EXPECT_TRUE(std::signbit(hi[4]) && hi[4] == 0) << "-0 + -0 stays -0";
    EXPECT_EQ(hi[7], 4.5);
    EXPECT_FALSE(low);
  }
}

TEST(Pairs, NormalizeKeepsTheValueAndRoundsHi) {
  std::mt19937_64 g(12);
  const uint32_t n = 1001;
  Case c = wide_case(g, n);
  for (uint32_t i = 0; i < n; i += 7)
    c.lo[i] = lane(g, 53, int(std::ilogb(c.hi[i])) + int(g() % 4) - 2);  // unnormalised
  c.hi[3] = -0.0;
  c.lo[3] = 0;
  c.hi[10] = NAN;
  c.lo[10] = 1.0;
  for (const prism::Kernels* k : prism::kernel_sets()) {
    SCOPED_TRACE(k->name);
    std::vector<double> hi = c.hi, lo = c.lo;
    const bool any = k->normalize_pairs(hi.data(), lo.data(), n);
    bool want_any = false;
    for (uint32_t i = 0; i < n; ++i) {
      if (i == 10) {
        EXPECT_TRUE(std::isnan(hi[i]));
        EXPECT_EQ(lo[i], 0.0) << "a NaN lane's lo is dropped";
        continue;
      }
      if (i == 3) {
        EXPECT_TRUE(std::signbit(hi[i]) && hi[i] == 0 && lo[i] == 0) << "-0 stays -0";
        continue;
      }
      ASSERT_TRUE(big_of(hi[i]) + big_of(lo[i]) == big_of(c.hi[i]) + big_of(c.lo[i])) << "lane " << i;
      // hi is the value rounded to nearest: |lo| at most half of hi's last place.
      if (lo[i] != 0) {
        const double half = std::ldexp(1.0, std::ilogb(hi[i]) - 53);
        EXPECT_LE(std::fabs(lo[i]), half) << "lane " << i;
        want_any = true;
      }
    }
    EXPECT_EQ(any, want_any);
    EXPECT_TRUE(want_any);
  }
}

// hi + lo rounded once to fp32 by ref::round_to, as the bits narrow_pairs must write.
uint32_t ref_f32(double hi, double lo) {
  if (lo == 0 && hi == 0) return std::signbit(hi) ? 0x80000000u : 0;
  const Big v = big_of(hi) + big_of(lo);
  if (v.is_zero()) return 0;
  return ref::round_to(ref::kFP32, v.negative(), v.abs(), kLow, false).bits;
}

TEST(Pairs, NarrowRoundsTheExactValueOnce) {
  std::mt19937_64 g(13);
  std::vector<double> hi, lo;
  for (int i = 0; i < 3000; ++i) {
    const int top = int(g() % 276) - 150;  // subnormal fp32 results included, no overflow
    double h = lane(g, 53, top);
    double l = (g() % 4) ? lane(g, 1 + int(g() % 52), top - 54 - int(g() % 30)) : 0.0;
    if (i % 5 == 0) {  // h exactly halfway between two floats: lo breaks the tie, or not
      h = lane(g, 25, top);
      l = (g() % 3) ? 0.0 : lane(g, 1 + int(g() % 20), top - 60);
    }
    hi.push_back(h);
    lo.push_back(l);
  }
  hi.push_back(-0.0), lo.push_back(0.0);
  hi.push_back(0.0), lo.push_back(0.0);
  hi.push_back(1.0), lo.push_back(-1.0);  // unnormalised, exactly 0: +0
  const uint32_t n = uint32_t(hi.size());
  for (const prism::Kernels* k : prism::kernel_sets()) {
    SCOPED_TRACE(k->name);
    std::vector<uint8_t> out(size_t(n) * 4 + 1);
    ASSERT_TRUE(k->narrow_pairs(hi.data(), lo.data(), n, out.data() + 1));
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t got;
      std::memcpy(&got, &out[1 + size_t(i) * 4], 4);
      ASSERT_EQ(got, ref_f32(hi[i], lo[i])) << "lane " << i << ": " << hi[i] << " + " << lo[i];
    }
    const double over[] = {1.0, 3.5e38, NAN, 2.0}, zero[] = {0.0, 0.0, 0.0, 0.0};
    EXPECT_FALSE(k->narrow_pairs(over + 1, zero, 1, out.data())) << "an overflow";
    EXPECT_FALSE(k->narrow_pairs(over, zero, 4, out.data())) << "a NaN lane";
  }
}

}  // namespace
