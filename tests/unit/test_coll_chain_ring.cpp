// Host collectives over the in-process transport (one thread per rank): seed
// 000's pipelined chain (coll/chain.hpp) and the ring allreduce
// (coll/ring.hpp).
//
// References: one accumulator fed every rank's input (make_accumulator with
// group = p: the switch's result); for the fp32 policies the recursive
// summation bound |r - K| <= (gamma_{p-1} + u) sum |x| around K, the exact
// sum rounded to fp32; the seed's pipeline written out from its text; the
// seed's optimal m worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/chain.hpp"
#include "coll/inproc.hpp"
#include "coll/ring.hpp"
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

Result reference(const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count) {
  OpDesc d{op.dtype, op.out, Policy::KULISCH_FIXED, op.exceptions, uint32_t(p), uint32_t(count)};
  auto acc = prism::make_accumulator(d);
  for (int r = 0; r < p; ++r) acc->add(in[size_t(r)].data(), uint32_t(r));
  Result res{Bytes(count * prism::info(op.out).bytes), Bytes(count)};
  acc->finalize(res.out.data(), res.flags.data());
  return res;
}

std::vector<Bytes> inputs(Format f, int p, size_t count, bool finite = false) {
  std::vector<Bytes> in;
  for (int r = 0; r < p; ++r) in.push_back(make_input(f, count, uint32_t(1000 * p + r + count), finite));
  return in;
}

std::string what(const char* algo, const ReduceOp& op, int p, size_t count, size_t m) {
  return std::string(algo) + " " + prism::name(op.dtype) + "->" + prism::name(op.out) + " " + prism::name(op.policy) +
         " p=" + std::to_string(p) + " count=" + std::to_string(count) + " m=" + std::to_string(m);
}

// Chain reduce (rank 0) and allreduce (every rank) against one accumulator.
void check_chain_exact(const ReduceOp& op, int p, size_t count, size_t m) {
  const auto in = inputs(op.dtype, p, count);
  const Result want = reference(op, p, in, count);
  const size_t osz = prism::info(op.out).bytes;
  std::vector<Result> red(static_cast<size_t>(p)), all(static_cast<size_t>(p));
  run_group(p, [&](int r, prism::coll::Links& t) {
    Result& a = red[size_t(r)];
    Result& b = all[size_t(r)];
    a = Result{Bytes(count * osz, 0xEE), Bytes(count, 0xEE)};
    b = Result{Bytes(count * osz, 0xEE), Bytes(count, 0xEE)};
    prism::coll::chain_reduce(t, in[size_t(r)].data(), count, op, a.out.data(), a.flags.data(), m);
    prism::coll::chain_allreduce(t, in[size_t(r)].data(), count, op, b.out.data(), b.flags.data(), m);
  });
  const std::string w = what("chain", op, p, count, m);
  EXPECT_EQ(red[0].out, want.out) << w << ": reduce result at rank 0";
  EXPECT_EQ(red[0].flags, want.flags) << w << ": reduce flags at rank 0";
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(all[size_t(r)].out, want.out) << w << ": allreduce result at rank " << r;
    EXPECT_EQ(all[size_t(r)].flags, want.flags) << w << ": allreduce flags at rank " << r;
    if (r != 0) {
      EXPECT_EQ(red[size_t(r)].out, Bytes(count * osz, 0xEE)) << w << ": reduce wrote at rank " << r;
    }
  }
}

void check_ring_exact(const ReduceOp& op, int p, size_t count) {
  const auto in = inputs(op.dtype, p, count);
  const Result want = reference(op, p, in, count);
  const size_t osz = prism::info(op.out).bytes;
  std::vector<Result> all(static_cast<size_t>(p));
  run_group(p, [&](int r, prism::coll::Links& t) {
    Result& b = all[size_t(r)];
    b = Result{Bytes(count * osz, 0xEE), Bytes(count, 0xEE)};
    prism::coll::ring_allreduce(t, in[size_t(r)].data(), count, op, b.out.data(), b.flags.data());
  });
  const std::string w = what("ring", op, p, count, 0);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(all[size_t(r)].out, want.out) << w << ": result at rank " << r;
    EXPECT_EQ(all[size_t(r)].flags, want.flags) << w << ": flags at rank " << r;
  }
}

constexpr size_t kCounts[] = {1, 7, 1000, 4099};
constexpr size_t kSegments[] = {1, 3, 8};
constexpr Format kFloats[] = {Format::FP32, Format::BF16, Format::E4M3FN};

TEST(CollChain, SegmentsSplitUnevenly) {
  using prism::coll::chain_segment_start;
  EXPECT_EQ(chain_segment_start(7, 3, 0), 0u);
  EXPECT_EQ(chain_segment_start(7, 3, 1), 3u);  // 3, 2, 2
  EXPECT_EQ(chain_segment_start(7, 3, 2), 5u);
  EXPECT_EQ(chain_segment_start(7, 3, 3), 7u);
  EXPECT_EQ(chain_segment_start(1, 8, 1), 1u);  // one element, seven empty segments
  EXPECT_EQ(chain_segment_start(1, 8, 8), 1u);
}

TEST(CollChain, KulischEqualsOneAccumulator) {
  for (Format f : kFloats)
    for (Format out : {Format::FP32, f})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts)
          for (size_t m : kSegments)
            check_chain_exact(ReduceOp{f, out, Policy::KULISCH_FIXED, Exceptions::IEEE}, p, c, m);
}

TEST(CollChain, Int32EveryPolicy) {
  for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
    for (int p = 1; p <= 9; ++p)
      for (size_t c : kCounts)
        for (size_t m : kSegments)
          check_chain_exact(ReduceOp{Format::INT32, Format::INT32, pol, Exceptions::IEEE}, p, c, m);
}

// Finite inputs as doubles (fp32 and bf16 are exact in a double).
double value(Format f, const Bytes& b, size_t i) {
  uint32_t bits = 0;
  if (f == Format::FP32) {
    std::memcpy(&bits, b.data() + 4 * i, 4);
  } else {
    bits = uint32_t(b[2 * i] | b[2 * i + 1] << 8) << 16;  // bf16: fp32's upper half
  }
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// |r - K| <= (gamma_{p-1} + u) sum |x| on every rank, every rank's bits the
// same, and FP32_BINOMIAL's bits those of FP32_ARRIVAL (a chain or a ring
// has one order for both).
template <class Algo>
void check_fp32_bound(const char* name, Format f, int p, size_t count, size_t m, Algo algo) {
  const auto in = inputs(f, p, count, true);
  const ReduceOp kop{f, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  const Result k = reference(kop, p, in, count);
  const double u = std::ldexp(1.0, -24), gamma = (p - 1) * u / (1 - (p - 1) * u);
  std::vector<Bytes> got[2];
  for (int i = 0; i < 2; ++i) {
    const ReduceOp op{f, Format::FP32, i ? Policy::FP32_BINOMIAL : Policy::FP32_ARRIVAL, Exceptions::IEEE};
    got[i].assign(size_t(p), Bytes(count * 4));
    run_group(p, [&](int r, prism::coll::Links& t) {
      algo(t, in[size_t(r)].data(), count, op, got[i][size_t(r)].data(), m);
    });
  }
  const std::string w = what(name, ReduceOp{f, Format::FP32, Policy::FP32_ARRIVAL, Exceptions::IEEE}, p, count, m);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(got[0][size_t(r)], got[0][0]) << w << ": rank " << r << " differs from rank 0";
    EXPECT_EQ(got[1][size_t(r)], got[0][0]) << w << ": FP32_BINOMIAL at rank " << r << " differs from FP32_ARRIVAL";
  }
  for (size_t e = 0; e < count; ++e) {
    double abs_sum = 0;
    for (int r = 0; r < p; ++r) abs_sum += std::fabs(value(f, in[size_t(r)], e));
    const double res = value(Format::FP32, got[0][0], e), kk = value(Format::FP32, k.out, e);
    ASSERT_LE(std::fabs(res - kk), (gamma + u) * abs_sum * (1 + 1e-12)) << w << " element " << e;
  }
}

void chain_fp32(prism::coll::Links& t, const uint8_t* in, size_t count, const ReduceOp& op, uint8_t* out, size_t m) {
  prism::coll::chain_allreduce(t, in, count, op, out, nullptr, m);
}
void ring_fp32(prism::coll::Links& t, const uint8_t* in, size_t count, const ReduceOp& op, uint8_t* out, size_t) {
  prism::coll::ring_allreduce(t, in, count, op, out, nullptr);
}

TEST(CollChain, Fp32WithinRecursiveSummationBound) {
  for (Format f : {Format::FP32, Format::BF16})
    for (int p = 1; p <= 9; ++p)
      for (size_t c : kCounts)
        for (size_t m : kSegments) check_fp32_bound("chain", f, p, c, m, chain_fp32);
}

// p = 4, m = 3: the reduce sends segment s along 3 -> 2 -> 1 -> 0 in that
// order, and the pipeline is p + m - 2 = 5 steps deep (a message's step: one
// more than the latest of what its sender waited for: the same segment from
// upstream and its own previous send); the broadcast runs 0 -> 1 -> 2 -> 3.
TEST(CollChain, SeedsPipeline) {
  const int p = 4;
  const size_t m = 3, count = 1000;
  std::vector<prism::coll::MessageEvent> ev;
  const ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  run_group(
      p,
      [&](int r, prism::coll::Links& t) {
        const Bytes in = make_input(Format::FP32, count, uint32_t(r));
        Bytes out(count * 4);
        prism::coll::chain_allreduce(t, in.data(), count, op, out.data(), nullptr, m);
      },
      [&](const prism::coll::MessageEvent& e) { ev.push_back(e); });
  const size_t half = size_t(p - 1) * m;
  ASSERT_EQ(ev.size(), 2 * half);
  std::map<int, std::vector<uint64_t>> up, down;  // by sender: its sends' sequence numbers, in order
  for (size_t i = 0; i < ev.size(); ++i) {
    if (i < half) {
      ASSERT_EQ(ev[i].to, ev[i].from - 1) << "reduce message " << i;
      up[ev[i].from].push_back(ev[i].seq);
    } else {
      ASSERT_EQ(ev[i].to, ev[i].from + 1) << "broadcast message " << i;
      down[ev[i].from].push_back(ev[i].seq);
    }
  }
  std::map<std::pair<int, size_t>, int> step;  // (sender, segment) -> step
  int depth = 0;
  for (size_t s = 0; s < m; ++s)
    for (int r = p - 1; r >= 1; --r) {
      ASSERT_EQ(up[r].size(), m) << "rank " << r;
      if (r < p - 1) {
        EXPECT_LT(up[r + 1][s], up[r][s]) << "segment " << s << " reached rank " << r << " out of order";
      }
      int st = 1;
      if (r < p - 1) st = std::max(st, step[{r + 1, s}] + 1);
      if (s > 0) st = std::max(st, step[{r, s - 1}] + 1);
      step[{r, s}] = st;
      depth = std::max(depth, st);
      EXPECT_EQ(st, int(s) + (p - 1 - r) + 1) << "segment " << s << " from rank " << r;
    }
  EXPECT_EQ(depth, p + int(m) - 2);
  for (size_t s = 0; s < m; ++s)
    for (int r = 1; r + 1 < p; ++r) {
      ASSERT_EQ(down[r].size(), m);
      EXPECT_LT(down[r - 1][s], down[r][s]) << "broadcast segment " << s << " at rank " << r;
    }
}

// m* = sqrt(n (p-2) T_byte / T_start), by hand:
//  n = 1e6, p = 10, T_byte = 1e-9, T_start = 1e-5: sqrt(1e6 * 8 * 1e-4) = sqrt(800) = 28.28 -> 28
//    (T(28) = (1e-5 + 1e-3/28)(36) = 1.6457e-3 < T(29) = (1e-5 + 1e-3/29)(37) = 1.6459e-3).
//  n = 1e6, p = 6, T_byte = 1e-9, T_start = 1e-6: sqrt(1e6 * 4 * 1e-3) = sqrt(4000) = 63.25 -> 63.
//  n = 100, p = 3, T_byte = 1, T_start = 1e-6: sqrt(1e8) = 1e4 > n -> 100.
//  n = 1000, p = 2 (p - 2 = 0) -> 1; n = 1000, p = 3, T_byte = 1e-9, T_start = 1: sqrt(1e-6) < 1 -> 1.
//  n = 2, p = 11, T_byte = 1, T_start = 9: sqrt(2 * 9 / 9) = 1.414 -> T(1) = 11 * 10 = 110,
//    T(2) = 10 * 11 = 110: a tie, the smaller -> 1.
// The chain's broadcast on its own (the allreduce runs its own loop): 0 -> 1 -> ... -> p-1,
// in m segments, an uneven split and empty segments (m > bytes) included.
TEST(CollChain, Broadcast) {
  for (int p = 1; p <= 9; ++p)
    for (size_t m : {size_t(1), size_t(3), size_t(64)})
      for (size_t n : {size_t(0), size_t(5), size_t(40001)}) {
        std::vector<uint8_t> src(n);
        for (size_t i = 0; i < n; ++i) src[i] = uint8_t(i * 13 + p);
        std::vector<std::vector<uint8_t>> got(static_cast<size_t>(p), std::vector<uint8_t>(n));
        run_group(p, [&](int r, prism::coll::Links& t) {
          if (r == 0) got[0] = src;
          prism::coll::chain_broadcast(t, got[size_t(r)].data(), n, m);
        });
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(got[size_t(r)], src) << "p=" << p << " m=" << m << " n=" << n << " rank " << r;
      }
}

TEST(CollChain, OptimalSegments) {
  using prism::coll::chain_optimal_segments;
  EXPECT_EQ(chain_optimal_segments(1000000, 10, 1e-5, 1e-9), 28u);
  EXPECT_EQ(chain_optimal_segments(1000000, 6, 1e-6, 1e-9), 63u);
  EXPECT_EQ(chain_optimal_segments(100, 3, 1e-6, 1), 100u);
  EXPECT_EQ(chain_optimal_segments(1000, 2, 1e-6, 1e-9), 1u);
  EXPECT_EQ(chain_optimal_segments(1000, 3, 1, 1e-9), 1u);
  EXPECT_EQ(chain_optimal_segments(2, 11, 9, 1), 1u);
  EXPECT_EQ(chain_optimal_segments(0, 5, 1, 1), 1u);
}

TEST(CollChain, ModelTime) {
  // (T_start + n/m T_byte)(p + m - 2): (2 + 100/4 * 0.5)(8 + 4 - 2) = 14.5 * 10.
  EXPECT_DOUBLE_EQ(prism::coll::chain_model_time(100, 8, 4, 2, 0.5), 145.0);
  // m = 1: the unpipelined chain, (p - 1)(T_start + n T_byte).
  EXPECT_DOUBLE_EQ(prism::coll::chain_model_time(100, 5, 1, 2, 0.5), 4 * 52.0);
}

TEST(CollRing, KulischEqualsOneAccumulator) {
  for (Format f : kFloats)
    for (Format out : {Format::FP32, f})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) check_ring_exact(ReduceOp{f, out, Policy::KULISCH_FIXED, Exceptions::IEEE}, p, c);
}

TEST(CollRing, Int32EveryPolicy) {
  for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
    for (int p = 1; p <= 9; ++p)
      for (size_t c : kCounts) check_ring_exact(ReduceOp{Format::INT32, Format::INT32, pol, Exceptions::IEEE}, p, c);
}

TEST(CollRing, TwoBlocks) {
  for (int p : {3, 5})
    check_ring_exact(ReduceOp{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE}, p,
                     2 * size_t(prism::coll::ring_block(p)) + 5);
}

TEST(CollRing, Fp32WithinRecursiveSummationBound) {
  for (Format f : {Format::FP32, Format::BF16})
    for (int p = 1; p <= 9; ++p)
      for (size_t c : kCounts) check_fp32_bound("ring", f, p, c, 0, ring_fp32);
}

}  // namespace
