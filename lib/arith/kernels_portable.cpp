#include <cpuid.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "arith/kernels.hpp"

namespace prism {
namespace {

struct Fp8Tables {
  float t[4][256];
  Fp8Tables() {
    const Format fs[4] = {Format::E4M3FN, Format::E4M3FNUZ, Format::E5M2, Format::E5M2FNUZ};
    for (int k = 0; k < 4; ++k)
      for (int c = 0; c < 256; ++c) t[k][c] = to_float(fs[k], uint32_t(c));
  }
};
const Fp8Tables& tables() {
  static const Fp8Tables t;
  return t;
}

template <Format F>
inline float elem_float(const uint8_t* e, uint32_t i, const float* table) {
  if constexpr (F == Format::FP32) {
    float x;
    std::memcpy(&x, e + 4 * i, 4);
    return x;
  } else if constexpr (F == Format::FP16) {
    return fp16_to_float(uint16_t(e[2 * i] | e[2 * i + 1] << 8));
  } else if constexpr (F == Format::BF16) {
    return bits_float(uint32_t(e[2 * i] | e[2 * i + 1] << 8) << 16);
  } else {
    return table[e[i]];
  }
}

inline const float* table_for(Format f) { return fp8_table(f); }  // null but for fp8

template <Format F>
void add_f32_t(float* acc, const uint8_t* e, uint32_t n) {
  const float* t = table_for(F);
  for (uint32_t i = 0; i < n; ++i) acc[i] += elem_float<F>(e, i, t);
}
void add_f32_out(float* acc, const uint8_t* e, uint8_t* out, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, e + 4 * size_t(i), 4);
    acc[i] += x;
    std::memcpy(out + 4 * size_t(i), &acc[i], 4);
  }
}
template <Format F>
void add_f64_t(double* acc, const uint8_t* e, uint32_t n) {
  const float* t = table_for(F);
  for (uint32_t i = 0; i < n; ++i) acc[i] += double(elem_float<F>(e, i, t));
}
template <Format F>
uint32_t add_f64_checked_t(double* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  const float* t = table_for(F);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const double a = acc[i], b = double(elem_float<F>(e, i, t));
    const double s = a + b;
    if (s - a == b && s - b == a)
      acc[i] = s;
    else
      left[k++] = i;
  }
  return k;
}
template <Format F>
uint32_t add_f32_checked_t(float* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  const float* t = table_for(F);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const float a = acc[i], b = elem_float<F>(e, i, t);
    const float s = a + b;
    if (s - a == b && s - b == a)
      acc[i] = s;
    else
      left[k++] = i;
  }
  return k;
}
uint32_t add_f32_checked(Format f, float* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_f32_checked_t, f, acc, e, n, left)
}
void add_f32(Format f, float* acc, const uint8_t* e, uint32_t n) { PRISM_FLOAT_DISPATCH(add_f32_t, f, acc, e, n) }
void add_f64(Format f, double* acc, const uint8_t* e, uint32_t n) { PRISM_FLOAT_DISPATCH(add_f64_t, f, acc, e, n) }
uint32_t add_f64_checked(Format f, double* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_f64_checked_t, f, acc, e, n, left)
}

// Specials by bit pattern: (x & mask) == value.
struct SpecialPattern {
  uint32_t mask, value;
};
SpecialPattern special_pattern(Format f) {
  switch (f) {
    case Format::FP32: return {0x7F800000, 0x7F800000};
    case Format::FP16: return {0x7C00, 0x7C00};
    case Format::BF16: return {0x7F80, 0x7F80};
    case Format::E4M3FN: return {0x7F, 0x7F};
    case Format::E5M2: return {0x7C, 0x7C};
    case Format::E4M3FNUZ:
    case Format::E5M2FNUZ: return {0xFF, 0x80};
    case Format::INT8:
    case Format::INT32: break;
  }
  return {0, 1};  // integers (and no format): never
}

bool any_special(Format f, const uint8_t* e, uint32_t n) {
  const SpecialPattern sp = special_pattern(f);
  const uint32_t sz = info(f).bytes;
  bool hit = false;
  for (uint32_t i = 0; i < n; ++i) hit |= (load_bits(f, e + i * sz) & sp.mask) == sp.value;
  return hit;
}

// add_f32_screened and add_f64_screened: T is the lanes' type.
template <Format F, typename T>
uint32_t add_screened_t(T* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left) {
  const float* t = table_for(F);
  const SpecialPattern sp = special_pattern(F);
  const uint32_t sz = info(F).bytes;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if ((load_bits(F, e + i * sz) & sp.mask) == sp.value) {
      if (first) acc[i] = T(-0.0);
      left[k++] = i;
    } else {
      const T x = T(elem_float<F>(e, i, t));
      acc[i] = first ? x : acc[i] + x;
    }
  }
  return k;
}
uint32_t add_f32_screened(Format f, float* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_screened_t, f, acc, e, n, first, left)
}
uint32_t add_f64_screened(Format f, double* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_screened_t, f, acc, e, n, first, left)
}

void exp_range(Format f, const uint8_t* e, uint32_t n, uint32_t* lo, uint32_t* hi) {
  const FormatInfo& fi = info(f);
  const uint32_t emask = (1u << fi.ebits) - 1, magmask = fi.sign_bit - 1;
  uint32_t l = *lo, h = *hi;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t x = load_bits(f, e + i * fi.bytes) & magmask;
    if (x == 0) continue;
    const uint32_t ex = (x >> fi.mbits) & emask;
    l = std::min(l, std::max(ex, 1u));
    h = std::max(h, ex);
  }
  *lo = l;
  *hi = h;
}

void add_i64(Format f, int64_t* acc, const uint8_t* e, uint32_t n) {
  if (f == Format::INT8) {
    for (uint32_t i = 0; i < n; ++i) acc[i] += int8_t(e[i]);
  } else {
    for (uint32_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, e + 4 * i, 4);
      acc[i] += v;
    }
  }
}

}  // namespace

float fp16_to_float(uint16_t h) {
  const uint32_t s = uint32_t(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0x1F) return bits_float(s | 0x7F800000 | (m << 13) | (m ? 0x400000 : 0));
  if (e != 0) return bits_float(s | ((e + 112) << 23) | (m << 13));
  const float v = float(m) * 0x1p-24f;  // subnormal or zero: exact
  return s ? -v : v;
}

namespace {
bool round_f32(Format out, const float* in, uint32_t n, uint8_t* dst) {
  const uint32_t osz = info(out).bytes;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t bits;
    if (!round_float_to(out, in[i], &bits)) return false;
    store_bits(out, dst + i * osz, bits);
  }
  return true;
}
bool odd_f64(const double* in, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) {
    const double v = in[i];
    if (!(std::fabs(v) <= double(std::numeric_limits<float>::max()))) return false;  // NaN, infinity, too large
    float f = float(v);                                                              // to nearest
    if (double(f) != v) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      if (std::fabs(double(f)) > std::fabs(v)) --b;  // rounded away from zero: truncate instead
      b |= 1u;                                       // inexact: odd
      std::memcpy(&f, &b, 4);
    }
    out[i] = f;
  }
  return true;
}
bool narrow_f64(const double* in, uint32_t n, float* out) {
  bool ok = true;
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = float(in[i]);
    ok &= std::isfinite(out[i]);
  }
  return ok;
}
bool round_f64(Format out, const double* in, uint32_t n, uint8_t* dst) {
  return round_f64_by_odd(odd_f64, round_f32, out, in, n, dst);
}

// Pairs (kernels.hpp). One lane of add_pairs: 0 done, 1 left.
inline bool add_pair(double& hi, double& lo, double b, bool& low) {
  const double a = hi, s = a + b, bb = s - a, err = (a - (s - bb)) + (b - bb);
  if (err == 0) {  // false for a NaN: a NaN operand or an overflow
    hi = s;
    return false;
  }
  const double l = lo, t = l + err;
  if (t - l == err && t - err == l) {
    hi = s;
    lo = t;
    low = true;
    return false;
  }
  return true;
}
uint32_t add_pairs(double* hi, double* lo, const double* v, uint32_t n, uint32_t* left, bool* low) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (add_pair(hi[i], lo[i], v[i], *low)) left[k++] = i;
  return k;
}
uint32_t add_f32_pairs(double* hi, double* lo, const uint8_t* e, uint32_t n, uint32_t* left, bool* low) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, e + size_t(i) * 4, 4);
    if (add_pair(hi[i], lo[i], double(x), *low)) left[k++] = i;
  }
  return k;
}
bool normalize_pairs(double* hi, double* lo, uint32_t n) {
  bool any = false;
  for (uint32_t i = 0; i < n; ++i) {
    const double l = lo[i];
    if (l == 0) continue;
    const double h = hi[i];
    if (std::isnan(h)) {
      lo[i] = 0;
      continue;
    }
    const double s = h + l, bb = s - h, err = (h - (s - bb)) + (l - bb);
    hi[i] = s;
    lo[i] = err;
    any |= err != 0;
  }
  return any;
}
bool narrow_pairs(const double* hi, const double* lo, uint32_t n, uint8_t* out) {
  bool bad = false;
  for (uint32_t i = 0; i < n; ++i) {
    const double h = hi[i], l = lo[i];
    double r = h;
    if (l != 0) {
      const double s = h + l, bb = s - h, err = (h - (s - bb)) + (l - bb);
      uint64_t b = std::bit_cast<uint64_t>(s);
      if (err != 0 && !(b & 1)) b += (err > 0) == (s > 0) ? 1 : uint64_t(-1);  // toward the exact value
      r = std::bit_cast<double>(b);
    }
    const float f = float(r);
    bad |= !std::isfinite(f);
    std::memcpy(out + size_t(i) * 4, &f, 4);
  }
  return !bad;
}

uint64_t scan_f64(const double* v, uint32_t n, bool* neg_zero) {
  uint64_t top = 0, nz = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t b = std::bit_cast<uint64_t>(v[i]);
    const uint64_t mag = b & ~(uint64_t(1) << 63);
    top = mag > top ? mag : top;
    nz |= b == (uint64_t(1) << 63);
  }
  if (nz) *neg_zero = true;
  return top;
}

bool exact_f32(const double* in, uint32_t n, uint8_t* out) {
  bool bad = false;
  for (uint32_t i = 0; i < n; ++i) {
    const float x = float(in[i]);
    std::memcpy(out + size_t(i) * 4, &x, 4);
    bad |= double(x) != in[i];
  }
  return !bad;
}

void pack_i64(const int64_t* x, uint32_t n, int tz, uint32_t w, uint8_t* out) {
  for (uint32_t i = 0; i < n; ++i) {  // 8 bytes a lane, each store's excess overwritten by the next (or room)
    const int64_t y = x[i] >> tz;
    std::memcpy(out + size_t(i) * w, &y, 8);
  }
}

void unfix_f64(const uint8_t* d, uint32_t n, uint32_t w, double scale, double* out) {
  const int up = 64 - 8 * int(w);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t raw;
    std::memcpy(&raw, d + size_t(i) * w, 8);
    out[i] = double(int64_t(raw << up) >> up) * scale;
  }
}

uint64_t fix_f64(const double* v, uint32_t n, double scale, int64_t* x, uint64_t* any) {
  // |y| < 2^51: y + 1.5 * 2^52 rounds y to a whole number, and its bits
  // minus the constant's are that number (the magic-number conversion).
  constexpr double kMagic = 6755399441055744.0;
  uint64_t lost = 0, all = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const double y = v[i] * scale, t = y + kMagic;
    lost |= (t - kMagic) != y;
    const int64_t xi = int64_t(std::bit_cast<uint64_t>(t) - std::bit_cast<uint64_t>(kMagic));
    x[i] = xi;
    all |= uint64_t(xi);
  }
  *any |= all;
  return lost;
}

}  // namespace

const float* fp8_table(Format f) {
  switch (f) {
    case Format::E4M3FN: return tables().t[0];
    case Format::E4M3FNUZ: return tables().t[1];
    case Format::E5M2: return tables().t[2];
    case Format::E5M2FNUZ: return tables().t[3];
    case Format::FP32:
    case Format::FP16:
    case Format::BF16:
    case Format::INT8:
    case Format::INT32: break;
  }
  return nullptr;
}

void not_a_float_format(Format f, const char* kernel) {
  throw std::logic_error(std::string("kernel ") + kernel + " called for " + name(f) + " (code " +
                         std::to_string(unsigned(f)) + "), which is not a float format");
}

const Kernels& portable_kernels() {
  static const Kernels k{"portable", any_special, add_f32,     add_f64,       add_f64_checked,  add_f32_checked,
                         exp_range,  add_i64,     round_f32,   odd_f64,       add_f32_screened, add_f64_screened,
                         narrow_f64, round_f64,   add_f32_out, scan_f64,      fix_f64,          unfix_f64,
                         exact_f32,  pack_i64,    add_pairs,   add_f32_pairs, normalize_pairs,  narrow_pairs};
  return k;
}

const Kernels& avx2_kernels_unchecked();  // kernels_avx2.cpp

const Kernels* avx2_kernels() {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know it.
  unsigned a, b, c, d;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  return ok ? &avx2_kernels_unchecked() : nullptr;
}

std::vector<const Kernels*> kernel_sets() {
  std::vector<const Kernels*> v{&portable_kernels()};
  if (const Kernels* a = avx2_kernels()) v.push_back(a);
  return v;
}

const Kernels& best_kernels() {
  static const Kernels* k = [] {
    const char* force = std::getenv("PRISM_KERNELS");
    const Kernels* a = avx2_kernels();
    if (force && std::strcmp(force, "portable") == 0) a = nullptr;
    return a ? a : &portable_kernels();
  }();
  return *k;
}

}  // namespace prism
