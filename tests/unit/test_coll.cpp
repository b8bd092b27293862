// Host collectives over the in-process transport (one thread per rank):
// the binomial tree of seed 000 (coll/binomial.hpp).
//
// References: one accumulator fed every rank's input (make_accumulator with
// group = p: the switch's result), the seed's tree written out here in plain
// fp32 arithmetic, and the seed's message pattern written out from its text.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/algorithms.hpp"
#include "coll/binomial.hpp"
#include "coll/inproc.hpp"
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

// One accumulator fed every rank's input: rank r as contribution (r - root) mod p.
Result reference(const ReduceOp& op, int p, const std::vector<Bytes>& in, size_t count, int root, Policy policy) {
  OpDesc d{op.dtype, op.out, policy, op.exceptions, uint32_t(p), uint32_t(count)};
  auto acc = prism::make_accumulator(d);
  for (int r = 0; r < p; ++r) acc->add(in[size_t(r)].data(), uint32_t((r - root + p) % p));
  Result res{Bytes(count * prism::info(op.out).bytes), Bytes(count)};
  acc->finalize(res.out.data(), res.flags.data());
  return res;
}

std::string what(const ReduceOp& op, int p, size_t count, int root) {
  return std::string(prism::name(op.dtype)) + "->" + prism::name(op.out) + " " + prism::name(op.policy) +
         " p=" + std::to_string(p) + " count=" + std::to_string(count) + " root=" + std::to_string(root);
}

// Reduce to `root` and allreduce from `root`; every rank's allreduce result
// and the root's reduce result must be the reference's bits and flags.
void check(const ReduceOp& op, int p, size_t count, int root, Policy ref_policy) {
  std::vector<Bytes> in;
  for (int r = 0; r < p; ++r) in.push_back(make_input(op.dtype, count, uint32_t(1000 * p + r + count)));
  const Result want = reference(op, p, in, count, root, ref_policy);
  const size_t osz = prism::info(op.out).bytes;
  std::vector<Result> red(static_cast<size_t>(p)), all(static_cast<size_t>(p));
  run_group(p, [&](int r, prism::coll::Links& t) {
    Result& a = red[size_t(r)];
    Result& b = all[size_t(r)];
    a = Result{Bytes(count * osz, 0xEE), Bytes(count, 0xEE)};
    b = Result{Bytes(count * osz, 0xEE), Bytes(count, 0xEE)};
    prism::coll::binomial_reduce(t, in[size_t(r)].data(), count, op, a.out.data(), a.flags.data(), root);
    prism::coll::binomial_allreduce(t, in[size_t(r)].data(), count, op, b.out.data(), b.flags.data(), root);
  });
  const std::string w = what(op, p, count, root);
  EXPECT_EQ(red[size_t(root)].out, want.out) << w << ": reduce result at the root";
  EXPECT_EQ(red[size_t(root)].flags, want.flags) << w << ": reduce flags at the root";
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(all[size_t(r)].out, want.out) << w << ": allreduce result at rank " << r;
    EXPECT_EQ(all[size_t(r)].flags, want.flags) << w << ": allreduce flags at rank " << r;
    if (r != root) {
      EXPECT_EQ(red[size_t(r)].out, Bytes(count * osz, 0xEE)) << w << ": reduce wrote at rank " << r;
    }
  }
}

constexpr size_t kCounts[] = {1, 7, 1000, 4099};
constexpr Format kFloats[] = {Format::FP32, Format::FP16, Format::BF16, Format::E4M3FN};

// Exact: bit-identical to one accumulator fed every input, any p, any root.
TEST(CollBinomial, KulischEqualsOneAccumulator) {
  for (Format f : kFloats)
    for (Format out : {Format::FP32, f})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) {
          const ReduceOp op{f, out, Policy::KULISCH_FIXED, Exceptions::IEEE};
          check(op, p, c, 0, Policy::KULISCH_FIXED);
          if (p > 1) check(op, p, c, int(c % size_t(p)), Policy::KULISCH_FIXED);
        }
}

TEST(CollBinomial, KulischSaturate) {
  for (Format f : {Format::FP16, Format::E4M3FN})
    for (int p : {3, 8})
      check(ReduceOp{f, f, Policy::KULISCH_FIXED, Exceptions::SATURATE}, p, 1000, 0, Policy::KULISCH_FIXED);
}

// Integers sum exactly in every policy.
TEST(CollBinomial, Int32EveryPolicy) {
  for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL})
    for (Format out : {Format::INT32, Format::FP32})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) {
          check(ReduceOp{Format::INT32, out, pol, Exceptions::IEEE}, p, c, 0, Policy::KULISCH_FIXED);
          if (p > 1) check(ReduceOp{Format::INT32, out, pol, Exceptions::IEEE}, p, c, p - 1, Policy::KULISCH_FIXED);
        }
}

// FP32_BINOMIAL: the accumulator's own binomial order over (relabelled) rank index.
TEST(CollBinomial, Fp32BinomialEqualsAccumulatorOrder) {
  for (Format f : kFloats)
    for (Format out : {Format::FP32, f})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts) {
          const ReduceOp op{f, out, Policy::FP32_BINOMIAL, Exceptions::IEEE};
          check(op, p, c, 0, Policy::FP32_BINOMIAL);
          if (p > 1) check(op, p, c, int(c % size_t(p)), Policy::FP32_BINOMIAL);
        }
}

// FP32_ARRIVAL through the tree: the arrival order at each node is the
// tree's, so the result is the binomial order's fp32 sums, exactly.
TEST(CollBinomial, Fp32ArrivalIsTheTreesOrder) {
  for (Format f : kFloats)
    for (Format out : {Format::FP32, f})
      for (int p = 1; p <= 9; ++p)
        for (size_t c : kCounts)
          check(ReduceOp{f, out, Policy::FP32_ARRIVAL, Exceptions::IEEE}, p, c, 0, Policy::FP32_BINOMIAL);
}

// The seed's tree written out here in plain fp32 (finite inputs): at step k,
// x_i <- x_i + x_{i+2^k} for every i with bits 0..k clear and i + 2^k < p.
TEST(CollBinomial, Fp32BinomialIsTheSeedsTree) {
  for (int p = 2; p <= 9; ++p) {
    const size_t count = 1000;
    std::vector<std::vector<float>> x(static_cast<size_t>(p), std::vector<float>(count));
    std::vector<Bytes> in(static_cast<size_t>(p));
    std::mt19937 rng(static_cast<uint32_t>(p));
    std::uniform_real_distribution<float> u(-1, 1);
    for (int r = 0; r < p; ++r) {
      in[size_t(r)].resize(count * 4);
      for (size_t i = 0; i < count; ++i) x[size_t(r)][i] = std::ldexp(u(rng), int(rng() % 40) - 20);
      std::memcpy(in[size_t(r)].data(), x[size_t(r)].data(), count * 4);
    }
    for (int k = 0; (1 << k) < p; ++k)
      for (int i = 0; i + (1 << k) < p; i += 1 << (k + 1))
        for (size_t e = 0; e < count; ++e) x[size_t(i)][e] += x[size_t(i + (1 << k))][e];
    Bytes want(count * 4);
    std::memcpy(want.data(), x[0].data(), count * 4);
    for (Policy pol : {Policy::FP32_BINOMIAL, Policy::FP32_ARRIVAL}) {
      std::vector<Bytes> got(static_cast<size_t>(p), Bytes(count * 4));
      run_group(p, [&](int r, prism::coll::Links& t) {
        prism::coll::binomial_allreduce(t, in[size_t(r)].data(), count,
                                        ReduceOp{Format::FP32, Format::FP32, pol, Exceptions::IEEE},
                                        got[size_t(r)].data(), nullptr);
      });
      for (int r = 0; r < p; ++r) EXPECT_EQ(got[size_t(r)], want) << prism::name(pol) << " p=" << p << " rank " << r;
    }
  }
}

// The messages: reduce exactly as seed 000 sends them, then the broadcast's reverse.
struct Edge {
  int from, to;
  bool operator<(const Edge& o) const { return from != o.from ? from < o.from : to < o.to; }
};

void check_pattern(int p, int root, size_t count) {
  std::vector<prism::coll::MessageEvent> ev;  // appended under the group's sequence lock
  const int blocks = int((count + prism::coll::kBinomialBlock - 1) / prism::coll::kBinomialBlock);
  const ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  run_group(
      p,
      [&](int r, prism::coll::Links& t) {
        const Bytes in = make_input(Format::FP32, count, uint32_t(r));
        Bytes out(count * 4);
        prism::coll::binomial_allreduce(t, in.data(), count, op, out.data(), nullptr, root);
      },
      [&](const prism::coll::MessageEvent& e) { ev.push_back(e); });
  const std::string w = "p=" + std::to_string(p) + " root=" + std::to_string(root) + " count=" + std::to_string(count);
  auto rank = [&](int v) { return (v + root) % p; };
  // The seed's reduce: at step k, v (bit k set, lower bits clear) -> v - 2^k.
  std::map<Edge, int> up_step;  // edge (ranks) -> its step
  for (int k = 0; (1 << k) < p; ++k)
    for (int v = 0; v < p; ++v)
      if ((v >> k & 1) && (v & ((1 << k) - 1)) == 0) up_step[Edge{rank(v), rank(v - (1 << k))}] = k;
  const size_t nup = up_step.size() * size_t(blocks);
  ASSERT_EQ(ev.size(), 2 * nup) << w;
  std::map<Edge, std::vector<uint64_t>> up, down;  // each edge's messages' sequence numbers, in order
  for (size_t i = 0; i < ev.size(); ++i) {
    const Edge e{ev[i].from, ev[i].to};
    if (i < nup) {
      ASSERT_TRUE(up_step.count(e)) << w << ": reduce message " << e.from << "->" << e.to << " is not the seed's";
      up[e].push_back(ev[i].seq);
    } else {
      ASSERT_TRUE(up_step.count(Edge{e.to, e.from}))
          << w << ": broadcast message " << e.from << "->" << e.to << " is not a reduce edge reversed";
      down[Edge{e.to, e.from}].push_back(ev[i].seq);
    }
  }
  for (auto& [e, k] : up_step) {
    ASSERT_EQ(up[e].size(), size_t(blocks)) << w << ": reduce edge " << e.from << "->" << e.to;
    ASSERT_EQ(down[e].size(), size_t(blocks)) << w << ": broadcast edge " << e.to << "->" << e.from;
  }
  // Step order, block by block: a rank sends up only after every message of
  // its earlier steps came in; in the broadcast it passes a block on only
  // after receiving it, to its children from the highest step down.
  for (int b = 0; b < blocks; ++b)
    for (auto& [e, k] : up_step)
      for (auto& [f, j] : up_step) {
        if (f.to == e.from) {  // f brings step j < k's partial to e's sender
          EXPECT_LT(up[f][size_t(b)], up[e][size_t(b)]) << w << ": reduce step " << j << " before step " << k;
        }
        if (f.from == e.to) {  // f reversed brings the result to e reversed's sender
          EXPECT_LT(down[f][size_t(b)], down[e][size_t(b)]) << w << ": broadcast relays before receiving";
        }
        if (f.to == e.to && j > k) {  // the same sender's children, highest step first
          EXPECT_LT(down[f][size_t(b)], down[e][size_t(b)]) << w << ": broadcast step " << j << " before " << k;
        }
      }
}

TEST(CollBinomial, MessagesAreTheSeeds) {
  for (int p : {5, 6, 7}) {
    check_pattern(p, 0, 7);
    check_pattern(p, 0, 4099);  // two blocks: each edge twice, in block order
    check_pattern(p, 2, 7);     // another root: the same tree relabelled
  }
}

TEST(CollBinomial, Errors) {
  // An op the arithmetic refuses.
  EXPECT_THROW(run_group(2,
                         [](int, prism::coll::Links& t) {
                           uint8_t in[4] = {}, out[4];
                           prism::coll::binomial_allreduce(
                               t, in, 1, ReduceOp{Format::FP32, Format::INT32, Policy::KULISCH_FIXED}, out, nullptr);
                         }),
               std::invalid_argument);
  // A root outside the group: refused by the one check every algorithm runs behind (coll::run's check_call).
  EXPECT_THROW(run_group(2,
                         [](int, prism::coll::Links& t) {
                           uint8_t in[4] = {}, out[4];
                           prism::coll::Context ctx;
                           ctx.links = &t;
                           prism::coll::run(prism::Algorithm::BINOMIAL, ctx,
                                            {prism::Collective::REDUCE, in, out, nullptr, 1, ReduceOp{}, 2, 0});
                         }),
               std::invalid_argument);
  // Ranks that disagree on the op: the receiver names the sender and both ops.
  try {
    run_group(2, [](int r, prism::coll::Links& t) {
      uint8_t in[8] = {}, out[8];
      const ReduceOp op{Format::FP32, Format::FP32, r == 0 ? Policy::KULISCH_FIXED : Policy::FP32_ARRIVAL};
      prism::coll::binomial_reduce(t, in, 2, op, out, nullptr);
    });
    ADD_FAILURE() << "a mismatched op was accepted";
  } catch (const prism::coll::CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("fp32_arrival"), std::string::npos) << m;
  }
}

// The partial message: the smallest lossless encoding, and a round trip
// that leaves the receiver's accumulator as if it had seen the inputs.
TEST(CollPartialMessage, SmallestLosslessEncoding) {
  using prism::coll::encode_partial;
  using prism::coll::kPartialHeader;
  using prism::coll::merge_partial;
  std::vector<prism::LaneExact> scratch;
  Bytes msg;
  auto roundtrip = [&](const ReduceOp& op, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    const size_t n = a.size(), sz = prism::info(op.dtype).bytes;
    Bytes ea(n * sz), eb(n * sz);
    for (size_t i = 0; i < n; ++i) {
      prism::store_bits(op.dtype, ea.data() + i * sz, a[i]);
      prism::store_bits(op.dtype, eb.data() + i * sz, b[i]);
    }
    const Policy node = op.policy == Policy::KULISCH_FIXED ? op.policy : Policy::FP32_ARRIVAL;
    const OpDesc d{op.dtype, op.out, node, op.exceptions, 3, uint32_t(n)};
    auto sender = prism::make_accumulator(d), recv = prism::make_accumulator(d), one = prism::make_accumulator(d);
    sender->add(eb.data(), 1);
    encode_partial(*sender, op, scratch, msg);
    const Bytes sent = msg;
    recv->add(ea.data(), 0);
    merge_partial(*recv, op, sent.data(), sent.size(), 1, scratch);
    one->add(ea.data(), 0);
    one->add(eb.data(), 1);
    const size_t osz = prism::info(op.out).bytes;
    Bytes r1(n * osz), r2(n * osz), f1(n), f2(n);
    recv->finalize(r1.data(), f1.data());
    one->finalize(r2.data(), f2.data());
    EXPECT_EQ(r1, r2);
    EXPECT_EQ(f1, f2);
    return sent;
  };
  const ReduceOp kul{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  // A single fp32 value per lane is an fp32 element: 4 bytes a lane.
  Bytes m = roundtrip(kul, {0x3F800000u, 0x00000001u}, {0x3F800001u, 0xC0000000u});
  EXPECT_EQ(m.size(), kPartialHeader + 2 * 4);
  EXPECT_EQ(m[4], uint8_t(Format::FP32));
  // A partial with a NaN lane (sideband): lane records.
  m = roundtrip(kul, {0x3F800000u, 0}, {0x7FC00000u, 0});
  EXPECT_EQ(m[4], 0);
  // FP32_ARRIVAL passes fp32 sums on as fp32 elements; a special needs lane records.
  const ReduceOp arr{Format::FP16, Format::FP16, Policy::FP32_ARRIVAL, Exceptions::IEEE};
  m = roundtrip(arr, {0x3C00u, 0x0001u}, {0x3C01u, 0x8001u});
  EXPECT_EQ(m.size(), kPartialHeader + 2 * 4);
  EXPECT_EQ(m[4], uint8_t(Format::FP32));
  m = roundtrip(arr, {0x3C00u, 0x7C00u}, {0xFC00u, 0x0001u});
  EXPECT_EQ(m[4], 0);
  // Another op's partial, or a cut one, is refused with the sender's rank.
  auto acc = prism::make_accumulator(OpDesc{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE, 3, 2});
  m = roundtrip(kul, {1, 2}, {3, 4});
  EXPECT_THROW(merge_partial(*acc, kul, m.data(), m.size() - 1, 4, scratch), prism::coll::CollectiveError);
  EXPECT_THROW(merge_partial(*acc, ReduceOp{Format::FP32, Format::BF16, Policy::KULISCH_FIXED, Exceptions::IEEE},
                             m.data(), m.size(), 4, scratch),
               prism::coll::CollectiveError);
}

// A vector of many blocks (bounded memory per rank) and the plain broadcast.
TEST(CollBinomial, LargeVectorAndBroadcast) {
  check(ReduceOp{Format::BF16, Format::BF16, Policy::KULISCH_FIXED, Exceptions::IEEE}, 6, 5 * 4096 + 3, 0,
        Policy::KULISCH_FIXED);
  for (int p = 1; p <= 9; ++p)
    for (int root = 0; root < p; ++root) {
      const size_t n = 40000;
      Bytes src(n);
      for (size_t i = 0; i < n; ++i) src[i] = uint8_t(i * 7 + root);
      std::vector<Bytes> got(static_cast<size_t>(p), Bytes(n));
      run_group(p, [&](int r, prism::coll::Links& t) {
        if (r == root) got[size_t(r)] = src;
        prism::coll::binomial_broadcast(t, got[size_t(r)].data(), n, root);
      });
      for (int r = 0; r < p; ++r) EXPECT_EQ(got[size_t(r)], src) << "p=" << p << " root=" << root << " rank " << r;
    }
}

}  // namespace
