// The reducers' inner loops, one packet's worth of lanes per call.
//
// Two implementations with identical results: a portable one (plain C++) and
// an AVX2/FMA/F16C one chosen at run time when the CPU has them. Each kernel
// works on `n` lanes: element i of the packet updates lane i, so a packet's
// lanes update different memory and the loops vectorise across lanes.
#pragma once

#include <cstdint>
#include <vector>

#include "format/format.hpp"

namespace prism {

struct Kernels {
  const char* name;
  // True when any of the n elements is a NaN or an infinity.
  bool (*any_special)(Format f, const uint8_t* e, uint32_t n);
  // acc[i] = fl32(acc[i] + float(e[i])): FP32 arrival order. No specials in e.
  // Cost (AVX2, fp32): one load, one add, one store per 8 lanes.
  void (*add_f32)(Format f, float* acc, const uint8_t* e, uint32_t n);
  // acc[i] += double(e[i]) where the caller has proved every sum exact (by
  // the format's range and R, or by the op's exponent window). No specials in e.
  void (*add_f64)(Format f, double* acc, const uint8_t* e, uint32_t n);
  // acc[i] += double(e[i]) only where that addition is exact; returns how
  // many lanes it left unchanged (specials, or a sum that would round) and
  // writes their indices to `left`. Exactness test: s = a + b is exact iff
  // s - a == b and s - b == a (Fast2Sum's error term is zero for the larger
  // operand). Cost (AVX2): ~13 uops per 4 lanes.
  uint32_t (*add_f64_checked)(Format f, double* acc, const uint8_t* e, uint32_t n, uint32_t* left);
  // The same with fp32 lanes, for formats of at most 11 significant bits
  // (bf16, fp16): 8 lanes per vector. Both checked adds screen the specials
  // of fp32, fp16 and bf16, the formats that use them (KulischWide); the
  // AVX2 ones read an fp8 special as a finite value.
  uint32_t (*add_f32_checked)(Format f, float* acc, const uint8_t* e, uint32_t n, uint32_t* left);
  // Widens [*lo, *hi] to the biased exponent fields of the non-zero elements
  // (subnormals count as field 1: their last bit is the format's unit). An
  // all-ones field (a special in IEEE formats) shows up as hi. Cost (AVX2):
  // ~8 uops per vector of elements.
  void (*exp_range)(Format f, const uint8_t* e, uint32_t n, uint32_t* lo, uint32_t* hi);
  // acc[i] += int(e[i]) for int8/int32 elements.
  void (*add_i64)(Format f, int64_t* acc, const uint8_t* e, uint32_t n);
  // dst[i] = round_float_to(out, in[i]), in out's wire encoding, for a float
  // format narrower than fp32. False (dst then unspecified) when some lane
  // has no such rounding: a NaN, an infinity or an overflow, which the caller
  // handles lane by lane. Cost (AVX2): ~25 uops per 8 lanes, no branches.
  bool (*round_f32)(Format out, const float* in, uint32_t n, uint8_t* dst);
  // out[i] = in[i] rounded to a float by round-to-odd: truncated, then its
  // last bit set when that was inexact. Rounding such a float again into a
  // format of at most 22 significant bits (bf16, fp16, fp8) gives the
  // double's own correctly rounded value: no double rounding (Boldo and
  // Melquiond, 2008). False when a lane is a NaN, an infinity or beyond the
  // float range. Cost (AVX2): ~12 uops per 4 lanes.
  bool (*odd_f64)(const double* in, uint32_t n, float* out);
  // FP32 arrival order with the specials screened in the same pass: for each
  // lane whose element is finite, acc[i] = float(e[i]) when `first` (the
  // op's first term: -0 + x == x), else fl32(acc[i] + float(e[i])). A lane
  // whose element is a NaN or an infinity is left for the caller (acc[i] =
  // -0 when `first`, else unchanged) and its index written to `left`;
  // returns how many. Cost (AVX2, fp32): ~9 uops per 8 lanes, one pass over
  // the packet instead of any_special's and add_f32's two.
  uint32_t (*add_f32_screened)(Format f, float* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left);
  // add_f64 with the specials screened in the same pass: for each lane whose
  // element is finite, acc[i] = double(e[i]) when `first`, else acc[i] +=
  // double(e[i]) (the caller has proved those sums exact); a lane whose
  // element is a NaN or an infinity is left for the caller (acc[i] = -0 when
  // `first`, else unchanged) and its index written to `left`; returns how many.
  uint32_t (*add_f64_screened)(Format f, double* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left);
  // out[i] = in[i] rounded to the nearest float, ties to even (exact sums
  // in double lanes, rounded once into an fp32 result). False when some
  // result is not finite: a NaN or infinite input, or an overflow. Cost
  // (AVX2): ~5 uops per 4 lanes.
  bool (*narrow_f64)(const double* in, uint32_t n, float* out);
  // dst[i] = in[i] rounded once into `out` (a float format narrower than
  // fp32), to nearest, ties to even, in out's wire encoding: odd_f64 then
  // round_f32, fused. False as round_f32 is (a NaN, an infinity or an
  // overflow). Cost (AVX2, fp16): ~25 uops per 8 lanes where odd_f64 and
  // round_f32 take ~40.
  bool (*round_f64)(Format out, const double* in, uint32_t n, uint8_t* dst);
  // acc[i] = fl32(acc[i] + e[i]), then out[i] = acc[i], for n fp32 elements
  // in one pass (`out` may be `e`): the least data work a reducer can do for
  // a contribution, which the bench's ideal reducer does and nothing else
  // (the bench's IdealWork, app/bench_baselines.hpp). Cost (AVX2): 2 loads, 1 add, 2 stores per 8 lanes.
  void (*add_f32_out)(float* acc, const uint8_t* e, uint8_t* out, uint32_t n);

  // Exact partials as doubles (a Kulisch accumulator's lanes, each a finite
  // whole number of lane units) and packed lanes (proto/packed_lanes.hpp).
  // scan_f64: the largest |v[i]|'s bits (sign cleared); *neg_zero set when
  // a lane is -0 (left unchanged otherwise).
  uint64_t (*scan_f64)(const double* v, uint32_t n, bool* neg_zero);
  // fix_f64: x[i] = v[i] * scale as an integer, scale a power of two with
  // every |v[i] * scale| < 2^51 (the caller's, from scan_f64); *any |= every
  // x[i]. Returns non-zero when some v[i] * scale is not a whole number (the
  // lanes span more than 51 bits). Cost (AVX2): ~7 uops per 4 lanes (a
  // multiply and the magic-number conversion).
  uint64_t (*fix_f64)(const double* v, uint32_t n, double scale, int64_t* x, uint64_t* any);
  // unfix_f64: out[i] = x * scale, x the w-byte (1..6) little-endian two's
  // complement integer at d + i * w; 16 bytes must be readable there.
  void (*unfix_f64)(const uint8_t* d, uint32_t n, uint32_t w, double scale, double* out);
  // exact_f32: float(in[i]) as 4 little-endian bytes at out + 4 i (any
  // alignment: a message's payload); whether every lane was exactly a float
  // (a NaN is not): when not, out is unspecified. Cost (AVX2): ~5 uops per 4 lanes.
  bool (*exact_f32)(const double* in, uint32_t n, uint8_t* out);
  // pack_i64: x[i] >> tz (arithmetic) as w bytes (1..8) at out + i * w,
  // little-endian; out must have 16 bytes of room past n * w.
  void (*pack_i64)(const int64_t* x, uint32_t n, int tz, uint32_t w, uint8_t* out);

  // Pairs: a Kulisch lane as two doubles, hi + lo (KulischWide's double
  // lanes): hi takes each add rounded, lo the add's exact error (TwoSum)
  // while lo's own sum stays exact; sums over 60 binades stay out of the bank.
  // add_pairs: lane i += v[i]: s = hi + v, err its TwoSum error; where err is
  // 0, hi = s (an exact add, lo untouched); else, where lo + err is exact,
  // hi = s and lo += err (*low set). Other lanes (a NaN hi, a non-finite v,
  // an overflow, a lo that would round) are left unchanged and their indices
  // written to `left`; returns how many. Cost (AVX2): ~9 uops per 4 lanes
  // while no lane has an error; ~20 with one.
  uint32_t (*add_pairs)(double* hi, double* lo, const double* v, uint32_t n, uint32_t* left, bool* low);
  // add_f32_pairs: the same for n fp32 elements (4 bytes each, any alignment).
  uint32_t (*add_f32_pairs)(double* hi, double* lo, const uint8_t* e, uint32_t n, uint32_t* left, bool* low);
  // normalize_pairs: each lane with lo != 0 becomes (RN(hi + lo), the exact
  // rest), so lo != 0 only where the value needs more than 53 bits; a NaN
  // hi's lo is set to 0. Returns whether a lo is still non-zero.
  bool (*normalize_pairs)(double* hi, double* lo, uint32_t n);
  // narrow_pairs: hi + lo (hi itself where lo == 0, so -0 stays -0) rounded
  // once to the nearest float, ties to even, as 4 little-endian bytes at
  // out + 4 i: hi + lo rounded to odd in a double, then to a float (53 >= 24
  // + 2 bits: no double rounding). False when a result is not finite (a NaN
  // lane, an overflow): out is then unspecified.
  bool (*narrow_pairs)(const double* hi, const double* lo, uint32_t n, uint8_t* out);
};

// round_f64 by its two steps, 64 lanes at a time through a float buffer on
// the stack: `odd` and `round` are a kernel set's odd_f64 and round_f32.
template <class Odd, class Round>
bool round_f64_by_odd(Odd odd, Round round, Format out, const double* in, uint32_t n, uint8_t* dst) {
  float f[64];
  const uint32_t osz = info(out).bytes;
  for (uint32_t at = 0; at < n; at += 64) {
    const uint32_t m = n - at < 64 ? n - at : 64;
    if (!odd(in + at, m, f) || !round(out, f, m, dst + size_t(at) * osz)) return false;
  }
  return true;
}

const Kernels& portable_kernels();
// Null when the CPU lacks AVX2, FMA or F16C.
const Kernels* avx2_kernels();
// Every set this CPU runs: portable, then avx2 where available.
std::vector<const Kernels*> kernel_sets();
// The fastest available; PRISM_KERNELS=portable in the environment forces the portable ones.
const Kernels& best_kernels();

// fp8 code -> exact fp32 value, one 256-entry table per fp8 format (NaN ->
// quiet NaN). Null for a format that is not fp8.
const float* fp8_table(Format f);
float fp16_to_float(uint16_t h);

// Throws std::logic_error: a float kernel was asked for an integer format
// (or a value that is no format). The callers' admission keeps this from
// happening; a kernel never runs another format's code instead.
[[noreturn]] void not_a_float_format(Format f, const char* kernel);

// Calls fn<F>(args...) for the float format f (kernel implementations only).
// Exhaustive: every Format has its case (-Werror=switch), the integer
// formats go to not_a_float_format(), never to a float kernel.
#define PRISM_FLOAT_DISPATCH(fn, f, ...)                             \
  switch (f) {                                                       \
    case Format::FP32: return fn<Format::FP32>(__VA_ARGS__);         \
    case Format::FP16: return fn<Format::FP16>(__VA_ARGS__);         \
    case Format::BF16: return fn<Format::BF16>(__VA_ARGS__);         \
    case Format::E4M3FN: return fn<Format::E4M3FN>(__VA_ARGS__);     \
    case Format::E4M3FNUZ: return fn<Format::E4M3FNUZ>(__VA_ARGS__); \
    case Format::E5M2: return fn<Format::E5M2>(__VA_ARGS__);         \
    case Format::E5M2FNUZ: return fn<Format::E5M2FNUZ>(__VA_ARGS__); \
    case Format::INT8:                                               \
    case Format::INT32: break;                                       \
  }                                                                  \
  not_a_float_format(f, #fn);

}  // namespace prism
