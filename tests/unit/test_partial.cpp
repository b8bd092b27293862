// Lossless partials: lane records (encode/decode), merging states in trees of
// accumulators, malformed records, and AUTO's "fits the output format" test.
//
// References: the exact sums and rounding of ref.hpp, and a lane-record
// encoder written here from the layout in docs/ARITHMETIC.md.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "acc_util.hpp"
#include "coll/partial_message.hpp"
#include "proto/packed_lanes.hpp"
#include "proto/partial.hpp"

namespace {

using namespace acc_util;  // NOLINT
using prism::LaneExact;
using prism::PartialError;
using prism::Wide;
using ref::Big;
using ref::Kind;

Wide wide_of(const Big& b) {
  Wide w;
  const auto l = ref::to_limbs6(b);
  for (int i = 0; i < Wide::kLimbs; ++i) w.limb[i] = l[size_t(i)];
  return w;
}
Big big_of(const Wide& w) { return ref::from_limbs(w.limb, Wide::kLimbs); }

LaneExact lane(uint8_t side, const Big& v) {
  LaneExact l;
  l.side = side;
  l.value = wide_of(v);
  return l;
}

// The record as docs/ARITHMETIC.md lays it out: side | sign<<7, n, offset,
// then the magnitude's bytes from the lowest non-zero one to the highest.
std::vector<uint8_t> doc_record(uint8_t side, const Big& v) {
  std::vector<uint8_t> r = {uint8_t(side | (v.negative() ? 0x80 : 0)), 0, 0};
  if (v.is_zero()) return r;
  std::vector<uint8_t> bytes;
  for (int pos = 0; pos < v.bitlen(); pos += 8) bytes.push_back(uint8_t(v.bits64(pos) & 0xFF));
  size_t lo = 0;
  while (bytes[lo] == 0) ++lo;
  r[1] = uint8_t(bytes.size() - lo);
  r[2] = uint8_t(lo);
  r.insert(r.end(), bytes.begin() + long(lo), bytes.end());
  return r;
}

std::vector<uint8_t> encode_all(const std::vector<LaneExact>& lanes) {
  std::vector<uint8_t> buf(lanes.size() * prism::kMaxLaneBytes + 8, 0xCC);
  const size_t n = prism::encode_kulisch_lanes(lanes.data(), uint32_t(lanes.size()), buf.data());
  buf.resize(n);
  return buf;
}

std::vector<LaneExact> states(const prism::Accumulator& acc) {
  std::vector<LaneExact> s(acc.desc().lanes);
  EXPECT_TRUE(acc.state(s.data()));
  return s;
}

// Through the wire and back, checked to be lossless on the way.
std::vector<LaneExact> through_bytes(const std::vector<LaneExact>& s) {
  const auto bytes = encode_all(s);
  std::vector<LaneExact> back(s.size());
  size_t used = 0;
  const PartialError e =
      prism::decode_kulisch_lanes(bytes.data(), bytes.size(), uint32_t(s.size()), back.data(), &used);
  EXPECT_EQ(e, PartialError::None) << prism::describe(e);
  EXPECT_EQ(used, bytes.size());
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(back[i].side, s[i].side) << "lane " << i;
    EXPECT_TRUE(back[i].value == s[i].value) << "lane " << i;
  }
  return back;
}

uint64_t seed_of(const Fmt& f, Kind k, uint32_t R, uint32_t lanes, uint64_t salt) {
  return (uint64_t(f.code) << 56) ^ (uint64_t(k) << 48) ^ (uint64_t(R) << 20) ^ lanes ^ (salt * 0x9E3779B97F4A7C15ull);
}

// ---------------------------------------------------------------- records

TEST(LaneRecord, LayoutIsTheDocumentedOne) {
  ref::Rng rng(30);
  std::vector<std::pair<uint8_t, Big>> cases = {{ref::kSideNegZeroOnly, Big()},
                                                {0, Big()},
                                                {0, Big(1)},
                                                {0, Big(-1)},
                                                {0, Big(0x100)},
                                                {0, Big::pow2(293)},
                                                {0, -(Big::pow2(294) - Big(1))},
                                                {ref::kSideNan, Big()},
                                                {ref::kSidePosInf | ref::kSideNegInf, Big()},
                                                {ref::kSideInvalid | ref::kSideOverflow, Big(-77)}};
  for (int i = 0; i < 3000; ++i) {
    Big v;
    const int bits = int(rng() % 370);
    for (int b = 0; b < bits; b += 60) v += Big::from_mag(rng() >> 4).shl(b);
    v = v.shr_mag(int(rng() % 8)).shl(int(rng() % 64));
    if (v.bitlen() > 375) v = v.shr_mag(v.bitlen() - 375);
    cases.push_back({uint8_t((rng() & 1) ? ref::kSideInvalid : 0), (rng() & 1) ? -v : v});
  }
  for (const auto& [side, v] : cases) {
    const LaneExact l = lane(side, v);
    const std::vector<uint8_t> want = doc_record(side, v);
    std::vector<uint8_t> got(prism::kMaxLaneBytes + 4, 0xCC);
    const size_t n = prism::encode_kulisch_lane(l, got.data());
    ASSERT_EQ(n, want.size()) << v.str();
    ASSERT_EQ(prism::kulisch_lane_size(l), want.size()) << v.str();
    got.resize(n);
    ASSERT_EQ(got, want) << v.str();
    LaneExact back;
    size_t used = 0;
    ASSERT_EQ(prism::decode_kulisch_lane(got.data(), got.size(), &back, &used), PartialError::None) << v.str();
    ASSERT_EQ(used, n);
    ASSERT_EQ(back.side, side);
    ASSERT_EQ(big_of(back.value), v);
  }
}

TEST(LaneRecord, WorstCaseStatesSurviveEncodeDecode) {
  std::vector<LaneExact> ls;
  // fp32 at 65535 ranks of the largest value: 65535 * (2^24 - 1) * 2^(104 + 149) units.
  const Big fp32max = Big::from_mag((1u << 24) - 1).shl(104 + 149);
  Big top;
  for (int i = 0; i < 65535; ++i) top += fp32max;  // independent of multiplication
  ls.push_back(lane(0, top));
  ls.push_back(lane(0, -top));
  // The full exponent range in one value: the largest and the smallest bit.
  ls.push_back(lane(0, fp32max + Big(1)));
  ls.push_back(lane(0, -(fp32max + Big(1))));
  // Every sideband combination on a zero value, and fp32-policy flags on values.
  for (uint8_t s = 0; s <= 63; ++s) ls.push_back(lane(s, Big()));
  for (uint8_t s : {ref::kSideInvalid, ref::kSideOverflow, uint8_t(ref::kSideInvalid | ref::kSideOverflow)})
    ls.push_back(lane(s, Big(-123456789)));
  // The largest magnitude a record can hold: n + offset <= 47 bytes.
  ls.push_back(lane(0, Big::pow2(376) - Big(1)));
  ls.push_back(lane(0, -(Big::pow2(376) - Big(1))));
  ls.push_back(lane(0, Big::pow2(375)));
  through_bytes(ls);
  // The same from real accumulators at R = 65535 and the largest inputs.
  for (const Fmt& in : ref::kAll) {
    const uint32_t R = 65535, lanes = 4;
    ref::Data data(R, std::vector<uint32_t>(lanes));
    for (auto& row : data) {
      row[0] = in.max_code();
      row[1] = in.is_float() ? in.max_code() | in.sign_bit() : uint32_t(ref::int_min(in)) & in.mask();
      row[2] = in.max_code();
      row[3] = in.is_float() ? in.max_code() : 0;
    }
    data[R - 1][2] = 1;  // + the smallest value
    ref::Rng rng(in.code);
    if (in.is_float()) data[R / 2][3] = ref::nan_code(in, rng);  // a special in the sideband
    const OpDesc d = desc(in, in.is_float() ? in : ref::kINT32, Policy::KULISCH_FIXED, false, R, lanes);
    auto acc = prism::make_accumulator(d);
    add_all(*acc, packets(in, data), identity_order(R));
    const auto s = states(*acc);
    const auto t = truth(in, data);
    for (uint32_t i = 0; i < lanes; ++i) {
      const bool special = t[i].nan || t[i].pinf || t[i].ninf;  // then the value is 0 (op.hpp)
      EXPECT_EQ(big_of(s[i].value), special ? Big() : t[i].sum) << describe(d) << " lane " << i;
      EXPECT_EQ(s[i].side, t[i].side) << describe(d) << " lane " << i;
    }
    through_bytes(s);
  }
}

std::vector<uint8_t> rec(std::initializer_list<int> b) {
  std::vector<uint8_t> v;
  for (int x : b) v.push_back(uint8_t(x));
  return v;
}

PartialError decode_one(const std::vector<uint8_t>& r, size_t len) {
  LaneExact l;
  size_t used = 0;
  return prism::decode_kulisch_lane(r.data(), len, &l, &used);
}

TEST(LaneRecord, MalformedRecordsAreRefusedWithTheirReason) {
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    size_t len;  // bytes offered
    PartialError want;
  };
  std::vector<uint8_t> n47(3 + 47, 0x11);
  n47[0] = 0;
  n47[1] = 47;
  n47[2] = 0;
  std::vector<uint8_t> n48 = n47;
  n48.push_back(0x01);
  n48[1] = 48;
  std::vector<uint8_t> off47 = rec({0, 1, 47, 0x01});
  std::vector<uint8_t> n40off8(3 + 40, 0x22);
  n40off8[0] = 0;
  n40off8[1] = 40;
  n40off8[2] = 8;
  const std::vector<Case> cases = {
      {"empty", {}, 0, PartialError::Truncated},
      {"header cut", rec({0, 0, 0}), 2, PartialError::Truncated},
      {"magnitude cut", rec({0, 3, 0, 1, 2, 3}), 5, PartialError::Truncated},
      {"n=48", n48, n48.size(), PartialError::BadLength},
      {"offset 47 + 1 byte", off47, off47.size(), PartialError::BadLength},
      {"n 40 + offset 8", n40off8, n40off8.size(), PartialError::BadLength},
      {"n 255", rec({0, 255, 0}), 3, PartialError::BadLength},
      {"offset 255", rec({0, 1, 255, 1}), 4, PartialError::BadLength},
      {"first byte zero", rec({0, 2, 0, 0, 1}), 5, PartialError::NonCanonical},
      {"last byte zero", rec({0, 2, 0, 1, 0}), 5, PartialError::NonCanonical},
      {"single zero byte", rec({0, 1, 3, 0}), 4, PartialError::NonCanonical},
      {"sign on zero", rec({0x80, 0, 0}), 3, PartialError::NonCanonical},
      {"offset on zero", rec({0, 0, 5}), 3, PartialError::NonCanonical},
      {"reserved bit", rec({0x40, 0, 0}), 3, PartialError::ReservedBits},
      {"reserved bit with value", rec({0x40, 1, 0, 7}), 4, PartialError::ReservedBits},
      {"NaN with magnitude", rec({ref::kSideNan, 1, 0, 7}), 4, PartialError::SpecialValue},
      {"+Inf with magnitude", rec({ref::kSidePosInf, 1, 0, 7}), 4, PartialError::SpecialValue},
      {"-Inf with magnitude", rec({ref::kSideNegInf | 0x80, 1, 0, 7}), 4, PartialError::SpecialValue},
      {"-0 only with magnitude", rec({ref::kSideNegZeroOnly, 1, 0, 7}), 4, PartialError::SpecialValue},
  };
  for (const Case& c : cases) EXPECT_EQ(decode_one(c.bytes, c.len), c.want) << c.what;
  // Limits that are fine: 47 bytes at offset 0; 1 byte at offset 46.
  EXPECT_EQ(decode_one(n47, n47.size()), PartialError::None);
  EXPECT_EQ(decode_one(rec({0, 1, 46, 0x7F}), 4), PartialError::None);
  EXPECT_EQ(decode_one(rec({ref::kSideInvalid | ref::kSideOverflow | 0x80, 1, 0, 9}), 4), PartialError::None);
  // Every reason has a message.
  for (int e = 0; e <= int(PartialError::Unrepresentable); ++e) EXPECT_STRNE(prism::describe(PartialError(e)), "?");
}

TEST(LaneRecord, ChunkDecodeStopsAtTheFirstBadLane) {
  std::vector<LaneExact> ls = {lane(0, Big(5)), lane(0, Big(-300)), lane(ref::kSidePosInf, Big())};
  auto bytes = encode_all(ls);
  std::vector<LaneExact> out(3);
  size_t used = 0;
  EXPECT_EQ(prism::decode_kulisch_lanes(bytes.data(), bytes.size() - 1, 3, out.data(), &used), PartialError::Truncated);
  EXPECT_EQ(prism::decode_kulisch_lanes(bytes.data(), bytes.size(), 4, out.data(), &used), PartialError::Truncated)
      << "asking for one lane more than the bytes hold";
  bytes[4] |= 0x40;  // second record's sideband
  EXPECT_EQ(prism::decode_kulisch_lanes(bytes.data(), bytes.size(), 3, out.data(), &used), PartialError::ReservedBits);
}

// ---------------------------------------------------------------- accumulator states

// Kulisch and integer states are the exact sums and the specials seen.
TEST(AccumulatorState, IsTheExactSumAndSideband) {
  int failures = 0;
  for (const Fmt& in : ref::kAll) {
    for (Kind k : ref::kKinds) {
      for (uint32_t R : {1u, 5u, 64u, 9000u}) {
        const uint32_t lanes = R > 1000 ? 5 : 37;
        const ref::Data data = ref::make_data(in, k, R, lanes, seed_of(in, k, R, lanes, 1));
        const OpDesc d = desc(in, in.is_float() ? in : ref::kINT32, Policy::KULISCH_FIXED, false, R, lanes);
        ref::Rng rng(R);
        auto acc = prism::make_accumulator(d);
        add_all(*acc, packets(in, data), random_order(R, rng));
        const auto s = states(*acc);
        const auto t = truth(in, data);
        for (uint32_t i = 0; i < lanes; ++i) {
          const bool special = t[i].nan || t[i].pinf || t[i].ninf;
          const Big want = special ? Big() : t[i].sum;
          if (s[i].side != t[i].side || big_of(s[i].value) != want) {
            ADD_FAILURE() << describe(d) << " " << ref::kind_name(k) << " lane " << i << ": want side "
                          << int(t[i].side) << " value " << want.str() << ", got side " << int(s[i].side) << " value "
                          << big_of(s[i].value).str();
            if (++failures > 6) return;
          }
        }
      }
    }
  }
}

// state() -> records -> decode -> add_exact into a fresh accumulator: the same result.
void round_trip_all(Policy pol) {
  int failures = 0;
  for (const Fmt& in : ref::kAll) {
    for (Kind k : ref::kKinds) {
      for (uint32_t R : {1u, 3u, 64u, 9000u}) {
        const uint32_t lanes = R > 1000 ? 6 : 37;
        const ref::Data data = ref::make_data(in, k, R, lanes, seed_of(in, k, R, lanes, 2));
        const auto p = packets(in, data);
        for (const Fmt& out : ref::kAll) {
          if (out.code == ref::kINT8.code || (in.is_float() && !out.is_float())) continue;
          for (bool sat : {false, true}) {
            const OpDesc d = desc(in, out, pol, sat, R, lanes);
            auto a = prism::make_accumulator(d);
            add_all(*a, p, identity_order(R));
            const auto back = through_bytes(states(*a));
            auto b = prism::make_accumulator(d);
            ASSERT_TRUE(b->add_exact(back.data())) << describe(d);
            const auto res = same_runs(finalize(*a), finalize(*b));
            if (!res) {
              ADD_FAILURE() << describe(d) << " " << ref::kind_name(k)
                            << ": original vs through records: " << res.message();
              if (++failures > 6) return;
            }
          }
        }
      }
    }
  }
}

TEST(AccumulatorState, KulischRoundTripThroughRecordsGivesIdenticalBits) { round_trip_all(Policy::KULISCH_FIXED); }
TEST(AccumulatorState, Fp32ArrivalRoundTripThroughRecordsGivesIdenticalBits) { round_trip_all(Policy::FP32_ARRIVAL); }

// One fp32 lane through state() -> records -> a fresh accumulator.
Result fp32_arrival_round_trip(const std::vector<uint32_t>& xs, bool sat, Result* original) {
  const uint32_t R = uint32_t(xs.size());
  ref::Data data(R, std::vector<uint32_t>(1));
  for (uint32_t r = 0; r < R; ++r) data[r][0] = xs[r];
  const OpDesc d = desc(ref::kFP32, ref::kFP32, Policy::FP32_ARRIVAL, sat, R, 1);
  auto a = prism::make_accumulator(d);
  add_all(*a, packets(ref::kFP32, data), identity_order(R));
  *original = finalize(*a);
  const auto back = through_bytes(states(*a));
  auto b = prism::make_accumulator(d);
  EXPECT_TRUE(b->add_exact(back.data()));
  return finalize(*b);
}

// max + max overflows: under SATURATE the answer is +max with OVERFLOW. The
// state says POS_INF | OVERFLOW, and the receiving accumulator takes POS_INF
// for an input infinity, which SATURATE does not clamp.
TEST(AccumulatorState, Fp32ArrivalOverflowUnderSaturateSurvivesThePartial) {
  Result orig;
  const Result got = fp32_arrival_round_trip({0x7F7FFFFFu, 0x7F7FFFFFu}, true, &orig);
  EXPECT_EQ(orig.bits[0], 0x7F7FFFFFu);
  EXPECT_EQ(orig.flags[0], ref::kOverflow);
  EXPECT_EQ(got.bits[0], 0x7F7FFFFFu) << "through a partial";
  EXPECT_EQ(got.flags[0], ref::kOverflow) << "through a partial";
}

// +Inf + -Inf: canonical NaN with INVALID and no NAN_INPUT (no input was a NaN).
TEST(AccumulatorState, Fp32ArrivalInfMinusInfKeepsItsFlagsThroughThePartial) {
  Result orig;
  const Result got = fp32_arrival_round_trip({0x7F800000u, 0xFF800000u}, false, &orig);
  EXPECT_EQ(orig.bits[0], 0x7FC00000u);
  EXPECT_EQ(orig.flags[0], ref::kInvalid);
  EXPECT_EQ(got.bits[0], 0x7FC00000u) << "through a partial";
  EXPECT_EQ(got.flags[0], ref::kInvalid) << "through a partial";
}

TEST(AccumulatorState, BinomialHasNoLosslessState) {
  auto acc = prism::make_accumulator(desc(ref::kFP32, ref::kFP32, Policy::FP32_BINOMIAL, false, 4, 3));
  std::vector<LaneExact> s(3);
  EXPECT_FALSE(acc->state(s.data()));
  EXPECT_FALSE(acc->add_exact(s.data()));
}

TEST(AccumulatorState, AddExactRefusesValuesOutOfRangeAndChangesNothing) {
  for (const Fmt& in : ref::kAll) {
    for (uint32_t R : {2u, 64u, 9000u, 65535u}) {
      const uint32_t lanes = 3;
      const OpDesc d = desc(in, in.is_float() ? in : ref::kINT32, Policy::KULISCH_FIXED, false, R, lanes);
      auto acc = prism::make_accumulator(d);
      const ref::Data data = ref::make_data(in, Kind::FullRange, 2, lanes, R);
      add_all(*acc, packets(in, data), identity_order(2));
      const Result before = finalize(*acc);
      const auto s_before = states(*acc);
      // 2^376 units is beyond any op's range.
      std::vector<LaneExact> huge = {lane(0, Big(1)), lane(0, Big::pow2(376)), lane(0, Big(1))};
      EXPECT_FALSE(acc->add_exact(huge.data())) << describe(d);
      EXPECT_TRUE(same_runs(before, finalize(*acc))) << describe(d) << " changed by a refused add_exact";
      const auto s_after = states(*acc);
      for (uint32_t i = 0; i < lanes; ++i) EXPECT_TRUE(s_after[i].value == s_before[i].value) << describe(d);
    }
  }
}

// ---------------------------------------------------------------- merge trees

struct Node {
  std::unique_ptr<prism::Accumulator> acc;
  std::vector<uint32_t> pending;  // contributions this switch has yet to add itself
};

// Adds a random part (or all) of a node's own contributions.
void add_some(Node& n, const std::vector<std::vector<uint8_t>>& p, ref::Rng& rng, bool all) {
  size_t k = all ? n.pending.size() : size_t(rng() % (n.pending.size() + 1));
  for (; k > 0; --k) {
    const uint32_t r = n.pending.back();
    n.pending.pop_back();
    n.acc->add(p[r].data(), r);
  }
}

// Splits the R contributions into random groups, one accumulator each, and
// merges their states (through records) in a random tree until one is left.
// A switch may take its own contributions before, between and after the
// partials of its children.
Result merge_tree(const OpDesc& d, const std::vector<std::vector<uint8_t>>& p, ref::Rng& rng) {
  const uint32_t R = d.group;
  auto order = random_order(R, rng);
  const uint32_t groups = 1 + uint32_t(rng() % std::min<uint32_t>(R, 12));
  std::vector<Node> nodes(groups);
  for (auto& n : nodes) n.acc = prism::make_accumulator(d);
  for (uint32_t i = 0; i < R; ++i) nodes[i < groups ? i : uint32_t(rng() % groups)].pending.push_back(order[i]);
  for (auto& n : nodes) add_some(n, p, rng, false);
  while (nodes.size() > 1) {
    const size_t a = rng() % nodes.size();
    size_t b = rng() % (nodes.size() - 1);
    if (b >= a) ++b;
    add_some(nodes[b], p, rng, true);  // a child sends its partial once it has everything
    const auto sb = through_bytes(states(*nodes[b].acc));
    if (rng() % 3 == 0) {  // a parent switch that starts empty and takes both children
      add_some(nodes[a], p, rng, true);
      auto parent = prism::make_accumulator(d);
      const auto sa = through_bytes(states(*nodes[a].acc));
      EXPECT_TRUE(parent->add_exact(sa.data()));
      EXPECT_TRUE(parent->add_exact(sb.data()));
      nodes[a].acc = std::move(parent);
    } else {  // a switch that merges a child into its own sum, then goes on adding
      EXPECT_TRUE(nodes[a].acc->add_exact(sb.data())) << describe(d);
      add_some(nodes[a], p, rng, false);
    }
    nodes.erase(nodes.begin() + long(b));
  }
  add_some(nodes[0], p, rng, true);
  return finalize(*nodes[0].acc);
}

TEST(MergeTrees, EqualOneAccumulatorOverAllInputs) {
  int failures = 0;
  for (const Fmt& in : ref::kAll) {
    for (Kind k : ref::kKinds) {
      for (uint32_t R : {2u, 5u, 64u, 300u, 9000u}) {
        const uint32_t lanes = R > 1000 ? 5 : 23;
        const ref::Data data = ref::make_data(in, k, R, lanes, seed_of(in, k, R, lanes, 3));
        const auto p = packets(in, data);
        const auto t = truth(in, data);
        ref::Rng rng(seed_of(in, k, R, lanes, 4));
        for (const Fmt& out : {in.is_float() ? in : ref::kINT32, ref::kFP32, ref::kE4M3FN}) {
          for (bool sat : {false, true}) {
            const OpDesc d = desc(in, out, Policy::KULISCH_FIXED, sat, R, lanes);
            const auto want = kulisch_expect(t, in, out, sat);
            const Result one = run(d, p, identity_order(R));
            if (!same_lanes(one, want)) {
              ADD_FAILURE() << describe(d) << " " << ref::kind_name(k)
                            << " single: " << same_lanes(one, want).message();
              if (++failures > 6) return;
            }
            for (int tree = 0; tree < 3; ++tree) {
              const Result merged = merge_tree(d, p, rng);
              const auto res = same_lanes(merged, want);
              if (!res) {
                ADD_FAILURE() << describe(d) << " " << ref::kind_name(k) << " merge tree " << tree << ": "
                              << res.message();
                if (++failures > 6) return;
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- AUTO

// Reference: a lane fits `out` when it has no sideband but -0 (and -0 only
// where out has it) and its exact value is a finite value of out.
bool lane_fits(const LaneExact& l, int unit, const Fmt& out) {
  if (l.side & ~ref::kSideNegZeroOnly) return false;
  if (l.side & ref::kSideNegZeroOnly) return out.has_neg_zero();
  const Big v = big_of(l.value);
  if (v.is_zero()) return true;
  if (!out.is_float()) return v.cmp(Big(INT32_MIN)) >= 0 && v.cmp(Big(INT32_MAX)) <= 0 && unit == 0;
  const ref::Rounded r = ref::round_to(out, v.negative(), v.abs(), unit, false);
  return !r.overflow && !r.inexact;
}

// Lanes around out's grid: its own values in units of 2^unit, their
// neighbours one unit away, values past its range, and sideband states.
std::vector<LaneExact> auto_candidates(const Fmt& in, const Fmt& out, ref::Rng& rng) {
  std::vector<LaneExact> c;
  const int unit = in.unit();
  for (int i = 0; i < 400; ++i) {
    uint32_t code = ref::random_finite(out, rng);
    if (i % 4 == 0 && out.is_float()) code = (rng() & 1) ? out.max_code() : uint32_t(rng() % 8);
    const ref::Value v = ref::classify(out, code);
    const ref::Exact x = ref::exact_of(v.v);
    if (x.sig != 0 && x.exp < unit) continue;  // not a whole number of lane units
    Big val = x.sig == 0 ? Big() : Big::from_mag(x.sig, x.neg).shl(x.exp - unit);
    if (val.bitlen() > 300) continue;
    switch (rng() % 5) {
      case 0: val += Big(1); break;  // one unit off: fits only where out is as fine as the unit
      case 1: val += val; break;     // doubled: may leave the range
      default: break;
    }
    uint8_t side = 0;
    if (val.is_zero() && (rng() & 1)) side = ref::kSideNegZeroOnly;
    c.push_back(lane(side, val));
  }
  for (uint8_t s : {ref::kSideNan, ref::kSidePosInf, ref::kSideNegInf, ref::kSideInvalid, ref::kSideOverflow})
    c.push_back(lane(s, Big()));
  return c;
}

void check_lanes_fit_format(bool int_outputs) {
  ref::Rng rng(40);
  int failures = 0;
  for (const Fmt& in : ref::kAll) {
    for (const Fmt& out : ref::kAll) {
      if (out.code == ref::kINT8.code || (in.is_float() && !out.is_float())) continue;
      if (out.is_float() == int_outputs) continue;
      const int unit = in.unit();
      const auto cand = auto_candidates(in, out, rng);
      int fits_seen = 0, misfits_seen = 0;
      for (const LaneExact& l : cand) {
        // One lane alone, then in a chunk of lanes that all fit.
        const bool want = lane_fits(l, unit, out);
        (want ? fits_seen : misfits_seen)++;
        std::vector<uint8_t> el(8, 0xCC);
        const bool got = prism::lanes_fit_format(&l, 1, unit, F(out), el.data());
        if (got != want) {
          ADD_FAILURE() << in.name << " lane -> " << out.name << ": value " << big_of(l.value).str() << " side "
                        << int(l.side) << ": lanes_fit_format says " << got << ", the reference " << want;
          if (++failures > 8) return;
          continue;
        }
        if (!got) continue;
        LaneExact back;
        ASSERT_EQ(prism::lanes_from_elements(F(out), el.data(), 1, unit, &back), PartialError::None);
        EXPECT_TRUE(back.value == l.value) << in.name << " -> " << out.name << " " << big_of(l.value).str();
        EXPECT_EQ(back.side, l.side) << in.name << " -> " << out.name;
      }
      if (failures == 0) {
        EXPECT_GT(fits_seen, 0) << in.name << " -> " << out.name << ": no lane that fits was tried";
        EXPECT_GT(misfits_seen, 0) << in.name << " -> " << out.name;
      }
      // Whole chunks: all fitting lanes -> true, elements decode back; add one misfit -> false.
      std::vector<LaneExact> good, bad;
      for (const LaneExact& l : cand) (lane_fits(l, unit, out) ? good : bad).push_back(l);
      if (good.empty()) continue;
      std::vector<uint8_t> el(good.size() * size_t(out.bytes) + 4, 0xCC);
      EXPECT_TRUE(prism::lanes_fit_format(good.data(), uint32_t(good.size()), unit, F(out), el.data()))
          << in.name << " -> " << out.name;
      std::vector<LaneExact> back(good.size());
      ASSERT_EQ(prism::lanes_from_elements(F(out), el.data(), uint32_t(good.size()), unit, back.data()),
                PartialError::None);
      for (size_t i = 0; i < good.size(); ++i) EXPECT_TRUE(back[i].value == good[i].value) << i;
      if (!bad.empty()) {
        auto mixed = good;
        mixed.insert(mixed.begin() + long(rng() % (mixed.size() + 1)), bad[rng() % bad.size()]);
        EXPECT_FALSE(prism::lanes_fit_format(mixed.data(), uint32_t(mixed.size()), unit, F(out), el.data()))
            << in.name << " -> " << out.name;
      }
    }
  }
}

TEST(Auto, LanesFitFloatFormatExactlyWhenEveryLaneIsRepresentable) { check_lanes_fit_format(false); }
// Integer sums with int32 output: a lane fits when it is in int32's range.
TEST(Auto, LanesFitInt32ExactlyWhenEveryLaneIsInRange) { check_lanes_fit_format(true); }

TEST(Auto, SmallIntegerLaneFitsInt32) {
  const LaneExact l = lane(0, Big(5));
  uint8_t el[4] = {0, 0, 0, 0};
  ASSERT_TRUE(prism::lanes_fit_format(&l, 1, 0, prism::Format::INT32, el)) << "5 is an int32";
  EXPECT_EQ(ref::load_le(el, 4), 5u);
}

// The states real accumulators produce: AUTO's answer against the reference.
TEST(Auto, AccumulatorStatesFitWhenTheirSumsAreRepresentable) {
  int failures = 0;
  for (const Fmt& in : ref::kFloats) {
    for (Kind k : {Kind::Gradient, Kind::Subnormal, Kind::Specials, Kind::Cancel}) {
      const uint32_t R = 4, lanes = 64;
      const ref::Data data = ref::make_data(in, k, R, lanes, seed_of(in, k, R, lanes, 5));
      auto acc = prism::make_accumulator(desc(in, in, Policy::KULISCH_FIXED, false, R, lanes));
      add_all(*acc, packets(in, data), identity_order(R));
      const auto s = states(*acc);
      for (const Fmt& out : ref::kFloats) {
        for (uint32_t i = 0; i < lanes; ++i) {
          uint8_t el[4];
          const bool want = lane_fits(s[i], in.unit(), out);
          if (prism::lanes_fit_format(&s[i], 1, in.unit(), F(out), el) != want) {
            ADD_FAILURE() << in.name << " sum -> " << out.name << " lane " << i << " value " << big_of(s[i].value).str()
                          << " side " << int(s[i].side) << ": reference says fits=" << want;
            if (++failures > 6) return;
          }
        }
      }
    }
  }
}

// Every element of every float format read as lanes in every format's unit:
// a whole number of units gives that number, anything else is refused.
TEST(Auto, LanesFromElementsIsExactOrRefusedForEveryUnit) {
  ref::Rng rng(41);
  int failures = 0;
  for (const Fmt& f : ref::kFloats) {
    std::vector<uint32_t> codes;
    if (f.bytes < 4) {
      for (uint32_t c = 0; c <= f.mask(); ++c) codes.push_back(c);
    } else {
      for (uint32_t e = 0; e < 256; ++e)
        for (uint32_t m : {0u, 1u, 0x400000u, 0x7FFFFFu, uint32_t(rng()) & 0x7FFFFFu})
          codes.push_back(e << 23 | m | ((rng() & 1) ? 0x80000000u : 0));
    }
    for (const Fmt& u : ref::kAll) {
      const int unit = u.unit();
      for (uint32_t c : codes) {
        const ref::Value v = ref::classify(f, c);
        if (v.cls == ref::Cls::NaN || v.cls == ref::Cls::Inf || v.cls == ref::Cls::Zero) continue;
        const ref::Exact x = ref::exact_of(v.v);
        uint8_t el[4];
        ref::store_le(el, f.bytes, c);
        LaneExact l;
        const PartialError e = prism::lanes_from_elements(F(f), el, 1, unit, &l);
        const bool whole = x.exp >= unit;  // x.sig is odd
        const bool ok =
            whole ? (e == PartialError::None && big_of(l.value) == Big::from_mag(x.sig, x.neg).shl(x.exp - unit))
                  : e == PartialError::Unrepresentable;
        if (!ok) {
          ADD_FAILURE() << f.name << " element " << hex(c) << " (" << x.sig << "*2^" << x.exp << ") in units of 2^"
                        << unit << ": want " << (whole ? "its value" : "Unrepresentable") << ", got error " << int(e)
                        << " value " << big_of(l.value);
          if (++failures > 8) return;
        }
      }
    }
  }
}

// 2^-65 is 2^-64 of fp16's unit (2^-24): not a whole number of units.
TEST(Auto, ElementSixtyFourBitsBelowTheUnitIsUnrepresentable) {
  const float x = 0x1p-65f;
  uint8_t b[4];
  std::memcpy(b, &x, 4);
  LaneExact l;
  const PartialError e = prism::lanes_from_elements(prism::Format::FP32, b, 1, ref::kFP16.unit(), &l);
  EXPECT_EQ(e, PartialError::Unrepresentable) << "got value " << big_of(l.value);
}

TEST(Auto, ElementsFinerThanTheLaneUnitAreUnrepresentable) {
  // fp32's smallest subnormal as an fp16 lane (unit 2^-24): not a whole number of units.
  const uint8_t e[4] = {1, 0, 0, 0};
  LaneExact l;
  EXPECT_EQ(prism::lanes_from_elements(prism::Format::FP32, e, 1, ref::kFP16.unit(), &l),
            PartialError::Unrepresentable);
  // 2^-24 itself is one unit.
  float x = 0x1p-24f;
  uint8_t b[4];
  std::memcpy(b, &x, 4);
  ASSERT_EQ(prism::lanes_from_elements(prism::Format::FP32, b, 1, ref::kFP16.unit(), &l), PartialError::None);
  EXPECT_EQ(big_of(l.value), Big(1));
  // Specials and zeros map to the sideband.
  const uint8_t ninf[2] = {0x00, 0xFC}, nz[2] = {0x00, 0x80}, nan[2] = {0x01, 0x7C};
  ASSERT_EQ(prism::lanes_from_elements(prism::Format::FP16, ninf, 1, ref::kFP16.unit(), &l), PartialError::None);
  EXPECT_EQ(l.side, ref::kSideNegInf);
  ASSERT_EQ(prism::lanes_from_elements(prism::Format::FP16, nz, 1, ref::kFP16.unit(), &l), PartialError::None);
  EXPECT_EQ(l.side, ref::kSideNegZeroOnly);
  EXPECT_TRUE(l.value.is_zero());
  ASSERT_EQ(prism::lanes_from_elements(prism::Format::FP16, nan, 1, ref::kFP16.unit(), &l), PartialError::None);
  EXPECT_EQ(l.side, ref::kSideNan);
}

// ---------------------------------------------------------------------------
// The partial messages' fast paths (Accumulator::state_as, add_elements_exact,
// add_exact_doubles; the f64 lane-record codec) against the generic path they
// replace: state() + lanes_fit_format()/encode_kulisch_lanes() to encode,
// lanes_from_elements()/decode_kulisch_lanes() + add_exact() to merge. The
// generic message is built here from partial_message.hpp's documented layout.

using prism::Accumulator;
using prism::Exceptions;
using prism::Format;
using prism::Policy;

struct FastCase {
  Format dtype, out;
  Policy policy;
};

// Element bits of `f` in one of a few regimes: 0 values in a narrow window
// (their sums fp32 values or not, in a double either way: no bank), 1 any exponent
// (subnormals included: the bank), 2 near the format's largest (overflow),
// 3 a mix with specials (NaN, +-Inf, -0).
uint32_t element(Format f, int regime, std::mt19937_64& g) {
  std::uniform_int_distribution<uint32_t> u32;
  const uint32_t r = u32(g);
  if (f == Format::INT8) return r & 0xFF;
  if (f == Format::INT32) {
    if (regime == 2) return (r & 1) ? 0x7FFFFFF0u + (r >> 28) : 0x80000000u + (r >> 28);
    if (regime == 0) return uint32_t(int32_t(r % 2001) - 1000);
    return r;
  }
  uint32_t bits;  // fp32, bf16 as fp32's top half
  const uint32_t sign = r & 0x80000000u;
  switch (regime) {
    case 0: bits = sign | ((120 + (r >> 8) % 8) << 23) | (r & ((r & 1) ? 0x7FFFFFu : 0x7FFF00u)); break;
    case 1: bits = sign | (((r >> 3) % 255) << 23) | (r & 0x7FFFFFu); break;
    case 2: bits = sign | ((252 + (r >> 3) % 3) << 23) | (r & 0x7FFFFFu); break;
    default: {
      const uint32_t pick = (r >> 20) % 10;
      bits = pick == 0   ? 0x7FC00000u
             : pick == 1 ? 0x7F800000u
             : pick == 2 ? 0xFF800000u
             : pick == 3 ? 0x80000000u
             : pick == 4 ? (sign | (254u << 23) | (r & 0x7FFF00u))
                         : (sign | ((118 + (r >> 8) % 12) << 23) | (r & 0x7FFF00u));
    }
  }
  return f == Format::BF16 ? bits >> 16 : bits;
}

std::vector<uint8_t> contribution(Format f, uint32_t n, int regime, std::mt19937_64& g) {
  const uint32_t sz = prism::info(f).bytes;
  std::vector<uint8_t> e(size_t(n) * sz);
  // Regime 3 mixes plain lanes in (each lane's regime drawn), so some lanes stay finite.
  for (uint32_t i = 0; i < n; ++i)
    prism::store_bits(f, &e[size_t(i) * sz], element(f, regime == 3 && g() % 3 ? 0 : regime, g));
  return e;
}

// The message of partial_message.hpp by the generic path.
// A lane value (in units of 2^unit) as a double, when one holds it exactly.
bool exact_double(const prism::Wide& w, int unit, double* out) {
  if (w.is_zero()) {
    *out = 0;
    return true;
  }
  const prism::Wide m = w.magnitude();
  if (m.msb() - m.lsb() >= 53) return false;
  *out = std::ldexp(double(m.bits_at(m.lsb())), m.lsb() + unit) * (w.negative() ? -1 : 1);
  return true;
}

// v as hi + lo, hi the double nearest v (ties to even), lo = v - hi a
// double; false when two doubles do not hold v. Found here by trying the two
// multiples of hi's last place around v and keeping the nearer.
bool exact_pair(const prism::Wide& w, int unit, double* hi, double* lo) {
  *lo = 0;
  if (exact_double(w, unit, hi)) return true;
  const prism::Wide m = w.magnitude();
  const int cut = m.msb() - 52;
  const uint64_t t = m.bits_at(cut) & ((uint64_t(1) << 53) - 1);
  prism::Wide below = m, above = m;  // m - t 2^cut >= 0, m - (t + 1) 2^cut < 0
  below.add_shifted(-int64_t(t), cut);
  above.add_shifted(-int64_t(t + 1), cut);
  prism::Wide diff = below;  // |below| - |above|
  diff.add(above);
  const bool up = diff.is_zero() ? (t & 1) != 0 : !diff.negative();
  double r;
  if (!exact_double(up ? above : below, unit, &r)) return false;
  const double h = std::ldexp(double(up ? t + 1 : t), cut + unit);
  *hi = w.negative() ? -h : h;
  *lo = w.negative() ? -r : r;
  return true;
}

void put_u32(std::vector<uint8_t>& m, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) m[at + i] = uint8_t(v >> (8 * i));
}

std::vector<uint8_t> generic_message(const Accumulator& acc, const prism::coll::ReduceOp& op) {
  const uint32_t n = acc.desc().lanes;
  std::vector<LaneExact> lanes(n);
  EXPECT_TRUE(acc.state(lanes.data()));
  const Format ef = prism::is_float(op.dtype) && op.policy != Policy::KULISCH_FIXED ? Format::FP32 : op.out;
  std::vector<uint8_t> m(prism::coll::max_partial_bytes(n));
  const uint8_t head[12] = {uint8_t(op.dtype), uint8_t(op.out), uint8_t(op.policy), uint8_t(op.exceptions), 0, 0, 0, 0,
                            uint8_t(n),        uint8_t(n >> 8), uint8_t(n >> 16),   uint8_t(n >> 24)};
  std::copy(head, head + 12, m.begin());
  if (prism::lanes_fit_format(lanes.data(), n, prism::unit_exp(op.dtype), ef, &m[12])) {
    m[4] = uint8_t(ef);
    m.resize(12 + size_t(n) * prism::info(ef).bytes);
    return m;
  }
  // Every lane a double (finite, at most 53 bits, sideband at most
  // NEG_ZERO_ONLY, then a zero): packed lanes; every lane two doubles (hi
  // the lane rounded, lo the rest), some lo not 0, for fp32 sums (double
  // lanes): packed pairs; otherwise lane records.
  std::vector<double> v(n), lo(n);
  bool doubles = prism::is_float(op.dtype) && op.policy == Policy::KULISCH_FIXED, pairs = doubles;
  for (uint32_t i = 0; i < n && pairs; ++i) {
    const LaneExact& l = lanes[i];
    pairs = (l.side == 0 || (l.side == prism::side::NEG_ZERO_ONLY && l.value.is_zero())) &&
            exact_pair(l.value, prism::unit_exp(op.dtype), &v[i], &lo[i]);
    doubles = doubles && pairs && lo[i] == 0;
    if (pairs && l.side) v[i] = -0.0;
  }
  pairs = pairs && !doubles && op.dtype == Format::FP32;
  if (doubles) {
    m[4] = 0x40;
    m.resize(std::max(m.size(), 12 + prism::packed_room(n)));
    m.resize(12 + prism::encode_packed_lanes(v.data(), n, &m[12]));
  } else if (pairs) {
    // Layout (partial_message.hpp): the his' packed length (uint32), the
    // his packed, a bitmap of the lanes whose lo is not 0, those los packed.
    m[4] = 0x41;
    m.resize(12 + 4 + prism::packed_room(n) + (n + 7) / 8 + prism::packed_room(n));
    const size_t hlen = prism::encode_packed_lanes(v.data(), n, &m[16]);
    put_u32(m, 12, uint32_t(hlen));
    size_t at = 16 + hlen;
    std::vector<double> compact;
    for (uint32_t i = 0; i < n; ++i) {
      if (i % 8 == 0) m[at + i / 8] = 0;
      if (lo[i] != 0) {
        m[at + i / 8] |= uint8_t(1u << (i % 8));
        compact.push_back(lo[i]);
      }
    }
    at += (n + 7) / 8;
    m.resize(at + prism::encode_packed_lanes(compact.data(), uint32_t(compact.size()), &m[at]));
  } else {
    m.resize(12 + prism::encode_kulisch_lanes(lanes.data(), n, &m[12]));
  }
  return m;
}

// The generic merge: false where merge_partial() must throw.
bool generic_merge(Accumulator& acc, const prism::coll::ReduceOp& op, const std::vector<uint8_t>& m) {
  const uint32_t n = acc.desc().lanes;
  std::vector<LaneExact> lanes(n);
  const uint8_t* p = m.data() + 12;
  const size_t len = m.size() - 12;
  if (m[4] == 0x40) {
    std::vector<double> v(n);
    if (!prism::decode_packed_lanes(p, len, n, prism::unit_exp(op.dtype), v.data())) return false;
    for (uint32_t i = 0; i < n; ++i) lanes[i] = prism::lane_of_double(v[i], prism::unit_exp(op.dtype));
  } else if (m[4] == 0x41) {
    const int unit = prism::unit_exp(op.dtype);
    if (len < 4) return false;
    const size_t hlen = size_t(p[0]) | size_t(p[1]) << 8 | size_t(p[2]) << 16 | size_t(p[3]) << 24;
    const size_t nb = (n + 7) / 8;
    if (hlen > len - 4 || len - 4 - hlen < nb) return false;
    std::vector<double> v(n);
    if (!prism::decode_packed_lanes(p + 4, hlen, n, unit, v.data())) return false;
    const uint8_t* bits = p + 4 + hlen;
    std::vector<uint32_t> at;
    for (uint32_t i = 0; i < nb * 8; ++i)
      if (bits[i / 8] >> (i % 8) & 1) {
        if (i >= n) return false;
        at.push_back(i);
      }
    std::vector<double> lo(at.size());
    if (!prism::decode_packed_lanes(bits + nb, len - 4 - hlen - nb, uint32_t(at.size()), unit, lo.data())) return false;
    for (uint32_t i = 0; i < n; ++i) lanes[i] = prism::lane_of_double(v[i], unit);
    for (size_t j = 0; j < at.size(); ++j) {
      if (lo[j] == 0) return false;
      const LaneExact l = prism::lane_of_double(lo[j], unit);
      lanes[at[j]].value.add(l.value);
      lanes[at[j]].side = 0;  // hi + a non-zero lo: not a -0 lane
    }
  } else if (m[4] == 0) {
    size_t used = 0;
    if (prism::decode_kulisch_lanes(p, len, n, lanes.data(), &used) != PartialError::None || used != len) return false;
  } else if (prism::lanes_from_elements(Format(m[4]), p, n, prism::unit_exp(op.dtype), lanes.data()) !=
             PartialError::None) {
    return false;
  }
  return acc.add_exact(lanes.data());
}

::testing::AssertionResult same_accumulators(const Accumulator& a, const Accumulator& b) {
  const uint32_t n = a.desc().lanes;
  std::vector<LaneExact> sa(n), sb(n);
  a.state(sa.data());
  b.state(sb.data());
  for (uint32_t i = 0; i < n; ++i)
    if (sa[i].side != sb[i].side || !(sa[i].value == sb[i].value))
      return ::testing::AssertionFailure()
             << "lane " << i << "'s state differs: side " << int(sa[i].side) << " vs " << int(sb[i].side);
  const auto ra = acc_util::finalize(a), rb = acc_util::finalize(b);
  for (uint32_t i = 0; i < n; ++i)
    if (ra.bits[i] != rb.bits[i] || ra.flags[i] != rb.flags[i])
      return ::testing::AssertionFailure()
             << "lane " << i << "'s result differs: " << acc_util::hex(ra.bits[i]) << "/" << int(ra.flags[i]) << " vs "
             << acc_util::hex(rb.bits[i]) << "/" << int(rb.flags[i]);
  return ::testing::AssertionSuccess();
}

// Accumulators of one op fed contributions [from, to) of `data`.
std::unique_ptr<Accumulator> fed(const prism::OpDesc& d, const std::vector<std::vector<uint8_t>>& data, uint32_t from,
                                 uint32_t to) {
  auto a = prism::make_accumulator(d);
  for (uint32_t r = from; r < to; ++r) a->add(data[r].data(), r);
  return a;
}

TEST(PartialFast, EncodeAndMergeAreTheGenericPathsBitForBit) {
  const FastCase cases[] = {
      {Format::FP32, Format::FP32, Policy::FP32_ARRIVAL},   {Format::FP32, Format::BF16, Policy::FP32_ARRIVAL},
      {Format::BF16, Format::FP32, Policy::FP32_ARRIVAL},   {Format::FP32, Format::FP32, Policy::KULISCH_FIXED},
      {Format::FP32, Format::BF16, Policy::KULISCH_FIXED},  {Format::BF16, Format::BF16, Policy::KULISCH_FIXED},
      {Format::BF16, Format::FP32, Policy::KULISCH_FIXED},  {Format::INT32, Format::INT32, Policy::KULISCH_FIXED},
      {Format::INT8, Format::INT32, Policy::KULISCH_FIXED}, {Format::INT32, Format::INT32, Policy::FP32_ARRIVAL},
      {Format::FP16, Format::FP32, Policy::FP32_ARRIVAL},   {Format::E4M3FN, Format::FP32, Policy::FP32_ARRIVAL},
  };
  std::mt19937_64 g(20261203);
  constexpr uint32_t R = 6, n = 300;  // > one 256-lane kernel block
  int forms[4] = {};                  // messages seen: elements, packed lanes, records, pairs
  for (const FastCase& c : cases) {
    for (Exceptions ex : {Exceptions::IEEE, Exceptions::SATURATE}) {
      const prism::coll::ReduceOp op{c.dtype, c.out, c.policy, ex};
      const prism::OpDesc d = prism::coll::block_desc(op, R, n);
      for (int trial = 0; trial < 24; ++trial) {
        const int regime = trial % 4;
        std::vector<std::vector<uint8_t>> data;
        for (uint32_t r = 0; r < R; ++r) data.push_back(contribution(c.dtype, n, trial % 8 < 4 ? regime : r % 4, g));
        const uint32_t k = uint32_t(trial / 4) % 3;  // the sender's terms: 0, 1 or 2
        SCOPED_TRACE(acc_util::describe(d) + ", trial " + std::to_string(trial));
        auto sender = fed(d, data, 0, k);
        std::vector<LaneExact> scratch;
        std::vector<uint8_t> fast;
        prism::coll::encode_partial(*sender, op, scratch, fast);
        const auto gen = generic_message(*sender, op);
        ASSERT_EQ(fast, gen) << "encode_partial differs from state() + lanes_fit_format/encode_kulisch_lanes";
        ++forms[fast[4] == 0 ? 2 : fast[4] == 0x40 ? 1 : fast[4] == 0x41 ? 3 : 0];

        // Receivers with 0, 1 or 2 terms of their own, merged twice (the
        // second partial from another sender), then re-encoded.
        const uint32_t j = uint32_t(trial) % 3;
        auto a = fed(d, data, 2, 2 + j), b = fed(d, data, 2, 2 + j);
        prism::coll::merge_partial(*a, op, fast.data(), fast.size(), 1, scratch);
        ASSERT_TRUE(generic_merge(*b, op, gen));
        ASSERT_TRUE(same_accumulators(*a, *b)) << "after the first merge";
        auto other = fed(d, data, 4, R);
        std::vector<uint8_t> m2;
        prism::coll::encode_partial(*other, op, scratch, m2);
        ASSERT_EQ(m2, generic_message(*other, op));
        prism::coll::merge_partial(*a, op, m2.data(), m2.size(), 4, scratch);
        ASSERT_TRUE(generic_merge(*b, op, m2));
        ASSERT_TRUE(same_accumulators(*a, *b)) << "after the second merge";
        std::vector<uint8_t> m3;
        prism::coll::encode_partial(*a, op, scratch, m3);
        ASSERT_EQ(m3, generic_message(*b, op)) << "re-encoding the merged state";
        ++forms[m3[4] == 0 ? 2 : m3[4] == 0x40 ? 1 : m3[4] == 0x41 ? 3 : 0];
        // A third partial with specials: what the flags of the first two
        // merges decide (an overflow's infinity against an input one).
        auto third = prism::make_accumulator(d);
        third->add(contribution(c.dtype, n, 3, g).data(), 5);
        std::vector<uint8_t> m4;
        prism::coll::encode_partial(*third, op, scratch, m4);
        prism::coll::merge_partial(*a, op, m4.data(), m4.size(), 5, scratch);
        ASSERT_TRUE(generic_merge(*b, op, m4));
        ASSERT_TRUE(same_accumulators(*a, *b)) << "after the third merge";
      }
    }
  }
  EXPECT_GT(forms[0], 20) << "too few element messages to test that path";
  EXPECT_GT(forms[1], 20) << "too few packed-lane messages to test that path";
  EXPECT_GT(forms[2], 20) << "too few lane-record messages to test that path";
  EXPECT_GT(forms[3], 20) << "too few packed-pair messages to test that path";
}

// fp32 elements finer than a narrower input's lane unit do not decode: the
// fast merges refuse them as lanes_from_elements() does, changing nothing.
TEST(PartialFast, ElementsFinerThanTheUnitAreRefusedByTheFastMerges) {
  for (Policy pol : {Policy::FP32_ARRIVAL, Policy::KULISCH_FIXED}) {
    const prism::coll::ReduceOp op{Format::BF16, Format::FP32, pol, Exceptions::IEEE};
    const prism::OpDesc d = prism::coll::block_desc(op, 4, 40);
    for (float bad : {std::ldexp(1.0f, -140), std::ldexp(1.0f, -149), 1.0f + std::ldexp(1.0f, -23)}) {
      std::vector<uint8_t> m = {uint8_t(op.dtype),
                                uint8_t(op.out),
                                uint8_t(op.policy),
                                uint8_t(op.exceptions),
                                uint8_t(Format::FP32),
                                0,
                                0,
                                0,
                                40,
                                0,
                                0,
                                0};
      for (uint32_t i = 0; i < 40; ++i) {
        const uint32_t b = prism::float_bits(i == 33 ? bad : float(i));
        for (int k = 0; k < 4; ++k) m.push_back(uint8_t(b >> (8 * k)));
      }
      auto a = prism::make_accumulator(d), b = prism::make_accumulator(d);
      std::vector<LaneExact> scratch;
      if (bad == 1.0f + std::ldexp(1.0f, -23)) {  // whole units: taken
        prism::coll::merge_partial(*a, op, m.data(), m.size(), 2, scratch);
        ASSERT_TRUE(generic_merge(*b, op, m));
      } else {
        EXPECT_THROW(prism::coll::merge_partial(*a, op, m.data(), m.size(), 2, scratch), prism::coll::CollectiveError);
        EXPECT_FALSE(generic_merge(*b, op, m));
      }
      EXPECT_TRUE(same_accumulators(*a, *b));
    }
  }
}

// The accumulator-level calls against their generic forms, state by state:
// state_as() (elements, doubles or lanes) and add_exact_doubles(), including
// values add_exact() refuses (nothing changes).
TEST(PartialFast, AccumulatorFastCallsAreTheirGenericForms) {
  std::mt19937_64 g(7);
  constexpr uint32_t R = 4, n = 260;
  for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL}) {
    for (Format dt : {Format::FP32, Format::BF16, Format::INT32}) {
      const prism::coll::ReduceOp op{dt, dt, pol, Exceptions::IEEE};
      const prism::OpDesc d = prism::coll::block_desc(op, R, n);
      const Format ef = prism::is_float(dt) && pol != Policy::KULISCH_FIXED ? Format::FP32 : dt;
      const int unit = prism::unit_exp(dt);
      for (int trial = 0; trial < 16; ++trial) {
        SCOPED_TRACE(acc_util::describe(d) + ", trial " + std::to_string(trial));
        std::vector<std::vector<uint8_t>> data;
        for (uint32_t r = 0; r < R; ++r) data.push_back(contribution(dt, n, trial % 4, g));
        auto acc = fed(d, data, 0, 1 + uint32_t(trial) % 3);
        const uint32_t esz = prism::info(ef).bytes;
        std::vector<uint8_t> e1(size_t(n) * esz), e2(size_t(n) * esz);
        std::vector<LaneExact> l1(n), l2(n);
        std::vector<double> dv(n);
        const auto f1 = acc->state_as(ef, e1.data(), l1.data(), dv.data());
        const auto f2 = prism::state_as_generic(*acc, ef, e2.data(), l2.data());
        ASSERT_EQ(f1 == prism::StateForm::Elements, f2 == prism::StateForm::Elements);
        if (f1 == prism::StateForm::Elements) {
          EXPECT_EQ(e1, e2);
        }
        if (f1 == prism::StateForm::Doubles)
          for (uint32_t i = 0; i < n; ++i) l1[i] = prism::lane_of_double(dv[i], unit);
        if (f1 != prism::StateForm::Elements) {
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_TRUE(l1[i].side == l2[i].side && l1[i].value == l2[i].value) << "lane " << i;
        }

        // Doubles into a second accumulator: random whole lane values, some
        // beyond a Kulisch lane's bound when the trial asks for it.
        std::vector<double> v(n);
        for (uint32_t i = 0; i < n; ++i) {
          const int e = int(g() % 60);
          v[i] = std::ldexp(double(int64_t(g() >> 11) - (int64_t(1) << 52)), unit + e);
          if (i % 17 == 0) v[i] = (g() & 1) ? -0.0 : 0.0;
        }
        if (trial % 5 == 4) v[n / 2] = std::ldexp(1.0, unit + 300);
        auto a = fed(d, data, 1, R), b = fed(d, data, 1, R);
        const bool ta = a->add_exact_doubles(v.data(), l1.data());
        const bool tb = prism::add_exact_doubles_generic(*b, v.data(), l2.data());
        ASSERT_EQ(ta, tb);
        ASSERT_TRUE(same_accumulators(*a, *b));
      }
    }
  }
}

// The f64 lane-record codec is encode_kulisch_lanes()/decode_kulisch_lanes()
// for lanes a double holds, and declines every other record.
TEST(PartialFast, DoubleLaneRecordsAreTheGenericRecords) {
  std::mt19937_64 g(11);
  for (int unit : {-149, -133, 0}) {
    std::vector<double> v;
    for (int i = 0; i < 2000; ++i) {
      const int bits = 1 + int(g() % 53);
      const int64_t m = int64_t((g() >> (64 - bits)) | 1);
      double x = std::ldexp(double(m), unit + int(g() % 200));
      if (g() & 1) x = -x;
      if (i % 97 == 0) x = (i & 1) ? -0.0 : 0.0;
      v.push_back(x);
    }
    std::vector<LaneExact> lanes;
    for (double x : v) lanes.push_back(prism::lane_of_double(x, unit));
    std::vector<uint8_t> a(v.size() * prism::kMaxLaneBytes), b(a.size());
    const size_t na = prism::encode_kulisch_lanes_f64(v.data(), uint32_t(v.size()), unit, a.data());
    const size_t nb = prism::encode_kulisch_lanes(lanes.data(), uint32_t(lanes.size()), b.data());
    ASSERT_EQ(na, nb);
    a.resize(na);
    b.resize(nb);
    ASSERT_EQ(a, b);
    std::vector<double> back(v.size());
    ASSERT_TRUE(prism::decode_kulisch_lanes_f64(a.data(), na, uint32_t(v.size()), unit, back.data()));
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint64_t>(back[i]), std::bit_cast<uint64_t>(v[i])) << i;
    EXPECT_FALSE(prism::decode_kulisch_lanes_f64(a.data(), na - 1, uint32_t(v.size()), unit, back.data()));
  }
  // Records a double does not hold, or that are malformed: declined.
  const std::vector<std::vector<uint8_t>> declined = {
      {prism::side::NAN_INPUT, 0, 0},
      {prism::side::POS_INF, 0, 0},
      {prism::side::OVERFLOW, 1, 0, 1},
      {0x80, 0, 0},
      {0, 0, 1},
      {0, 2, 0, 1, 0},
      {0, 2, 0, 0, 1},
      {0x40, 1, 0, 1},
      {0, 9, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1},
      {0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0x80},
      {0, 1, 47, 1},
      {0, 3, 0, 1},
  };
  for (const auto& r : declined) {
    double out;
    EXPECT_FALSE(prism::decode_kulisch_lanes_f64(r.data(), r.size(), 1, -149, &out)) << int(r[0]) << " " << int(r[1]);
  }
}

}  // namespace

// Found by fuzz_message: packed lanes (any finite double) whose values no R
// inputs reach are refused with a CollectiveError, not taken (an fp16 sum in
// double lanes took 2^300 and later encoded records no decoder reads) and
// not converted beyond a Wide's 384 bits (an fp32 sum of 1e300).
TEST(PartialFast, ValuesBeyondTheOpsRangeAreRefused) {
  for (Format dt : {Format::FP16, Format::FP32, Format::BF16}) {
    const prism::coll::ReduceOp op{dt, dt, Policy::KULISCH_FIXED, Exceptions::IEEE};
    const uint32_t n = 3;
    for (double big : {std::ldexp(1.0, 300), 1e300, -std::ldexp(1.0, 1000)}) {
      SCOPED_TRACE(std::string(prism::name(dt)) + " " + std::to_string(big));
      const double v[n] = {1.0, big, 2.0};
      std::vector<uint8_t> m = {
          uint8_t(op.dtype), uint8_t(op.out), uint8_t(op.policy), uint8_t(op.exceptions), 0x40, 0, 0, 0, n, 0, 0, 0};
      m.resize(12 + prism::packed_room(n));
      m.resize(12 + prism::encode_packed_lanes(v, n, &m[12]));
      auto acc = prism::make_accumulator(prism::coll::block_desc(op, 8, n));
      std::vector<LaneExact> scratch;
      EXPECT_THROW(prism::coll::merge_partial(*acc, op, m.data(), m.size(), 1, scratch), prism::coll::CollectiveError);
    }
  }
}
