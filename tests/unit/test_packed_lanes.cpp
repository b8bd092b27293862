// Packed lanes (proto/packed_lanes.hpp): every lane comes back bit for bit,
// each sub-block takes the width its values' range needs (worked out here
// from each double's exponent and trailing zeros, not by the encoder's
// scaling), and every kind of malformed sub-block is refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "proto/packed_lanes.hpp"

namespace {

using prism::decode_packed_lanes;
using prism::encode_packed_lanes;
using prism::kPackedSub;

constexpr int kUnit = -149;  // fp32's lane unit

// The lowest and highest set bit of |d| as powers of two (d finite, non-zero).
void bit_range(double d, int* lo, int* hi) {
  int e;
  const double m = std::frexp(std::fabs(d), &e);  // |d| = m * 2^e, 0.5 <= m < 1
  *hi = e - 1;
  uint64_t sig = uint64_t(std::ldexp(m, 53));  // exact: 53 bits
  *lo = e - 53 + std::countr_zero(sig);
}

// The bytes an optimal encoder writes for v (per sub-block: 1 when all +0;
// 3 + w * n with w the bytes of a two's complement integer spanning the
// sub-block's bit range plus a sign; 1 + 8 n when that needs more than 52
// bits or a lane is -0).
size_t expected_size(const std::vector<double>& v) {
  size_t total = 0;
  for (size_t b = 0; b < v.size(); b += kPackedSub) {
    const size_t n = std::min<size_t>(kPackedSub, v.size() - b);
    int lo = 1 << 20, hi = -(1 << 20);
    bool neg_zero = false, any = false;
    for (size_t i = b; i < b + n; ++i) {
      if (v[i] == 0) {
        neg_zero |= std::signbit(v[i]);
        continue;
      }
      int l, h;
      bit_range(v[i], &l, &h);
      lo = std::min(lo, l);
      hi = std::max(hi, h);
      any = true;
    }
    if (neg_zero) {
      total += 1 + 8 * n;
    } else if (!any) {
      total += 1;
    } else {
      const int bits = hi - lo + 2;
      total += bits > 52 ? 1 + 8 * n : 3 + size_t((bits + 7) / 8) * n;
    }
  }
  return total;
}

// A whole number of 2^-149 units with at most `bits` significant bits, at
// about 2^scale.
double lane(std::mt19937_64& g, int bits, int scale) {
  const uint64_t m = (g() >> (64 - bits)) | 1;
  const int e = std::max(scale - bits, kUnit);
  const double d = std::ldexp(double(m), e);
  return (g() & 1) ? -d : d;
}

void round_trip_with(const std::vector<double>& v, const prism::Kernels& k);

// Every kernel set this CPU runs writes the same bytes and reads them back.
void round_trip(const std::vector<double>& v) {
  std::vector<uint8_t> first;
  for (const prism::Kernels* k : prism::kernel_sets()) {
    SCOPED_TRACE(k->name);
    round_trip_with(v, *k);
    std::vector<uint8_t> buf(prism::packed_room(uint32_t(v.size())));
    buf.resize(encode_packed_lanes(v.data(), uint32_t(v.size()), buf.data(), *k));
    if (first.empty())
      first = buf;
    else
      EXPECT_EQ(buf, first) << k->name << " packs differently from " << prism::kernel_sets()[0]->name;
  }
}

void round_trip_with(const std::vector<double>& v, const prism::Kernels& k) {
  std::vector<uint8_t> buf(prism::packed_room(uint32_t(v.size())), 0xA5);
  const size_t len = encode_packed_lanes(v.data(), uint32_t(v.size()), buf.data(), k);
  ASSERT_LE(len, prism::max_packed_bytes(uint32_t(v.size())));
  EXPECT_EQ(len, expected_size(v)) << "not the fewest bytes for these values";
  std::vector<double> back(v.size(), 1.0);
  ASSERT_TRUE(decode_packed_lanes(buf.data(), len, uint32_t(v.size()), kUnit, back.data(), k));
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint64_t>(back[i]), std::bit_cast<uint64_t>(v[i])) << "lane " << i << " of " << v.size();
  // The exact buffer (no slack past the message) decodes the same.
  std::vector<uint8_t> exact(buf.begin(), buf.begin() + long(len));
  std::vector<double> again(v.size());
  ASSERT_TRUE(decode_packed_lanes(exact.data(), exact.size(), uint32_t(v.size()), kUnit, again.data(), k));
  EXPECT_EQ(0, std::memcmp(again.data(), back.data(), v.size() * 8));
}

TEST(PackedLanes, GradientSumsTakeFiveBytes) {
  std::mt19937_64 g(1);
  std::normal_distribution<float> nd(0, 1.0f / 1024);
  std::vector<double> v(4096);
  for (double& d : v) d = double(nd(g)) + double(nd(g)) + double(nd(g));  // exact: a double holds these sums
  round_trip(v);
  std::vector<uint8_t> buf(prism::packed_room(4096));
  const size_t len = encode_packed_lanes(v.data(), 4096, buf.data());
  EXPECT_LE(double(len) / 4096, 6.0);
}

TEST(PackedLanes, EveryShape) {
  std::mt19937_64 g(20261204);
  for (uint32_t n : {1u, 2u, 7u, 255u, 256u, 257u, 1000u, 2048u}) {
    for (int kind = 0; kind < 11; ++kind) {
      SCOPED_TRACE("n " + std::to_string(n) + ", kind " + std::to_string(kind));
      std::vector<double> v(n);
      for (uint32_t i = 0; i < n; ++i) {
        switch (kind) {
          case 0: v[i] = 0.0; break;                                                   // all +0: one byte a sub-block
          case 1: v[i] = lane(g, 24, -10 + int(g() % 8)); break;                       // fp32-like, narrow range
          case 2: v[i] = lane(g, 53, int(g() % 3)); break;                             // full doubles, narrow: 8 bytes
          case 3: v[i] = lane(g, 24, -60 + int(g() % 120)); break;                     // beyond 63 bits: raw
          case 4: v[i] = (i % 97 == 5) ? -0.0 : lane(g, 20, 0); break;                 // a -0: raw
          case 5: v[i] = std::ldexp(double(g() % 5) - 2, kUnit); break;                // a few units: 1 byte
          case 6: v[i] = lane(g, 30, 127 + 3); break;                                  // fp32's top, summed
          case 7: v[i] = (i % 3) ? 0.0 : lane(g, 24, -20); break;                      // zeros among values
          case 8: v[i] = (i & 1) ? -std::ldexp(1.0, 62) : std::ldexp(1.0, 0); break;   // a 64-bit span: raw
          case 9: v[i] = (i & 1) ? -std::ldexp(1.0, 50) : std::ldexp(1.0, 0); break;   // 52 bits: 7 bytes
          case 10: v[i] = (i & 1) ? std::ldexp(1.0, 51) : -std::ldexp(1.0, 0); break;  // 53 bits: raw
        }
      }
      round_trip(v);
    }
  }
}

TEST(PackedLanes, MinusTwoToTheSixtyThree) {
  // x = -2^63 at scale 2^0: the most negative 8-byte integer.
  std::vector<uint8_t> m = {8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80};
  double out;
  ASSERT_TRUE(decode_packed_lanes(m.data(), m.size(), 1, kUnit, &out));
  EXPECT_EQ(out, -std::ldexp(1.0, 63));
}

TEST(PackedLanes, RefusesMalformed) {
  std::vector<double> v(300);
  std::mt19937_64 g(3);
  for (double& d : v) d = lane(g, 24, 0);
  std::vector<uint8_t> buf(prism::packed_room(300));
  buf.resize(encode_packed_lanes(v.data(), 300, buf.data()));
  std::vector<double> out(300);
  ASSERT_TRUE(decode_packed_lanes(buf.data(), buf.size(), 300, kUnit, out.data()));
  auto refused = [&](std::vector<uint8_t> m, uint32_t n = 300) {
    return !decode_packed_lanes(m.data(), m.size(), n, kUnit, out.data());
  };
  EXPECT_TRUE(refused({}, 1)) << "empty";
  EXPECT_TRUE(refused(std::vector<uint8_t>(buf.begin(), buf.end() - 1))) << "one byte short";
  auto extra = buf;
  extra.push_back(0);
  EXPECT_TRUE(refused(extra)) << "a byte left over";
  EXPECT_TRUE(refused(buf, 299)) << "more bytes than 299 lanes";
  auto w9 = buf;
  w9[0] = 9;
  EXPECT_TRUE(refused(w9)) << "width 9";
  auto low = buf;  // lo below fp32's unit: values that are not whole lane units
  low[1] = uint8_t(uint16_t(int16_t(-150)));
  low[2] = uint8_t(uint16_t(int16_t(-150)) >> 8);
  EXPECT_TRUE(refused(low)) << "lo below the unit";
  auto high = buf;
  high[1] = 0xFF;
  high[2] = 0x03;  // lo = 1023: beyond a double
  EXPECT_TRUE(refused(high)) << "lo beyond the double range";
  // A 54-bit integer: no double holds it exactly.
  const std::vector<uint8_t> wide = {7, 0, 0, 0x01, 0, 0, 0, 0, 0, 0x20};  // 2^53 + 1
  EXPECT_TRUE(refused(wide, 1)) << "54 significant bits";
  double d;
  std::vector<uint8_t> raw(9);
  raw[0] = prism::kRawDoubles;
  const double nan = std::nan("");
  std::memcpy(&raw[1], &nan, 8);
  EXPECT_FALSE(decode_packed_lanes(raw.data(), raw.size(), 1, kUnit, &d)) << "a raw NaN";
  const double inf = INFINITY;
  std::memcpy(&raw[1], &inf, 8);
  EXPECT_FALSE(decode_packed_lanes(raw.data(), raw.size(), 1, kUnit, &d)) << "a raw infinity";
  const double fine = std::ldexp(1.0, -150);  // half a unit
  std::memcpy(&raw[1], &fine, 8);
  EXPECT_FALSE(decode_packed_lanes(raw.data(), raw.size(), 1, kUnit, &d)) << "a raw value below the unit";
  const double ok = std::ldexp(3.0, -149);
  std::memcpy(&raw[1], &ok, 8);
  EXPECT_TRUE(decode_packed_lanes(raw.data(), raw.size(), 1, kUnit, &d));
  EXPECT_EQ(d, ok);
}

}  // namespace

namespace {

// exact_f32 (a Kulisch partial's elements from double lanes): whether every
// lane is exactly a float, and then the floats, in every set.
TEST(PackedLanes, ExactFloatsOfDoubles) {
  std::mt19937_64 g(11);
  for (uint32_t n : {1u, 3u, 4u, 7u, 256u, 301u}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<double> v(n);
      for (uint32_t i = 0; i < n; ++i) v[i] = double(float(lane(g, 24, int(g() % 20) - 10)));  // fp32 values
      const uint32_t at = uint32_t(g() % n);
      if (kind == 1) v[at] = lane(g, 30, 0);        // 30 bits: not a float
      if (kind == 2) v[at] = std::nan("");          // a NaN is not exact
      if (kind == 3) v[at] = std::ldexp(1.0, 200);  // beyond fp32
      for (const prism::Kernels* k : prism::kernel_sets()) {
        SCOPED_TRACE(std::string(k->name) + " n " + std::to_string(n) + " kind " + std::to_string(kind));
        std::vector<uint8_t> buf(4 * n + 1);
        uint8_t* out = buf.data() + 1;  // unaligned, as in a message
        const bool exact = k->exact_f32(v.data(), n, out);
        EXPECT_EQ(exact, kind == 0);
        for (uint32_t i = 0; exact && i < n; ++i) {  // the floats are specified when every one is exact
          uint32_t got;
          std::memcpy(&got, out + 4 * i, 4);
          EXPECT_EQ(got, std::bit_cast<uint32_t>(float(v[i])));
        }
      }
    }
  }
}

}  // namespace
