// Reduce-scatter and allgather as collectives of their own (MPI's
// semantics, uneven split): seed 001's RHD (coll/rhd.hpp) and the ring
// (coll/ring.hpp), over the in-process transport (one thread per rank).
//
// References: the block split written out by hand; one accumulator fed every
// rank's input (the switch's result), sliced at each rank's block, for the
// exact policies; the recursive-summation bound around the exact sum for the
// fp32 ones; the plain concatenation of the ranks' blocks for the
// allgather; and the seed's message pattern (fold, distance halving,
// scatter; gather, distance doubling, unfold) written out from its text,
// with the allgather's message sizes from the block split.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/blocks.hpp"
#include "coll/inproc.hpp"
#include "coll/rhd.hpp"
#include "coll/ring.hpp"
#include "coll_util.hpp"

namespace {

using prism::Exceptions;
using prism::Format;
using prism::Policy;
using prism::coll::coll_block_start;
using prism::coll::Links;
using prism::coll::ReduceOp;
using Bytes = std::vector<uint8_t>;
using prism::coll::test::make_input;
using prism::coll::test::run_group;

using ReduceScatter = void (*)(Links&, const void*, size_t, const ReduceOp&, void*, uint8_t*);
using Allgather = void (*)(Links&, const void*, void*, size_t, size_t);
using Allreduce = ReduceScatter;

struct Algo {
  const char* name;
  ReduceScatter rs;
  Allgather ag;
  Allreduce ar;
  uint32_t block;
};
const Algo kAlgos[] = {
    {"rhd", prism::coll::rhd_reduce_scatter, prism::coll::rhd_allgather, prism::coll::rhd_allreduce,
     prism::coll::kRhdBlock},
    {"ring", prism::coll::ring_reduce_scatter, prism::coll::ring_allgather, prism::coll::ring_allreduce,
     prism::coll::kRingBlockWide},  // the larger of ring_block(p)'s
};

struct Result {
  Bytes out, flags;
};

size_t block_len(size_t count, int p, int r) {
  return coll_block_start(count, p, r + 1) - coll_block_start(count, p, r);
}

Result reference(const ReduceOp& op, const std::vector<Bytes>& in, size_t count) {
  auto [out, flags] = prism::coll::test::one_accumulator(op, in, count);
  return Result{std::move(out), std::move(flags)};
}

// Rank r's block of a whole-vector result.
Result slice(const Result& all, size_t osz, size_t count, int p, int r) {
  const size_t b = coll_block_start(count, p, r), e = block_len(count, p, r);
  return Result{Bytes(all.out.begin() + long(b * osz), all.out.begin() + long((b + e) * osz)),
                Bytes(all.flags.begin() + long(b), all.flags.begin() + long(b + e))};
}

std::vector<Bytes> inputs(Format f, int p, size_t count, bool finite = false) {
  std::vector<Bytes> in;
  for (int r = 0; r < p; ++r) in.push_back(make_input(f, count, uint32_t(7919 * p + r + count), finite));
  return in;
}

std::vector<Result> run_rs(const Algo& a, const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count) {
  const size_t osz = prism::info(op.out).bytes;
  std::vector<Result> got(static_cast<size_t>(p));
  run_group(p, [&](int r, Links& t) {
    const size_t e = block_len(count, p, r);
    Result& b = got[size_t(r)];
    b = Result{Bytes(e * osz, 0xEE), Bytes(e, 0xEE)};
    a.rs(t, in[size_t(r)].data(), count, op, b.out.data(), b.flags.data());
  });
  return got;
}

std::string what(const Algo& a, const ReduceOp& op, int p, size_t count) {
  return std::string(a.name) + " " + prism::name(op.dtype) + "->" + prism::name(op.out) + " " + prism::name(op.policy) +
         " p=" + std::to_string(p) + " count=" + std::to_string(count);
}

void check_rs_exact(const Algo& a, const ReduceOp& op, int p, size_t count) {
  const auto in = inputs(op.dtype, p, count);
  const Result want = reference(op, in, count);
  const auto got = run_rs(a, op, p, in, count);
  const size_t osz = prism::info(op.out).bytes;
  for (int r = 0; r < p; ++r) {
    const Result w = slice(want, osz, count, p, r);
    EXPECT_EQ(got[size_t(r)].out, w.out) << what(a, op, p, count) << ": block at rank " << r;
    EXPECT_EQ(got[size_t(r)].flags, w.flags) << what(a, op, p, count) << ": flags at rank " << r;
  }
}

// Counts that p = 2..9 do not divide, below p, and across rounds.
constexpr size_t kCounts[] = {1, 3, 7, 1000, 4099};
size_t several_blocks(const Algo& a) { return 2 * size_t(a.block) + 5; }

TEST(CollBlocks, SplitByHand) {
  // 7 over 4: 2, 2, 2, 1.
  const size_t want7[] = {0, 2, 4, 6, 7};
  for (int r = 0; r <= 4; ++r) EXPECT_EQ(coll_block_start(7, 4, r), want7[r]) << r;
  // 2 over 5: 1, 1, 0, 0, 0.
  const size_t want2[] = {0, 1, 2, 2, 2, 2};
  for (int r = 0; r <= 5; ++r) EXPECT_EQ(coll_block_start(2, 5, r), want2[r]) << r;
  EXPECT_EQ(coll_block_start(9, 3, 1), 3u);
  EXPECT_EQ(coll_block_start(0, 3, 3), 0u);
  // RHD's segments follow the same rule.
  EXPECT_EQ(prism::coll::rhd_segment_start(7, 4, 3), coll_block_start(7, 4, 3));
}

TEST(CollReduceScatter, KulischEqualsOneAccumulatorSliced) {
  for (const Algo& a : kAlgos)
    for (Format f : {Format::FP32, Format::BF16})
      for (Format out : {Format::FP32, f})
        for (int p = 1; p <= 9; ++p)
          for (size_t c : kCounts) check_rs_exact(a, ReduceOp{f, out, Policy::KULISCH_FIXED, Exceptions::IEEE}, p, c);
}

TEST(CollReduceScatter, Int32EveryPolicy) {
  for (const Algo& a : kAlgos)
    for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) check_rs_exact(a, ReduceOp{Format::INT32, Format::INT32, pol, Exceptions::IEEE}, p, c);
}

TEST(CollReduceScatter, SeveralRounds) {
  for (const Algo& a : kAlgos)
    for (int p : {1, 3, 6, 8})
      check_rs_exact(a, ReduceOp{Format::BF16, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE}, p,
                     several_blocks(a));
}

// FP32_ARRIVAL / FP32_BINOMIAL: the algorithm's own fp32 order, within the
// recursive-summation bound of the exact sum K rounded to fp32:
// |r - K| <= (gamma_{p-1} + u) * sum |x|, u = 2^-24.
TEST(CollReduceScatter, Fp32WithinRecursiveSummationBound) {
  const double u = std::ldexp(1.0, -24);
  for (const Algo& a : kAlgos)
    for (Policy pol : {Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
      for (Format f : {Format::FP32, Format::BF16})
        for (int p = 1; p <= 9; ++p)
          for (size_t c : kCounts) {
            const ReduceOp op{f, Format::FP32, pol, Exceptions::IEEE};
            const auto in = inputs(f, p, c, true);
            const Result exact = reference(op, in, c);
            const Result mag = reference(op, prism::coll::test::magnitudes(f, in, c), c);
            const auto got = run_rs(a, op, p, in, c);
            const double gamma = (p - 1) * u / (1 - (p - 1) * u);
            for (int r = 0; r < p; ++r) {
              const size_t b0 = coll_block_start(c, p, r);
              ASSERT_EQ(got[size_t(r)].out.size(), 4 * block_len(c, p, r));
              for (size_t i = 0; i < block_len(c, p, r); ++i) {
                float g, k, s;
                std::memcpy(&g, got[size_t(r)].out.data() + 4 * i, 4);
                std::memcpy(&k, exact.out.data() + 4 * (b0 + i), 4);
                std::memcpy(&s, mag.out.data() + 4 * (b0 + i), 4);
                if (!(s < 0x1p126f)) continue;  // bf16 near the top: a partial sum may overflow fp32
                ASSERT_LE(std::fabs(double(g) - double(k)), (gamma + u) * double(s) * (1 + 2 * u))
                    << what(a, op, p, c) << " rank " << r << " element " << i;
              }
            }
          }
}

// Every rank's block of `count` elements of `esz` bytes, from one vector.
std::vector<Bytes> run_ag(const Algo& a, int p, const Bytes& whole, size_t count, size_t esz) {
  std::vector<Bytes> got(static_cast<size_t>(p));
  run_group(p, [&](int r, Links& t) {
    got[size_t(r)] = Bytes(count * esz, 0xEE);
    a.ag(t, whole.data() + coll_block_start(count, p, r) * esz, got[size_t(r)].data(), count, esz);
  });
  return got;
}

TEST(CollAllgather, EveryRankGetsTheConcatenation) {
  for (const Algo& a : kAlgos)
    for (size_t esz : {size_t(1), size_t(3), size_t(4)})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) {
          const Bytes whole = make_input(Format::E4M3FN, c * esz, uint32_t(p * 31 + c + esz));
          const auto got = run_ag(a, p, whole, c, esz);
          for (int r = 0; r < p; ++r)
            EXPECT_EQ(got[size_t(r)], whole)
                << a.name << " p=" << p << " count=" << c << " esz=" << esz << " rank " << r;
        }
  for (const Algo& a : kAlgos)
    for (int p : {3, 5, 8}) {
      const size_t c = several_blocks(a);
      const Bytes whole = make_input(Format::E4M3FN, c * 2, uint32_t(p));
      const auto got = run_ag(a, p, whole, c, 2);
      for (int r = 0; r < p; ++r) EXPECT_EQ(got[size_t(r)], whole) << a.name << " p=" << p << " rank " << r;
    }
}

// Reduce-scatter then allgather (of the results, then of the flags) gives
// the allreduce's bits, flags included.
TEST(CollReduceScatter, ThenAllgatherIsTheAllreduce) {
  for (const Algo& a : kAlgos)
    for (const ReduceOp& op : {ReduceOp{Format::BF16, Format::BF16, Policy::KULISCH_FIXED, Exceptions::IEEE},
                               ReduceOp{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE},
                               ReduceOp{Format::INT32, Format::INT32, Policy::FP32_ARRIVAL, Exceptions::IEEE}})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : {size_t(3), size_t(1000)}) {
          const auto in = inputs(op.dtype, p, c);
          const size_t osz = prism::info(op.out).bytes;
          std::vector<Result> two(static_cast<size_t>(p)), one(static_cast<size_t>(p));
          run_group(p, [&](int r, Links& t) {
            const size_t e = block_len(c, p, r);
            Result mine{Bytes(e * osz), Bytes(e)};
            a.rs(t, in[size_t(r)].data(), c, op, mine.out.data(), mine.flags.data());
            two[size_t(r)] = Result{Bytes(c * osz), Bytes(c)};
            a.ag(t, mine.out.data(), two[size_t(r)].out.data(), c, osz);
            a.ag(t, mine.flags.data(), two[size_t(r)].flags.data(), c, 1);
            one[size_t(r)] = Result{Bytes(c * osz), Bytes(c)};
            a.ar(t, in[size_t(r)].data(), c, op, one[size_t(r)].out.data(), one[size_t(r)].flags.data());
          });
          for (int r = 0; r < p; ++r) {
            EXPECT_EQ(two[size_t(r)].out, one[size_t(r)].out) << what(a, op, p, c) << " rank " << r;
            EXPECT_EQ(two[size_t(r)].flags, one[size_t(r)].flags) << what(a, op, p, c) << " rank " << r;
          }
        }
}

// The seed's pattern, rank by rank (q = 2^floor(log2 p), r = p - q, ranks
// renumbered v = i for 2i < 2r, v = x - r for x >= 2r; `distance` in the
// renumbered space):
//  - reduce-scatter: 2i+1 < 2r sends once, to 2i (the fold); every v sends
//    to v ^ q/2, ..., v ^ 1 (distance halving), then 2i to 2i+1 (the
//    scatter: its block, n_{2i+1} elements and flags);
//  - allgather: 2i+1 sends its block to 2i once; every v sends to v ^ 1,
//    ..., v ^ q/2 (distance doubling) its range: the blocks of the ranks
//    numbered like v above bit k, then 2i sends all n elements to 2i+1.
// Across ranks: each fold / gather message before any message of its even
// rank, each scatter / unfold after every message that rank receives.
struct Sent {
  int to;
  size_t bytes;
  uint64_t seq;
};

void check_pattern(int p, bool reduce_scatter) {
  const size_t count = 1003, esz = 4;
  const ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  std::vector<std::vector<Sent>> got(static_cast<size_t>(p));
  const Bytes whole = make_input(Format::FP32, count, 5);
  run_group(
      p,
      [&](int x, Links& t) {
        const Bytes in = make_input(Format::FP32, count, uint32_t(x));
        Bytes out(count * esz), fl(count);
        if (reduce_scatter)
          prism::coll::rhd_reduce_scatter(t, in.data(), count, op, out.data(), fl.data());
        else
          prism::coll::rhd_allgather(t, whole.data() + coll_block_start(count, p, x) * esz, out.data(), count, esz);
      },
      [&](const prism::coll::MessageEvent& e) {
        got[size_t(e.from)].push_back(Sent{e.to, e.bytes, e.seq});
      });
  const int q = int(std::bit_floor(unsigned(p))), r = p - q, m = std::countr_zero(unsigned(q));
  auto rank_of = [&](int v) { return v < r ? 2 * v : v + r; };
  auto bytes_of_ranks = [&](int x0, int x1) {  // blocks [x0, x1), as allgather bytes
    return (coll_block_start(count, p, x1) - coll_block_start(count, p, x0)) * esz;
  };
  // Segment v's ranks: [rank_of(v), rank_of(v + 1)), rank_of(q) = p.
  auto seg_rank = [&](int v) { return v == q ? p : rank_of(v); };
  const std::string w = std::string(reduce_scatter ? "reduce-scatter" : "allgather") + " p=" + std::to_string(p);
  for (int x = 0; x < p; ++x) {
    const auto& s = got[size_t(x)];
    std::vector<int> to;
    for (const Sent& e : s) to.push_back(e.to);
    std::vector<int> want;
    if (x < 2 * r && x % 2 == 1) {
      want = {x - 1};
      ASSERT_EQ(to, want) << w << ": rank " << x << "'s sends";
      if (!reduce_scatter) {
        EXPECT_EQ(s[0].bytes, bytes_of_ranks(x, x + 1)) << w << ": rank " << x << "'s block";
      }
      EXPECT_LT(s[0].seq, got[size_t(x - 1)].front().seq) << w << ": fold " << x << " not first";
      continue;
    }
    const int v = x >= 2 * r ? x - r : x / 2;
    for (int i = 0; i < m; ++i) {
      const int k = reduce_scatter ? m - 1 - i : i;
      want.push_back(rank_of(v ^ (1 << k)));
    }
    if (x < 2 * r) want.push_back(x + 1);
    ASSERT_EQ(to, want) << w << ": rank " << x << "'s sends";
    if (!reduce_scatter)
      for (int k = 0; k < m; ++k) {  // its range: the 2^k segments that agree with v above bit k
        const int lo = v >> k << k;
        EXPECT_EQ(s[size_t(k)].bytes, bytes_of_ranks(seg_rank(lo), seg_rank(lo + (1 << k))))
            << w << ": rank " << x << " step " << k;
      }
    if (x < 2 * r) {
      // The results alone: their flags travel only when one is set (none in this data).
      EXPECT_EQ(s.back().bytes, reduce_scatter ? block_len(count, p, x + 1) * esz : count * esz)
          << w << ": rank " << x << "'s last message to " << x + 1;
      for (int y = 0; y < p; ++y)
        for (const Sent& e : got[size_t(y)])
          if (e.to == x) {
            EXPECT_LT(e.seq, s.back().seq) << w << ": " << x << "->" << x + 1 << " not last";
          }
    }
  }
}

TEST(CollRhdReduceScatter, SeedPattern) {
  for (int p : {5, 6, 7}) check_pattern(p, true);
  for (int p : {1, 2, 4, 8}) check_pattern(p, true);
}

TEST(CollRhdAllgather, SeedPattern) {
  for (int p : {5, 6, 7}) check_pattern(p, false);
  for (int p : {1, 2, 4, 8}) check_pattern(p, false);
}

// The ring's: every message goes to the next rank, p-1 of them per rank when
// no block is empty.
TEST(CollRing, ReduceScatterAndAllgatherGoAroundTheRing) {
  for (int p : {2, 5, 7})
    for (bool rs : {true, false}) {
      std::vector<std::vector<int>> to(static_cast<size_t>(p));
      const size_t count = 100;
      run_group(
          p,
          [&](int x, Links& t) {
            Bytes in = make_input(Format::FP32, count, uint32_t(x)), out(count * 4);
            if (rs)
              prism::coll::ring_reduce_scatter(t, in.data(), count, ReduceOp{}, out.data(), nullptr);
            else
              prism::coll::ring_allgather(t, in.data(), out.data(), count, 4);
          },
          [&](const prism::coll::MessageEvent& e) { to[size_t(e.from)].push_back(e.to); });
      for (int x = 0; x < p; ++x)
        EXPECT_EQ(to[size_t(x)], std::vector<int>(size_t(p - 1), (x + 1) % p)) << "p=" << p << " rank " << x;
    }
}

// Ranks that disagree (count, op, element size) get CollectiveError, not
// wrong bits and not a hang. With p = 2 both ranks exchange in the first
// step, so both see it; in larger groups a rank that is not in the failing
// exchange waits on its partner, as in the allreduces (the TCP transport's
// recv timeout ends that wait).
TEST(CollReduceScatter, DisagreeingRanksThrow) {
  for (const Algo& a : kAlgos) {
    const ReduceOp kul{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
    EXPECT_THROW(run_group(2,
                           [&](int r, Links& t) {
                             const size_t c = r == 0 ? 10 : 11;
                             Bytes in(44), out(44), fl(11);
                             a.rs(t, in.data(), c, kul, out.data(), fl.data());
                           }),
                 prism::coll::CollectiveError)
        << a.name << ": counts";
    EXPECT_THROW(run_group(2,
                           [&](int r, Links& t) {
                             ReduceOp op = kul;
                             if (r == 1) op.policy = Policy::FP32_ARRIVAL;
                             Bytes in(40), out(40), fl(10);
                             a.rs(t, in.data(), 10, op, out.data(), fl.data());
                           }),
                 prism::coll::CollectiveError)
        << a.name << ": ops";
    EXPECT_THROW(run_group(2,
                           [&](int r, Links& t) {
                             Bytes in(48), out(48);
                             a.ag(t, in.data(), out.data(), r == 0 ? 10 : 12, 4);
                           }),
                 prism::coll::CollectiveError)
        << a.name << ": allgather counts";
    EXPECT_THROW(run_group(2,
                           [&](int r, Links& t) {
                             Bytes in(40), out(40);
                             a.ag(t, in.data(), out.data(), 10, r == 0 ? 4 : 2);
                           }),
                 prism::coll::CollectiveError)
        << a.name << ": allgather element sizes";
    // Refused before any message: an op the arithmetic does not admit.
    EXPECT_THROW(
        run_group(
            2,
            [&](int, Links& t) {
              Bytes in(4), out(4);
              a.rs(t, in.data(), 1, ReduceOp{Format::FP32, Format::INT32, Policy::KULISCH_FIXED}, out.data(), nullptr);
            }),
        std::invalid_argument)
        << a.name;
  }
}

}  // namespace
