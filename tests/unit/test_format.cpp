// Formats: names and codes, exact decoding of every narrow code, correctly
// rounded encoding, canonical NaNs, and admission widths.
//
// References (tests/unit/ref.hpp and below): a textbook decoder in long
// double, the compiler's _Float16 and the FPU's binary32 conversions, a
// big-integer round-to-nearest-even encoder, and a table encoder that picks
// the nearer of a value's two neighbouring codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "arith/kernels.hpp"
#include "arith/op.hpp"
#include "format/format.hpp"
#include "ref.hpp"

namespace {

using prism::Exceptions;
using prism::Format;
using prism::FpClass;
using ref::Big;
using ref::Cls;
using ref::Fmt;

Format F(const Fmt& f) { return Format(f.code); }

FpClass cls_of(Cls c) {
  switch (c) {
    case Cls::Zero: return FpClass::Zero;
    case Cls::Subnormal: return FpClass::Subnormal;
    case Cls::Normal: return FpClass::Normal;
    case Cls::Inf: return FpClass::Inf;
    case Cls::NaN: return FpClass::NaN;
  }
  return FpClass::NaN;
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%X", v);
  return b;
}

// The value a lib Decoded stands for, exactly (long double holds 64 significant bits).
long double value_of(const prism::Decoded& d) {
  const long double v = std::ldexp((long double)d.sig, d.exp);
  return d.neg ? -v : v;
}

float f16_hw(uint16_t h) {  // the compiler's binary16 (libgcc), a third-party decoder
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return float(x);
}
uint16_t f16_round_hw(long double v) {
  const _Float16 x = (_Float16)v;
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

// Checks one code of a float format against the textbook decoder.
void expect_decodes(const Fmt& f, uint32_t code) {
  const ref::Value want = ref::classify(f, code);
  const prism::Decoded got = prism::decode(F(f), code);
  ASSERT_EQ(got.cls, cls_of(want.cls)) << f.name << " code " << hex(code);
  if (want.cls == Cls::NaN) return;
  ASSERT_EQ(got.neg, want.neg) << f.name << " code " << hex(code);
  if (want.cls == Cls::Inf) return;
  ASSERT_EQ(value_of(got), want.v) << f.name << " code " << hex(code);
  if (want.cls == Cls::Zero) {
    ASSERT_EQ(got.sig, 0u);
  }
  ASSERT_LT(got.sig, uint64_t(1) << f.p()) << "significand wider than the format";
}

// ---------------------------------------------------------------- names and table

TEST(FormatTable, NamesAndCodesRoundTrip) {
  for (const Fmt& f : ref::kAll) {
    const auto byc = prism::format_from_code(f.code);
    ASSERT_TRUE(byc.has_value()) << f.name;
    EXPECT_EQ(uint8_t(*byc), f.code);
    EXPECT_STREQ(prism::name(*byc), f.name);
    const auto byn = prism::format_from_name(f.name);
    ASSERT_TRUE(byn.has_value()) << f.name;
    EXPECT_EQ(*byn, *byc);
  }
  for (int c : {0, 10, 11, 0x80, 255}) EXPECT_FALSE(prism::format_from_code(uint8_t(c)).has_value()) << c;
  for (const char* n : {"", "FP32", "fp64", "float", "e4m3", "e5m2fn", "int16", "fp32 ", "bfloat16"})
    EXPECT_FALSE(prism::format_from_name(n).has_value()) << '"' << n << '"';
}

TEST(FormatTable, InfoMatchesFormatDefinitions) {
  for (const Fmt& f : ref::kAll) {
    SCOPED_TRACE(f.name);
    const prism::FormatInfo& fi = prism::info(F(f));
    EXPECT_EQ(fi.format, F(f));
    EXPECT_EQ(fi.bytes, f.bytes);
    EXPECT_EQ(fi.is_float, f.is_float());
    EXPECT_EQ(prism::is_float(F(f)), f.is_float());
    EXPECT_EQ(fi.unit_exp, f.unit());
    EXPECT_EQ(prism::unit_exp(F(f)), f.unit());
    EXPECT_EQ(fi.max_finite, f.max_code());
    if (!f.is_float()) continue;
    EXPECT_EQ(fi.ebits, f.ebits);
    EXPECT_EQ(fi.mbits, f.mbits);
    EXPECT_EQ(fi.bias, f.bias);
    EXPECT_EQ(fi.p, f.p());
    EXPECT_EQ(fi.emin, f.emin());
    EXPECT_EQ(fi.emax, f.emax());
    EXPECT_EQ(fi.has_inf, f.has_inf());
    EXPECT_EQ(fi.has_neg_zero, f.has_neg_zero());
    EXPECT_EQ(fi.sign_bit, f.sign_bit());
    EXPECT_EQ(fi.canonical_nan, f.cnan);
    EXPECT_EQ(fi.inf, f.inf_code());
  }
}

TEST(FormatTable, LargestFiniteValuesAreTheDocumentedOnes) {
  const std::map<std::string, long double> want = {
      {"fp32", 0x1.fffffep127L}, {"fp16", 65504.0L}, {"bf16", 0x1.fep127L},  {"e4m3fn", 448.0L},
      {"e4m3fnuz", 240.0L},      {"e5m2", 57344.0L}, {"e5m2fnuz", 57344.0L},
  };
  for (const Fmt& f : ref::kFloats) {
    const uint32_t mx = prism::info(F(f)).max_finite;
    EXPECT_EQ(ref::classify(f, mx).v, want.at(f.name)) << f.name;
    EXPECT_EQ(value_of(prism::decode(F(f), mx)), want.at(f.name)) << f.name;
  }
}

TEST(FormatTable, CanonicalNansAreTheBriefs) {
  const std::map<Format, uint32_t> want = {
      {Format::FP32, 0x7FC00000u}, {Format::FP16, 0x7E00}, {Format::BF16, 0x7FC0},   {Format::E4M3FN, 0x7F},
      {Format::E4M3FNUZ, 0x80},    {Format::E5M2, 0x7E},   {Format::E5M2FNUZ, 0x80},
  };
  for (auto [f, bits] : want) {
    EXPECT_EQ(prism::info(f).canonical_nan, bits) << prism::name(f);
    EXPECT_EQ(prism::decode(f, bits).cls, FpClass::NaN) << prism::name(f);
    EXPECT_TRUE(prism::is_special(f, bits));
  }
}

// ---------------------------------------------------------------- decoding

TEST(Decode, EveryFp8CodeMatchesTheTextbookDecoder) {
  for (const Fmt& f : ref::kFp8) {
    int nans = 0, infs = 0, zeros = 0;
    for (uint32_t c = 0; c < 256; ++c) {
      expect_decodes(f, c);
      const ref::Value v = ref::classify(f, c);
      nans += v.cls == Cls::NaN;
      infs += v.cls == Cls::Inf;
      zeros += v.cls == Cls::Zero;
      EXPECT_EQ(prism::is_special(F(f), c), v.cls == Cls::NaN || v.cls == Cls::Inf) << f.name << hex(c);
    }
    // The definitions: e4m3fn NaN 0x7F/0xFF, no Inf; fnuz NaN 0x80 only, no -0; e5m2 IEEE.
    const std::map<std::string, std::array<int, 3>> want = {
        {"e4m3fn", {2, 0, 2}}, {"e4m3fnuz", {1, 0, 1}}, {"e5m2", {6, 2, 2}}, {"e5m2fnuz", {1, 0, 1}}};
    EXPECT_EQ(nans, want.at(f.name)[0]) << f.name;
    EXPECT_EQ(infs, want.at(f.name)[1]) << f.name;
    EXPECT_EQ(zeros, want.at(f.name)[2]) << f.name;
  }
  EXPECT_EQ(prism::decode(Format::E4M3FN, 0x7F).cls, FpClass::NaN);
  EXPECT_EQ(prism::decode(Format::E4M3FN, 0xFF).cls, FpClass::NaN);
  EXPECT_EQ(value_of(prism::decode(Format::E4M3FN, 0x7E)), 448.0L);
  EXPECT_EQ(value_of(prism::decode(Format::E4M3FN, 0x01)), 0x1p-9L);
  EXPECT_EQ(value_of(prism::decode(Format::E4M3FNUZ, 0x7F)), 240.0L);
  EXPECT_EQ(value_of(prism::decode(Format::E4M3FNUZ, 0x01)), 0x1p-10L);
  EXPECT_EQ(value_of(prism::decode(Format::E4M3FNUZ, 0xFF)), -240.0L);
  EXPECT_EQ(prism::decode(Format::E5M2, 0x7C).cls, FpClass::Inf);
  EXPECT_EQ(value_of(prism::decode(Format::E5M2, 0x7B)), 57344.0L);
  EXPECT_EQ(value_of(prism::decode(Format::E5M2, 0x01)), 0x1p-16L);
  EXPECT_EQ(value_of(prism::decode(Format::E5M2FNUZ, 0x7F)), 57344.0L);
  EXPECT_EQ(value_of(prism::decode(Format::E5M2FNUZ, 0x01)), 0x1p-17L);
}

TEST(Decode, EveryFp16CodeMatchesTextbookAndCompiler) {
  for (uint32_t c = 0; c < 65536; ++c) {
    expect_decodes(ref::kFP16, c);
    const float hw = f16_hw(uint16_t(c));
    const prism::Decoded d = prism::decode(Format::FP16, c);
    if (std::isnan(hw)) {
      ASSERT_EQ(d.cls, FpClass::NaN) << hex(c);
    } else if (std::isinf(hw)) {
      ASSERT_EQ(d.cls, FpClass::Inf) << hex(c);
      ASSERT_EQ(d.neg, hw < 0);
    } else {
      ASSERT_EQ(value_of(d), (long double)hw) << hex(c);
      ASSERT_EQ(d.neg, std::signbit(hw)) << hex(c);
    }
  }
}

TEST(Decode, EveryBf16CodeMatchesTextbookAndFp32Hardware) {
  for (uint32_t c = 0; c < 65536; ++c) {
    expect_decodes(ref::kBF16, c);
    float hw;
    const uint32_t w = c << 16;
    std::memcpy(&hw, &w, 4);
    const prism::Decoded d = prism::decode(Format::BF16, c);
    if (std::isnan(hw))
      ASSERT_EQ(d.cls, FpClass::NaN) << hex(c);
    else if (std::isinf(hw))
      ASSERT_EQ(d.cls, FpClass::Inf) << hex(c);
    else
      ASSERT_EQ(value_of(d), (long double)hw) << hex(c);
  }
}

std::vector<uint32_t> fp32_edge_codes() {
  std::vector<uint32_t> v;
  for (uint32_t base : {0x00000000u, 0x00000001u, 0x00000002u, 0x007FFFFEu, 0x007FFFFFu, 0x00800000u, 0x00800001u,
                        0x3F7FFFFFu, 0x3F800000u, 0x3F800001u, 0x7F7FFFFEu, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u,
                        0x7FBFFFFFu, 0x7FC00000u, 0x7FFFFFFFu, 0x4B7FFFFFu, 0x4B800000u})
    for (uint32_t s : {0u, 0x80000000u}) v.push_back(base | s);
  return v;
}

TEST(Decode, SampledFp32CodesMatchHardware) {
  ref::Rng rng(0xF32);
  std::vector<uint32_t> codes = fp32_edge_codes();
  for (int i = 0; i < 1000000; ++i) codes.push_back(uint32_t(rng()));
  for (uint32_t c : codes) {
    float hw;
    std::memcpy(&hw, &c, 4);
    const prism::Decoded d = prism::decode(Format::FP32, c);
    const ref::Value t = ref::classify(ref::kFP32, c);
    ASSERT_EQ(d.cls, cls_of(t.cls)) << hex(c);
    switch (std::fpclassify(hw)) {
      case FP_NAN: ASSERT_EQ(d.cls, FpClass::NaN) << hex(c); break;
      case FP_INFINITE: ASSERT_EQ(d.cls, FpClass::Inf) << hex(c); break;
      case FP_ZERO: ASSERT_EQ(d.cls, FpClass::Zero) << hex(c); break;
      case FP_SUBNORMAL: ASSERT_EQ(d.cls, FpClass::Subnormal) << hex(c); break;
      default: ASSERT_EQ(d.cls, FpClass::Normal) << hex(c);
    }
    if (d.cls == FpClass::NaN) continue;
    ASSERT_EQ(d.neg, std::signbit(hw)) << hex(c);
    if (d.cls != FpClass::Inf) {
      ASSERT_EQ(value_of(d), (long double)hw) << hex(c);
      ASSERT_EQ(value_of(d), t.v) << hex(c);
    }
  }
}

TEST(Decode, IntegersAreExact) {
  for (uint32_t c = 0; c < 256; ++c) {
    const prism::Decoded d = prism::decode(Format::INT8, c);
    EXPECT_EQ(value_of(d), (long double)int8_t(uint8_t(c))) << c;
    EXPECT_EQ(d.cls, c == 0 ? FpClass::Zero : FpClass::Normal);
  }
  ref::Rng rng(32);
  std::vector<uint32_t> codes = {0, 1, 0xFFFFFFFFu, 0x80000000u, 0x7FFFFFFFu, 0x80000001u};
  for (int i = 0; i < 10000; ++i) codes.push_back(uint32_t(rng()));
  for (uint32_t c : codes) {
    const prism::Decoded d = prism::decode(Format::INT32, c);
    EXPECT_EQ(value_of(d), (long double)int32_t(c)) << hex(c);
    EXPECT_EQ(d.cls, c == 0 ? FpClass::Zero : FpClass::Normal);
  }
}

TEST(Decode, ToFloatAndKernelTablesAreExact) {
  for (const Fmt& f : {ref::kFP16, ref::kBF16, ref::kE4M3FN, ref::kE4M3FNUZ, ref::kE5M2, ref::kE5M2FNUZ}) {
    const uint32_t n = 1u << f.bits();
    const float* table = f.bytes == 1 ? prism::fp8_table(F(f)) : nullptr;
    for (uint32_t c = 0; c < n; ++c) {
      const ref::Value v = ref::classify(f, c);
      std::vector<float> got = {prism::to_float(F(f), c)};
      if (table) got.push_back(table[c]);
      if (f.code == ref::kFP16.code) got.push_back(prism::fp16_to_float(uint16_t(c)));
      for (float g : got) {
        if (v.cls == Cls::NaN) {
          ASSERT_TRUE(std::isnan(g)) << f.name << hex(c);
        } else {
          ASSERT_EQ((long double)g, v.v) << f.name << hex(c);
          ASSERT_EQ(std::signbit(g), v.neg) << f.name << hex(c);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- encoding

prism::Encoded enc(const Fmt& f, bool neg, uint64_t mag, int exp, bool sticky, bool sat) {
  return prism::encode_float(F(f), neg, mag, exp, sticky, sat ? Exceptions::SATURATE : Exceptions::IEEE);
}

void expect_reencodes(const Fmt& f, uint32_t code, ref::Rng& rng) {
  const prism::Decoded d = prism::decode(F(f), code);
  if (d.cls == FpClass::NaN || d.cls == FpClass::Inf) return;
  uint64_t sig = d.sig;
  int exp = d.exp;
  for (bool sat : {false, true}) {
    const prism::Encoded e = enc(f, d.neg, sig, exp, false, sat);
    ASSERT_EQ(e.bits, code) << f.name << " code " << hex(code);
    ASSERT_FALSE(e.overflow);
  }
  if (sig == 0) return;
  // The same value through a different window: left-aligned, and odd.
  const int room = std::countl_zero(sig);
  const int k = int(rng() % uint64_t(room + 1));
  ASSERT_EQ(enc(f, d.neg, sig << k, exp - k, false, false).bits, code) << f.name << hex(code) << " shifted " << k;
  const int tz = std::countr_zero(sig);
  ASSERT_EQ(enc(f, d.neg, sig >> tz, exp + tz, false, false).bits, code) << f.name << hex(code);
}

TEST(Encode, EveryNarrowCodeReencodesToItself) {
  ref::Rng rng(1);
  for (const Fmt& f : {ref::kFP16, ref::kBF16, ref::kE4M3FN, ref::kE4M3FNUZ, ref::kE5M2, ref::kE5M2FNUZ})
    for (uint32_t c = 0; c < (1u << f.bits()); ++c) expect_reencodes(f, c, rng);
}

TEST(Encode, SampledFp32CodesReencodeToThemselves) {
  ref::Rng rng(2);
  std::vector<uint32_t> codes = fp32_edge_codes();
  for (int i = 0; i < 300000; ++i) codes.push_back(uint32_t(rng()));
  for (uint32_t c : codes) expect_reencodes(ref::kFP32, c, rng);
}

// A second encoder for the narrow formats: the positive finite values in
// order; a value rounds to the nearer of the two around it, a tie to the even
// code, and the one past the largest finite value is an overflow.
class TableEncoder {
 public:
  explicit TableEncoder(const Fmt& f) : f_(f) {
    for (uint32_t c = 0; c < f.sign_bit(); ++c) {
      const ref::Value v = ref::classify(f, c);
      if (v.cls != Cls::NaN && v.cls != Cls::Inf) vals_.push_back({v.v, c});
    }
    std::sort(vals_.begin(), vals_.end());
    for (size_t i = 1; i < vals_.size(); ++i)  // codes of one sign are in value order
      if (vals_[i].second != vals_[i - 1].second + 1) throw std::logic_error("codes not monotonic");
    const long double mx = vals_.back().first, prev = vals_[vals_.size() - 2].first;
    vals_.push_back({mx + (mx - prev), vals_.back().second + 1});  // past the end: overflow
  }
  // |x| (exact) plus, when sticky, something in (0, ulp-of-x-window).
  ref::Rounded round(bool neg, long double ax, bool sticky) const {
    auto it = std::upper_bound(vals_.begin(), vals_.end(), std::make_pair(ax, ~0u));
    if (it == vals_.end()) return {0, true, true};  // at or past the value after max
    const auto lo = *(it - 1), hi = *it;
    const long double mid = (lo.first + hi.first) / 2;
    bool up;
    if (ax < mid)
      up = false;
    else if (ax > mid || sticky)
      up = true;
    else
      up = (lo.second & 1) != 0;
    const auto pick = up ? hi : lo;
    const bool inexact = sticky || ax != pick.first;
    if (pick.second == vals_.back().second) return {0, true, true};
    uint32_t bits = pick.second;
    if (neg && (bits != 0 || f_.has_neg_zero())) bits |= f_.sign_bit();
    return {bits, false, inexact};
  }

 private:
  const Fmt& f_;
  std::vector<std::pair<long double, uint32_t>> vals_;
};

// Checks encode_float on +-(mag + sticky) * 2^exp against the references.
// With sticky the value is taken as (mag + 1/2) * 2^exp; the case is only
// meaningful when 1/4 and 3/4 give the same rounding, which the caller ensures.
void check_encode(const Fmt& f, const TableEncoder* table, bool neg, uint64_t mag, int exp, bool sticky) {
  for (bool sat : {false, true}) {
    const prism::Encoded got = enc(f, neg, mag, exp, sticky, sat);
    const std::string what = std::string(f.name) + (neg ? " -(" : " (") + std::to_string(mag) +
                             (sticky ? "+sticky" : "") + ")*2^" + std::to_string(exp) + (sat ? " saturate" : " ieee");
    ref::Rounded want;
    if (sticky) {
      const Big m2 = Big::from_mag(mag).shl(2);
      const ref::Rounded a = ref::round_to(f, neg, m2 + Big(1), exp - 2, sat);
      const ref::Rounded b = ref::round_to(f, neg, m2 + Big(3), exp - 2, sat);
      ASSERT_EQ(a.bits, b.bits) << "ill-posed case " << what;
      want = a;
    } else {
      want = ref::round_to(f, neg, Big::from_mag(mag), exp, sat);
    }
    ASSERT_EQ(got.bits, want.bits) << what << " want " << hex(want.bits) << " got " << hex(got.bits);
    ASSERT_EQ(got.overflow, want.overflow) << what;
    if (table && mag != 0) {
      const long double ax = std::ldexp((long double)mag, exp);
      ref::Rounded t = table->round(neg, ax, sticky);
      if (t.overflow) t.bits = ref::too_big_code(f, neg, sat);
      ASSERT_EQ(want.bits, t.bits) << "the two references disagree: " << what;
      ASSERT_EQ(want.overflow, t.overflow) << what;
    }
    if (!sticky && !sat && mag != 0) {  // hardware conversions from the exact long double
      const long double x = std::ldexp((long double)mag, exp) * (neg ? -1 : 1);
      if (f.code == ref::kFP32.code) {
        const float h = float(x);
        uint32_t hb;
        std::memcpy(&hb, &h, 4);
        ASSERT_EQ(got.bits, hb) << "binary32 hardware: " << what;
      } else if (f.code == ref::kFP16.code) {
        ASSERT_EQ(got.bits, f16_round_hw(x)) << "_Float16: " << what;
      }
    }
  }
}

// Positions just below, at and above the midpoint between each pair of
// neighbouring codes, with and without sticky bits.
void check_neighbours(const Fmt& f, const TableEncoder* table, uint32_t c, ref::Rng& rng) {
  const ref::Value lo = ref::classify(f, c);
  const bool last = c == f.max_code();
  const ref::Value hi_v = last ? ref::classify(f, c - 1) : ref::classify(f, c + 1);
  const long double ulp = last ? lo.v - hi_v.v : hi_v.v - lo.v;
  int k;
  std::frexp(ulp, &k);
  const int uexp = k - 1;  // ulp = 2^uexp
  const int exp = uexp - 40;
  const ref::Exact le = ref::exact_of(lo.v);
  const uint64_t L = lo.v == 0 ? 0 : le.sig << (le.exp - exp);
  const uint64_t half = uint64_t(1) << 39;
  const uint32_t up_code = c + 1;  // past max_code: overflow
  const bool tie_up = (c & 1) != 0;
  struct Case {
    uint64_t r;
    bool sticky;
    bool up;
  };
  std::vector<Case> cases = {{0, false, false},        {0, true, false},        {1, false, false},
                             {half - 1, false, false}, {half - 1, true, false}, {half, false, tie_up},
                             {half, true, true},       {half + 1, false, true}, {2 * half - 1, true, true}};
  for (int i = 0; i < 4; ++i) {
    const uint64_t r = rng() % (2 * half);
    cases.push_back({r, false, r > half || (r == half && tie_up)});
  }
  for (const Case& cs : cases) {
    for (bool neg : {false, true}) {
      check_encode(f, table, neg, L + cs.r, exp, cs.sticky);
      if (::testing::Test::HasFatalFailure()) return;
      // The simplest reference of all: below the midpoint the lower code, above it the upper one.
      const prism::Encoded e = enc(f, neg, L + cs.r, exp, cs.sticky, false);
      const uint32_t want_mag = cs.up ? up_code : c;
      if (want_mag > f.max_code()) {
        ASSERT_TRUE(e.overflow) << f.name << " code " << hex(c) << " r " << cs.r;
      } else {
        ASSERT_FALSE(e.overflow);
        const uint32_t want = want_mag == 0 ? ref::zero_code(f, neg) : (want_mag | (neg ? f.sign_bit() : 0));
        ASSERT_EQ(e.bits, want) << f.name << " between " << hex(c) << " and " << hex(c + 1) << " r=" << cs.r
                                << (cs.sticky ? "+sticky" : "") << (neg ? " negative" : "");
      }
    }
  }
}

TEST(Encode, EveryNarrowNeighbourPairRoundsToNearestEven) {
  ref::Rng rng(3);
  for (const Fmt& f : {ref::kFP16, ref::kBF16, ref::kE4M3FN, ref::kE4M3FNUZ, ref::kE5M2, ref::kE5M2FNUZ}) {
    SCOPED_TRACE(f.name);
    const TableEncoder table(f);
    const uint32_t step = f.bytes == 1 ? 1 : 3;  // 16-bit formats: every third pair
    for (uint32_t c = 0; c <= f.max_code(); c += step) {
      check_neighbours(f, &table, c, rng);
      if (::testing::Test::HasFatalFailure()) return;
    }
    check_neighbours(f, &table, f.max_code(), rng);  // the max-finite boundary, always
  }
}

TEST(Encode, SampledFp32NeighbourPairsRoundToNearestEven) {
  ref::Rng rng(4);
  std::vector<uint32_t> codes = {0, 1, 2, 0x007FFFFE, 0x007FFFFF, 0x00800000, 0x3F7FFFFF, 0x7F7FFFFE, 0x7F7FFFFF};
  for (int i = 0; i < 20000; ++i) codes.push_back(uint32_t(rng() % 0x7F7FFFFFu));
  for (uint32_t c : codes) {
    check_neighbours(ref::kFP32, nullptr, c, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Random windows over the whole range: far below the smallest subnormal,
// through the subnormals, normals, and past the largest finite value.
TEST(Encode, RandomExactValuesMatchReferences) {
  ref::Rng rng(5);
  for (const Fmt& f : ref::kFloats) {
    SCOPED_TRACE(f.name);
    std::unique_ptr<TableEncoder> table;
    if (f.bytes < 4) table = std::make_unique<TableEncoder>(f);
    const int n = f.bytes == 4 ? 60000 : 40000;
    for (int i = 0; i < n; ++i) {
      const int width = 1 + int(rng() % 64);
      uint64_t mag = width == 64 ? rng() : rng() & ((uint64_t(1) << width) - 1);
      switch (rng() % 4) {
        case 0: mag |= uint64_t(1) << (width - 1); break;
        case 1: {  // p + 1 significant bits ending in 1: an exact tie for normal results
          const uint64_t body = (rng() | (uint64_t(1) << (f.p() - 1))) & ((uint64_t(1) << f.p()) - 1);
          mag = (2 * body + 1) << (rng() % uint64_t(64 - f.p()));
          break;
        }
        case 2: {  // a tie followed by a few more bits (just above) or preceded by ones (just below)
          const uint64_t body = (rng() | (uint64_t(1) << (f.p() - 1))) & ((uint64_t(1) << f.p()) - 1);
          mag = ((2 * body + 1) << 20) + ((rng() & 1) ? 1 : -1);
          break;
        }
        default: break;
      }
      if (mag == 0) mag = 1;
      const int lo = f.unit() - 70 - width, hi = f.emax() + 4 - width + 1;
      const int exp = lo + int(rng() % uint64_t(hi - lo + 1));
      const bool neg = rng() & 1;
      bool sticky = (rng() % 3) == 0;
      if (sticky && mag != 0) {  // keep only well-posed cases: the half bit lies inside mag
        const int top = 63 - std::countl_zero(mag) + exp;
        const int q = std::max(top, f.emin()) - f.mbits;
        if (q - exp < 1) sticky = false;
      }
      check_encode(f, table.get(), neg, mag, exp, sticky);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// The reducers' fast rounding of an fp32 sum into a narrower format equals the
// general encoder at every code, every midpoint between neighbouring codes,
// a float ulp either side of it, and random floats over the whole range.
TEST(Encode, FastFloatRoundingMatchesTheGeneralEncoder) {
  using prism::encode_float;
  using prism::round_float_to;
  auto general = [](Format f, float a, uint32_t* bits) {
    if (a == 0) {
      *bits = prism::zero_bits(f, std::signbit(a));
      return true;
    }
    int e;
    const float m = std::frexp(std::fabs(a), &e);
    const auto en = encode_float(f, std::signbit(a), uint64_t(std::ldexp(m, 24)), e - 24, false, Exceptions::IEEE);
    *bits = en.bits;
    return !en.overflow;
  };
  std::mt19937_64 rng(7);
  for (Format f : {Format::FP16, Format::BF16, Format::E4M3FN, Format::E4M3FNUZ, Format::E5M2, Format::E5M2FNUZ}) {
    std::vector<float> probes;
    const uint32_t codes = 1u << (8 * prism::info(f).bytes);
    for (uint32_t c = 0; c < codes; ++c) {
      if (prism::is_special(f, c)) continue;
      const float v = prism::to_float(f, c);
      probes.push_back(v);
      const uint32_t up = (c & prism::info(f).sign_bit) ? c - 1 : c + 1;  // the next code away from zero
      if (up < codes && !prism::is_special(f, up) && (up & ~prism::info(f).sign_bit) != 0) {
        const float w = prism::to_float(f, up);
        const float mid = float((double(v) + double(w)) / 2);
        probes.insert(probes.end(),
                      {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), std::nextafter(mid, -1e30f)});
      }
    }
    for (int i = 0; i < 200000; ++i) {
      uint32_t b = uint32_t(rng());
      if ((b & 0x7F800000u) == 0x7F800000u) continue;
      probes.push_back(prism::bits_float(b));
    }
    size_t fast = 0;
    for (float a : probes) {
      uint32_t got = 0, want = 0;
      const bool ok = general(f, a, &want);
      if (!round_float_to(f, a, &got)) {
        ASSERT_FALSE(ok) << prism::name(f) << " refused " << a << ", which does not overflow";
        continue;
      }
      ++fast;
      ASSERT_TRUE(ok) << prism::name(f) << ": fast path took " << a << ", which overflows";
      ASSERT_EQ(got, want) << prism::name(f) << ": " << a;
    }
    EXPECT_GT(fast, probes.size() / 4) << prism::name(f);
  }
}

TEST(Encode, OverflowUnderEachExceptionsPolicy) {
  for (const Fmt& f : ref::kFloats) {
    SCOPED_TRACE(f.name);
    const uint64_t ms = f.max_sig();
    const int me = f.max_exp();
    for (bool neg : {false, true}) {
      const uint32_t s = neg ? f.sign_bit() : 0;
      const uint32_t ieee = f.has_inf() ? f.inf_code() | s : f.cnan;
      const uint32_t sat = f.max_code() | s;
      // Exactly max: no overflow.
      EXPECT_EQ(enc(f, neg, ms, me, false, false).bits, f.max_code() | s);
      EXPECT_FALSE(enc(f, neg, ms, me, false, false).overflow);
      // Max plus half an ulp: a tie between max and the next (virtual) value.
      // Ties go to even: over for IEEE/FNUZ (max is odd), back to max for e4m3fn (max is even).
      const bool max_is_odd = (f.max_code() & 1) != 0;
      const prism::Encoded tie = enc(f, neg, 2 * ms + 1, me - 1, false, false);
      EXPECT_EQ(tie.overflow, max_is_odd);
      EXPECT_EQ(tie.bits, max_is_odd ? ieee : f.max_code() | s);
      // Just above the tie: overflow everywhere.
      for (bool sat_mode : {false, true}) {
        const prism::Encoded over = enc(f, neg, 2 * ms + 1, me - 1, true, sat_mode);
        EXPECT_TRUE(over.overflow);
        EXPECT_EQ(over.bits, sat_mode ? sat : ieee);
        const prism::Encoded huge = enc(f, neg, ~uint64_t(0), f.emax() + 10, false, sat_mode);
        EXPECT_TRUE(huge.overflow);
        EXPECT_EQ(huge.bits, sat_mode ? sat : ieee);
        EXPECT_EQ(prism::overflow_bits(F(f), neg, sat_mode ? Exceptions::SATURATE : Exceptions::IEEE),
                  sat_mode ? sat : ieee);
      }
      // Just below the tie: max, either policy.
      EXPECT_EQ(enc(f, neg, 4 * ms + 1, me - 2, true, true).bits, f.max_code() | s);
      EXPECT_FALSE(enc(f, neg, 4 * ms + 1, me - 2, true, false).overflow);
    }
  }
}

TEST(Encode, ZerosAndUnderflow) {
  for (const Fmt& f : ref::kFloats) {
    SCOPED_TRACE(f.name);
    const int u = f.unit();
    for (bool neg : {false, true}) {
      const uint32_t z = neg && f.has_neg_zero() ? f.sign_bit() : 0;
      const uint32_t tiny = 1 | (neg ? f.sign_bit() : 0);
      EXPECT_EQ(prism::zero_bits(F(f), neg), z);
      EXPECT_EQ(enc(f, neg, 0, 0, false, false).bits, z);
      EXPECT_EQ(enc(f, neg, 0, u - 100, true, false).bits, z);
      // Half the smallest subnormal is a tie with zero (even): zero, keeping the sign.
      EXPECT_EQ(enc(f, neg, 1, u - 1, false, false).bits, z);
      EXPECT_EQ(enc(f, neg, uint64_t(1) << 63, u - 64, false, false).bits, z);
      EXPECT_EQ(enc(f, neg, 1, u - 1, true, false).bits, tiny);
      EXPECT_EQ(enc(f, neg, uint64_t(1) << 63, u - 64, true, false).bits, tiny);
      EXPECT_EQ(enc(f, neg, (uint64_t(1) << 63) + 1, u - 64, false, false).bits, tiny);
      EXPECT_EQ(enc(f, neg, (uint64_t(1) << 63) - 1, u - 64, true, false).bits, z);
      EXPECT_EQ(enc(f, neg, ~uint64_t(0), u - 65, true, false).bits, z);
      EXPECT_EQ(enc(f, neg, ~uint64_t(0), u - 200, true, false).bits, z);
      EXPECT_EQ(enc(f, neg, 3, u - 2, false, false).bits, tiny);  // 3/4 of the smallest
      // The largest subnormal rounding up into the smallest normal.
      const uint64_t maxsub = (uint64_t(1) << f.mbits) - 1;
      EXPECT_EQ(enc(f, neg, 2 * maxsub + 1, u - 1, false, false).bits,
                (uint32_t(1) << f.mbits) | (neg ? f.sign_bit() : 0));
    }
  }
}

TEST(Encode, SpecialsAndLittleEndianAccess) {
  for (const Fmt& f : ref::kAll) {
    ref::Rng rng(f.code);
    for (int i = 0; i < 1000; ++i) {
      const uint32_t v = uint32_t(rng()) & f.mask();
      uint8_t buf[8] = {0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE};
      prism::store_bits(F(f), buf + 1, v);
      EXPECT_EQ(ref::load_le(buf + 1, f.bytes), v);
      EXPECT_EQ(buf[0], 0xEE);
      EXPECT_EQ(buf[1 + f.bytes], 0xEE) << "store_bits wrote past the element";
      EXPECT_EQ(prism::load_bits(F(f), buf + 1), v);
      if (f.is_float())
        EXPECT_EQ(prism::is_special(F(f), v), ref::is_special_code(f, v)) << f.name << hex(v);
      else
        EXPECT_FALSE(prism::is_special(F(f), v));
    }
  }
}

// ---------------------------------------------------------------- admission

int ceil_log2_ref(uint32_t r) {
  int k = 0;
  while ((uint64_t(1) << k) < r) ++k;
  return k;
}

TEST(Admission, RequiredWidthReproducesTheSeedTable) {
  const std::map<Format, int> seed = {{Format::FP32, 278},    {Format::BF16, 262}, {Format::FP16, 41},
                                      {Format::E5M2FNUZ, 34}, {Format::E5M2, 33},  {Format::E4M3FN, 19},
                                      {Format::E4M3FNUZ, 19}, {Format::INT8, 8},   {Format::INT32, 32}};
  for (auto [f, base] : seed) {
    const Fmt& rf = ref::fmt(uint8_t(f));
    if (rf.is_float()) {
      EXPECT_EQ(base, rf.emax() - rf.emin() + rf.p() + 1) << rf.name;  // seed 002's formula
    }
    for (uint32_t R : {1u, 2u, 3u, 4u, 5u, 64u, 65u, 256u, 1000u, 8192u, 8193u, 65535u})
      EXPECT_EQ(prism::required_width(f, R), base + ceil_log2_ref(R)) << rf.name << " R=" << R;
  }
  EXPECT_EQ(prism::required_width(Format::FP32, 256), 286);
  EXPECT_EQ(prism::required_width(Format::FP32, 65535), 294);
  EXPECT_EQ(prism::required_width(Format::FP32, 65535), prism::kMaxWidth);
  EXPECT_EQ(prism::required_width(Format::E4M3FN, 3), 21);
  for (uint32_t R : {1u, 2u, 3u, 4u, 7u, 8u, 9u, 1023u, 1024u, 1025u, 65535u})
    EXPECT_EQ(prism::ceil_log2(R), ceil_log2_ref(R)) << R;
}

TEST(Admission, RefusesTooNarrowWidthAndNamesTheRequiredOne) {
  for (const Fmt& f : ref::kAll) {
    for (uint32_t R : {1u, 2u, 3u, 64u, 256u, 65535u}) {
      prism::OpDesc d;
      d.dtype = F(f);
      d.out = f.is_float() ? F(f) : Format::INT32;
      d.policy = prism::Policy::KULISCH_FIXED;
      d.group = R;
      d.lanes = 16;
      const int need = (f.is_float() ? f.emax() - f.emin() + f.p() + 1 : f.bits()) + ceil_log2_ref(R);
      EXPECT_FALSE(prism::admission_error(d, need).has_value()) << f.name << " R=" << R;
      EXPECT_FALSE(prism::admission_error(d, need + 50).has_value()) << f.name << " R=" << R;
      const auto err = prism::admission_error(d, need - 1);
      ASSERT_TRUE(err.has_value()) << f.name << " R=" << R << " admitted at width " << need - 1;
      EXPECT_NE(err->find(std::to_string(need)), std::string::npos)
          << "message does not name the required width " << need << ": " << *err;
    }
  }
}

TEST(Admission, OtherRulesOfTheOp) {
  prism::OpDesc d;
  d.dtype = Format::FP32;
  d.out = Format::FP32;
  d.lanes = 8;
  for (uint32_t g : {0u, 65536u, 100000u}) {
    d.group = g;
    EXPECT_TRUE(prism::admission_error(d, prism::kMaxWidth).has_value()) << "group " << g;
  }
  d.group = 4;
  for (Format out : {Format::INT8, Format::INT32}) {  // float sums have no integer output
    d.out = out;
    EXPECT_TRUE(prism::admission_error(d, prism::kMaxWidth).has_value());
  }
  d.dtype = Format::INT8;
  d.out = Format::INT8;
  EXPECT_TRUE(prism::admission_error(d, prism::kMaxWidth).has_value()) << "int sums are int32 or float";
  for (const Fmt& o : ref::kFloats) {
    d.out = F(o);
    EXPECT_FALSE(prism::admission_error(d, prism::kMaxWidth).has_value()) << o.name;
  }
  d.out = Format::INT32;
  for (auto p : {prism::Policy::FP32_ARRIVAL, prism::Policy::KULISCH_FIXED, prism::Policy::FP32_BINOMIAL}) {
    d.policy = p;
    EXPECT_FALSE(prism::admission_error(d, prism::kMaxWidth).has_value());
  }
}

TEST(Names, PoliciesExceptionsTransportsRoundTrip) {
  using prism::Policy;
  for (auto [code, nm] :
       std::vector<std::pair<int, const char*>>{{1, "fp32_arrival"}, {2, "kulisch"}, {3, "fp32_binomial"}}) {
    const auto p = prism::policy_from_code(uint8_t(code));
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(uint8_t(*p), code);
    EXPECT_EQ(prism::policy_from_name(nm), p);
    EXPECT_EQ(prism::policy_from_name(prism::name(*p)), p);
  }
  EXPECT_EQ(prism::policy_from_name("kulisch_fixed"), Policy::KULISCH_FIXED);
  EXPECT_FALSE(prism::policy_from_code(0).has_value());
  EXPECT_FALSE(prism::policy_from_code(4).has_value());
  EXPECT_FALSE(prism::policy_from_name("KULISCH").has_value());
  EXPECT_EQ(prism::exceptions_from_code(1), Exceptions::IEEE);
  EXPECT_EQ(prism::exceptions_from_code(2), Exceptions::SATURATE);
  EXPECT_FALSE(prism::exceptions_from_code(0).has_value());
  EXPECT_FALSE(prism::exceptions_from_code(3).has_value());
  for (auto e : {Exceptions::IEEE, Exceptions::SATURATE}) EXPECT_EQ(prism::exceptions_from_name(prism::name(e)), e);
  EXPECT_FALSE(prism::exceptions_from_name("none").has_value());
  for (int c = 1; c <= 3; ++c) {
    const auto t = prism::transport_from_code(uint8_t(c));
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(uint8_t(*t), c);
  }
  EXPECT_STREQ(prism::name(prism::PartialTransport::AUTO), "auto");
  EXPECT_FALSE(prism::transport_from_code(0).has_value());
  EXPECT_FALSE(prism::transport_from_code(4).has_value());
}

// ---------------------------------------------------------------------------
// Closed sets (util/closed_set.hpp): each table names, parses and lists its
// set. The expected spellings and codes are docs/PROTOCOL.md's and
// docs/CONFIG.md's (and ref.hpp's format list), not the tables'.

TEST(ClosedSets, FormatsAreNamedParsedAndListedInCodeOrder) {
  std::string want;
  for (const ref::Fmt& rf : ref::kAll) {
    want += std::string(want.empty() ? "" : " ") + rf.name;
    const Format f = Format(rf.code);
    EXPECT_STREQ(prism::name(f), rf.name);
    EXPECT_EQ(prism::from_name<Format>(rf.name), f) << rf.name;
    EXPECT_EQ(prism::format_from_name(rf.name), f) << rf.name;
    EXPECT_EQ(prism::from_code<Format>(uint8_t(rf.code)), f) << rf.name;
    EXPECT_EQ(prism::format_from_code(uint8_t(rf.code)), f) << rf.name;
    EXPECT_GT(std::strlen(prism::doc(f)), 10u) << rf.name << " has a doc line";
  }
  EXPECT_EQ(prism::choices<Format>(), want);
  EXPECT_EQ(prism::choices<Format>(), "fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32");
  EXPECT_EQ(prism::choices_if<Format>(prism::is_float), "fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz");
  EXPECT_EQ(prism::count<Format>(), std::size(ref::kAll));
  for (int c : {0, 10, 255}) {
    EXPECT_FALSE(prism::from_code<Format>(uint8_t(c)).has_value()) << c;
    EXPECT_FALSE(prism::format_from_code(uint8_t(c)).has_value()) << c;
  }
  EXPECT_FALSE(prism::from_name<Format>("FP32").has_value()) << "names are lower case";
  EXPECT_FALSE(prism::from_name<Format>("").has_value());
  EXPECT_STREQ(prism::name(Format(42)), "?") << "a value off the wire that is no format";
}

TEST(ClosedSets, PoliciesTransportsAndExceptions) {
  using prism::PartialTransport;
  using prism::Policy;
  EXPECT_EQ(prism::choices<Policy>(), "fp32_arrival kulisch fp32_binomial");
  EXPECT_EQ(prism::choices<Policy>(", "), "fp32_arrival, kulisch, fp32_binomial");
  EXPECT_EQ(prism::from_name<Policy>("kulisch"), Policy::KULISCH_FIXED);
  EXPECT_EQ(prism::from_name<Policy>("kulisch_fixed"), Policy::KULISCH_FIXED) << "the alias parses";
  EXPECT_STREQ(prism::name(Policy::KULISCH_FIXED), "kulisch") << "and is never printed";
  // PROTOCOL.md: policy 1 FP32_ARRIVAL, 2 KULISCH_FIXED, 3 FP32_BINOMIAL.
  EXPECT_EQ(prism::from_code<Policy>(1), Policy::FP32_ARRIVAL);
  EXPECT_EQ(prism::from_code<Policy>(2), Policy::KULISCH_FIXED);
  EXPECT_EQ(prism::from_code<Policy>(3), Policy::FP32_BINOMIAL);
  for (int c = 0; c < 256; ++c)
    EXPECT_EQ(prism::policy_from_code(uint8_t(c)), prism::from_code<Policy>(uint8_t(c))) << c;
  EXPECT_EQ(prism::choices<PartialTransport>(), "rounded kulisch auto");
  for (int c = 0; c < 256; ++c)
    EXPECT_EQ(prism::transport_from_code(uint8_t(c)), prism::from_code<PartialTransport>(uint8_t(c))) << c;
  EXPECT_EQ(prism::choices<Exceptions>(), "ieee saturate");
  for (int c = 0; c < 256; ++c)
    EXPECT_EQ(prism::exceptions_from_code(uint8_t(c)), prism::from_code<Exceptions>(uint8_t(c))) << c;
  for (auto p : {Policy::FP32_ARRIVAL, Policy::KULISCH_FIXED, Policy::FP32_BINOMIAL})
    EXPECT_GT(std::strlen(prism::doc(p)), 10u);
}

// "Needs a Kulisch width" (op.hpp): KULISCH_FIXED over floats, every policy over integers.
TEST(ClosedSets, ExactWidthIsNeededByKulischAndByIntegers) {
  using prism::Policy;
  for (const ref::Fmt& rf : ref::kAll)
    for (auto p : {Policy::FP32_ARRIVAL, Policy::KULISCH_FIXED, Policy::FP32_BINOMIAL}) {
      prism::OpDesc d;
      d.dtype = Format(rf.code);
      d.policy = p;
      d.group = 8;
      const bool want = p == Policy::KULISCH_FIXED || rf.ebits == 0;
      EXPECT_EQ(prism::needs_exact_width(d), want) << rf.name << " " << prism::name(p);
      EXPECT_EQ(prism::exact_width_needed(d).has_value(), want) << rf.name;
    }
  prism::OpDesc d;  // fp32 at R = 8: 278 + 3 bits (ARITHMETIC.md; the example)
  d.group = 8;
  EXPECT_EQ(prism::exact_width_needed(d), 281);
  d.dtype = Format::INT32;
  d.policy = Policy::FP32_ARRIVAL;
  EXPECT_EQ(prism::exact_width_needed(d), 35);
}

// Every float format reaches its own kernel through the format-by-format
// dispatch (PRISM_FLOAT_DISPATCH, fp8_table), in every kernel set: one
// element added into a zero lane gives the element's value as ref.hpp
// decodes it. The integer formats reach no float kernel: they throw.
TEST(ClosedSets, FloatDispatchCoversEveryFormatAndNoIntegerOne) {
  const std::vector<const prism::Kernels*> sets = prism::kernel_sets();
  for (const auto* k : sets)
    for (const auto& e : prism::entries(Format{})) {
      const ref::Fmt& rf = ref::fmt(uint8_t(e.value));
      SCOPED_TRACE(std::string(k->name) + " " + e.name);
      if (!prism::is_float(e.value)) {
        double acc[1] = {0};
        uint8_t el[4] = {1, 0, 0, 0};
        EXPECT_THROW(k->add_f64(e.value, acc, el, 1), std::logic_error);
        EXPECT_EQ(prism::fp8_table(e.value), nullptr);
        continue;
      }
      EXPECT_EQ(prism::fp8_table(e.value) != nullptr, rf.bytes == 1);
      std::vector<uint32_t> codes;
      for (uint32_t c = 1; codes.size() < 40; c = c * 3 + 1) {
        const uint32_t code = c & rf.mask();
        if (!ref::is_special_code(rf, code)) codes.push_back(code);
      }
      const std::vector<uint8_t> el = ref::pack(rf, codes);
      std::vector<double> acc64(codes.size(), 0.0);
      std::vector<float> acc32(codes.size(), 0.0f);
      k->add_f64(e.value, acc64.data(), el.data(), uint32_t(codes.size()));
      k->add_f32(e.value, acc32.data(), el.data(), uint32_t(codes.size()));
      for (size_t i = 0; i < codes.size(); ++i) {
        const float want = ref::to_f32(rf, codes[i]);
        EXPECT_EQ(acc64[i], double(want)) << "code " << codes[i];
        EXPECT_EQ(acc32[i], want) << "code " << codes[i];
      }
    }
}

}  // namespace
