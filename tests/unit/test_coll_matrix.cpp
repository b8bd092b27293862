// Every host algorithm of the table (coll/algorithms.hpp's kAlgorithms) and
// every reducing collective it offers, through coll::run, under every input format, every output format the op
// admits, every policy and every exceptions mode, for p in {1, 3, 5, 8} and
// a count no p divides, over the in-process transport (one thread per rank).
//
// References, per element:
//  - KULISCH_FIXED and integer inputs (any policy): one accumulator fed every
//    rank's input in rank order and rounded once (the switch's result): bit
//    for bit, flags included, for every algorithm, p and root.
//  - FP32_BINOMIAL and FP32_ARRIVAL through binomial_*: the accumulator's
//    FP32_BINOMIAL bits, rank (r - root) mod p as contribution index
//    (binomial.hpp: the tree's pairing is the accumulator's).
//  - FP32 policies through the other algorithms, which round where they add:
//    the same specials (NaN/Inf bits) and flags as the exact reference, and
//    finite values within the recursive-summation bound of the exact sum K:
//    |r - K| <= (gamma_{p-1} + u) * sum |x| (u = 2^-24), plus an ulp of the
//    output format when it is narrower than fp32 (its own rounding). Where
//    the exact sum lies within that bound of the output format's overflow
//    threshold, either side of it is accepted (counted as "boundary").
// Also: allreduce results are the same on every rank, rhd_reduce's root has
// rhd_allreduce's bits, reduces leave non-roots' buffers alone, and every
// combination admission_error() refuses is refused by every collective.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "arith/op.hpp"
#include "coll/algorithms.hpp"
#include "coll/blocks.hpp"
#include "coll/inproc.hpp"
#include "coll/rhd.hpp"
#include "coll_util.hpp"

namespace {

using prism::Algorithm;
using prism::Collective;
using prism::Exceptions;
using prism::Format;
using prism::OpDesc;
using prism::Policy;
using prism::coll::coll_block_start;
using prism::coll::Links;
using prism::coll::ReduceOp;
using prism::coll::test::run_group;
using Bytes = std::vector<uint8_t>;

constexpr int kPs[] = {1, 3, 5, 8};
constexpr size_t kCount = 4099;  // no p of kPs divides it
constexpr size_t kChainSegments = 3;
constexpr Policy kPolicies[] = {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL};
constexpr Exceptions kExceptionsModes[] = {Exceptions::IEEE, Exceptions::SATURATE};

// Tallies printed at the end.
struct Tally {
  size_t ops = 0;          // (in, out, policy, exceptions, p) combinations run
  size_t runs = 0;         // algorithm runs (ops x algorithms)
  size_t skipped = 0;      // (in, out, policy, exceptions, p) refused by admission_error
  size_t boundary = 0;     // fp32-policy elements at the output format's overflow threshold
  size_t bound_elems = 0;  // fp32-policy elements checked against the error bound
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};
Tally g_tally;

class PrintTally : public ::testing::Environment {
 public:
  void TearDown() override {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_tally.start).count();
    std::printf(
        "[coll matrix] %zu combinations (in, out, policy, exceptions, p) ran, %zu algorithm runs; %zu combinations "
        "skipped as inadmissible; %zu fp32-policy elements checked against the bound, %zu at the overflow "
        "threshold; %.1f s\n",
        g_tally.ops, g_tally.runs, g_tally.skipped, g_tally.bound_elems, g_tally.boundary, s);
  }
};
[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new PrintTally);

// The cases: every reducing collective each algorithm of the table offers
// (kAlgorithms: a row added there is run here), the rooted ones at two roots
// where the algorithm takes any (1 and p - 1: for p = 3, 5 the fold's other
// parity, and the last rank), the chain's at rank 0. Through coll::run, the
// dispatch Group uses; the switch is tested against a switch (test_rank,
// tests/py).
struct Case {
  Algorithm algo;
  Collective coll;
  int root;
};
std::vector<Case> cases(int p) {
  std::vector<Case> out;
  for (const prism::coll::AlgorithmInfo& a : prism::coll::algorithms()) {
    if (!a.hosts) continue;
    for (Collective c : {Collective::ALLREDUCE, Collective::REDUCE_SCATTER, Collective::REDUCE}) {
      if (!(a.runs & prism::coll::bit(c))) continue;
      if (c != Collective::REDUCE || a.roots == prism::coll::Roots::ZERO) {
        out.push_back({a.value, c, 0});
        continue;
      }
      out.push_back({a.value, c, std::min(1, p - 1)});
      if (p > 2) out.push_back({a.value, c, p - 1});
    }
  }
  return out;
}

struct Result {
  Bytes out, flags;
};

// Rank r's buffers for case k: the whole vector, or its block for a reduce-scatter.
size_t out_len(const Case& k, size_t count, int p, int r) {
  return k.coll == Collective::REDUCE_SCATTER ? coll_block_start(count, p, r + 1) - coll_block_start(count, p, r)
                                              : count;
}

// Runs every case, one after another, on one group; got[r][k] is rank r's result of case k.
std::vector<std::vector<Result>> run_all(const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count) {
  const size_t osz = prism::info(op.out).bytes;
  const std::vector<Case> all = cases(p);
  std::vector<std::vector<Result>> got(static_cast<size_t>(p), std::vector<Result>(all.size()));
  run_group(p, [&](int r, Links& t) {
    prism::coll::Context ctx;
    ctx.links = &t;
    for (size_t k = 0; k < all.size(); ++k) {
      const size_t n = out_len(all[k], count, p, r);
      Result& g = got[size_t(r)][k];
      g = Result{Bytes(n * osz, 0xEE), Bytes(n, 0xEE)};
      prism::coll::Call call{all[k].coll,
                             in[size_t(r)].data(),
                             g.out.empty() ? nullptr : g.out.data(),
                             g.flags.empty() ? nullptr : g.flags.data(),
                             count,
                             op,
                             all[k].root,
                             kChainSegments};
      if (all[k].coll == Collective::REDUCE && r != all[k].root) call.out = nullptr, call.flags = nullptr;
      prism::coll::run(all[k].algo, ctx, call);
    }
  });
  g_tally.runs += all.size();
  return got;
}

// One accumulator of `policy` fed every rank's input, rank r as contribution
// (r - root) mod p, rounded once into `out`.
Result reference(Format dtype, Format out, Policy policy, Exceptions ex, const std::vector<Bytes>& in, size_t count,
                 int root = 0) {
  const int p = int(in.size());
  auto acc = prism::make_accumulator(OpDesc{dtype, out, policy, ex, uint32_t(p), uint32_t(count)});
  for (int r = 0; r < p; ++r) acc->add(in[size_t(r)].data(), uint32_t((r - root + p) % p));
  Result res{Bytes(count * prism::info(out).bytes), Bytes(count)};
  acc->finalize(res.out.data(), res.flags.data());
  return res;
}

// A special of f (NaN, or an infinity where f has them), or its largest
// finite value of either sign for the formats without infinities.
uint32_t wild_bits(Format f, std::mt19937& rng) {
  const prism::FormatInfo& fi = prism::info(f);
  const uint32_t sign = (rng() & 1) ? fi.sign_bit : 0;
  switch (rng() % 3) {
    case 0: return fi.canonical_nan | (fi.nan_style == prism::NanStyle::FNUZ ? 0 : sign);
    case 1: return fi.has_inf ? fi.inf | sign : fi.max_finite | sign;
    default:
      if (fi.nan_style == prism::NanStyle::IEEE)  // a NaN with a payload
        return fi.inf | sign | (1u + (rng() & ((1u << fi.mbits) - 2)));
      return fi.canonical_nan | (fi.nan_style == prism::NanStyle::FNUZ ? 0 : sign);
  }
}

// Rank r's input: mostly finite values (fp32 and bf16 kept to exponents
// 2^-24..2^25 so fp32 partial sums neither overflow nor lose everything),
// about one element in 300 wild (wild_bits; integers: any bit pattern), and
// planted at elements 1..3: a NaN at rank p/2, +Inf at rank 0 with -Inf at
// rank p-1 (INVALID), -Inf at every rank.
Bytes make_matrix_input(Format f, size_t count, int r, int p) {
  std::mt19937 rng(uint32_t(1009 * int(f) + 101 * p + r));
  const prism::FormatInfo& fi = prism::info(f);
  const size_t sz = fi.bytes;
  Bytes b(count * sz);
  for (size_t i = 0; i < count; ++i) {
    const bool wild = rng() % 300 == 0;
    uint32_t bits;
    if (f == Format::INT32) {
      bits = wild ? uint32_t(rng()) : uint32_t(int32_t(rng() % 2000001) - 1000000);
    } else if (f == Format::INT8) {
      bits = rng() & 0xFF;
    } else if (wild) {
      bits = wild_bits(f, rng);
    } else {
      do {
        bits = uint32_t(rng()) & uint32_t((uint64_t(1) << (8 * sz)) - 1);
        if (f == Format::FP32 || f == Format::BF16) {
          const uint32_t emask = 0xFFu << fi.mbits;
          bits = (bits & ~emask) | uint32_t(103 + rng() % 49) << fi.mbits;
        }
      } while (prism::is_special(f, bits));
    }
    store_bits(f, b.data() + i * sz, bits);
  }
  if (fi.is_float && count > 3) {
    if (r == p / 2) store_bits(f, b.data() + 1 * sz, fi.canonical_nan);
    if (fi.has_inf) {
      if (r == 0) store_bits(f, b.data() + 2 * sz, fi.inf);
      if (r == p - 1 && p > 1) store_bits(f, b.data() + 2 * sz, fi.inf | fi.sign_bit);
      store_bits(f, b.data() + 3 * sz, fi.inf | fi.sign_bit);
    }
  }
  return b;
}

double value_of(Format f, uint32_t bits) {
  const prism::Decoded d = prism::decode(f, bits);
  if (d.cls == prism::FpClass::NaN) return NAN;
  if (d.cls == prism::FpClass::Inf) return d.neg ? -INFINITY : INFINITY;
  const double v = std::ldexp(double(d.sig), d.exp);
  return d.neg ? -v : v;
}

// The spacing of f's values at magnitude x (its subnormal step below 2^emin).
double ulp(Format f, double x) {
  const prism::FormatInfo& fi = prism::info(f);
  const int e = x > 0 ? std::ilogb(x) : fi.emin;
  return std::ldexp(1.0, std::max(e, fi.emin) - fi.mbits);
}

std::string what(const ReduceOp& op, int p, size_t count, const Case& k) {
  return std::string(prism::name(k.algo)) + " " + prism::name(k.coll) + " " + prism::name(op.dtype) + "->" +
         prism::name(op.out) + " " + prism::name(op.policy) + " " + prism::name(op.exceptions) +
         " p=" + std::to_string(p) + " count=" + std::to_string(count) + " root=" + std::to_string(k.root);
}

std::string elem(Format f, const Result& r, size_t i) {
  const size_t sz = prism::info(f).bytes;
  char buf[96];
  const uint32_t b = prism::load_bits(f, r.out.data() + i * sz);
  std::snprintf(buf, sizeof buf, "0x%0*x (%.9g) flags %u", int(2 * sz), b, value_of(f, b), unsigned(r.flags[i]));
  return buf;
}

// Bit for bit, flags included; reports the first differing element and how many differ.
void expect_bits(const Result& got, const Result& want, Format out, const std::string& w) {
  if (got.out == want.out && got.flags == want.flags) return;
  const size_t sz = prism::info(out).bytes, n = want.flags.size();
  ASSERT_EQ(got.out.size(), want.out.size()) << w;
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(got.out.data() + i * sz, want.out.data() + i * sz, sz) != 0 || got.flags[i] != want.flags[i]) {
      if (first == n) first = i;
      ++bad;
    }
  ADD_FAILURE() << w << ": " << bad << " of " << n << " elements differ; first " << first << ": got "
                << elem(out, got, first) << ", want " << elem(out, want, first);
}

// The whole vector an algorithm produced (the root's, rank 0's, or the
// reduce-scatter's blocks in rank order), after checking what the other
// ranks hold.
Result view(const std::vector<std::vector<Result>>& got, size_t a, const Case& k, int p, size_t count, Format out,
            const std::string& w) {
  const size_t osz = prism::info(out).bytes;
  if (k.coll == Collective::REDUCE_SCATTER) {
    Result v;
    for (int r = 0; r < p; ++r) {
      const Result& b = got[size_t(r)][a];
      v.out.insert(v.out.end(), b.out.begin(), b.out.end());
      v.flags.insert(v.flags.end(), b.flags.begin(), b.flags.end());
    }
    return v;
  }
  const int root = k.root;
  for (int r = 0; r < p; ++r) {
    if (r == root) continue;
    const Result& b = got[size_t(r)][a];
    if (k.coll == Collective::ALLREDUCE) {
      expect_bits(b, got[size_t(root)][a], out, w + ": rank " + std::to_string(r) + " vs rank 0");
    } else {
      EXPECT_TRUE(b.out == Bytes(count * osz, 0xEE) && b.flags == Bytes(count, 0xEE))
          << w << ": reduce wrote at rank " << r;
    }
  }
  return got[size_t(root)][a];
}

// The fp32 references of one op: the exact sum K and the exact sum of
// magnitudes S, each rounded to fp32 only.
struct Fp32Refs {
  Result k32, s32;
  double gamma_u;  // gamma_{p-1} + u
};

void check_fp32(const Result& got, const Result& exact, const Fp32Refs& f, const ReduceOp& op, const std::string& w) {
  const Format out = op.out;
  const prism::FormatInfo& fo = prism::info(out);
  const size_t osz = fo.bytes, n = exact.flags.size();
  const double u = std::ldexp(1.0, -24);
  const double maxf = value_of(out, fo.max_finite);
  const double threshold = maxf + ulp(out, maxf) / 2;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t gb = prism::load_bits(out, got.out.data() + i * osz);
    const uint32_t rb = prism::load_bits(out, exact.out.data() + i * osz);
    float k, s;
    std::memcpy(&k, f.k32.out.data() + 4 * i, 4);
    std::memcpy(&s, f.s32.out.data() + 4 * i, 4);
    const double bound = f.gamma_u * double(s) * (1 + 2 * u);
    const double slack = out == Format::FP32 ? 0 : ulp(out, std::fabs(value_of(out, gb)));
    const bool finite_inputs = std::isfinite(k) &&
                               (exact.flags[i] & (prism::flag::NAN_INPUT | prism::flag::INVALID)) == 0 &&
                               (f.k32.flags[i] & (prism::flag::NAN_INPUT | prism::flag::INVALID)) == 0;
    const bool at_threshold = finite_inputs && std::fabs(std::fabs(double(k)) - threshold) <= bound + ulp(out, maxf);
    const bool special = prism::is_special(out, gb) || prism::is_special(out, rb);
    if (got.flags[i] != exact.flags[i] || special || (exact.flags[i] & prism::flag::OVERFLOW)) {
      // Specials and overflows: the exact reference's bits and flags.
      if (gb == rb && got.flags[i] == exact.flags[i]) continue;
      if (at_threshold) {
        ++g_tally.boundary;
        continue;
      }
      ADD_FAILURE() << w << ": element " << i << ": got " << elem(out, got, i) << ", want " << elem(out, exact, i)
                    << " (exact sum " << k << ")";
      return;
    }
    ++g_tally.bound_elems;
    const double g = value_of(out, gb);
    if (!(std::fabs(g - double(k)) <= bound + slack)) {
      ADD_FAILURE() << w << ": element " << i << ": got " << elem(out, got, i) << ", exact sum " << k << ", off by "
                    << std::fabs(g - double(k)) << " > bound " << bound + slack;
      return;
    }
  }
}

// Every case for one op on p ranks, against the references above.
void check_op(const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count) {
  const bool exact = op.policy == Policy::KULISCH_FIXED || !prism::is_float(op.dtype);
  const Result want = reference(op.dtype, op.out, Policy::KULISCH_FIXED, op.exceptions, in, count);
  const std::vector<Case> all = cases(p);
  const auto got = run_all(op, p, in, count);
  ++g_tally.ops;
  Fp32Refs f;
  if (!exact) {
    f.k32 = reference(op.dtype, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE, in, count);
    f.s32 = reference(op.dtype, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE,
                      prism::coll::test::magnitudes(op.dtype, in, count), count);
    const double u = std::ldexp(1.0, -24);
    f.gamma_u = (p - 1) * u / (1 - (p - 1) * u) + u;
  }
  Result rhd_all;
  for (size_t a = 0; a < all.size(); ++a) {
    const Case& k = all[a];
    const std::string w = what(op, p, count, k);
    const Result v = view(got, a, k, p, count, op.out, w);
    if (k.algo == Algorithm::RHD && k.coll == Collective::ALLREDUCE) rhd_all = v;
    // RHD's reduce is its allreduce's reduce-scatter gathered at the root: the same bits, any root.
    if (k.algo == Algorithm::RHD && k.coll == Collective::REDUCE)
      expect_bits(v, rhd_all, op.out, w + ": vs rhd allreduce");
    if (exact) {
      expect_bits(v, want, op.out, w);
      continue;
    }
    // The binomial tree's fp32 order is the accumulator's FP32_BINOMIAL over ranks relabelled (r - root) mod p.
    if (k.algo == Algorithm::BINOMIAL)
      expect_bits(v, reference(op.dtype, op.out, Policy::FP32_BINOMIAL, op.exceptions, in, count, k.root), op.out,
                  w + ": vs the accumulator's FP32_BINOMIAL");
    check_fp32(v, want, f, op, w);
  }
}

// Every case refuses an op admission_error() refuses (p = 1: no peer to wait on).
void expect_refused(const ReduceOp& op) {
  const Bytes in(16 * prism::info(op.dtype).bytes);
  Bytes out(64), flags(16);
  for (const Case& k : cases(1))
    EXPECT_THROW(
        run_group(1,
                  [&](int, Links& t) {
                    prism::coll::Context ctx;
                    ctx.links = &t;
                    prism::coll::run(k.algo, ctx, {k.coll, in.data(), out.data(), flags.data(), 16, op, k.root, 3});
                  }),
        std::invalid_argument)
        << prism::name(k.algo) << " " << prism::name(k.coll) << " " << prism::name(op.dtype) << "->"
        << prism::name(op.out) << " " << prism::name(op.policy) << " " << prism::name(op.exceptions);
}

// The matrix for one input format: every output format, policy, exceptions mode and p.
void run_matrix(Format in_fmt, size_t count) {
  for (int p : kPs) {
    std::vector<Bytes> in;
    for (int r = 0; r < p; ++r) in.push_back(make_matrix_input(in_fmt, count, r, p));
    for (const auto& oe : prism::entries(Format{}))
      for (Policy pol : kPolicies)
        for (Exceptions ex : kExceptionsModes) {
          const ReduceOp op{in_fmt, oe.value, pol, ex};
          if (prism::admission_error(OpDesc{in_fmt, oe.value, pol, ex, uint32_t(p), uint32_t(count)},
                                     prism::kMaxWidth)) {
            ++g_tally.skipped;
            if (p == 1) expect_refused(op);
            continue;
          }
          check_op(op, p, in, count);
        }
  }
}

class CollMatrix : public ::testing::TestWithParam<Format> {};

TEST_P(CollMatrix, EveryAlgorithmPolicyOutputAndExceptions) { run_matrix(GetParam(), kCount); }

std::vector<Format> all_formats() {
  std::vector<Format> v;
  for (const auto& e : prism::entries(Format{})) v.push_back(e.value);
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, CollMatrix, ::testing::ValuesIn(all_formats()),
                         [](const ::testing::TestParamInfo<Format>& i) { return std::string(prism::name(i.param)); });

// One bigger case per algorithm: several blocks of every algorithm
// (kRhdBlock = 65536, kBinomialBlock = 4096; the ring's 262144 at p = 5: one) on 5 ranks, exact
// and fp32.
TEST(CollMatrixBig, SeveralBlocks) {
  const size_t count = 2 * size_t(prism::coll::kRhdBlock) + 7;
  const int p = 5;
  for (const ReduceOp& op : {ReduceOp{Format::BF16, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE},
                             ReduceOp{Format::FP16, Format::FP16, Policy::FP32_ARRIVAL, Exceptions::SATURATE}}) {
    std::vector<Bytes> in;
    for (int r = 0; r < p; ++r) in.push_back(make_matrix_input(op.dtype, count, r, p));
    check_op(op, p, in, count);
  }
}

}  // namespace
