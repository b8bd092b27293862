// AVX2 kernels. Compiled with -mavx2 -mfma -mf16c and only called after the
// CPU has been checked; tails shorter than a vector go to the portable code.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "arith/kernels.hpp"

namespace prism {
namespace {

const Kernels& P() { return portable_kernels(); }

// Eight elements starting at lane i, converted exactly to fp32.
template <Format F>
inline __m256 load8(const uint8_t* e, size_t i, const float* table) {
  if constexpr (F == Format::FP32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(e) + i);
  } else if constexpr (F == Format::FP16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 2 * i)));
  } else if constexpr (F == Format::BF16) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (F == Format::E5M2 || F == Format::E4M3FN || F == Format::E4M3FNUZ) {
    // Through F16C: e5m2 is the top byte of an fp16 (the same bias); e4m3's
    // 4-bit exponent and 3-bit mantissa sit in an fp16's low exponent bits and
    // top mantissa bits, a power of two away (2^8 for bias 7, 2^7 for bias 8),
    // subnormals included. Both steps are exact. Specials come out as finite
    // garbage or as fp16's own: callers screen them.
    (void)table;
    const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + i)));
    if constexpr (F == Format::E5M2) {
      return _mm256_cvtph_ps(_mm_slli_epi16(c, 8));
    } else {
      const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7F)), 7),
                                     _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8));
      return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(F == Format::E4M3FN ? 256.0f : 128.0f));
    }
  } else {
    // fp8 -> fp32 without a table or a denormal (which would cost a microcode
    // assist): rebias the exponent field in the integer domain; a subnormal
    // code is read as exponent field 1 and has 2^(1 - bias) taken off, exact
    // by Sterbenz. Specials come out as finite garbage: callers screen them.
    (void)table;
    constexpr int kMbits = info(F).mbits, kBias = info(F).bias;
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + i)));
    const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7F)), 23 - kMbits);
    const __m256i sub =
        _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7F & ~((1 << kMbits) - 1))), _mm256_setzero_si256());
    const __m256i bits = _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32((127 - kBias) << 23)),
                                          _mm256_and_si256(sub, _mm256_set1_epi32(1 << 23)));
    const __m256 fix = _mm256_and_ps(_mm256_castsi256_ps(sub), _mm256_set1_ps(__builtin_ldexpf(1.0f, 1 - kBias)));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    return _mm256_or_ps(_mm256_sub_ps(_mm256_castsi256_ps(bits), fix), _mm256_castsi256_ps(sign));
  }
}

template <Format F>
void add_f32_t(float* acc, const uint8_t* e, uint32_t n) {
  const float* table = info(F).bytes == 1 ? fp8_table(F) : nullptr;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)  // 1 load + 1 add + 1 store per 8 lanes (+ convert)
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), load8<F>(e, i, table)));
  if (i < n) P().add_f32(F, acc + i, e + i * info(F).bytes, uint32_t(n - i));
}

// Four vectors a step: each its own load, add and two stores, no chain between them.
void add_f32_out(float* acc, const uint8_t* e, uint8_t* out, uint32_t n) {
  const auto* x = reinterpret_cast<const float*>(e);
  auto* o = reinterpret_cast<float*>(out);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (size_t v = 0; v < 32; v += 8) {
      const __m256 s = _mm256_add_ps(_mm256_loadu_ps(acc + i + v), _mm256_loadu_ps(x + i + v));
      _mm256_storeu_ps(acc + i + v, s);
      _mm256_storeu_ps(o + i + v, s);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 s = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_loadu_ps(x + i));
    _mm256_storeu_ps(acc + i, s);
    _mm256_storeu_ps(o + i, s);
  }
  if (i < n) P().add_f32_out(acc + i, e + 4 * i, out + 4 * i, uint32_t(n - i));
}

template <Format F>
void add_f64_t(double* acc, const uint8_t* e, uint32_t n) {
  const float* table = info(F).bytes == 1 ? fp8_table(F) : nullptr;
  const auto add4 = [](double* a, __m256d x) { _mm256_storeu_pd(a, _mm256_add_pd(_mm256_loadu_pd(a), x)); };
  // Sixteen lanes a step, with a 64-bit index (a 32-bit one cost five
  // address instructions per eight lanes). fp32 converts straight from
  // memory, four elements at a time, with no extract.
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if constexpr (F == Format::FP32) {
      const float* f = reinterpret_cast<const float*>(e) + i;
      for (int k = 0; k < 4; ++k) add4(acc + i + 4 * k, _mm256_cvtps_pd(_mm_loadu_ps(f + 4 * k)));
    } else {
      const __m256 x = load8<F>(e, uint32_t(i), table), y = load8<F>(e, uint32_t(i + 8), table);
      add4(acc + i, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
      add4(acc + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
      add4(acc + i + 8, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
      add4(acc + i + 12, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x = load8<F>(e, uint32_t(i), table);
    add4(acc + i, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    add4(acc + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  if (i < n) P().add_f64(F, acc + i, e + i * info(F).bytes, uint32_t(n - i));
}

// s = a + b and the mask of the lanes where that add is exact (s - a == b
// and s - b == a), eight lanes as two vectors: bit j for lane j.
inline unsigned exact8(__m256d a0, __m256d a1, __m256d b0, __m256d b1, __m256d& s0, __m256d& s1) {
  s0 = _mm256_add_pd(a0, b0), s1 = _mm256_add_pd(a1, b1);
  const __m256d ok0 = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s0, a0), b0, _CMP_EQ_OQ),
                                    _mm256_cmp_pd(_mm256_sub_pd(s0, b0), a0, _CMP_EQ_OQ));
  const __m256d ok1 = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s1, a1), b1, _CMP_EQ_OQ),
                                    _mm256_cmp_pd(_mm256_sub_pd(s1, b1), a1, _CMP_EQ_OQ));
  return unsigned(_mm256_movemask_pd(ok0)) | unsigned(_mm256_movemask_pd(ok1)) << 4;
}

// Eight lanes: keeps a + b where it is exact and leaves the others as they
// were for the caller. Cost per 8 lanes: 2 loads, 2 adds, 4 subs, 4 compares,
// 3 ands, 2 stores, 1 movemask + branch (taken only on a special or a sum
// that would round).
inline uint32_t checked8(double* acc, __m256d b0, __m256d b1, uint32_t base, uint32_t* left, uint32_t k) {
  const __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4);
  __m256d s0, s1;
  const unsigned good = exact8(a0, a1, b0, b1, s0, s1);
  _mm256_storeu_pd(acc, s0);
  _mm256_storeu_pd(acc + 4, s1);
  if (__builtin_expect(good != 0xFF, 0)) {
    alignas(32) double old[8];
    _mm256_store_pd(old, a0);
    _mm256_store_pd(old + 4, a1);
    for (unsigned bad = ~good & 0xFF; bad; bad &= bad - 1) {
      const unsigned j = unsigned(__builtin_ctz(bad));
      acc[j] = old[j];
      left[k++] = base + j;
    }
  }
  return k;
}

// Eight fp32 lanes, as checked8 for doubles.
inline uint32_t checked8f(float* acc, __m256 b, uint32_t base, uint32_t* left, uint32_t k) {
  const __m256 a = _mm256_loadu_ps(acc);
  const __m256 s = _mm256_add_ps(a, b);
  const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(s, a), b, _CMP_EQ_OQ),
                                  _mm256_cmp_ps(_mm256_sub_ps(s, b), a, _CMP_EQ_OQ));
  _mm256_storeu_ps(acc, s);
  const unsigned good = unsigned(_mm256_movemask_ps(ok));
  if (__builtin_expect(good != 0xFF, 0)) {
    alignas(32) float old[8];
    _mm256_store_ps(old, a);
    for (unsigned bad = ~good & 0xFF; bad; bad &= bad - 1) {
      const unsigned j = unsigned(__builtin_ctz(bad));
      acc[j] = old[j];
      left[k++] = base + j;
    }
  }
  return k;
}

template <Format F>
uint32_t add_f32_checked_t(float* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  const float* table = info(F).bytes == 1 ? fp8_table(F) : nullptr;
  size_t i = 0;  // 64-bit: no address arithmetic per access
  uint32_t k = 0;
  // Four vectors a test: their sums are kept in registers and stored only
  // when every lane was exact; otherwise checked8f redoes them one by one
  // (nothing was stored yet). Per 8 lanes: the conversion, 1 load, 1 add,
  // 2 subs, 2 compares, 1 and, 1 store and a quarter of the test and loop.
  for (; i + 32 <= n; i += 32) {
    __m256 s[4];
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int v = 0; v < 4; ++v) {
      const __m256 a = _mm256_loadu_ps(acc + i + 8 * v), b = load8<F>(e, i + 8 * v, table);
      s[v] = _mm256_add_ps(a, b);
      ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(s[v], a), b, _CMP_EQ_OQ),
                                           _mm256_cmp_ps(_mm256_sub_ps(s[v], b), a, _CMP_EQ_OQ)));
    }
    if (__builtin_expect(_mm256_movemask_ps(ok) == 0xFF, 1)) {
      for (int v = 0; v < 4; ++v) _mm256_storeu_ps(acc + i + 8 * v, s[v]);
    } else {
      for (int v = 0; v < 4; ++v)
        k = checked8f(acc + i + 8 * v, load8<F>(e, i + 8 * v, table), uint32_t(i + 8 * v), left, k);
    }
  }
  for (; i + 8 <= n; i += 8) k = checked8f(acc + i, load8<F>(e, i, table), uint32_t(i), left, k);
  if (i < n) {
    const uint32_t t = P().add_f32_checked(F, acc + i, e + i * info(F).bytes, uint32_t(n - i), left + k);
    for (uint32_t j = 0; j < t; ++j) left[k + j] += uint32_t(i);
    k += t;
  }
  return k;
}

template <Format F>
uint32_t add_f64_checked_t(double* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  const float* table = info(F).bytes == 1 ? fp8_table(F) : nullptr;
  size_t i = 0;
  uint32_t k = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = load8<F>(e, i, table);
    k = checked8(acc + i, _mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)),
                 uint32_t(i), left, k);
  }
  if (i < n) {
    const uint32_t t = P().add_f64_checked(F, acc + i, e + i * info(F).bytes, uint32_t(n - i), left + k);
    for (uint32_t j = 0; j < t; ++j) left[k + j] += uint32_t(i);
    k += t;
  }
  return k;
}

// Specials by exponent pattern: (x & mask) == mask, or x == value for FNUZ.
template <int Bits>
inline __m256i cmpeq(__m256i a, __m256i b) {
  if constexpr (Bits == 8)
    return _mm256_cmpeq_epi8(a, b);
  else if constexpr (Bits == 16)
    return _mm256_cmpeq_epi16(a, b);
  else
    return _mm256_cmpeq_epi32(a, b);
}
template <int Bits>
inline __m256i splat(uint32_t v) {
  if constexpr (Bits == 8)
    return _mm256_set1_epi8(char(v));
  else if constexpr (Bits == 16)
    return _mm256_set1_epi16(short(v));
  else
    return _mm256_set1_epi32(int(v));
}
template <int Bits>
bool any_masked(const uint8_t* e, uint32_t nbytes, uint32_t mask, uint32_t value, uint32_t& done) {
  const __m256i m = splat<Bits>(mask), v = splat<Bits>(value);
  __m256i hit = _mm256_setzero_si256();
  uint32_t i = 0;
  auto test = [&](uint32_t at) {
    return cmpeq<Bits>(_mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + at)), m), v);
  };
  for (; i + 128 <= nbytes; i += 128)  // four vectors a step: the loop's own cost a quarter as often
    hit = _mm256_or_si256(
        hit, _mm256_or_si256(_mm256_or_si256(test(i), test(i + 32)), _mm256_or_si256(test(i + 64), test(i + 96))));
  for (; i + 32 <= nbytes; i += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i));
    hit = _mm256_or_si256(hit, cmpeq<Bits>(_mm256_and_si256(x, m), v));
  }
  done = i;
  return !_mm256_testz_si256(hit, hit);
}

bool any_special(Format f, const uint8_t* e, uint32_t n) {
  const uint32_t nbytes = n * info(f).bytes;
  uint32_t done = 0;
  bool hit = false;
  switch (f) {
    case Format::FP32: hit = any_masked<32>(e, nbytes, 0x7F800000, 0x7F800000, done); break;
    case Format::FP16: hit = any_masked<16>(e, nbytes, 0x7C00, 0x7C00, done); break;
    case Format::BF16: hit = any_masked<16>(e, nbytes, 0x7F80, 0x7F80, done); break;
    case Format::E4M3FN: hit = any_masked<8>(e, nbytes, 0x7F, 0x7F, done); break;
    case Format::E5M2: hit = any_masked<8>(e, nbytes, 0x7C, 0x7C, done); break;
    case Format::E4M3FNUZ:
    case Format::E5M2FNUZ: hit = any_masked<8>(e, nbytes, 0xFF, 0x80, done); break;
    case Format::INT8:
    case Format::INT32: return false;  // integers have no specials
  }
  if (hit) return true;
  const uint32_t sz = info(f).bytes;
  return done < nbytes && P().any_special(f, e + done, (nbytes - done) / sz);
}

// Lanes of eight elements that are NaN or infinity, as all-ones 32-bit
// lanes. fp32, fp16 and bf16 convert specials to fp32 specials, so the
// converted vector tells; fp8's conversion does not, so its codes are read.
template <Format F>
inline __m256i special8(const uint8_t* e, size_t i, __m256 x) {
  if constexpr (info(F).bytes >= 2) {
    (void)e;
    (void)i;
    const __m256i ex = _mm256_set1_epi32(0x7F800000);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x), ex), ex);
  } else {
    (void)x;
    constexpr bool fnuz = F == Format::E4M3FNUZ || F == Format::E5M2FNUZ;
    constexpr int mask = fnuz ? 0xFF : F == Format::E4M3FN ? 0x7F : 0x7C;
    constexpr int value = fnuz ? 0x80 : mask;
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + i)));
    return _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(mask)), _mm256_set1_epi32(value));
  }
}

// add_f32_screened for a vector holding a special (rare): the finite lanes
// as usual, the special ones left alone and listed.
template <Format F, bool First>
__attribute__((noinline)) uint32_t screened_slow(float* acc, const uint8_t* e, uint32_t i, uint32_t* left, uint32_t k) {
  const __m256 x = load8<F>(e, i, nullptr);
  const __m256i sp = special8<F>(e, i, x);
  const __m256 a = First ? _mm256_set1_ps(-0.0f) : _mm256_loadu_ps(acc + i);
  _mm256_storeu_ps(acc + i, _mm256_blendv_ps(First ? x : _mm256_add_ps(a, x), a, _mm256_castsi256_ps(sp)));
  for (unsigned bad = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(sp))); bad; bad &= bad - 1)
    left[k++] = i + unsigned(__builtin_ctz(bad));
  return k;
}

// `V` vectors of add_f32_screened: the specials are tested once for all of
// them before anything is stored, and a block holding one goes to
// screened_slow, which starts again from memory (nothing is kept for it, so
// nothing spills). Cost per 8 fp32 lanes with V = 4: 2 loads, 1 add,
// 1 store, 1 and, 1 compare, 1 or, and a quarter of the test and the loop.
template <Format F, bool First, int V>
__attribute__((always_inline)) inline uint32_t screened(float* acc, const uint8_t* e, size_t i, uint32_t* left,
                                                        uint32_t k) {
  __m256 s[V];
  __m256i any = _mm256_setzero_si256();
  for (int v = 0; v < V; ++v) {
    const __m256 x = load8<F>(e, i + 8 * v, nullptr);
    any = _mm256_or_si256(any, special8<F>(e, i + 8 * v, x));
    s[v] = First ? x : _mm256_add_ps(_mm256_loadu_ps(acc + i + 8 * v), x);
  }
  if (__builtin_expect(_mm256_testz_si256(any, any), 1)) {
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + i + 8 * v, s[v]);
    return k;
  }
  for (int v = 0; v < V; ++v) k = screened_slow<F, First>(acc, e, uint32_t(i + 8 * v), left, k);
  return k;
}

// add_f64_screened for eight lanes holding a special (rare).
template <Format F, bool First>
__attribute__((noinline)) uint32_t screened_f64_slow(double* acc, const uint8_t* e, uint32_t i, uint32_t* left,
                                                     uint32_t k) {
  const __m256 x = load8<F>(e, i, nullptr);
  alignas(32) float xs[8];
  _mm256_store_ps(xs, x);
  const unsigned bad = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(special8<F>(e, i, x))));
  for (unsigned j = 0; j < 8; ++j) {
    if (bad >> j & 1) {
      if (First) acc[i + j] = -0.0;
      left[k++] = i + j;
    } else {
      acc[i + j] = First ? double(xs[j]) : acc[i + j] + double(xs[j]);
    }
  }
  return k;
}

// `V` times eight double lanes, the specials tested once before anything is
// stored (as screened() for floats). Cost per 8 lanes with V = 2: 1 load and
// 1 convert of the elements, 2 widenings, 2 loads, 2 adds and 2 stores of
// the lanes (the first term: only the stores), 1 and, 1 compare, and half
// of the or/test/loop.
template <Format F, bool First, int V>
__attribute__((always_inline)) inline uint32_t screened_f64(double* acc, const uint8_t* e, size_t i, uint32_t* left,
                                                            uint32_t k) {
  __m256d s[2 * V];
  __m256i any = _mm256_setzero_si256();
  for (int v = 0; v < V; ++v) {
    const __m256 x = load8<F>(e, i + 8 * v, nullptr);
    any = _mm256_or_si256(any, special8<F>(e, i + 8 * v, x));
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    s[2 * v] = First ? lo : _mm256_add_pd(_mm256_loadu_pd(acc + i + 8 * v), lo);
    s[2 * v + 1] = First ? hi : _mm256_add_pd(_mm256_loadu_pd(acc + i + 8 * v + 4), hi);
  }
  if (__builtin_expect(_mm256_testz_si256(any, any), 1)) {
    for (int v = 0; v < 2 * V; ++v) _mm256_storeu_pd(acc + i + 4 * v, s[v]);
    return k;
  }
  for (int v = 0; v < V; ++v) k = screened_f64_slow<F, First>(acc, e, uint32_t(i + 8 * v), left, k);
  return k;
}

// add_f64_screened for fp16 and fp32 elements, 32 lanes a step. The
// specials are found on the elements' own bits (an all-ones exponent field),
// 256 bits at a time, and fp32 lanes are widened straight from memory
// (vcvtps2pd with a memory operand, no 128-bit extract). Cost per 8 lanes:
// 2 converts (fp16: 4), 2 adds, 2 stores, 1.5 (fp16) or 3 (fp32) ops of the
// screen, and an eighth of the loop.
template <Format F, bool First>
__attribute__((always_inline)) inline uint32_t screened_f64_direct(double* acc, const uint8_t* e, size_t i,
                                                                   uint32_t* left, uint32_t k) {
  static_assert(F == Format::FP16 || F == Format::FP32);
  constexpr bool kHalf = F == Format::FP16;
  constexpr size_t kBytes = info(F).bytes;
  const __m256i ex = kHalf ? _mm256_set1_epi16(0x7C00) : _mm256_set1_epi32(0x7F800000);
  __m256i any = _mm256_setzero_si256();
  for (size_t b = 0; b < 32 * kBytes; b += 32) {
    const __m256i x = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i * kBytes + b)), ex);
    any = _mm256_or_si256(any, kHalf ? _mm256_cmpeq_epi16(x, ex) : _mm256_cmpeq_epi32(x, ex));
  }
  __m256d x[8];
  for (int q = 0; q < 8; q += 2) {
    const uint8_t* p = e + (i + 4 * size_t(q)) * kBytes;
    if constexpr (kHalf) {  // eight halves to floats from memory, then each 128-bit half widened
      const __m256 h = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      x[q] = _mm256_cvtps_pd(_mm256_castps256_ps128(h));
      x[q + 1] = _mm256_cvtps_pd(_mm256_extractf128_ps(h, 1));
    } else {
      x[q] = _mm256_cvtps_pd(_mm_loadu_ps(reinterpret_cast<const float*>(p)));
      x[q + 1] = _mm256_cvtps_pd(_mm_loadu_ps(reinterpret_cast<const float*>(p) + 4));
    }
  }
  __m256d s[8];
  for (int q = 0; q < 8; ++q) s[q] = First ? x[q] : _mm256_add_pd(_mm256_loadu_pd(acc + i + 4 * q), x[q]);
  if (__builtin_expect(_mm256_testz_si256(any, any), 1)) {
    for (int q = 0; q < 8; ++q) _mm256_storeu_pd(acc + i + 4 * q, s[q]);
    return k;
  }
  for (int v = 0; v < 4; ++v) k = screened_f64_slow<F, First>(acc, e, uint32_t(i + 8 * v), left, k);
  return k;
}

// add_f32_screened and add_f64_screened: T is the lanes' type. Float lanes
// go four vectors a test, double lanes two (each is 16 doubles' registers),
// or 32 lanes a test from fp16 and fp32 elements (screened_f64_direct).
template <Format F, bool First, typename T>
uint32_t screened_lanes(T* acc, const uint8_t* e, uint32_t n, uint32_t* left, uint32_t* at) {
  size_t i = 0;  // 64-bit: a 32-bit index costs address arithmetic on every access
  uint32_t k = 0;
  if constexpr (sizeof(T) == 4) {
    for (; i + 32 <= n; i += 32) k = screened<F, First, 4>(acc, e, i, left, k);
    for (; i + 8 <= n; i += 8) k = screened<F, First, 1>(acc, e, i, left, k);
  } else {
    if constexpr (F == Format::FP16 || F == Format::FP32)
      for (; i + 32 <= n; i += 32) k = screened_f64_direct<F, First>(acc, e, i, left, k);
    for (; i + 16 <= n; i += 16) k = screened_f64<F, First, 2>(acc, e, i, left, k);
    for (; i + 8 <= n; i += 8) k = screened_f64<F, First, 1>(acc, e, i, left, k);
  }
  *at = uint32_t(i);
  return k;
}

template <Format F, typename T>
uint32_t add_screened_t(T* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left) {
  uint32_t i;
  uint32_t k = first ? screened_lanes<F, true>(acc, e, n, left, &i) : screened_lanes<F, false>(acc, e, n, left, &i);
  if (i < n) {
    const uint32_t rest = n - i, off = i * info(F).bytes;
    uint32_t t;
    if constexpr (sizeof(T) == 4)
      t = P().add_f32_screened(F, acc + i, e + off, rest, first, left + k);
    else
      t = P().add_f64_screened(F, acc + i, e + off, rest, first, left + k);
    for (uint32_t j = 0; j < t; ++j) left[k + j] += i;
    k += t;
  }
  return k;
}

// Unsigned min or max of the Bits-wide lanes of v, folded to one value.
template <int Bits, bool Min>
inline uint32_t fold_lanes(__m256i v) {
  auto op = [](__m128i a, __m128i b) {
    if constexpr (Bits == 8)
      return Min ? _mm_min_epu8(a, b) : _mm_max_epu8(a, b);
    else if constexpr (Bits == 16)
      return Min ? _mm_min_epu16(a, b) : _mm_max_epu16(a, b);
    else
      return Min ? _mm_min_epu32(a, b) : _mm_max_epu32(a, b);
  };
  __m128i x = op(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = op(x, _mm_srli_si128(x, 8));
  x = op(x, _mm_srli_si128(x, 4));
  if constexpr (Bits <= 16) x = op(x, _mm_srli_si128(x, 2));
  if constexpr (Bits == 8) x = op(x, _mm_srli_si128(x, 1));
  return uint32_t(_mm_cvtsi128_si32(x)) & uint32_t((uint64_t(1) << Bits) - 1);
}

// The unsigned min (Min) or max of two vectors of Bits-wide lanes.
template <int Bits, bool Min>
inline __m256i minmax_lanes(__m256i a, __m256i b) {
  if constexpr (Bits == 8)
    return Min ? _mm256_min_epu8(a, b) : _mm256_max_epu8(a, b);
  else if constexpr (Bits == 16)
    return Min ? _mm256_min_epu16(a, b) : _mm256_max_epu16(a, b);
  else
    return Min ? _mm256_min_epu32(a, b) : _mm256_max_epu32(a, b);
}

// The exponent fields of the smallest and largest non-zero magnitudes are
// the window: a float's magnitude orders like its bits. Per vector: an and,
// a subtract (a zero wraps to all-ones, so the min passes it by), a min and
// a max; the fields are taken once at the end.
template <int Bits>
void exp_range_t(Format f, const uint8_t* e, uint32_t n, uint32_t* lo, uint32_t* hi) {
  const FormatInfo& fi = info(f);
  constexpr uint32_t kLanes = 256 / Bits;
  constexpr uint32_t kOnes = uint32_t((uint64_t(1) << Bits) - 1);
  const __m256i magmask = splat<Bits>(fi.sign_bit - 1), one = splat<Bits>(1);
  __m256i vlo = _mm256_set1_epi8(char(0xFF)), vhi = _mm256_setzero_si256();
  const auto mag = [&](size_t at) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + at * (Bits / 8))), magmask);
  };
  const auto vmin = [](__m256i a, __m256i b) { return minmax_lanes<Bits, true>(a, b); };
  const auto vmax = [](__m256i a, __m256i b) { return minmax_lanes<Bits, false>(a, b); };
  const auto dec = [&](__m256i x) {
    if constexpr (Bits == 8)
      return _mm256_sub_epi8(x, one);
    else if constexpr (Bits == 16)
      return _mm256_sub_epi16(x, one);
    else
      return _mm256_sub_epi32(x, one);
  };
  size_t i = 0;
  // Four vectors a step, folded as a tree before they meet the running min
  // and max: half the loop's instructions of one vector a step.
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const __m256i x0 = mag(i), x1 = mag(i + kLanes), x2 = mag(i + 2 * kLanes), x3 = mag(i + 3 * kLanes);
    vlo = vmin(vlo, vmin(vmin(dec(x0), dec(x1)), vmin(dec(x2), dec(x3))));
    vhi = vmax(vhi, vmax(vmax(x0, x1), vmax(x2, x3)));
  }
  for (; i + kLanes <= n; i += kLanes) {
    const __m256i x = mag(i);
    vlo = vmin(vlo, dec(x));
    vhi = vmax(vhi, x);
  }
  uint32_t rl = *lo, rh = *hi;
  if (i) {
    const uint32_t mlo = fold_lanes<Bits, true>(vlo);          // smallest non-zero magnitude - 1
    if (mlo != kOnes) {                                        // some element was not zero
      rl = std::min(rl, std::max((mlo + 1) >> fi.mbits, 1u));  // a subnormal counts as field 1
      rh = std::max(rh, fold_lanes<Bits, false>(vhi) >> fi.mbits);
    }
  }
  if (i < n) P().exp_range(f, e + i * (Bits / 8), uint32_t(n - i), &rl, &rh);
  *lo = rl;
  *hi = rh;
}

void exp_range(Format f, const uint8_t* e, uint32_t n, uint32_t* lo, uint32_t* hi) {
  switch (info(f).bytes) {  // every format is 1, 2 or 4 bytes (format.hpp static_asserts it)
    case 4: return exp_range_t<32>(f, e, n, lo, hi);
    case 2: return exp_range_t<16>(f, e, n, lo, hi);
    case 1: return exp_range_t<8>(f, e, n, lo, hi);
  }
  __builtin_unreachable();
}

void add_i64(Format f, int64_t* acc, const uint8_t* e, uint32_t n) {
  uint32_t i = 0;
  if (f == Format::INT8) {
    for (; i + 4 <= n; i += 4) {
      int32_t w;
      std::memcpy(&w, e + i, 4);
      const __m256i x = _mm256_cvtepi8_epi64(_mm_cvtsi32_si128(w));
      auto* p = reinterpret_cast<__m256i*>(acc + i);
      _mm256_storeu_si256(p, _mm256_add_epi64(_mm256_loadu_si256(p), x));
    }
  } else {
    for (; i + 4 <= n; i += 4) {
      const __m256i x = _mm256_cvtepi32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e + 4 * i)));
      auto* p = reinterpret_cast<__m256i*>(acc + i);
      _mm256_storeu_si256(p, _mm256_add_epi64(_mm256_loadu_si256(p), x));
    }
  }
  if (i < n) P().add_i64(f, acc + i, e + i * info(f).bytes, n - i);
}

// Eight 32-bit lanes, each < 2^16 (or < 2^8), stored as 16-bit (8-bit) codes.
template <uint32_t Bytes>
inline void store_codes(uint8_t* dst, __m256i v) {
  const __m256i w = _mm256_packus_epi32(v, v);  // per 128-bit half: its 4 lanes as 16 bits, twice
  if constexpr (Bytes == 2) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm256_castsi256_si128(_mm256_permute4x64_epi64(w, _MM_SHUFFLE(3, 1, 2, 0))));
  } else {
    const __m256i b = _mm256_packus_epi16(w, w);
    const uint32_t lo = uint32_t(_mm256_extract_epi32(b, 0)), hi = uint32_t(_mm256_extract_epi32(b, 4));
    std::memcpy(dst, &lo, 4);
    std::memcpy(dst + 4, &hi, 4);
  }
}

// round_float_to() eight lanes at a time, the same steps without branches:
// a + 1.5*2^(qe+23) - 1.5*2^(qe+23) rounds a to a multiple of the format's
// quantum 2^qe at a (ties to even, by the hardware), then the result's
// exponent and top mantissa bits are the code (shifted right where subnormal).
template <Format F>
bool round_f32_t(const float* in, uint32_t n, uint8_t* dst) {
  constexpr uint32_t kBytes = info(F).bytes;
  size_t i = 0;
  if constexpr (F == Format::FP16) {  // F16C: the hardware's IEEE conversion, to nearest, ties to even
    const __m128i ex = _mm_set1_epi16(0x7C00);
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      // An all-ones exponent: a NaN, an infinity or an overflow, which have no rounding here.
      if (!_mm_testz_si128(_mm_cmpeq_epi16(_mm_and_si128(h, ex), ex), _mm_set1_epi16(-1))) return false;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
    }
  } else if constexpr (F == Format::E5M2 || F == Format::E4M3FN) {
    // Through a half. e5m2 is fp16's top byte (the same exponent field and
    // bias); e4m3fn is a half's sign, low exponent field and top three
    // mantissa bits once the float is scaled by 2^-8 (exact: bias 7 against
    // fp16's 15), subnormals included. F16C converts toward zero and a
    // compare of the half widened back marks the lanes that lost bits: with
    // that sticky last bit the half is the float rounded to odd, and it
    // keeps 7 or 8 bits more than the format at every magnitude, so rounding
    // it again, to nearest even on its low bits, is the float's own rounding
    // (Boldo and Melquiond). A float past fp16's range truncates to 65504
    // with the sticky bit, which rounds past the largest code: refused, as
    // every overflow, infinity and NaN is.
    constexpr int kLow = F == Format::E5M2 ? 8 : 7;  // the half's bits below the format's last
    const __m256 scale = _mm256_set1_ps(F == Format::E5M2 ? 1.0f : 0x1p-8f);
    const __m128i half = _mm_set1_epi16((1 << (kLow - 1)) - 1), one = _mm_set1_epi16(1), mag = _mm_set1_epi16(0x7FFF),
                  sign = _mm_set1_epi16(0x80), top = _mm_set1_epi16(int16_t(info(F).max_finite));
    __m128i bad = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
      const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(in + i), scale);
      const __m128i t = _mm256_cvtps_ph(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256i lost = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtph_ps(t), a, _CMP_NEQ_UQ));
      const __m128i sticky = _mm_packs_epi32(_mm256_castsi256_si128(lost), _mm256_extracti128_si256(lost, 1));
      const __m128i h = _mm_or_si128(t, _mm_and_si128(sticky, one));
      const __m128i m = _mm_and_si128(h, mag);
      const __m128i r =
          _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(m, half), _mm_and_si128(_mm_srli_epi16(m, kLow), one)), kLow);
      bad = _mm_or_si128(bad, _mm_cmpgt_epi16(r, top));
      const __m128i code = _mm_or_si128(r, _mm_and_si128(_mm_srli_epi16(h, 8), sign));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi16(code, code));
    }
    if (!_mm_testz_si128(bad, bad)) return false;
  } else if constexpr (F == Format::BF16) {  // fp32's exponent range: round the bits
    for (; i + 8 <= n; i += 8) {
      const __m256i ab = _mm256_castps_si256(_mm256_loadu_ps(in + i));
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(ab, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(ab, _mm256_set1_epi32(0x7FFF)), odd), 16);
      const __m256i top = _mm256_and_si256(r, _mm256_set1_epi32(0x7F80));
      if (!_mm256_testz_si256(_mm256_cmpeq_epi32(top, _mm256_set1_epi32(0x7F80)), _mm256_set1_epi32(-1))) return false;
      store_codes<2>(dst + 2 * i, r);
    }
  } else {
    constexpr int kM = info(F).mbits, kEmin = info(F).emin, kBias = info(F).bias;
    static const float kMax = to_float(F, info(F).max_finite);
    const __m256i zpos = _mm256_set1_epi32(int(zero_bits(F, false))), zneg = _mm256_set1_epi32(int(zero_bits(F, true)));
    for (; i + 8 <= n; i += 8) {
      const __m256 a = _mm256_loadu_ps(in + i);
      const __m256i ab = _mm256_castps_si256(a);
      const __m256i e = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(ab, 23), _mm256_set1_epi32(0xFF)),
                                         _mm256_set1_epi32(127));
      const __m256i qe = _mm256_sub_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(kEmin)), _mm256_set1_epi32(kM));
      __m256i bad = _mm256_cmpgt_epi32(qe, _mm256_set1_epi32(254 - 23 - 127));  // NaN, infinity, far out of range
      const __m256 s = _mm256_castsi256_ps(_mm256_or_si256(
          _mm256_slli_epi32(_mm256_add_epi32(qe, _mm256_set1_epi32(23 + 127)), 23), _mm256_set1_epi32(0x400000)));
      const __m256 r = _mm256_sub_ps(_mm256_add_ps(a, s), s);
      const __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), r);
      bad = _mm256_or_si256(bad, _mm256_castps_si256(_mm256_cmp_ps(mag, _mm256_set1_ps(kMax), _CMP_GT_OQ)));
      if (!_mm256_testz_si256(bad, bad)) return false;
      const __m256i rb = _mm256_castps_si256(r);
      const __m256i er = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(rb, 23), _mm256_set1_epi32(0xFF)),
                                          _mm256_set1_epi32(127));
      const __m256i neg = _mm256_srai_epi32(ab, 31);
      const __m256i sign = _mm256_and_si256(neg, _mm256_set1_epi32(int(info(F).sign_bit)));
      const __m256i normal =
          _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(er, _mm256_set1_epi32(kBias)), kM),
                          _mm256_and_si256(_mm256_srli_epi32(rb, 23 - kM), _mm256_set1_epi32((1 << kM) - 1)));
      const __m256i sub = _mm256_srlv_epi32(
          _mm256_or_si256(_mm256_set1_epi32(0x800000), _mm256_and_si256(rb, _mm256_set1_epi32(0x7FFFFF))),
          _mm256_sub_epi32(_mm256_set1_epi32(23 - kM + kEmin), er));
      const __m256i is_normal = _mm256_cmpgt_epi32(er, _mm256_set1_epi32(kEmin - 1));
      __m256i code = _mm256_or_si256(sign, _mm256_blendv_epi8(sub, normal, is_normal));
      const __m256i zero = _mm256_castps_si256(_mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_EQ_OQ));
      code = _mm256_blendv_epi8(code, _mm256_blendv_epi8(zpos, zneg, neg), zero);
      store_codes<kBytes>(dst + kBytes * i, code);
    }
  }
  return i == n || P().round_f32(F, in + i, uint32_t(n - i), dst + kBytes * i);
}

bool round_f32(Format out, const float* in, uint32_t n, uint8_t* dst) {
  switch (out) {
    case Format::FP16: return round_f32_t<Format::FP16>(in, n, dst);
    case Format::BF16: return round_f32_t<Format::BF16>(in, n, dst);
    case Format::E4M3FN: return round_f32_t<Format::E4M3FN>(in, n, dst);
    case Format::E4M3FNUZ: return round_f32_t<Format::E4M3FNUZ>(in, n, dst);
    case Format::E5M2: return round_f32_t<Format::E5M2>(in, n, dst);
    case Format::E5M2FNUZ: return round_f32_t<Format::E5M2FNUZ>(in, n, dst);
    case Format::FP32: return P().round_f32(out, in, n, dst);  // not narrower: the portable loop
    case Format::INT8:
    case Format::INT32: break;
  }
  not_a_float_format(out, "round_f32");
}

bool odd_f64(const double* in, uint32_t n, float* out) {
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFFFFFFFFFFFFFF));
  const __m256d fmax = _mm256_set1_pd(double(std::numeric_limits<float>::max()));
  const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);  // a 64-bit mask's low 32 bits, 4 lanes
  __m256d bad = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_loadu_pd(in + i);
    const __m256d av = _mm256_and_pd(v, abs_mask);
    bad = _mm256_or_pd(bad, _mm256_cmp_pd(av, fmax, _CMP_NLE_UQ));  // NaN, infinity, too large
    const __m128 f = _mm256_cvtpd_ps(v);                            // to nearest
    const __m256d back = _mm256_cvtps_pd(f);
    const __m256d inexact = _mm256_cmp_pd(back, v, _CMP_NEQ_UQ);
    const __m256d away = _mm256_cmp_pd(_mm256_and_pd(back, abs_mask), av, _CMP_GT_OQ);
    const __m128i in32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), low_halves));
    const __m128i away32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), low_halves));
    __m128i b = _mm_add_epi32(_mm_castps_si128(f), away32);  // away from zero: one float step back (-1)
    b = _mm_or_si128(b, _mm_and_si128(in32, _mm_set1_epi32(1)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), b);
  }
  return _mm256_testz_pd(bad, bad) && (i == n || P().odd_f64(in + i, uint32_t(n - i), out + i));
}

bool narrow_f64(const double* in, uint32_t n, float* out) {
  const __m128i ex = _mm_set1_epi32(0x7F800000);
  __m128i bad = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 f = _mm256_cvtpd_ps(_mm256_loadu_pd(in + i));  // MXCSR: to nearest, ties to even
    _mm_storeu_ps(out + i, f);
    bad = _mm_or_si128(bad, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(f), ex), ex));
  }
  return _mm_testz_si128(bad, bad) && (i == n || P().narrow_f64(in + i, uint32_t(n - i), out + i));
}

// The MXCSR rounding mode set to toward zero for a scope, then restored:
// vcvtpd2ps has no rounding operand below AVX-512.
class TowardZero {
 public:
  TowardZero() : saved_(_mm_getcsr()) { _mm_setcsr((saved_ & ~0x6000u) | 0x6000u); }
  ~TowardZero() { _mm_setcsr(saved_); }
  TowardZero(const TowardZero&) = delete;
  TowardZero& operator=(const TowardZero&) = delete;

 private:
  unsigned saved_;
};

// Doubles rounded once into fp16, eight lanes a step, by round-to-odd
// floats without a branch: vcvtpd2ps toward zero truncates, a compare of
// the float widened back says where that was inexact, and that lane's last
// bit is set (the compare's all-ones mask, narrowed, is a NaN whose bits
// are all ones). F16C then rounds the odd float to nearest, ties to even:
// the double's own rounding (Boldo and Melquiond). An all-ones exponent in
// the result (a NaN, an infinity, an overflow) fails the batch at the end.
bool round_f64_fp16(const double* in, uint32_t n, uint8_t* dst) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m128i ex = _mm_set1_epi16(0x7C00);
  __m128i bad = _mm_setzero_si128();
  size_t i = 0;
  {
    const TowardZero rz;
    for (; i + 8 <= n; i += 8) {
      const __m256d v0 = _mm256_loadu_pd(in + i), v1 = _mm256_loadu_pd(in + i + 4);
      const __m128 t0 = _mm256_cvtpd_ps(v0), t1 = _mm256_cvtpd_ps(v1);
      const __m128 m0 = _mm256_cvtpd_ps(_mm256_cmp_pd(_mm256_cvtps_pd(t0), v0, _CMP_NEQ_UQ));
      const __m128 m1 = _mm256_cvtpd_ps(_mm256_cmp_pd(_mm256_cvtps_pd(t1), v1, _CMP_NEQ_UQ));
      const __m256i odd = _mm256_or_si256(_mm256_castps_si256(_mm256_set_m128(t1, t0)),
                                          _mm256_and_si256(_mm256_castps_si256(_mm256_set_m128(m1, m0)), one));
      const __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(odd), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, ex), ex));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
    }
  }
  return _mm_testz_si128(bad, bad) && (i == n || P().round_f64(Format::FP16, in + i, uint32_t(n - i), dst + 2 * i));
}

bool round_f64(Format out, const double* in, uint32_t n, uint8_t* dst) {
  if (out == Format::FP16) return round_f64_fp16(in, n, dst);
  return round_f64_by_odd(odd_f64, round_f32, out, in, n, dst);
}

void add_f32(Format f, float* acc, const uint8_t* e, uint32_t n) { PRISM_FLOAT_DISPATCH(add_f32_t, f, acc, e, n) }
void add_f64(Format f, double* acc, const uint8_t* e, uint32_t n) { PRISM_FLOAT_DISPATCH(add_f64_t, f, acc, e, n) }
uint32_t add_f64_checked(Format f, double* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_f64_checked_t, f, acc, e, n, left)
}
uint32_t add_f32_checked(Format f, float* acc, const uint8_t* e, uint32_t n, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_f32_checked_t, f, acc, e, n, left)
}
uint32_t add_f32_screened(Format f, float* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_screened_t, f, acc, e, n, first, left)
}
uint32_t add_f64_screened(Format f, double* acc, const uint8_t* e, uint32_t n, bool first, uint32_t* left) {
  PRISM_FLOAT_DISPATCH(add_screened_t, f, acc, e, n, first, left)
}

// Exact partials as doubles and packed lanes (kernels.hpp).

// Pairs (kernels.hpp): eight lanes of hi + lo += b, the exactness test
// first (as checked8's): while every add is exact, lo is not read.
inline uint32_t add_pairs4(double* hi, double* lo, __m256d b, uint32_t base, uint32_t* left, uint32_t k, __m256d& low);
inline uint32_t add_pairs8(double* hi, double* lo, __m256d b0, __m256d b1, uint32_t base, uint32_t* left, uint32_t k,
                           __m256d& low) {
  const __m256d a0 = _mm256_loadu_pd(hi), a1 = _mm256_loadu_pd(hi + 4);
  __m256d s0, s1;
  if (__builtin_expect(exact8(a0, a1, b0, b1, s0, s1) == 0xFF, 1)) {
    _mm256_storeu_pd(hi, s0);
    _mm256_storeu_pd(hi + 4, s1);
    return k;
  }
  k = add_pairs4(hi, lo, b0, base, left, k, low);
  return add_pairs4(hi + 4, lo + 4, b1, base + 4, left, k, low);
}
inline uint32_t add_pairs4(double* hi, double* lo, __m256d b, uint32_t base, uint32_t* left, uint32_t k, __m256d& low) {
  const __m256d a = _mm256_loadu_pd(hi), s = _mm256_add_pd(a, b), bb = _mm256_sub_pd(s, a);
  const __m256d err = _mm256_add_pd(_mm256_sub_pd(a, _mm256_sub_pd(s, bb)), _mm256_sub_pd(b, bb));
  const __m256d nz = _mm256_cmp_pd(err, _mm256_setzero_pd(), _CMP_NEQ_UQ);  // a NaN too
  if (_mm256_testz_pd(nz, nz)) {                                            // every add exact: lo untouched
    _mm256_storeu_pd(hi, s);
    return k;
  }
  const __m256d l = _mm256_loadu_pd(lo), t = _mm256_add_pd(l, err);
  const __m256d ok = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(t, l), err, _CMP_EQ_OQ),
                                   _mm256_cmp_pd(_mm256_sub_pd(t, err), l, _CMP_EQ_OQ));
  _mm256_storeu_pd(hi, _mm256_blendv_pd(a, s, ok));
  _mm256_storeu_pd(lo, _mm256_blendv_pd(l, t, ok));
  low = _mm256_or_pd(low, _mm256_and_pd(ok, nz));
  for (unsigned bad = ~unsigned(_mm256_movemask_pd(ok)) & 0xF; bad; bad &= bad - 1)
    left[k++] = base + unsigned(__builtin_ctz(bad));
  return k;
}
uint32_t add_pairs(double* hi, double* lo, const double* v, uint32_t n, uint32_t* left, bool* low) {
  uint32_t i = 0, k = 0;
  __m256d any = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8)
    k = add_pairs8(hi + i, lo + i, _mm256_loadu_pd(v + i), _mm256_loadu_pd(v + i + 4), i, left, k, any);
  for (; i + 4 <= n; i += 4) k = add_pairs4(hi + i, lo + i, _mm256_loadu_pd(v + i), i, left, k, any);
  if (!_mm256_testz_pd(any, any)) *low = true;
  if (i < n) {
    const uint32_t t = P().add_pairs(hi + i, lo + i, v + i, n - i, left + k, low);
    for (uint32_t j = 0; j < t; ++j) left[k + j] += i;
    k += t;
  }
  return k;
}
uint32_t add_f32_pairs(double* hi, double* lo, const uint8_t* e, uint32_t n, uint32_t* left, bool* low) {
  uint32_t i = 0, k = 0;
  __m256d any = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(reinterpret_cast<const float*>(e + size_t(i) * 4));
    k = add_pairs8(hi + i, lo + i, _mm256_cvtps_pd(_mm256_castps256_ps128(x)),
                   _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), i, left, k, any);
  }
  for (; i + 4 <= n; i += 4)
    k = add_pairs4(hi + i, lo + i, _mm256_cvtps_pd(_mm_loadu_ps(reinterpret_cast<const float*>(e + size_t(i) * 4))), i,
                   left, k, any);
  if (!_mm256_testz_pd(any, any)) *low = true;
  if (i < n) {
    const uint32_t t = P().add_f32_pairs(hi + i, lo + i, e + size_t(i) * 4, n - i, left + k, low);
    for (uint32_t j = 0; j < t; ++j) left[k + j] += i;
    k += t;
  }
  return k;
}
bool normalize_pairs(double* hi, double* lo, uint32_t n) {
  const __m256d zero = _mm256_setzero_pd();
  __m256d any = zero;
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d l = _mm256_loadu_pd(lo + i);
    const __m256d has = _mm256_cmp_pd(l, zero, _CMP_NEQ_OQ);
    if (_mm256_testz_pd(has, has)) continue;
    const __m256d h = _mm256_loadu_pd(hi + i);
    const __m256d num = _mm256_and_pd(has, _mm256_cmp_pd(h, h, _CMP_ORD_Q));  // a NaN hi's lo is dropped
    const __m256d s = _mm256_add_pd(h, l), bb = _mm256_sub_pd(s, h);
    const __m256d err = _mm256_add_pd(_mm256_sub_pd(h, _mm256_sub_pd(s, bb)), _mm256_sub_pd(l, bb));
    _mm256_storeu_pd(hi + i, _mm256_blendv_pd(h, s, num));
    const __m256d nl = _mm256_and_pd(num, err);  // 0 where not a number's pair
    _mm256_storeu_pd(lo + i, nl);
    any = _mm256_or_pd(any, _mm256_cmp_pd(nl, zero, _CMP_NEQ_OQ));
  }
  const bool tail = i < n && P().normalize_pairs(hi + i, lo + i, n - i);
  return !_mm256_testz_pd(any, any) || tail;
}
bool narrow_pairs(const double* hi, const double* lo, uint32_t n, uint8_t* out) {
  const __m256d zero = _mm256_setzero_pd();
  const __m256i one = _mm256_set1_epi64x(1), sign = _mm256_set1_epi64x(INT64_MIN);
  const __m128i ex = _mm_set1_epi32(0x7F800000);
  __m128i bad = _mm_setzero_si128();
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d h = _mm256_loadu_pd(hi + i), l = _mm256_loadu_pd(lo + i);
    const __m256d s = _mm256_add_pd(h, l), bb = _mm256_sub_pd(s, h);
    const __m256d err = _mm256_add_pd(_mm256_sub_pd(h, _mm256_sub_pd(s, bb)), _mm256_sub_pd(l, bb));
    // Round to odd: where err != 0 and s's last bit is 0, one ulp toward the
    // exact value: +1 on the bits when err has s's sign (away from 0), else -1.
    const __m256i sb = _mm256_castpd_si256(s);
    const __m256i fix = _mm256_andnot_si256(_mm256_cmpeq_epi64(_mm256_and_si256(sb, one), one),
                                            _mm256_castpd_si256(_mm256_cmp_pd(err, zero, _CMP_NEQ_OQ)));
    const __m256i away = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_xor_si256(sb, _mm256_castpd_si256(err)), sign),
                                            _mm256_setzero_si256());
    const __m256i step =  // +1 away from 0, -1 (all ones) toward it
        _mm256_and_si256(fix, _mm256_or_si256(_mm256_andnot_si256(away, _mm256_set1_epi64x(-1)), one));
    const __m256d odd = _mm256_castsi256_pd(_mm256_add_epi64(sb, step));
    const __m256d r = _mm256_blendv_pd(odd, h, _mm256_cmp_pd(l, zero, _CMP_EQ_OQ));  // lo == 0: hi, -0 kept
    const __m128 f = _mm256_cvtpd_ps(r);
    _mm_storeu_ps(reinterpret_cast<float*>(out + size_t(i) * 4), f);
    bad = _mm_or_si128(bad, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(f), ex), ex));
  }
  return _mm_testz_si128(bad, bad) && (i == n || P().narrow_pairs(hi + i, lo + i, n - i, out + size_t(i) * 4));
}

uint64_t scan_f64(const double* v, uint32_t n, bool* neg_zero) {
  const __m256i mag_mask = _mm256_set1_epi64x(0x7FFFFFFFFFFFFFFFll), sign = _mm256_set1_epi64x(INT64_MIN);
  __m256i top = _mm256_setzero_si256(), nz = _mm256_setzero_si256();
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    const __m256i mag = _mm256_and_si256(b, mag_mask);  // < 2^63: a signed compare orders them
    top = _mm256_blendv_epi8(top, mag, _mm256_cmpgt_epi64(mag, top));
    nz = _mm256_or_si256(nz, _mm256_cmpeq_epi64(b, sign));
  }
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), top);
  uint64_t m = std::max(std::max(t[0], t[1]), std::max(t[2], t[3]));
  if (!_mm256_testz_si256(nz, nz)) *neg_zero = true;
  if (i < n) m = std::max(m, P().scan_f64(v + i, n - i, neg_zero));
  return m;
}

uint64_t fix_f64(const double* v, uint32_t n, double scale, int64_t* x, uint64_t* any) {
  const __m256d sc = _mm256_set1_pd(scale), magic = _mm256_set1_pd(6755399441055744.0);
  const __m256i magic_bits = _mm256_set1_epi64x(0x4338000000000000ll);
  __m256d lost = _mm256_setzero_pd();
  __m256i all = _mm256_setzero_si256();
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d y = _mm256_mul_pd(_mm256_loadu_pd(v + i), sc), t = _mm256_add_pd(y, magic);
    lost = _mm256_or_pd(lost, _mm256_cmp_pd(_mm256_sub_pd(t, magic), y, _CMP_NEQ_UQ));
    const __m256i xi = _mm256_sub_epi64(_mm256_castpd_si256(t), magic_bits);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + i), xi);
    all = _mm256_or_si256(all, xi);
  }
  alignas(32) uint64_t a[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), all);
  *any |= a[0] | a[1] | a[2] | a[3];
  uint64_t out = uint64_t(_mm256_movemask_pd(lost));
  if (i < n) out |= P().fix_f64(v + i, n - i, scale, x + i, any);
  return out;
}

// The byte shuffle that moves two w-byte lanes, packed at the start of a
// 128-bit half, into (from_packed) or out of (to_packed) that half's two
// 64-bit slots; -1 (0x80) bytes give 0.
__m256i lane_shuffle(uint32_t w, bool from_packed) {
  w = std::min(w, 8u);
  alignas(16) int8_t m[16];
  for (int i = 0; i < 16; ++i) m[i] = -1;
  for (uint32_t j = 0; j < 2; ++j)
    for (uint32_t b = 0; b < w; ++b) {
      if (from_packed)
        m[8 * j + b] = int8_t(j * w + b);
      else
        m[j * w + b] = int8_t(8 * j + b);
    }
  const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(m));
  return _mm256_set_m128i(h, h);
}

void unfix_f64(const uint8_t* d, uint32_t n, uint32_t w, double scale, double* out) {
  // Two lanes a 128-bit load, spread into 64-bit slots by a shuffle;
  // |x| < 2^47: x + 1.5 * 2^52 as a double's bits is that double exactly
  // (the magic-number conversion), minus 1.5 * 2^52 gives double(x).
  const __m256i shuf = lane_shuffle(w, true);
  const __m256i half = _mm256_set1_epi64x(int64_t(1) << (8 * w - 1));
  const __m256i magic = _mm256_set1_epi64x(0x4338000000000000ll);
  const __m256d magic_d = _mm256_set1_pd(6755399441055744.0), s = _mm256_set1_pd(scale);
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint8_t* p = d + size_t(i) * w;
    const __m256i two =
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 2 * w), reinterpret_cast<const __m128i*>(p));
    const __m256i raw = _mm256_shuffle_epi8(two, shuf);
    const __m256i x = _mm256_sub_epi64(_mm256_xor_si256(raw, half), half);  // sign-extended
    const __m256d f = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(x, magic)), magic_d);
    _mm256_storeu_pd(out + i, _mm256_mul_pd(f, s));
  }
  if (i < n) P().unfix_f64(d + size_t(i) * w, n - i, w, scale, out + i);
}

bool exact_f32(const double* in, uint32_t n, uint8_t* out) {
  __m256d bad = _mm256_setzero_pd();
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_loadu_pd(in + i);
    const __m128 f = _mm256_cvtpd_ps(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + size_t(i) * 4), _mm_castps_si128(f));
    bad = _mm256_or_pd(bad, _mm256_cmp_pd(_mm256_cvtps_pd(f), v, _CMP_NEQ_UQ));
  }
  return _mm256_testz_pd(bad, bad) && (i == n || P().exact_f32(in + i, n - i, out + size_t(i) * 4));
}

void pack_i64(const int64_t* x, uint32_t n, int tz, uint32_t w, uint8_t* out) {
  // x >> tz arithmetic: (x ^ s) >> tz logical, ^ s, with s the sign mask.
  const __m256i shuf = lane_shuffle(w, false), zero = _mm256_setzero_si256();
  const __m128i count = _mm_cvtsi32_si128(tz);
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i sgn = _mm256_cmpgt_epi64(zero, v);
    const __m256i y = _mm256_xor_si256(_mm256_srl_epi64(_mm256_xor_si256(v, sgn), count), sgn);
    const __m256i b = _mm256_shuffle_epi8(y, shuf);
    uint8_t* p = out + size_t(i) * w;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(b));  // lanes i, i+1: 2w bytes
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * w), _mm256_extracti128_si256(b, 1));
  }
  if (i < n) P().pack_i64(x + i, n - i, tz, w, out + size_t(i) * w);
}

}  // namespace

const Kernels& avx2_kernels_unchecked() {
  static const Kernels k{"avx2",     any_special, add_f32,     add_f64,       add_f64_checked,  add_f32_checked,
                         exp_range,  add_i64,     round_f32,   odd_f64,       add_f32_screened, add_f64_screened,
                         narrow_f64, round_f64,   add_f32_out, scan_f64,      fix_f64,          unfix_f64,
                         exact_f32,  pack_i64,    add_pairs,   add_f32_pairs, normalize_pairs,  narrow_pairs};
  return k;
}

}  // namespace prism
