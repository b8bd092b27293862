// prism-rank's data and its check: every rank's generated input (a function
// of the seed, the rank and the element index only, so any process can make
// every rank's input) and the reference model a result is compared with.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/blocks.hpp"
#include "coll/call.hpp"
#include "values.hpp"

namespace prism::app {

// The generated floats' distribution (--data):
//  - SPREAD: uniform in (-1, 1) times 2^k, k uniform in -8..8 (17 binades,
//    both signs: sums cancel and round);
//  - GRADIENT: gradient-like, normal with standard deviation 2^-10 (Box-Muller
//    from two uniforms): most of a lane's terms within a few binades;
//  - WIDE: 60 binades, magnitude 2^u with u uniform in [-30, 30), both signs:
//    a lane's terms of very different sizes (the worst case for exact sums).
enum class Data : uint8_t { SPREAD, GRADIENT, WIDE };
inline constexpr const char* kDataNames[] = {"spread", "gradient", "wide"};

// What the data and the reference depend on.
struct DataSpec {
  Format dtype = Format::FP32, out = Format::FP32;
  Policy policy = Policy::KULISCH_FIXED;
  Exceptions exceptions = Exceptions::IEEE;
  Collective coll = Collective::ALLREDUCE;
  uint64_t seed = 1, count = 0;
  uint16_t root = 0;
  Data data = Data::SPREAD;
};

inline uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Rank r's generated input: element i is a function of (seed, r, i) only.
// Floats as s.data says; integers small enough that no sum overflows int32.
inline std::vector<uint8_t> generate(const DataSpec& s, uint16_t rank) {
  const Format f = s.dtype;
  const size_t esz = info(f).bytes;
  std::vector<uint8_t> out(s.count * esz);
  const uint64_t base = mix(s.seed ^ (uint64_t(rank) << 40));
  for (uint64_t i = 0; i < s.count; ++i) {
    const uint64_t h = mix(base + i);
    double v;
    if (f == Format::INT8)
      v = double(int(h % 201) - 100);
    else if (f == Format::INT32)
      v = double(int64_t(h % (1u << 21)) - (1 << 20));
    else if (s.data == Data::GRADIENT) {
      const uint64_t h2 = mix(h);
      const double u1 = (double(h >> 11) + 1) / double(1ull << 53), u2 = double(h2 >> 11) / double(1ull << 53);
      v = std::ldexp(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2), -10);
    } else if (s.data == Data::WIDE) {
      v = std::exp2(double(h >> 11) / double(1ull << 53) * 60 - 30) * ((h & 1) ? -1 : 1);
    } else {
      v = std::ldexp(double(h >> 11) / double(1ull << 53) * 2 - 1, int((h >> 3) % 17) - 8);
    }
    store_bits(f, out.data() + i * esz, encode_value(f, v));
  }
  return out;
}

// FNV-1a 64 of the result bytes: the digest every rank prints.
inline uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

inline double as_double(Format f, const uint8_t* p) {
  const uint32_t bits = load_bits(f, p);
  if (f == Format::INT8) return double(int8_t(bits));
  if (f == Format::INT32) return double(int32_t(bits));
  return double(to_float(f, bits));
}

inline coll::Call call_of(const DataSpec& s) {
  coll::Call c;
  c.coll = s.coll;
  c.count = s.count;
  c.op = {s.dtype, s.out, s.policy, s.exceptions};
  c.root = s.root;
  return c;
}

// The reference model: every rank's input reduced by the library's
// accumulators in rank order, block by block; KULISCH_FIXED, FP32_BINOMIAL
// and integers must match bit for bit; FP32_ARRIVAL (whose order at the
// switch is the arrival order) must lie within the recursive-summation
// bound of the exact sum: |r − S| ≤ (γ_{R−1} + u)·Σ|x| (+ the output
// format's rounding).
struct CheckResult {
  uint64_t differ = 0, beyond_bound = 0;
  std::string first;
};

// Every rank's input and what this rank's result must be: `expect` (elements
// of `esz` bytes) from element `first` of the vector on; for broadcast and
// allgather the inputs' bytes themselves.
struct Reference {
  std::vector<std::vector<uint8_t>> ins;
  bool arrival = false;  // checked against the bound, not bit for bit
  std::vector<uint8_t> expect;
  size_t first = 0, esz = 0;
};

// The policy's order is `algo`'s own where it is not the reference's:
// FP32_ARRIVAL always (the switch's arrival order, the host algorithms'
// rounding where they add), FP32_BINOMIAL through the chain, RHD and the ring;
// these are checked against the bound of the exact sum. The binomial tree is
// FP32_BINOMIAL's order over its ranks relabelled (rank - root) mod p.
inline Reference make_expected(const DataSpec& s, Algorithm algo, uint16_t rank, uint16_t group) {
  Reference ref;
  const coll::ResultShape sh = coll::result_shape(call_of(s), rank, group);
  const size_t ib = info(s.dtype).bytes, ob = info(s.out).bytes;
  ref.esz = sh.esz;
  ref.first = sh.first;
  if (s.coll == Collective::BROADCAST || s.coll == Collective::ALLGATHER) {
    ref.expect.resize(s.count * ib);
    for (uint16_t r = 0; r < group; ++r) {
      if (s.coll == Collective::BROADCAST && r != s.root) continue;
      const size_t lo = s.coll == Collective::BROADCAST ? 0 : coll::coll_block_start(s.count, group, r);
      const size_t hi = s.coll == Collective::BROADCAST ? s.count : coll::coll_block_start(s.count, group, r + 1);
      const std::vector<uint8_t> in = generate(s, r);
      std::memcpy(ref.expect.data() + lo * ib, in.data() + lo * ib, (hi - lo) * ib);
    }
    return ref;
  }
  ref.ins.resize(group);
  for (uint16_t r = 0; r < group; ++r) ref.ins[r] = generate(s, r);
  std::vector<uint8_t> all(s.count * ob);
  const size_t block = 4096;
  OpDesc d;
  d.dtype = s.dtype;
  d.out = s.out;
  d.exceptions = s.exceptions;
  d.group = group;
  const bool own_order = s.policy == Policy::FP32_ARRIVAL || (s.policy == Policy::FP32_BINOMIAL &&
                                                              algo != Algorithm::SWITCH && algo != Algorithm::BINOMIAL);
  ref.arrival = own_order && is_float(s.dtype);
  const uint16_t root = algo == Algorithm::BINOMIAL && s.coll == Collective::REDUCE ? s.root : 0;
  d.policy = ref.arrival ? Policy::KULISCH_FIXED : s.policy;
  std::vector<uint8_t> flags(block);
  for (size_t at = 0; at < s.count; at += block) {
    const size_t n = std::min(block, size_t(s.count - at));
    d.lanes = uint32_t(n);
    auto acc = make_accumulator(d);
    for (uint16_t r = 0; r < group; ++r) acc->add(ref.ins[r].data() + at * ib, uint16_t((r + group - root) % group));
    acc->finalize(all.data() + at * ob, flags.data());
  }
  ref.expect.assign(all.begin() + sh.first * sh.esz, all.begin() + (sh.first + sh.elems) * sh.esz);
  return ref;
}

inline CheckResult check(const DataSpec& s, const Reference& ref, const std::vector<uint8_t>& result) {
  CheckResult cr;
  const size_t ib = info(s.dtype).bytes, ob = ref.esz;
  const Format of = ob == info(s.out).bytes ? s.out : s.dtype;
  const size_t group = ref.ins.size();
  const double u32 = std::ldexp(1.0, -24), uo = std::ldexp(1.0, -int(info(s.out).mbits) - 1);
  const double gamma = double(group - 1) * u32 / (1 - double(group - 1) * u32);
  for (size_t i = 0; i * ob < ref.expect.size(); ++i) {
    const uint8_t* got = result.data() + i * ob;
    const uint8_t* want = ref.expect.data() + i * ob;
    if (std::memcmp(got, want, ob) == 0) continue;
    ++cr.differ;
    if (ref.arrival) {
      double abs_sum = 0;
      for (size_t r = 0; r < group; ++r)
        abs_sum += std::fabs(as_double(s.dtype, ref.ins[r].data() + (ref.first + i) * ib));
      const double g = as_double(s.out, got), w = as_double(s.out, want);
      const double bound = (gamma + u32) * abs_sum + 2 * uo * abs_sum + std::ldexp(1.0, -149);
      if (std::fabs(g - w) <= bound) continue;
    }
    ++cr.beyond_bound;
    if (cr.first.empty()) {
      char b[160];
      std::snprintf(b, sizeof b, "element %zu: got 0x%0*x, the reference model gives 0x%0*x", ref.first + i,
                    int(ob * 2), load_bits(of, got), int(ob * 2), load_bits(of, want));
      cr.first = b;
    }
  }
  return cr;
}

}  // namespace prism::app
