// Element formats of PRISM: exact decoding and correctly rounded encoding.
//
// Every finite value of every float format is an integer significand times a
// power of two, so decoding is exact: (class, sign, sig, exp) with
// value = (-1)^neg * sig * 2^exp. Subnormals are ordinary values here; nothing
// is ever flushed to zero. Encoding takes an exact value (a 64-bit window of
// its magnitude plus a sticky bit for anything below the window) and rounds it
// once, to nearest with ties to even.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "prism/types.hpp"
#include "util/closed_set.hpp"

namespace prism {

// Format, Exceptions and their wire codes: prism/types.hpp (the public vocabulary).
inline constexpr int kFormatCount = 9;  // detail::kInfo has a row for each, in code order

inline constexpr size_t kExceptionsCount = 2;
inline constexpr Entry<Exceptions> kExceptions[] = {
    {Exceptions::IEEE, "ieee", "an overflow becomes an infinity (NaN where the format has none)"},
    {Exceptions::SATURATE, "saturate", "an overflow becomes the largest finite value of its sign"},
};
static_assert(std::size(kExceptions) == kExceptionsCount, "every Exceptions has a row in kExceptions");
constexpr std::span<const Entry<Exceptions>> entries(Exceptions) { return kExceptions; }
static_assert(codes_in_order<Exceptions>(1), "exceptions_from_code() range-checks the codes");
inline const char* name(Exceptions e) { return prism::name<Exceptions>(e); }
inline std::optional<Exceptions> exceptions_from_name(std::string_view s) { return from_name<Exceptions>(s); }
inline std::optional<Exceptions> exceptions_from_code(uint8_t c) {  // inline: parse() runs it per packet
  if (c >= 1 && c <= kExceptionsCount) return Exceptions(c);
  return std::nullopt;
}

// How a format spells NaN: IEEE (all-ones exponent, non-zero mantissa),
// FN (all-ones exponent and mantissa, no Inf), FNUZ (0x80 only: no Inf, no -0).
enum class NanStyle : uint8_t { IEEE, FN, FNUZ, None };

struct FormatInfo {
  Format format;
  const char* name;  // command-line and config spelling: "fp32", "e4m3fn", ...
  const char* doc;   // one line for help texts and docs
  uint8_t bytes;     // element size on the wire
  bool is_float;
  int ebits, mbits;  // exponent and stored mantissa bits
  int bias;
  int p;           // significand precision, implicit bit included
  int emin, emax;  // unbiased exponent range of normal numbers
  NanStyle nan_style;
  bool has_inf;
  bool has_neg_zero;
  uint32_t sign_bit;
  uint32_t max_finite;     // bits of the largest finite value (positive)
  uint32_t canonical_nan;  // bits of the NaN PRISM outputs
  uint32_t inf;            // bits of +Inf (0 when the format has none)
  int unit_exp;            // exponent of the smallest positive value (emin - p + 1); 0 for ints
};

namespace detail {
constexpr FormatInfo make_float(Format f, const char* name, const char* doc, uint8_t bytes, int ebits, int mbits,
                                int bias, NanStyle ns, uint32_t max_finite, uint32_t cnan) {
  const int emax_field = (1 << ebits) - 1;
  // IEEE formats reserve the all-ones exponent; FN and FNUZ formats use it for finite values.
  const int emax = (ns == NanStyle::IEEE ? emax_field - 1 : emax_field) - bias;
  const int emin = 1 - bias;
  const int p = mbits + 1;
  const bool has_inf = ns == NanStyle::IEEE;
  const uint32_t inf = has_inf ? uint32_t(emax_field) << mbits : 0;
  return FormatInfo{f,
                    name,
                    doc,
                    bytes,
                    true,
                    ebits,
                    mbits,
                    bias,
                    p,
                    emin,
                    emax,
                    ns,
                    has_inf,
                    ns != NanStyle::FNUZ,
                    1u << (ebits + mbits),
                    max_finite,
                    cnan,
                    inf,
                    emin - p + 1};
}
inline constexpr FormatInfo kInfo[kFormatCount] = {
    make_float(Format::FP32, "fp32", "IEEE 754 binary32 (8 exponent, 23 mantissa bits)", 4, 8, 23, 127, NanStyle::IEEE,
               0x7F7FFFFF, 0x7FC00000),
    make_float(Format::FP16, "fp16", "IEEE 754 binary16 (5 exponent, 10 mantissa bits)", 2, 5, 10, 15, NanStyle::IEEE,
               0x7BFF, 0x7E00),
    make_float(Format::BF16, "bf16", "bfloat16: fp32's exponent range, 7 mantissa bits", 2, 8, 7, 127, NanStyle::IEEE,
               0x7F7F, 0x7FC0),
    make_float(Format::E4M3FN, "e4m3fn", "OCP FP8 E4M3: no infinities, NaN is S.1111.111", 1, 4, 3, 7, NanStyle::FN,
               0x7E, 0x7F),
    make_float(Format::E4M3FNUZ, "e4m3fnuz", "FP8 E4M3, bias 8: no infinities, no -0, NaN is 0x80", 1, 4, 3, 8,
               NanStyle::FNUZ, 0x7F, 0x80),
    make_float(Format::E5M2, "e5m2", "OCP FP8 E5M2: IEEE infinities and NaNs", 1, 5, 2, 15, NanStyle::IEEE, 0x7B, 0x7E),
    make_float(Format::E5M2FNUZ, "e5m2fnuz", "FP8 E5M2, bias 16: no infinities, no -0, NaN is 0x80", 1, 5, 2, 16,
               NanStyle::FNUZ, 0x7F, 0x80),
    // Integers: p is the width, for the admission formula.
    FormatInfo{Format::INT8, "int8", "two's-complement 8-bit integer (summed exactly, output as int32 or a float)", 1,
               false, 0, 0, 0, 8, 0, 0, NanStyle::None, false, false, 0x80, 0x7F, 0, 0, 0},
    FormatInfo{Format::INT32, "int32", "two's-complement 32-bit integer (summed exactly)", 4, false, 0, 0, 0, 32, 0, 0,
               NanStyle::None, false, false, 0x80000000u, 0x7FFFFFFF, 0, 0, 0},
};
// The formats' closed-set rows, read off kInfo: kInfo is the one list of formats.
constexpr std::array<Entry<Format>, kFormatCount> format_entries() {
  std::array<Entry<Format>, kFormatCount> a{};
  for (int i = 0; i < kFormatCount; ++i) a[size_t(i)] = {kInfo[i].format, kInfo[i].name, kInfo[i].doc};
  return a;
}
inline constexpr std::array<Entry<Format>, kFormatCount> kFormatEntries = format_entries();
constexpr bool info_rows_in_code_order() {
  for (int i = 0; i < kFormatCount; ++i) {
    const FormatInfo& fi = kInfo[i];
    if (uint8_t(fi.format) != i + 1 || fi.name == nullptr || fi.doc == nullptr) return false;
    if (fi.bytes != 1 && fi.bytes != 2 && fi.bytes != 4) return false;  // the kernels' element widths
  }
  return true;
}
static_assert(info_rows_in_code_order(),
              "kInfo has one row per Format, in code order (a missing row reads as 0), each 1, 2 or 4 bytes");
}  // namespace detail

constexpr std::span<const Entry<Format>> entries(Format) { return detail::kFormatEntries; }

constexpr const FormatInfo& info(Format f) { return detail::kInfo[uint8_t(f) - 1]; }
inline std::optional<Format> format_from_code(uint8_t code) {  // inline: parse() runs it per packet
  if (code < 1 || code > kFormatCount) return std::nullopt;
  return Format(code);
}
inline std::optional<Format> format_from_name(std::string_view s) { return from_name<Format>(s); }
// "?" for a value off the wire that is no format (info() must not see one).
inline const char* name(Format f) { return uint8_t(f) >= 1 && uint8_t(f) <= kFormatCount ? info(f).name : "?"; }
inline bool is_float(Format f) { return info(f).is_float; }

enum class FpClass : uint8_t { Zero, Subnormal, Normal, Inf, NaN };

// value = (-1)^neg * sig * 2^exp for finite classes; integers decode with exp 0.
struct Decoded {
  FpClass cls;
  bool neg;
  uint32_t sig;
  int exp;
};

Decoded decode(Format f, uint32_t bits);

// Raw element access, little-endian on the wire.
inline uint32_t load_bits(Format f, const uint8_t* p) {
  switch (info(f).bytes) {
    case 1: return p[0];
    case 2: return uint32_t(p[0]) | uint32_t(p[1]) << 8;
    default: return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
}
inline void store_bits(Format f, uint8_t* p, uint32_t v) {
  switch (info(f).bytes) {
    case 1: p[0] = uint8_t(v); break;
    case 2:
      p[0] = uint8_t(v);
      p[1] = uint8_t(v >> 8);
      break;
    default:
      p[0] = uint8_t(v);
      p[1] = uint8_t(v >> 8);
      p[2] = uint8_t(v >> 16);
      p[3] = uint8_t(v >> 24);
  }
}

// True when `bits` is a NaN or an infinity of `f` (integers: never).
bool is_special(Format f, uint32_t bits);

struct Encoded {
  uint32_t bits;
  bool overflow;  // the rounded magnitude exceeded the format's largest finite value
};

// Rounds the exact magnitude (mag + frac) * 2^exp, where frac is in (0,1) when
// `sticky` is set and 0 otherwise, to the float format `f` (round to nearest,
// ties to even). A zero magnitude gives a zero with the given sign (+0 where
// the format has no -0). Overflow gives +-Inf (or the canonical NaN for
// formats without Inf) under IEEE and +-max finite under SATURATE.
Encoded encode_float(Format f, bool neg, uint64_t mag, int exp, bool sticky, Exceptions ex);

// The bits an out-of-range result takes under `ex` (sign applied where the format allows).
uint32_t overflow_bits(Format f, bool neg, Exceptions ex);
// Signed zero of `f` (+0 when the format has no -0).
uint32_t zero_bits(Format f, bool neg);

// Round to nearest even of a finite fp32 value into the float format `f`
// narrower than fp32, by the hardware's own rounding (one add and one
// subtract at the format's quantum) and bit moves: the reducers' fast path
// to a result. False when the rounded value overflows `f`: the general path
// (encode_float) then applies the exceptions mode and raises the flag.
bool round_float_to(Format f, float a, uint32_t* bits);

// Exact conversions used by the reducers' fast paths.
float to_float(Format f, uint32_t bits);  // every float format converts to fp32 exactly
inline uint32_t float_bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float bits_float(uint32_t b) { return std::bit_cast<float>(b); }
inline double bits_double(uint64_t b) { return std::bit_cast<double>(b); }
inline uint64_t double_bits(double x) { return std::bit_cast<uint64_t>(x); }

// `v` rounded once into format `f`: to nearest (ties away from zero for the
// integer formats, the format's own rounding for the float ones), saturating
// at the largest finite magnitude (an integer format's at +-(2^(bits-1) - 1),
// symmetric, so a negated value is representable too).
inline uint32_t encode_double(Format f, double v) {
  if (f == Format::INT8) return uint32_t(uint8_t(int8_t(std::clamp(std::llround(v), -127LL, 127LL))));
  if (f == Format::INT32) return uint32_t(int32_t(std::clamp(std::llround(v), -2147483647LL, 2147483647LL)));
  if (v == 0) return zero_bits(f, std::signbit(v));
  int e;
  const double m = std::frexp(std::fabs(v), &e);
  return encode_float(f, v < 0, uint64_t(std::ldexp(m, 53)), e - 53, false, Exceptions::SATURATE).bits;
}

}  // namespace prism
