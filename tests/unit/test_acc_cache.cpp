// The accumulator cache (coll/acc_cache.hpp), one per group's links: what
// take() gives is empty whatever the accumulator held before (its results are
// a freshly made one's bits), the cache keeps at most kAccCacheBytes, and each
// cache is its own. The collectives, called twice on the same links (the
// second call on the first one's accumulators and buffers), still give one
// accumulator's exact result.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/acc_cache.hpp"
#include "coll/binomial.hpp"
#include "coll/chain.hpp"
#include "coll/rhd.hpp"
#include "coll/ring.hpp"
#include "coll_util.hpp"

namespace {

using prism::Exceptions;
using prism::Format;
using prism::OpDesc;
using prism::Policy;
using namespace prism::coll;
using prism::coll::test::make_input;
using prism::coll::test::one_accumulator;
using prism::coll::test::run_group;

struct Out {
  std::vector<uint8_t> elems, flags;
  bool operator==(const Out& o) const { return elems == o.elems && flags == o.flags; }
};

Out finalize(const prism::Accumulator& a) {
  Out o{std::vector<uint8_t>(size_t(a.desc().lanes) * prism::info(a.desc().out).bytes),
        std::vector<uint8_t>(a.desc().lanes)};
  a.finalize(o.elems.data(), o.flags.data());
  return o;
}

const OpDesc kDescs[] = {
    {Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE, 4, 3000},  // fast lane + bank
    {Format::FP16, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE, 4, 3000},  // double lanes
    {Format::FP32, Format::FP32, Policy::FP32_ARRIVAL, Exceptions::IEEE, 4, 3000},
    {Format::INT32, Format::INT32, Policy::KULISCH_FIXED, Exceptions::IEEE, 4, 3000},
};

// A taken-again accumulator that held sums (specials, a wide exponent
// spread, the bank in use) behaves as make_accumulator's: empty, then the
// same bits for the same inputs.
TEST(AccCache, ReusedIsEmpty) {
  AccCache cache;
  for (const OpDesc& d : kDescs) {
    SCOPED_TRACE(prism::name(d.dtype));
    cache.clear();
    auto dirty = cache.take(d);
    const prism::Accumulator* was = dirty.get();
    for (uint32_t r = 0; r < d.group; ++r) dirty->add(make_input(d.dtype, d.lanes, 100 + r).data(), r);
    cache.give_back(std::move(dirty));
    ASSERT_EQ(cache.count(), 1u);

    auto reused = cache.take(d);
    ASSERT_EQ(reused.get(), was) << "the spare of this descriptor";
    EXPECT_EQ(cache.count(), 0u);
    auto fresh = prism::make_accumulator(d);
    const Out empty = finalize(*reused);
    EXPECT_TRUE(empty == finalize(*fresh)) << "taken again: not empty";
    for (size_t i = 0; i < d.lanes; ++i) {  // an empty lane: zero, no flag
      EXPECT_EQ(empty.flags[i], 0) << i;
      EXPECT_EQ(prism::load_bits(d.out, empty.elems.data() + i * prism::info(d.out).bytes) & 0x7FFFFFFFu, 0u) << i;
    }
    for (uint32_t r = 0; r < d.group; ++r) {
      const auto in = make_input(d.dtype, d.lanes, 200 + r);
      reused->add(in.data(), r);
      fresh->add(in.data(), r);
    }
    EXPECT_TRUE(finalize(*reused) == finalize(*fresh));
    cache.give_back(std::move(reused));
  }
  cache.clear();
}

TEST(AccCache, OnlyTheSameDescriptor) {
  AccCache cache;
  cache.clear();
  OpDesc d = kDescs[0];
  cache.give_back(prism::make_accumulator(d));
  OpDesc other = d;
  other.group = 8;
  auto a = cache.take(other);
  EXPECT_EQ(a->desc().group, 8u);
  EXPECT_EQ(cache.count(), 1u) << "a spare of another group is not taken";
  cache.clear();
}

// At most kAccCacheBytes kept; the least recently given back go first.
TEST(AccCache, ByteBound) {
  AccCache cache;
  cache.clear();
  OpDesc d{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE, 4, 65536};
  const size_t each = prism::make_accumulator(d)->bytes_per_lane() * d.lanes;
  const int n = int(kAccCacheBytes / each) + 4;  // more than fit
  for (int i = 0; i < n; ++i) {
    d.lanes = 65536 - uint32_t(i);
    cache.give_back(prism::make_accumulator(d));
    EXPECT_LE(cache.bytes(), kAccCacheBytes);
  }
  EXPECT_LT(cache.count(), size_t(n));
  EXPECT_GT(cache.bytes(), kAccCacheBytes - 2 * each);
  const size_t kept = cache.count();
  d.lanes = 65536 - uint32_t(n - 1);  // the last given back: kept
  auto last = cache.take(d);
  EXPECT_EQ(cache.count(), kept - 1);
  d.lanes = 65536;  // the first: dropped, so made afresh
  auto first = cache.take(d);
  EXPECT_EQ(cache.count(), kept - 1);
  cache.clear();
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(AccCache, PerCache) {
  // Two groups' caches (two Links) never share a spare: no global or per-thread state.
  AccCache mine_cache, other_cache;
  const OpDesc d = kDescs[0];
  mine_cache.give_back(prism::make_accumulator(d));
  const prism::Accumulator* mine = nullptr;
  {
    auto a = mine_cache.take(d);
    mine = a.get();
    mine_cache.give_back(std::move(a));
  }
  EXPECT_EQ(other_cache.count(), 0u) << "another cache sees none of this one's spares";
  auto b = other_cache.take(d);
  EXPECT_NE(b.get(), mine);
  EXPECT_EQ(mine_cache.count(), 1u);
  auto a = mine_cache.take(d);
  EXPECT_EQ(a.get(), mine);
}

// Each allreduce twice on the same links: the second call reuses the
// first's accumulators (ring, RHD) and buffers (all four), left holding
// wild sums, and must still equal one accumulator fed every rank's input.
TEST(AccCache, CollectivesCalledAgain) {
  const int p = 4;
  const size_t count = 70000;  // more than one block, the last shorter
  const ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  std::vector<std::vector<uint8_t>> first, second;
  for (int r = 0; r < p; ++r) {
    first.push_back(make_input(Format::FP32, count, 10 + uint32_t(r)));
    second.push_back(make_input(Format::FP32, count, 20 + uint32_t(r)));
  }
  const auto want = one_accumulator(op, second, count);
  using Fn = void (*)(Links&, const void*, size_t, const ReduceOp&, void*, uint8_t*);
  const std::pair<const char*, Fn> algos[] = {
      {"ring", ring_allreduce},
      {"rhd", rhd_allreduce},
      {"binomial", [](Links& t, const void* in, size_t n, const ReduceOp& o, void* out,
                      uint8_t* fl) { binomial_allreduce(t, in, n, o, out, fl, 0); }},
      {"chain", [](Links& t, const void* in, size_t n, const ReduceOp& o, void* out,
                   uint8_t* fl) { chain_allreduce(t, in, n, o, out, fl, 3); }},
  };
  for (const auto& [algo, fn] : algos) {
    SCOPED_TRACE(algo);
    std::vector<std::vector<uint8_t>> out(p, std::vector<uint8_t>(count * 4)), fl(p, std::vector<uint8_t>(count));
    run_group(p, [&](int r, Links& t) {
      fn(t, first[size_t(r)].data(), count, op, out[size_t(r)].data(), fl[size_t(r)].data());
      fn(t, second[size_t(r)].data(), count, op, out[size_t(r)].data(), fl[size_t(r)].data());
    });
    for (int r = 0; r < p; ++r) {
      EXPECT_TRUE(out[size_t(r)] == want.out) << "rank " << r;
      EXPECT_TRUE(fl[size_t(r)] == want.flags) << "rank " << r;
    }
  }
}

}  // namespace
