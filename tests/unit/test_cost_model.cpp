// The host collectives' cost models (lib/coll/cost_model.hpp) against the
// seeds' tables worked by hand, `auto`'s choice, and the models' message and
// byte counts against what the algorithms really send (the in-process
// transport's observer); the calibration's JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "coll/algorithms.hpp"
#include "coll/binomial.hpp"
#include "coll/calibrate.hpp"
#include "coll/cost_model.hpp"
#include "coll/rhd.hpp"
#include "coll/ring.hpp"
#include "coll_util.hpp"

namespace prism::coll {
namespace {

using test::make_input;
using test::run_group;

CostParams only(double alpha, double beta, double gamma, double w = 1, double o = 1) {
  CostParams c;
  c.alpha = alpha, c.beta = beta, c.gamma = gamma, c.partial_ratio = w, c.out_ratio = o;
  return c;
}

double pred(Algorithm a, Collective k, int p, size_t count, const CostParams& c, size_t m = 0) {
  const auto t = predict(a, Problem{k, p, count, 4, 0}, c, m);
  EXPECT_TRUE(t.has_value()) << name(a) << " " << name(k);
  return t.value_or(-1);
}

constexpr auto AR = Collective::ALLREDUCE;
constexpr auto RED = Collective::REDUCE;

// Seed 001, allreduce: 2 log p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma for p = 2^k, and
// (2 floor(log p) + 2) alpha + (2 (p'-1)/p' + 2) n beta + ((p'-1)/p' + 1) n gamma otherwise.
TEST(CostModel, RhdAllreduceIsSeed001sTable) {
  const size_t count = 1000;  // one block; n = 4000 bytes
  const double n = 4000;
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, 8, count, only(1, 0, 0)), 6);  // 2 * 3
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, 8, count, only(0, 1, 0)), 2 * 7.0 / 8 * n);
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, 8, count, only(0, 0, 1)), 7.0 / 8 * n);
  for (int p : {5, 6, 7}) {  // p' = 4
    EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, p, count, only(1, 0, 0)), 2 * 2 + 2) << p;
    EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, p, count, only(0, 1, 0)), (2 * 3.0 / 4 + 2) * n) << p;
    EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, p, count, only(0, 0, 1)), (3.0 / 4 + 1) * n) << p;
  }
  // reduce (ReduceScatter + Gather): (2 floor(log p) + 1) alpha + (2 (p'-1)/p' + 1) n beta + ...
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, RED, 6, count, only(1, 0, 0)), 5);
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, RED, 6, count, only(0, 1, 0)), (2 * 3.0 / 4 + 1) * n);
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, RED, 4, count, only(1, 1, 1)), 2 * 2 + 2 * 3.0 / 4 * n + 3.0 / 4 * n);
  // broadcast: ceil(log p)(alpha + n beta)
  const Problem bc{Collective::BROADCAST, 6, 1000, 4, 0};
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, bc, only(1, 1, 0)), 3 * (1 + n));
}

TEST(CostModel, RhdReduceScatterNonPowerOfTwoIsTheSeedsThreeSteps) {
  // p = 6, k = 2, r = 2: the fold alpha + n beta + n gamma, then i = 1, 2: alpha + s_i/6 n (beta +
  // gamma) with s_1 = 2 + 2 rank blocks (the pair's segments are two), s_2 = 1 + 1 (the seed's
  // ceil(6/2^i) = 3, 2 assumes them spread evenly), then the scatter alpha + n/6 beta.
  const double n = 4000;
  const Problem rs{Collective::REDUCE_SCATTER, 6, 1000, 4, 0};
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, rs, only(1, 0, 0)), 4);
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, rs, only(0, 1, 0)), n + 4.0 / 6 * n + 2.0 / 6 * n + n / 6);
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, rs, only(0, 0, 1)), n + 4.0 / 6 * n + 2.0 / 6 * n);
  // p = 5 = q + 1 and p = 7 = 2q - 1: the seed's sum itself (3 + 2 and 4 + 2 of 7)
  const Problem rs5{Collective::REDUCE_SCATTER, 5, 1000, 4, 0}, rs7{Collective::REDUCE_SCATTER, 7, 1000, 4, 0};
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, rs5, only(0, 0, 1)), n + (3.0 + 2.0) / 5 * n);
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, rs7, only(0, 0, 1)), n + (4.0 + 2.0) / 7 * n);
  const Problem ag{Collective::ALLGATHER, 6, 1000, 4, 0};
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, ag, only(0, 0, 1)), 0);  // no gamma
  const Problem rs8{Collective::REDUCE_SCATTER, 8, 1000, 4, 0};
  EXPECT_DOUBLE_EQ(*predict(Algorithm::RHD, rs8, only(1, 1, 1)), 3 + 7.0 / 8 * n * 2);
}

// Seed 000: the plain binomial tree ceil(log2 p)(T_start + n T_byte); the pipelined chain
// (T_start + n/m T_byte)(p + m - 2).
TEST(CostModel, BinomialAndChainAreSeed000s) {
  const double n = 4000;
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 5, 1000, only(1, 0.5, 0.25)), 3 * (1 + n * 0.75));
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, AR, 5, 1000, only(1, 0.5, 0.25)), 3 * (1 + n * 0.75) + 3 * (1 + n * 0.5));
  EXPECT_DOUBLE_EQ(pred(Algorithm::CHAIN, RED, 5, 1000, only(2, 1, 0), 10), (2 + n / 10) * (5 + 10 - 2));
  // allreduce: the reduce and the broadcast pipelines, T_start = 2 alpha, T_byte the sum
  EXPECT_DOUBLE_EQ(pred(Algorithm::CHAIN, AR, 5, 1000, only(2, 1, 1), 10), (4 + n / 10 * 3) * 13);
  // the seed's m = sqrt(n (p-2) T_byte / T_start): n = 4000, p = 6, T_byte = 1, T_start = 10 -> 40
  EXPECT_EQ(model_segments(Problem{RED, 6, 1000, 4, 0}, only(10, 1, 0)), 40u);
  EXPECT_EQ(model_segments(Problem{RED, 2, 1000, 4, 0}, only(10, 1, 0)), 1u);           // nothing to pipeline
  EXPECT_FALSE(predict(Algorithm::CHAIN, Problem{RED, 6, 1000, 4, 3}, only(1, 1, 1)));  // to rank 0 only
  // the ring: 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 5, 1000, only(1, 1, 1)), 8 + 2 * 0.8 * n + 0.8 * n);
  EXPECT_FALSE(predict(Algorithm::RING, Problem{RED, 5, 1000, 4, 0}, only(1, 1, 1)));
}

TEST(CostModel, AlphaIsPaidPerBlockAndNothingForOneRank) {
  // 3 ring blocks (65536 elements at p = 2, 262144 above): alpha three times, bytes once
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 4, 3 * size_t(ring_block(4)), only(1, 0, 0)), 3 * 6);
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 2, 3 * size_t(kRingBlock), only(1, 0, 0)), 3 * 2);
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 4, 3 * size_t(kRingBlock), only(1, 0, 0)), 6);
  // the binomial tree's blocks stream: alpha once per level, as the seed counts it
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 4, 3 * kBinomialBlock + 1, only(1, 0, 0)), 2);
  // ... and each of its 4 blocks a gap at each of its L levels (allreduce: down as well as up)
  CostParams g = only(0, 0, 0);
  g.gap = 1;
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 4, 3 * kBinomialBlock + 1, g), 2 * 4);
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, AR, 8, 3 * kBinomialBlock + 1, g), 2 * 3 * 4);
  // the broadcast's segments are 16 KiB: 3 * 4096 + 1 fp32 elements are 4 of them
  EXPECT_DOUBLE_EQ(*predict(Algorithm::BINOMIAL, Problem{Collective::BROADCAST, 4, 3 * kBinomialBlock + 1, 4, 0}, g),
                   2 * 4);
  // with alpha: once per level, and the gap per block
  g.alpha = 3;
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 4, 3 * kBinomialBlock + 1, g), 2 * 3 + 2 * 4 * 1);
  // with more ranks on a host than cores, each of its L (1 + B) messages waited for finds its sender
  // off a core half the time (4 ranks, 2 cores) and pays alpha: 0.5 * 2 * 5 * 3 = 15 > the path's 14
  g.ranks_per_host = 4, g.host_cores = 2;
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 4, 3 * kBinomialBlock + 1, g), 0.5 * 2 * 5 * 3);
  for (Algorithm a : {Algorithm::BINOMIAL, Algorithm::CHAIN, Algorithm::RHD, Algorithm::RING})
    EXPECT_EQ(pred(a, AR, 1, 1000, only(1, 1, 1)), 0) << name(a);
}

TEST(CostModel, GammaFollowsTheAccumulatorsSize) {
  CostParams c = only(0, 0, 1);
  c.gamma_large = 3;
  EXPECT_EQ(gamma_at(c, 100), 1);
  EXPECT_EQ(gamma_at(c, kGammaSmallLanes), 1);
  EXPECT_DOUBLE_EQ(gamma_at(c, 16384), 2);  // halfway in log2 from 4096 to 65536
  EXPECT_EQ(gamma_at(c, 1 << 20), 3);
  // the ring works on 65536-lane blocks, the binomial tree on 4096
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 2, 1 << 20, c), 0.5 * 4.0 * (1 << 20) * 3);
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 2, 1 << 20, c), 4.0 * (1 << 20) * 1);
}

// Every algorithm's first hop passes one rank's own input on (KULISCH over fp32: the elements
// themselves, cheap); the rest pass sums on (lane records).
TEST(CostModel, TheFirstHopCarriesOneRanksOwnInput) {
  const double n = 4000;
  CostParams c = only(0, 0, 1);
  c.gamma_single = 0.25;
  // binomial at p = 2: one level, rank 1's own input; at p = 8 one of three levels
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 2, 1000, c), 0.25 * n);
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 8, 1000, c), 0.25 * n + 2 * n);
  // the ring's reduce-scatter: the first of p - 1 steps
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 4, 1000, c), n / 4 * 0.25 + 2.0 / 4 * n);
  // RHD: the fold (p = 6), or the first halving step at a power of two
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, 6, 1000, c), n * 0.25 + 3.0 / 4 * n);
  EXPECT_DOUBLE_EQ(pred(Algorithm::RHD, AR, 8, 1000, c), n / 2 * 0.25 + (7.0 / 8 - 0.5) * n);
  // the chain's pace: a sum-passing hop from p = 3 on
  EXPECT_DOUBLE_EQ(pred(Algorithm::CHAIN, RED, 2, 1000, c, 4), n / 4 * 0.25 * 4);
  EXPECT_DOUBLE_EQ(pred(Algorithm::CHAIN, RED, 3, 1000, c, 4), n / 4 * 5);
}

// A rank's own input (an accumulator emptied, the input added, the result rounded): once on every
// critical path, p times in the work.
TEST(CostModel, EveryRankPaysForItsOwnInputOnce) {
  const double n = 4000;
  CostParams c = only(0, 0, 0);
  c.local = 1;
  for (Algorithm a : {Algorithm::BINOMIAL, Algorithm::CHAIN, Algorithm::RHD, Algorithm::RING})
    EXPECT_DOUBLE_EQ(pred(a, AR, 8, 1000, c), n) << name(a);
  c.ranks_per_host = 8, c.host_cores = 2;  // eight inputs on two cores
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 8, 1000, c), 4 * n);
  const Problem bc{Collective::BROADCAST, 8, 1000, 4, 0};  // a broadcast reduces nothing
  EXPECT_DOUBLE_EQ(*predict(Algorithm::BINOMIAL, bc, c), 0);
}

// The binomial tree's blocks stream: the root merges block b while its children encode b + 1, so
// only the merging share of gamma is on its path (the work bound still counts both).
TEST(CostModel, TheBinomialRootPaysOnlyForMerging) {
  const double n = 4000;
  CostParams c = only(0, 1, 2);  // beta 1, gamma 2
  c.merge_share = 0.25, c.merge_share_single = 0.5;
  // p = 2: one level, rank 1's own input: beta + 0.5 gamma per byte
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 2, 1000, c), n * (1 + 0.5 * 2));
  // p = 4: the second level merges a sum: w beta + 0.25 gamma
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 4, 1000, c), n * (1 + 0.5 * 2) + n * (1 + 0.25 * 2));
  // the ring encodes and merges on every rank's path: all of gamma
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 2, 1000, c), n / 2 * (1 + 2) + n / 2 * 1);
  c.ranks_per_host = 2, c.host_cores = 1;  // both ranks on one core: the whole work, encoding included
  EXPECT_DOUBLE_EQ(pred(Algorithm::BINOMIAL, RED, 2, 1000, c), n * (1 + 2));
}

// Ranks that share a host cannot finish before the host has done their work: W * ranks_per_host
// / (p * host_cores), W = (p-1) n (w beta + gamma + o beta) for any allreduce.
TEST(CostModel, SharedCoresBoundEveryAlgorithmByTheWork) {
  const size_t count = 1 << 20;
  const double n = 4.0 * count;
  CostParams c = only(0, 1e-9, 4e-9, 2, 1.25);  // red = 6 ns/B, res = 1.25 ns/B; no alpha (its wake-ups: below)
  const double work = 7 * n * (6e-9 + 1.25e-9);
  for (Algorithm a : {Algorithm::BINOMIAL, Algorithm::CHAIN, Algorithm::RHD, Algorithm::RING}) {
    const double alone = pred(a, AR, 8, count, c);
    EXPECT_LT(work / 8, alone * (1 + 1e-12)) << name(a);  // one rank per core: never binds
    c.ranks_per_host = 8, c.host_cores = 2;               // eight ranks on two cores
    EXPECT_DOUBLE_EQ(pred(a, AR, 8, count, c), std::max(alone, work / 2)) << name(a);
    c.ranks_per_host = 1, c.host_cores = 1;
  }
  c.ranks_per_host = 8, c.host_cores = 2;
  // the ring's critical path is its share of the work: on two cores the work bound is 4x it
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 8, count, c), work / 2);
}

// With more ranks on a host than cores, every message an algorithm waits for (each alpha of its
// critical path) finds its sender off a core with odds 1 - cores / ranks, and costs a wake-up
// (alpha) on top of the host's work. Where the work binds, alpha 1 against alpha 0 adds that much.
TEST(CostModel, SharedCoresAddAWakeUpPerMessageWaitedFor) {
  CostParams c = only(1, 1, 0), none = only(0, 1, 0);
  for (CostParams* x : {&c, &none}) x->ranks_per_host = 8, x->host_cores = 2;  // off a core: 3/4
  const auto wake = [&](Algorithm a, int p, size_t m = 0) {
    c.ranks_per_host = none.ranks_per_host = p;
    return pred(a, AR, p, 1000, c, m) - pred(a, AR, p, 1000, none, m);
  };
  // 1000 elements are one block of each: the ring 2 (p-1) exchanges, RHD 2 log2 p (and 2 for the
  // fold at p = 6), the binomial tree 2 L (1 + B) messages, the chain 2 (p + m - 2)
  EXPECT_DOUBLE_EQ(wake(Algorithm::RING, 8), 0.75 * 14);
  EXPECT_DOUBLE_EQ(wake(Algorithm::RHD, 8), 0.75 * 6);
  EXPECT_DOUBLE_EQ(wake(Algorithm::BINOMIAL, 8), 0.75 * 12);
  EXPECT_DOUBLE_EQ(wake(Algorithm::CHAIN, 8, 4), 0.75 * 20);
  EXPECT_DOUBLE_EQ(wake(Algorithm::RHD, 6), 2.0 / 3 * 6);
  // one rank per core: alpha is on the critical path only, which the work does not exceed
  c.ranks_per_host = 8, c.host_cores = 8;
  EXPECT_DOUBLE_EQ(pred(Algorithm::RING, AR, 8, 1000, c), 14 + 4000.0 / 8 + 6.0 / 8 * 4000 + 7.0 / 8 * 4000);
}

TEST(CostModel, AutoTakesTheLeastPredictionAndTheSwitchWhenItIsFaster) {
  const Algorithm hosts[] = {Algorithm::BINOMIAL, Algorithm::CHAIN, Algorithm::RHD, Algorithm::RING};
  // latency only: at p = 8 the tree's 2 * 3 messages beat the ring's 14; binomial first on a tie with RHD
  EXPECT_EQ(choose(Problem{AR, 8, 256, 4, 0}, only(1, 0, 0), hosts).algo, Algorithm::BINOMIAL);
  // the wire only, p = 6: the ring's 2 (p-1)/p n beats RHD's fold (at p = 8 they tie: RHD, listed first)
  EXPECT_EQ(choose(Problem{AR, 6, 1 << 20, 4, 0}, only(0, 1, 0), hosts).algo, Algorithm::RING);
  EXPECT_EQ(choose(Problem{AR, 8, 1 << 20, 4, 0}, only(0, 1, 0), hosts).algo, Algorithm::RHD);
  // p = 2: RHD and the ring are one exchange and tie at any parameters; the ring (measured faster)
  for (const CostParams& c2 : {only(1e-5, 1e-9, 1e-8), only(0, 1, 0), only(1, 0, 0)}) {
    const auto all = candidates(Problem{AR, 2, 1 << 20, 4, 0}, c2, hosts);
    double rhd = -1, ring = -2, least = 1e300;
    for (const Choice& ch : all) {
      if (ch.algo == Algorithm::RHD) rhd = ch.seconds;
      if (ch.algo == Algorithm::RING) ring = ch.seconds;
      least = std::min(least, ch.seconds);
    }
    EXPECT_EQ(rhd, ring);
    if (ring == least) {
      EXPECT_EQ(choose(Problem{AR, 2, 1 << 20, 4, 0}, c2, hosts).algo, Algorithm::RING);
    }
  }
  // a reduce to rank 3: no chain, no ring
  for (const Choice& c : candidates(Problem{RED, 8, 1000, 4, 3}, only(1, 1, 1), hosts))
    EXPECT_TRUE(c.algo == Algorithm::BINOMIAL || c.algo == Algorithm::RHD) << name(c.algo);
  CostParams c = only(1e-5, 1e-9, 1e-8);
  c.have_switch = true, c.switch_alpha = 1e-5, c.switch_beta = 1e-10;
  EXPECT_EQ(choose(Problem{AR, 8, 1 << 20, 4, 0}, c, all_algorithms()).algo, Algorithm::SWITCH);
  c.switch_alpha = 10;  // a switch far away
  EXPECT_NE(choose(Problem{AR, 8, 1 << 20, 4, 0}, c, all_algorithms()).algo, Algorithm::SWITCH);
  const Algorithm ring_only[] = {Algorithm::RING};
  EXPECT_THROW(choose(Problem{RED, 4, 10, 4, 0}, c, ring_only), std::invalid_argument);
}

// What the algorithms send, counted by the observer, against the models' terms: with alpha = 1
// and nothing else a model counts a rank's message steps; with beta = 1, w and o the real sizes,
// its bytes.
struct Counts {
  std::map<int, int> sent, received;
  std::map<int, size_t> bytes_sent, bytes_received;
};

Counts observe(int p, size_t count, void (*fn)(Links&, const void*, size_t, const ReduceOp&, void*, uint8_t*)) {
  Counts c;
  std::mutex mu;
  const ReduceOp op{Format::INT32, Format::INT32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  run_group(
      p,
      [&](int r, Links& t) {
        const auto in = make_input(Format::INT32, count, 100 + r, true);
        std::vector<uint8_t> out(count * 4), fl(count);
        fn(t, in.data(), count, op, out.data(), fl.data());
      },
      [&](const MessageEvent& e) {
        std::lock_guard lk(mu);
        ++c.sent[e.from], ++c.received[e.to];
        c.bytes_sent[e.from] += e.bytes, c.bytes_received[e.to] += e.bytes;
      });
  return c;
}

TEST(CostModel, RingAndRhdAllreduceSendWhatTheirModelsCount) {
  for (int p : {2, 3, 4, 5, 6, 7, 8}) {
    SCOPED_TRACE(p);
    const size_t count = 2 * size_t(ring_block(p)) + 1000;  // three ring blocks
    // int32 partials travel as int32 (w = 1, plus a 12-byte header); results alone: no status byte is set (o = 1)
    const Counts ring = observe(p, count, ring_allreduce);
    const double ring_alpha = pred(Algorithm::RING, AR, p, count, only(1, 0, 0));
    const double ring_bytes = pred(Algorithm::RING, AR, p, count, only(0, 1, 0, 1, 1.0));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(ring.sent.at(r), ring_alpha) << "rank " << r;  // every step of the ring is one send per rank
      EXPECT_NEAR(double(ring.bytes_sent.at(r)), ring_bytes, 0.01 * ring_bytes + 3 * 2 * p * 12) << "rank " << r;
    }
    // RHD: rank 0 is in the block; it also takes the fold's message (p not a power of two),
    // which the model's 2 floor(log p) + 2 counts with its unfold send.
    const size_t rcount = 2 * size_t(kRhdBlock) + 1000;  // three RHD blocks
    const double rn = double(rcount) * 4;
    const Counts rhd = observe(p, rcount, rhd_allreduce);
    const double rhd_alpha = pred(Algorithm::RHD, AR, p, rcount, only(1, 0, 0));
    const int q = 1 << int(std::floor(std::log2(p)));
    const int fold = p != q;
    EXPECT_EQ(rhd.sent.at(0) + fold * 3, rhd_alpha);  // the fold's receive, once per block
    const double rhd_bytes = pred(Algorithm::RHD, AR, p, rcount, only(0, 1, 0, 1, 1.0));
    // the model's bytes: what rank 0 sends, and the fold it receives
    const double got = double(rhd.bytes_sent.at(0)) + (fold ? rn + 12 * 3 : 0);
    EXPECT_NEAR(got, rhd_bytes, 0.01 * rhd_bytes + 3 * 4 * 12) << "rank 0";
  }
}

TEST(CostModel, BinomialRootSendsAndTakesWhatTheModelCounts) {
  const size_t count = kBinomialBlock;  // one block (more stream, and the model counts alpha once per level)
  for (int p : {2, 3, 5, 8}) {
    const Counts b =
        observe(p, count, [](Links& t, const void* in, size_t n, const ReduceOp& op, void* out, uint8_t* fl) {
          binomial_allreduce(t, in, n, op, out, fl, 0);
        });
    const double alpha = pred(Algorithm::BINOMIAL, AR, p, count, only(1, 0, 0));
    EXPECT_EQ(b.sent.at(0) + b.received.at(0), alpha) << p;  // L per block each way
  }
}

TEST(Calibration, JsonRoundTripAndErrors) {
  CostParams c = only(3.5e-6, 3.25e-10, 1.5e-8, 1.875, 1.25);
  c.have_switch = true, c.switch_alpha = 4e-5, c.switch_beta = 2e-10, c.gamma_large = 3.5e-8;
  const CostParams back = cost_params_from_json(to_json(c));
  EXPECT_EQ(back.gamma_large, c.gamma_large);
  EXPECT_EQ(back.gamma_single, c.gamma);  // not given: as gamma
  c.gamma_single = 1.25e-9, c.partial_ratio_single = 1.0, c.local = 2.5e-10, c.local_large = 5e-10;
  EXPECT_EQ(cost_params_from_json(to_json(c)).local, 2.5e-10);
  EXPECT_EQ(cost_params_from_json(to_json(c)).local_large, 5e-10);
  c.merge_share = 0.375, c.merge_share_single = 0.75, c.gap = 2.5e-6;
  EXPECT_EQ(cost_params_from_json(to_json(c)).gap, 2.5e-6);
  // not given (a file from before it was measured): 0
  EXPECT_EQ(cost_params_from_json(R"({"alpha":1,"beta":1,"gamma":1,"partial_ratio":1,"out_ratio":1})").gap, 0);
  EXPECT_EQ(cost_params_from_json(to_json(c)).merge_share, 0.375);
  EXPECT_EQ(cost_params_from_json(to_json(c)).merge_share_single, 0.75);
  EXPECT_EQ(cost_params_from_json(to_json(c)).gamma_single, 1.25e-9);
  EXPECT_EQ(cost_params_from_json(to_json(c)).partial_ratio_single, 1.0);
  c.ranks_per_host = 8, c.host_cores = 2;
  const CostParams shared = cost_params_from_json(to_json(c));
  EXPECT_EQ(shared.ranks_per_host, 8);
  EXPECT_EQ(shared.host_cores, 2);
  EXPECT_EQ(back.ranks_per_host, 1);
  EXPECT_EQ(back.alpha, c.alpha);
  EXPECT_EQ(back.beta, c.beta);
  EXPECT_EQ(back.gamma, c.gamma);
  EXPECT_EQ(back.partial_ratio, c.partial_ratio);
  EXPECT_EQ(back.out_ratio, c.out_ratio);
  EXPECT_TRUE(back.have_switch);
  EXPECT_EQ(back.switch_alpha, c.switch_alpha);
  EXPECT_EQ(back.switch_beta, c.switch_beta);
  EXPECT_THROW(cost_params_from_json("{\"alpha\": 1}"), std::invalid_argument);
  EXPECT_THROW(cost_params_from_json("nonsense: ["), std::invalid_argument);
}

TEST(Calibration, ReduceCostFromTheReducersThemselves) {
  const auto in = make_input(Format::FP32, kRhdBlock, 7, true);
  const CostParams k =
      measure_reduce({Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE}, 4, in.data(), kRhdBlock, 2);
  EXPECT_GT(k.gamma, 0);
  EXPECT_GT(k.gamma_large, 0);
  EXPECT_GT(k.partial_ratio, 1);  // sums of two fp32 rarely fit one: packed lanes or records, wider
  EXPECT_EQ(k.out_ratio, 1);      // an fp32 result (its status byte travels only when set)
  const CostParams a =
      measure_reduce({Format::FP32, Format::FP32, Policy::FP32_ARRIVAL, Exceptions::IEEE}, 4, in.data(), kRhdBlock, 2);
  EXPECT_NEAR(a.partial_ratio, 1, 0.001);         // fp32 sums as fp32
  EXPECT_NEAR(k.partial_ratio_single, 1, 0.001);  // one rank's fp32 input: its elements
  EXPECT_GT(k.gamma_single, 0);
  EXPECT_GT(k.local, 0);
  EXPECT_GT(k.local_large, 0);
  EXPECT_GT(k.merge_share, 0);
  EXPECT_LE(k.merge_share, 1);
  const CostParams i = measure_reduce({Format::INT8, Format::INT32, Policy::KULISCH_FIXED, Exceptions::IEEE}, 4,
                                      make_input(Format::INT8, 1000, 3).data(), 1000, 2);
  EXPECT_NEAR(i.partial_ratio, 4, 0.02);  // int8 in, int32 partials
  EXPECT_EQ(i.out_ratio, 4);              // an int32 result per int8 input
}

}  // namespace
}  // namespace prism::coll
