// Seed 001's Recursive Halving-Doubling (coll/rhd.hpp) over the in-process
// transport (one thread per rank).
//
// References: one accumulator fed every rank's input (the switch's result)
// for the exact policies; for FP32_ARRIVAL / FP32_BINOMIAL, whose bits are
// RHD's own, the recursive-summation bound around the exact sum; and the
// seed's message pattern (fold, halving exchanges, doubling exchanges,
// unfold) written out from its text.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/inproc.hpp"
#include "coll/rhd.hpp"
#include "coll_util.hpp"

namespace {

using prism::Exceptions;
using prism::Format;
using prism::OpDesc;
using prism::Policy;
using prism::coll::ReduceOp;
using Bytes = std::vector<uint8_t>;
using prism::coll::test::make_input;
using prism::coll::test::run_group;

struct Result {
  Bytes out, flags;
};

Result reference(const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count, Policy policy) {
  OpDesc d{op.dtype, op.out, policy, op.exceptions, uint32_t(p), uint32_t(count)};
  auto acc = prism::make_accumulator(d);
  for (int r = 0; r < p; ++r) acc->add(in[size_t(r)].data(), uint32_t(r));
  Result res{Bytes(count * prism::info(op.out).bytes), Bytes(count)};
  acc->finalize(res.out.data(), res.flags.data());
  return res;
}

std::vector<Result> run_rhd(const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count) {
  const size_t osz = prism::info(op.out).bytes;
  std::vector<Result> all(static_cast<size_t>(p));
  run_group(p, [&](int r, prism::coll::Links& t) {
    Result& b = all[size_t(r)];
    b = Result{Bytes(count * osz, 0xEE), Bytes(count, 0xEE)};
    prism::coll::rhd_allreduce(t, in[size_t(r)].data(), count, op, b.out.data(), b.flags.data());
  });
  return all;
}

std::string what(const ReduceOp& op, int p, size_t count) {
  return std::string(prism::name(op.dtype)) + "->" + prism::name(op.out) + " " + prism::name(op.policy) +
         " p=" + std::to_string(p) + " count=" + std::to_string(count);
}

void check_exact(const ReduceOp& op, int p, size_t count) {
  std::vector<Bytes> in;
  for (int r = 0; r < p; ++r) in.push_back(make_input(op.dtype, count, uint32_t(1000 * p + r + count)));
  const Result want = reference(op, p, in, count, Policy::KULISCH_FIXED);
  const auto all = run_rhd(op, p, in, count);
  const std::string w = what(op, p, count);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(all[size_t(r)].out, want.out) << w << ": result at rank " << r;
    EXPECT_EQ(all[size_t(r)].flags, want.flags) << w << ": flags at rank " << r;
  }
}

constexpr size_t kCounts[] = {1, 7, 1000, 4099};

TEST(CollRhd, SegmentSplit) {
  // Contiguous, the first n % q segments one larger.
  EXPECT_EQ(prism::coll::rhd_segment_start(7, 4, 0), 0u);
  EXPECT_EQ(prism::coll::rhd_segment_start(7, 4, 1), 2u);
  EXPECT_EQ(prism::coll::rhd_segment_start(7, 4, 2), 4u);
  EXPECT_EQ(prism::coll::rhd_segment_start(7, 4, 3), 6u);
  EXPECT_EQ(prism::coll::rhd_segment_start(7, 4, 4), 7u);
  EXPECT_EQ(prism::coll::rhd_segment_start(1, 8, 1), 1u);
  EXPECT_EQ(prism::coll::rhd_segment_start(1, 8, 8), 1u);
}

// Exact: bit-identical to one accumulator fed every input, on every rank.
TEST(CollRhd, KulischEqualsOneAccumulator) {
  for (Format f : {Format::FP32, Format::BF16, Format::E4M3FN, Format::FP16})
    for (Format out : {Format::FP32, f})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) check_exact(ReduceOp{f, out, Policy::KULISCH_FIXED, Exceptions::IEEE}, p, c);
}

TEST(CollRhd, KulischSaturate) {
  for (Format f : {Format::FP16, Format::E4M3FN})
    for (int p : {3, 6, 8}) check_exact(ReduceOp{f, f, Policy::KULISCH_FIXED, Exceptions::SATURATE}, p, 1000);
}

TEST(CollRhd, Int32EveryPolicy) {
  for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
    for (Format out : {Format::INT32, Format::FP32})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) check_exact(ReduceOp{Format::INT32, out, pol, Exceptions::IEEE}, p, c);
}

// More than one block (kRhdBlock): exact, p = 3 and 8.
TEST(CollRhd, KulischSeveralBlocks) {
  for (int p : {3, 8})
    check_exact(ReduceOp{Format::BF16, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE}, p,
                2 * size_t(prism::coll::kRhdBlock) + 5);
}

// Reduce (the seed's ReduceScatter + Gather) to every root: the root's bits
// are the allreduce's (and, exactly, one accumulator's); other ranks' output
// untouched.
TEST(CollRhd, ReduceEveryRoot) {
  for (Format f : {Format::FP32, Format::BF16, Format::E4M3FN})
    for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : {size_t(7), size_t(1000)})
          for (int root = 0; root < p; ++root) {
            const ReduceOp op{f, Format::FP32, pol, Exceptions::IEEE};
            std::vector<Bytes> in;
            for (int r = 0; r < p; ++r) in.push_back(make_input(f, c, uint32_t(31 * p + r + c)));
            const auto all = run_rhd(op, p, in, c);
            std::vector<Result> red(static_cast<size_t>(p));
            run_group(p, [&](int r, prism::coll::Links& t) {
              Result& b = red[size_t(r)];
              b = Result{Bytes(c * 4, 0xEE), Bytes(c, 0xEE)};
              prism::coll::rhd_reduce(t, in[size_t(r)].data(), c, op, b.out.data(), b.flags.data(), root);
            });
            const std::string w = what(op, p, c) + " root=" + std::to_string(root);
            EXPECT_EQ(red[size_t(root)].out, all[0].out) << w;
            EXPECT_EQ(red[size_t(root)].flags, all[0].flags) << w;
            if (pol == Policy::KULISCH_FIXED) {
              EXPECT_EQ(red[size_t(root)].out, reference(op, p, in, c, Policy::KULISCH_FIXED).out) << w;
            }
            for (int r = 0; r < p; ++r)
              if (r != root) {
                EXPECT_EQ(red[size_t(r)].out, Bytes(c * 4, 0xEE)) << w << ": reduce wrote at rank " << r;
              }
          }
}

// Broadcast from every root, sizes across segments.
TEST(CollRhd, BroadcastEveryRoot) {
  for (int p = 1; p <= 9; ++p)
    for (size_t bytes : {size_t(0), size_t(1), size_t(1000), size_t(prism::coll::kRhdBlock) * 4 + 3})
      for (int root = 0; root < p; ++root) {
        std::vector<Bytes> buf(static_cast<size_t>(p), Bytes(bytes, 0));
        buf[size_t(root)] = make_input(Format::E4M3FN, bytes, uint32_t(root + p));
        run_group(p, [&](int r, prism::coll::Links& t) {
          prism::coll::rhd_broadcast(t, buf[size_t(r)].data(), bytes, root);
        });
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(buf[size_t(r)], buf[size_t(root)])
              << "p=" << p << " bytes=" << bytes << " root=" << root << " rank " << r;
      }
}

// FP32_ARRIVAL / FP32_BINOMIAL: RHD's own fp32 order, the same bits on every
// rank, within the recursive-summation bound of the exact sum K (rounded to
// fp32): |r - K| <= (gamma_{p-1} + u) * sum |x|, u = 2^-24.
TEST(CollRhd, Fp32WithinRecursiveSummationBound) {
  const double u = std::ldexp(1.0, -24);
  for (Policy pol : {Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
    for (Format f : {Format::FP32, Format::BF16, Format::E4M3FN})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) {
          const ReduceOp op{f, Format::FP32, pol, Exceptions::IEEE};
          std::vector<Bytes> in;
          for (int r = 0; r < p; ++r) in.push_back(make_input(f, c, uint32_t(77 * p + r + c), true));
          const Result exact = reference(op, p, in, c, Policy::KULISCH_FIXED);
          // sum |x| per element: the exact sum of the absolute values, rounded up a hair.
          std::vector<Bytes> absin = in;
          const size_t isz = prism::info(f).bytes;
          const uint32_t sign = 1u << (8 * isz - 1);
          for (auto& b : absin)
            for (size_t i = 0; i < c; ++i)
              prism::store_bits(f, b.data() + i * isz, prism::load_bits(f, b.data() + i * isz) & ~sign);
          const Result mag = reference(op, p, absin, c, Policy::KULISCH_FIXED);
          const auto all = run_rhd(op, p, in, c);
          const double gamma = (p - 1) * u / (1 - (p - 1) * u);
          const std::string w = what(op, p, c);
          for (int r = 0; r < p; ++r) {
            EXPECT_EQ(all[size_t(r)].out, all[0].out) << w << ": rank " << r << " differs from rank 0";
            EXPECT_EQ(all[size_t(r)].flags, all[0].flags) << w << ": flags at rank " << r << " differ from rank 0";
          }
          for (size_t i = 0; i < c; ++i) {
            float got, k, s;
            std::memcpy(&got, all[0].out.data() + 4 * i, 4);
            std::memcpy(&k, exact.out.data() + 4 * i, 4);
            std::memcpy(&s, mag.out.data() + 4 * i, 4);
            if (!(s < 0x1p126f)) continue;  // bf16 near the top: a partial sum may overflow fp32
            const double bound = (gamma + u) * double(s) * (1 + 2 * u);
            ASSERT_LE(std::fabs(double(got) - double(k)), bound) << w << " element " << i;
          }
        }
}

// The seed's pattern, rank by rank: an odd rank 2i+1 < 2r sends its whole
// vector to 2i once and then nothing; every other rank (v its number among
// the q = 2^floor(log2 p)) sends to v ^ 1, v ^ 2, ..., v ^ q/2 (halving), then
// v ^ q/2, ..., v ^ 1 (doubling), in the renumbered space, and an even rank
// 2i < 2r then sends the result to 2i+1. Across ranks: each fold message is
// sent before any message of its even rank, each unfold after every
// message its even rank receives.
void check_pattern(int p) {
  std::vector<prism::coll::MessageEvent> ev;
  const size_t count = 1000;
  const ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  run_group(
      p,
      [&](int r, prism::coll::Links& t) {
        const Bytes in = make_input(Format::FP32, count, uint32_t(r));
        Bytes out(count * 4);
        prism::coll::rhd_allreduce(t, in.data(), count, op, out.data(), nullptr);
      },
      [&](const prism::coll::MessageEvent& e) { ev.push_back(e); });
  const int q = int(std::bit_floor(unsigned(p))), r = p - q, m = std::countr_zero(unsigned(q));
  auto rank_of = [&](int v) { return v < r ? 2 * v : v + r; };
  std::vector<std::vector<int>> want(static_cast<size_t>(p));
  for (int i = 0; i < r; ++i) want[size_t(2 * i + 1)] = {2 * i};  // fold: odd -> even
  for (int v = 0; v < q; ++v) {
    auto& w = want[size_t(rank_of(v))];
    for (int k = 0; k < m; ++k) w.push_back(rank_of(v ^ (1 << k)));       // distance 1, 2, ...
    for (int k = m - 1; k >= 0; --k) w.push_back(rank_of(v ^ (1 << k)));  // ..., 2, 1
    if (v < r) w.push_back(2 * v + 1);                                    // unfold: even -> odd
  }
  std::vector<std::vector<int>> got(static_cast<size_t>(p));
  std::vector<std::vector<uint64_t>> seq(static_cast<size_t>(p));
  for (const auto& e : ev) {
    got[size_t(e.from)].push_back(e.to);
    seq[size_t(e.from)].push_back(e.seq);
  }
  for (int x = 0; x < p; ++x) EXPECT_EQ(got[size_t(x)], want[size_t(x)]) << "p=" << p << ": rank " << x << "'s sends";
  for (int i = 0; i < r; ++i) {
    const auto& odd = seq[size_t(2 * i + 1)];
    const auto& even = seq[size_t(2 * i)];
    ASSERT_EQ(odd.size(), 1u);
    ASSERT_FALSE(even.empty());
    EXPECT_LT(odd[0], even.front()) << "p=" << p << ": fold " << 2 * i + 1 << "->" << 2 * i << " not first";
    for (int x = 0; x < p; ++x)
      for (size_t j = 0; j < seq[size_t(x)].size(); ++j)
        if (got[size_t(x)][j] == 2 * i) {
          EXPECT_LT(seq[size_t(x)][j], even.back())
              << "p=" << p << ": unfold " << 2 * i << "->" << 2 * i + 1 << " not after every message to " << 2 * i;
        }
  }
  // Every exchange is answered: the halving and doubling messages pair up.
  size_t total = 0;
  for (auto& w : want) total += w.size();
  EXPECT_EQ(ev.size(), total) << "p=" << p;
}

// Broadcast's pattern (the seed: the root's parity picks the fold ranks in
// the block, distance halving inside it, one send to each pair's other rank
// at the end), and reduce's (fold into the root's parity, halving exchanges,
// then the gather: q - 1 messages at distances q/2, ..., 1 towards the root).
void check_rooted_pattern(int p, int root) {
  const int q = int(std::bit_floor(unsigned(p))), r = p - q, m = std::countr_zero(unsigned(q));
  const int par = root < 2 * r ? root % 2 : 0;
  auto rank_of = [&](int v) { return v < r ? 2 * v + par : v + r; };
  auto v_of = [&](int x) { return x >= 2 * r ? x - r : x % 2 == par ? x / 2 : -1; };
  const int vr = v_of(root);
  std::vector<std::vector<int>> want_b(static_cast<size_t>(p)), want_r(static_cast<size_t>(p));
  for (int v = 0; v < q; ++v) {
    const int x = rank_of(v), d = v ^ vr;
    for (int k = m - 1; k >= 0; --k)
      if ((d & ((2 << k) - 1)) == 0) want_b[size_t(x)].push_back(rank_of(v ^ (1 << k)));
    if (x < 2 * r) want_b[size_t(x)].push_back(x ^ 1);
    for (int k = 0; k < m; ++k) want_r[size_t(x)].push_back(rank_of(v ^ (1 << k)));
    for (int k = m - 1; k >= 0; --k)
      if ((d >> k) == 1) want_r[size_t(x)].push_back(rank_of(v ^ (1 << k)));
  }
  for (int x = 0; x < 2 * r; ++x)
    if (v_of(x) < 0) want_r[size_t(x)].push_back(x ^ 1);
  for (bool bcast : {true, false}) {
    std::vector<std::vector<int>> got(static_cast<size_t>(p));
    run_group(
        p,
        [&](int x, prism::coll::Links& t) {
          Bytes in = make_input(Format::FP32, 100, uint32_t(x));
          Bytes out(400);
          if (bcast)
            prism::coll::rhd_broadcast(t, in.data(), in.size(), root);
          else
            prism::coll::rhd_reduce(t, in.data(), 100,
                                    ReduceOp{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE},
                                    out.data(), nullptr, root);
        },
        [&](const prism::coll::MessageEvent& e) { got[size_t(e.from)].push_back(e.to); });
    for (int x = 0; x < p; ++x)
      EXPECT_EQ(got[size_t(x)], bcast ? want_b[size_t(x)] : want_r[size_t(x)])
          << (bcast ? "broadcast" : "reduce") << " p=" << p << " root=" << root << ": rank " << x << "'s sends";
  }
}

TEST(CollRhd, SeedPatternRooted) {
  for (int p = 1; p <= 9; ++p)
    for (int root = 0; root < p; ++root) check_rooted_pattern(p, root);
}

TEST(CollRhd, SeedPatternFold) {
  for (int p : {5, 6, 7}) check_pattern(p);
}

TEST(CollRhd, SeedPatternPowersOfTwo) {
  for (int p : {1, 2, 4, 8}) check_pattern(p);
}

}  // namespace
