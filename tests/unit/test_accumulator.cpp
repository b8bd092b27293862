// Accumulators against independent references:
//  - KULISCH_FIXED: the exact sum as a big integer, the brief's specials
//    rules, and a big-integer round-to-nearest-even encoder (ref.hpp);
//  - FP32_ARRIVAL: sequential binary32 additions in add order;
//  - FP32_BINOMIAL: seed 000's tree order over rank index;
//  - integer inputs: exact sums, int32 output saturating.
// Plus order independence, portable vs AVX2 kernels, reset, memory per lane.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "acc_util.hpp"

namespace {

using namespace acc_util;  // NOLINT
using ref::Kind;

struct Size {
  uint32_t R, lanes;
};
// Lanes deliberately not multiples of 8 (vector width) except 256.
constexpr Size kSizes[] = {{1, 1}, {2, 7}, {3, 37}, {5, 256}, {64, 37}, {1000, 37}, {300, 256}};

uint64_t seed_of(const Fmt& f, Kind k, uint32_t R, uint32_t lanes, uint64_t salt = 0) {
  return (uint64_t(f.code) << 56) ^ (uint64_t(k) << 48) ^ (uint64_t(R) << 20) ^ lanes ^ (salt * 0x9E3779B97F4A7C15ull);
}

std::string fmt_param_name(const ::testing::TestParamInfo<Fmt>& i) { return i.param.name; }

// Stops a test after this many failing configurations (one bug shows in many).
constexpr int kMaxFailures = 6;

// ---------------------------------------------------------------- KULISCH_FIXED

class KulischFixed : public ::testing::TestWithParam<Fmt> {};

// Every output format and both exceptions policies for one data set.
void check_kulisch_all_outputs(const Fmt& in, const ref::Data& data, const std::string& what, int* failures,
                               ref::Rng& rng, bool every_output = true) {
  const uint32_t R = uint32_t(data.size()), lanes = uint32_t(data[0].size());
  const auto p = packets(in, data);
  const auto t = truth(in, data);
  const auto order = random_order(R, rng);
  {  // the exact state itself: every bit of the sum, and the specials seen
    const OpDesc d = desc(in, in, Policy::KULISCH_FIXED, false, R, lanes);
    auto acc = prism::make_accumulator(d);
    add_all(*acc, p, order);
    std::vector<prism::LaneExact> st(lanes);
    EXPECT_TRUE(acc->state(st.data()));
    for (uint32_t i = 0; i < lanes; ++i) {
      const bool special = t[i].nan || t[i].pinf || t[i].ninf;
      const ref::Big v = ref::from_limbs(st[i].value.limb, prism::Wide::kLimbs);
      if (st[i].side != t[i].side || v != (special ? ref::Big() : t[i].sum)) {
        ADD_FAILURE() << describe(d) << " data " << what << " lane " << i << ": state side " << int(st[i].side)
                      << " value " << v << ", exact side " << int(t[i].side) << " value " << t[i].sum
                      << lane_inputs(data, i, order);
        if (++*failures >= kMaxFailures) return;
        break;
      }
    }
  }
  // Large cases: the input format, fp32, and the two fp8 overflow styles (FN, FNUZ).
  std::vector<Fmt> outs(std::begin(ref::kFloats), std::end(ref::kFloats));
  if (!every_output) outs = {in, ref::kFP32, ref::kE4M3FN, ref::kE5M2FNUZ};
  for (const Fmt& out : outs) {
    for (bool sat : {false, true}) {
      const OpDesc d = desc(in, out, Policy::KULISCH_FIXED, sat, R, lanes);
      const Result got = run(d, p, order);
      const auto want = kulisch_expect(t, in, out, sat);
      if (!same_lanes(got, want, &data, &order)) {
        ADD_FAILURE() << describe(d) << " data " << what << ": " << same_lanes(got, want, &data, &order).message();
        if (++*failures >= kMaxFailures) return;
      }
    }
  }
}

TEST_P(KulischFixed, MatchesExactReferenceForEveryOutputFormat) {
  const Fmt in = GetParam();
  int failures = 0;
  for (Kind k : ref::kKinds) {
    for (Size s : kSizes) {
      ref::Rng rng(seed_of(in, k, s.R, s.lanes, 1));
      const ref::Data data = ref::make_data(in, k, s.R, s.lanes, seed_of(in, k, s.R, s.lanes));
      check_kulisch_all_outputs(in, data, ref::kind_name(k), &failures, rng);
      if (failures >= kMaxFailures) return;
    }
  }
}

TEST_P(KulischFixed, MatchesExactReferenceAt65535Ranks) {
  const Fmt in = GetParam();
  int failures = 0;
  for (Kind k : {Kind::Extreme, Kind::BankStress, Kind::Ties, Kind::FullRange, Kind::Cancel, Kind::Specials}) {
    ref::Rng rng(seed_of(in, k, 65535, 3, 1));
    const uint32_t lanes = k == Kind::Extreme ? 6 : k == Kind::BankStress ? 4 : 3;
    const ref::Data data = ref::make_data(in, k, 65535, lanes, seed_of(in, k, 65535, 3));
    check_kulisch_all_outputs(in, data, ref::kind_name(k), &failures, rng, false);
    if (failures >= kMaxFailures) return;
  }
}

// Terms whose exponents span a window of `w` fields: most at the top of the
// window with full significands, a few at the bottom, arriving at random
// times. Around w = 53 - p - ceil(log2 R) a double holding the running sum
// stops being exact, so an implementation that trusts a window too wide, or
// stops trusting it too late, rounds where it must not.
ref::Data window_data(const Fmt& f, uint32_t R, uint32_t lanes, int w, uint64_t seed) {
  ref::Rng rng(seed);
  ref::Data d(R, std::vector<uint32_t>(lanes));
  const int top_field = int(f.top_field());
  const int lo_field = 1 + int(rng() % uint64_t(std::max(1, top_field - w)));
  const uint32_t hi_field = uint32_t(std::min(top_field, lo_field + w));
  const uint32_t mant_mask = (1u << f.mbits) - 1;
  for (uint32_t i = 0; i < lanes; ++i) {
    const bool mixed = i % 3 == 0;
    const uint32_t n_low = 1 + uint32_t(rng() % 3);
    for (uint32_t r = 0; r < R; ++r) {
      uint32_t c = hi_field << f.mbits | (i % 2 ? mant_mask : (uint32_t(rng()) & mant_mask));
      if (mixed && (rng() & 1)) c |= f.sign_bit();
      d[r][i] = c;
    }
    for (uint32_t k = 0; k < n_low; ++k)
      d[rng() % R][i] =
          uint32_t(lo_field) << f.mbits | (uint32_t(rng()) & mant_mask) | 1u | ((rng() & 1) ? f.sign_bit() : 0);
  }
  return d;
}

TEST_P(KulischFixed, ExactAcrossExponentWindowBoundaries) {
  const Fmt in = GetParam();
  int failures = 0;
  for (uint32_t R : {2u, 7u, 64u, 1000u, 9000u}) {
    int budget = 53 - in.p();
    while ((1u << (53 - in.p() - budget)) < R) --budget;  // 53 - p - ceil(log2 R)
    for (int w : {0, 1, budget - 2, budget - 1, budget, budget + 1, budget + 2, budget + 8, 1000}) {
      if (w < 0) continue;
      for (uint64_t salt = 0; salt < 3; ++salt) {
        ref::Rng rng(salt);
        const uint32_t lanes = R > 1000 ? 5 : 19;
        const ref::Data data = window_data(in, R, lanes, w, seed_of(in, Kind::Gradient, R, uint32_t(w), salt));
        check_kulisch_all_outputs(in, data, "window " + std::to_string(w), &failures, rng, false);
        if (failures >= kMaxFailures) return;
      }
    }
  }
}

TEST_P(KulischFixed, AddOrderDoesNotChangeTheBits) {
  const Fmt in = GetParam();
  for (Kind k : ref::kKinds) {
    for (Size s : {Size{64, 37}, Size{1000, 7}, Size{9, 256}}) {
      ref::Rng rng(seed_of(in, k, s.R, s.lanes, 2));
      const ref::Data data = ref::make_data(in, k, s.R, s.lanes, seed_of(in, k, s.R, s.lanes, 3));
      const auto p = packets(in, data);
      for (const Fmt& out : {ref::kFP32, in, ref::kE4M3FNUZ}) {
        const OpDesc d = desc(in, out, Policy::KULISCH_FIXED, false, s.R, s.lanes);
        const Result first = run(d, p, identity_order(s.R));
        for (int perm = 0; perm < 3; ++perm) {
          const Result other = run(d, p, random_order(s.R, rng));
          ASSERT_TRUE(same_runs(first, other)) << describe(d) << " " << ref::kind_name(k) << " permutation " << perm;
        }
        // Reversed order too: the worst case for a running sum.
        auto rev = identity_order(s.R);
        std::reverse(rev.begin(), rev.end());
        ASSERT_TRUE(same_runs(first, run(d, p, rev))) << describe(d) << " " << ref::kind_name(k) << " reversed";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatInputs, KulischFixed, ::testing::ValuesIn(ref::kFloats), fmt_param_name);

// ---------------------------------------------------------------- FP32 policies

class Fp32Policies : public ::testing::TestWithParam<Fmt> {};

TEST_P(Fp32Policies, ArrivalEqualsSequentialFloatAdditionsInAddOrder) {
  const Fmt in = GetParam();
  int failures = 0;
  for (Kind k : ref::kKinds) {
    for (Size s : kSizes) {
      const ref::Data data = ref::make_data(in, k, s.R, s.lanes, seed_of(in, k, s.R, s.lanes, 4));
      ref::Rng rng(seed_of(in, k, s.R, s.lanes, 5));
      const auto p = packets(in, data);
      const auto order = random_order(s.R, rng);
      std::vector<ref::F32Sum> sums;
      for (uint32_t i = 0; i < s.lanes; ++i) {
        std::vector<float> xs;
        for (uint32_t r : order) xs.push_back(ref::to_f32(in, data[r][i]));
        sums.push_back(ref::fp32_arrival(xs));
      }
      for (const Fmt& out : ref::kFloats) {
        for (bool sat : {false, true}) {
          std::vector<ref::Out> want;
          for (const auto& sum : sums) want.push_back(sum.result(out, sat));
          const OpDesc d = desc(in, out, Policy::FP32_ARRIVAL, sat, s.R, s.lanes);
          const Result got = run(d, p, order);
          const auto res = same_lanes(got, want, &data, &order);
          if (!res) {
            ADD_FAILURE() << describe(d) << " data " << ref::kind_name(k) << ": " << res.message();
            if (++failures >= kMaxFailures) return;
          }
        }
      }
    }
  }
}

TEST_P(Fp32Policies, BinomialEqualsSeedOrderOverRankIndex) {
  const Fmt in = GetParam();
  int failures = 0;
  for (Kind k : ref::kKinds) {
    for (Size s : kSizes) {
      const ref::Data data = ref::make_data(in, k, s.R, s.lanes, seed_of(in, k, s.R, s.lanes, 6));
      ref::Rng rng(seed_of(in, k, s.R, s.lanes, 7));
      const auto p = packets(in, data);
      const auto order = random_order(s.R, rng);  // arrival order must not matter: the index does
      std::vector<ref::F32Sum> sums;
      for (uint32_t i = 0; i < s.lanes; ++i) {
        std::vector<float> x;
        for (uint32_t r = 0; r < s.R; ++r) x.push_back(ref::to_f32(in, data[r][i]));
        sums.push_back(ref::fp32_binomial(x));
      }
      for (const Fmt& out : ref::kFloats) {
        for (bool sat : {false, true}) {
          std::vector<ref::Out> want;
          for (const auto& sum : sums) want.push_back(sum.result(out, sat));
          const OpDesc d = desc(in, out, Policy::FP32_BINOMIAL, sat, s.R, s.lanes);
          const Result got = run(d, p, order);
          const auto res = same_lanes(got, want, &data, &order);
          if (!res) {
            ADD_FAILURE() << describe(d) << " data " << ref::kind_name(k) << ": " << res.message();
            if (++failures >= kMaxFailures) return;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatInputs, Fp32Policies, ::testing::ValuesIn(ref::kFloats), fmt_param_name);

// Hand-made cases whose answers follow from IEEE binary32 alone.
TEST(Fp32Arrival, KnownSequences) {
  const float big = 0x1p24f;
  struct Case {
    std::vector<float> xs;
    uint32_t want;
    uint8_t flags;
  };
  const float inf = INFINITY, mx = 0x1.fffffep127f;
  const std::vector<Case> cases = {
      {{big, 1.0f, 1.0f}, 0x4B800000u, 0},  // 2^24 + 1 + 1 in order: each 1 is lost
      {{1.0f, 1.0f, big}, 0x4B800001u, 0},  // the other order keeps them: 2^24 + 2
      {{-0.0f}, 0x80000000u, 0},            // the first term as it is
      {{-0.0f, -0.0f}, 0x80000000u, 0},
      {{-0.0f, 0.0f}, 0x00000000u, 0},
      {{mx, mx}, 0x7F800000u, ref::kOverflow},  // a finite sum overflowed
      {{mx, mx, -inf}, 0x7FC00000u, ref::kOverflow | ref::kInvalid},
      {{inf, -inf}, 0x7FC00000u, ref::kInvalid},
      {{inf, 1.0f}, 0x7F800000u, 0},
      {{NAN, 1.0f}, 0x7FC00000u, ref::kNanInput},
  };
  for (const Case& c : cases) {
    const uint32_t R = uint32_t(c.xs.size());
    ref::Data data(R, std::vector<uint32_t>(1));
    for (uint32_t r = 0; r < R; ++r) std::memcpy(&data[r][0], &c.xs[r], 4);
    const Result got = run(desc(ref::kFP32, ref::kFP32, Policy::FP32_ARRIVAL, false, R, 1), packets(ref::kFP32, data),
                           identity_order(R));
    EXPECT_EQ(got.bits[0], c.want) << "case with " << R << " terms, first " << c.xs[0];
    EXPECT_EQ(got.flags[0], c.flags) << "case with " << R << " terms, first " << c.xs[0];
  }
}

TEST(Fp32Binomial, KnownTreeOrder) {
  // R = 3: (x0 + x1) + x2. R = 4: (x0 + x1) + (x2 + x3). R = 6: ((x0 + x1) + (x2 + x3)) + (x4 + x5).
  // The ulp of 2^24 is 2: 2^24 + 1 ties to 2^24 (even).
  const float big = 0x1p24f;
  auto sum = [](std::vector<float> xs) {
    const uint32_t R = uint32_t(xs.size());
    ref::Data data(R, std::vector<uint32_t>(1));
    for (uint32_t r = 0; r < R; ++r) std::memcpy(&data[r][0], &xs[r], 4);
    ref::Rng rng(R);
    return run(desc(ref::kFP32, ref::kFP32, Policy::FP32_BINOMIAL, false, R, 1), packets(ref::kFP32, data),
               random_order(R, rng))
        .bits[0];
  };
  EXPECT_EQ(sum({1.0f, 1.0f, big}), 0x4B800001u);                    // (1 + 1) + 2^24 = 2^24 + 2
  EXPECT_EQ(sum({big, 1.0f, 1.0f}), 0x4B800000u);                    // (2^24 + 1) + 1 = 2^24
  EXPECT_EQ(sum({1.0f, big, 1.0f, 1.0f}), 0x4B800001u);              // 2^24 + 2 (in order: 2^24)
  EXPECT_EQ(sum({big, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}), 0x4B800002u);  // (2^24 + 2) + 2 = 2^24 + 4
  EXPECT_EQ(sum({big, 1.0f, 1.0f, 1.0f, 1.0f}), 0x4B800002u);        // (2^24 + 2) + 1: tie, to even 2^24 + 4
}

// ---------------------------------------------------------------- integers

TEST(IntegerInputs, ExactUnderEveryPolicy) {
  int failures = 0;
  for (const Fmt& in : {ref::kINT8, ref::kINT32}) {
    for (Kind k : {Kind::Gradient, Kind::FullRange, Kind::Cancel, Kind::Extreme}) {
      for (Size s : {Size{1, 1}, Size{3, 37}, Size{64, 7}, Size{1000, 37}, Size{65535, 2}}) {
        const ref::Data data = ref::make_data(in, k, s.R, s.lanes, seed_of(in, k, s.R, s.lanes, 8));
        ref::Rng rng(seed_of(in, k, s.R, s.lanes, 9));
        const auto p = packets(in, data);
        const auto t = truth(in, data);
        const auto order = random_order(s.R, rng);
        std::vector<Fmt> outs(std::begin(ref::kFloats), std::end(ref::kFloats));
        outs.push_back(ref::kINT32);
        for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL}) {
          for (const Fmt& out : outs) {
            for (bool sat : {false, true}) {
              const OpDesc d = desc(in, out, pol, sat, s.R, s.lanes);
              const Result got = run(d, p, order);
              const auto want = kulisch_expect(t, in, out, sat);
              const auto res = same_lanes(got, want, &data, &order);
              if (!res) {
                ADD_FAILURE() << describe(d) << " data " << ref::kind_name(k) << ": " << res.message();
                if (++failures >= kMaxFailures) return;
              }
            }
          }
        }
      }
    }
  }
}

TEST(IntegerInputs, Int32OutputSaturatesWithOverflow) {
  // 65535 * INT32_MAX and 65535 * INT32_MIN; and sums just past either end.
  struct Case {
    std::vector<int64_t> xs;
    uint32_t want;
    uint8_t flags;
  };
  const std::vector<Case> cases = {
      {{INT32_MAX, 1}, 0x7FFFFFFFu, ref::kOverflow},
      {{INT32_MIN, -1}, 0x80000000u, ref::kOverflow},
      {{INT32_MAX, 1, -1}, 0x7FFFFFFFu, 0},
      {{INT32_MIN, INT32_MAX}, 0xFFFFFFFFu, 0},
      {{INT32_MIN, 0}, 0x80000000u, 0},
  };
  for (const Case& c : cases) {
    const uint32_t R = uint32_t(c.xs.size());
    ref::Data data(R, std::vector<uint32_t>(1));
    for (uint32_t r = 0; r < R; ++r) data[r][0] = uint32_t(int32_t(c.xs[r]));
    for (bool sat : {false, true}) {
      const Result got = run(desc(ref::kINT32, ref::kINT32, Policy::KULISCH_FIXED, sat, R, 1),
                             packets(ref::kINT32, data), identity_order(R));
      EXPECT_EQ(got.bits[0], c.want);
      EXPECT_EQ(got.flags[0], c.flags);
    }
  }
  ref::Data data(65535, std::vector<uint32_t>{0x7FFFFFFFu, 0x80000000u, 0x7FFFFFFFu});
  for (auto& row : data) row[2] = 0xFFFFFFFFu;  // -1 each: -65535, in range
  const Result got = run(desc(ref::kINT32, ref::kINT32, Policy::FP32_ARRIVAL, false, 65535, 3),
                         packets(ref::kINT32, data), identity_order(65535));
  EXPECT_EQ(got.bits[0], 0x7FFFFFFFu);
  EXPECT_EQ(got.flags[0], ref::kOverflow);
  EXPECT_EQ(got.bits[1], 0x80000000u);
  EXPECT_EQ(got.flags[1], ref::kOverflow);
  EXPECT_EQ(got.bits[2], uint32_t(-65535));
  EXPECT_EQ(got.flags[2], 0);
}

// ---------------------------------------------------------------- kernels

bool same_states(const prism::Accumulator& a, const prism::Accumulator& b, std::string* why) {
  const uint32_t n = a.desc().lanes;
  std::vector<prism::LaneExact> sa(n), sb(n);
  const bool ha = a.state(sa.data()), hb = b.state(sb.data());
  if (ha != hb) return *why = "one has a state, the other not", false;
  if (!ha) return true;
  for (uint32_t i = 0; i < n; ++i)
    if (sa[i].side != sb[i].side || !(sa[i].value == sb[i].value))
      return *why = "lane " + std::to_string(i) + " state differs", false;
  return true;
}

TEST(Kernels, EverySetGivesThePortableBits) {
  const std::vector<const prism::Kernels*> sets = prism::kernel_sets();
  if (sets.size() < 2) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  const prism::Kernels& port = prism::portable_kernels();
  int failures = 0;
  for (size_t si = 1; si < sets.size(); ++si) {
    const prism::Kernels* avx2 = sets[si];
    for (const Fmt& in : ref::kAll) {
      for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL}) {
        for (Kind k : ref::kKinds) {
          for (Size s : {Size{3, 1}, Size{5, 7}, Size{64, 13}, Size{33, 37}, Size{200, 256}, Size{9000, 9}}) {
            if (s.R == 9000 && pol == Policy::FP32_BINOMIAL) continue;
            const ref::Data data = ref::make_data(in, k, s.R, s.lanes, seed_of(in, k, s.R, s.lanes, 10));
            ref::Rng rng(seed_of(in, k, s.R, s.lanes, 11));
            const auto p = packets(in, data);
            const auto order = random_order(s.R, rng);
            for (const Fmt& out : {in.is_float() ? ref::kFP32 : ref::kINT32, ref::kBF16, ref::kE5M2FNUZ}) {
              for (bool sat : {false, true}) {
                const OpDesc d = desc(in, out, pol, sat, s.R, s.lanes);
                auto a = prism::make_accumulator(d, port);
                auto b = prism::make_accumulator(d, *avx2);
                add_all(*a, p, order);
                add_all(*b, p, order);
                std::string why;
                const bool same_state = same_states(*a, *b, &why);
                const auto res = same_runs(finalize(*a), finalize(*b));
                if (!res || !same_state) {
                  ADD_FAILURE() << describe(d) << " data " << ref::kind_name(k) << ": portable vs " << avx2->name
                                << ": " << (res ? why : res.message());
                  if (++failures >= kMaxFailures) return;
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- lifecycle

TEST(AccumulatorLifecycle, ResetRestoresTheEmptyState) {
  for (const Fmt& in : ref::kAll) {
    for (Policy pol : {Policy::KULISCH_FIXED, Policy::FP32_ARRIVAL, Policy::FP32_BINOMIAL}) {
      for (uint32_t R : {3u, 70u, 9000u}) {
        if (R == 9000 && pol == Policy::FP32_BINOMIAL) continue;
        const uint32_t lanes = 11;
        const Fmt out = in.is_float() ? in : ref::kINT32;
        const OpDesc d = desc(in, out, pol, false, R, lanes);
        const auto a = ref::make_data(in, Kind::Specials, R, lanes, seed_of(in, Kind::Specials, R, lanes, 12));
        const auto b = ref::make_data(in, Kind::FullRange, R, lanes, seed_of(in, Kind::FullRange, R, lanes, 13));
        auto used = prism::make_accumulator(d);
        auto fresh = prism::make_accumulator(d);
        add_all(*used, packets(in, a), identity_order(R));
        used->reset();
        std::string why;
        EXPECT_TRUE(same_runs(finalize(*used), finalize(*fresh))) << describe(d) << " right after reset";
        EXPECT_TRUE(same_states(*used, *fresh, &why)) << describe(d) << " " << why;
        add_all(*used, packets(in, b), identity_order(R));
        add_all(*fresh, packets(in, b), identity_order(R));
        EXPECT_TRUE(same_runs(finalize(*used), finalize(*fresh))) << describe(d) << " reused after reset";
        EXPECT_TRUE(same_states(*used, *fresh, &why)) << describe(d) << " " << why;
        if (pol == Policy::KULISCH_FIXED || !in.is_float()) {
          EXPECT_TRUE(same_lanes(finalize(*used), kulisch_expect(truth(in, b), in, out, false)))
              << describe(d) << " after reset";
        }
      }
    }
  }
}

TEST(AccumulatorLifecycle, EmptyKulischLaneIsNegativeZeroOnly) {
  // op.hpp: an empty lane is {NEG_ZERO_ONLY, 0}.
  for (const Fmt& in : ref::kFloats) {
    for (uint32_t R : {1u, 64u, 65535u}) {
      auto acc = prism::make_accumulator(desc(in, in, Policy::KULISCH_FIXED, false, R, 9));
      std::vector<prism::LaneExact> s(9);
      ASSERT_TRUE(acc->state(s.data()));
      for (const auto& l : s) {
        EXPECT_EQ(l.side, ref::kSideNegZeroOnly) << in.name << " R=" << R;
        EXPECT_TRUE(l.value.is_zero());
      }
    }
  }
}

TEST(AccumulatorLifecycle, BytesPerLaneWithinBudget) {
  for (const Fmt& in : ref::kFloats) {
    for (uint32_t R : {1u, 2u, 64u, 1000u, 8192u, 8193u, 65535u}) {
      const size_t b =
          prism::make_accumulator(desc(in, ref::kFP32, Policy::KULISCH_FIXED, false, R, 16))->bytes_per_lane();
      if (in.bytes == 1 || (in.code == ref::kFP16.code && R <= 8192))
        EXPECT_LE(b, 8u) << in.name << " R=" << R;
      else
        EXPECT_LE(b, 64u) << in.name << " R=" << R;
    }
  }
  for (const Fmt& in : {ref::kINT8, ref::kINT32})
    EXPECT_LE(prism::make_accumulator(desc(in, ref::kINT32, Policy::KULISCH_FIXED, false, 65535, 16))->bytes_per_lane(),
              8u);
}

TEST(AccumulatorLifecycle, InadmissibleDescriptorsThrow) {
  EXPECT_THROW(prism::make_accumulator(desc(ref::kFP32, ref::kFP32, Policy::KULISCH_FIXED, false, 0, 4)),
               std::invalid_argument);
  EXPECT_THROW(prism::make_accumulator(desc(ref::kFP32, ref::kFP32, Policy::KULISCH_FIXED, false, 65536, 4)),
               std::invalid_argument);
  EXPECT_THROW(prism::make_accumulator(desc(ref::kE4M3FN, ref::kINT32, Policy::KULISCH_FIXED, false, 4, 4)),
               std::invalid_argument);
  EXPECT_THROW(prism::make_accumulator(desc(ref::kINT8, ref::kINT8, Policy::KULISCH_FIXED, false, 4, 4)),
               std::invalid_argument);
  EXPECT_NO_THROW(prism::make_accumulator(desc(ref::kFP32, ref::kFP32, Policy::KULISCH_FIXED, false, 65535, 4)));
}

}  // namespace

// The batch rounding kernel (narrow results of the FP32 policies and of
// Kulisch's fast lanes) against round_float_to() lane by lane: every code,
// every midpoint between neighbours and a float ulp either side, random
// floats from below the smallest subnormal to past the largest finite value,
// in batches of 37 lanes (vectors and a tail). A batch with a lane that has
// no rounding (NaN, infinity, overflow) must be refused, wherever that lane is.
TEST(Kernels, BatchRoundingMatchesRoundFloatTo) {
  const std::vector<const prism::Kernels*> ks = prism::kernel_sets();
  std::mt19937_64 rng(11);
  for (Format f : {Format::FP16, Format::BF16, Format::E4M3FN, Format::E4M3FNUZ, Format::E5M2, Format::E5M2FNUZ}) {
    const prism::FormatInfo& fi = prism::info(f);
    std::vector<float> probes;
    const uint32_t codes = 1u << (8 * fi.bytes);
    for (uint32_t c = 0; c < codes; c += (fi.bytes == 2 ? 7 : 1)) {
      if (prism::is_special(f, c)) continue;
      const float v = prism::to_float(f, c);
      probes.push_back(v);
      const uint32_t up = (c & fi.sign_bit) ? c - 1 : c + 1;
      if (up < codes && !prism::is_special(f, up) && (up & ~fi.sign_bit) != 0) {
        const float mid = float((double(v) + double(prism::to_float(f, up))) / 2);
        probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)});
      }
    }
    std::uniform_int_distribution<int> ex(fi.emin - fi.mbits - 4, f == Format::BF16 ? 126 : fi.emax + 1);
    for (int i = 0; i < 50000; ++i)
      probes.push_back(std::ldexp(float(rng() >> 40) * 0x1p-24f + 1.0f, ex(rng)) * ((rng() & 1) ? -1.0f : 1.0f));
    probes.push_back(0.0f);
    probes.push_back(-0.0f);
    probes.push_back(prism::bits_float(1));  // an fp32 subnormal
    // The overflow edge: halfway between the largest finite value and the
    // next step (a tie: overflow where that value's last bit is odd), and
    // a float either side of it.
    const float top = prism::to_float(f, fi.max_finite), tie = top + std::ldexp(1.0f, fi.emax - fi.mbits - 1);
    for (float v : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, INFINITY)})
      probes.insert(probes.end(), {v, -v});
    std::shuffle(probes.begin(), probes.end(), rng);
    size_t taken = 0, refused = 0;
    for (size_t at = 0; at < probes.size(); at += 37) {
      const uint32_t n = uint32_t(std::min<size_t>(37, probes.size() - at));
      std::vector<uint8_t> want(size_t(n) * fi.bytes);
      bool ok = true;
      for (uint32_t i = 0; i < n && ok; ++i) {
        uint32_t bits;
        ok = prism::round_float_to(f, probes[at + i], &bits);
        if (ok) prism::store_bits(f, want.data() + size_t(i) * fi.bytes, bits);
      }
      ok ? ++taken : ++refused;
      for (const prism::Kernels* k : ks) {
        std::vector<uint8_t> got(want.size());
        ASSERT_EQ(k->round_f32(f, probes.data() + at, n, got.data()), ok) << k->name << " " << prism::name(f);
        if (ok) {
          ASSERT_EQ(got, want) << k->name << " " << prism::name(f) << " batch at " << at;
        }
      }
    }
    EXPECT_GT(taken, 20u) << prism::name(f);
    // One lane without a rounding, at every position of a 37-lane batch of zeros.
    const float max = prism::to_float(f, fi.max_finite);
    for (float bad : {NAN, INFINITY, -INFINITY, std::nextafter(max, INFINITY) * 2, -max * 4}) {
      for (uint32_t pos = 0; pos < 37; ++pos) {
        std::vector<float> v(37, 0.0f);
        v[pos] = bad;
        std::vector<uint8_t> got(37 * fi.bytes);
        for (const prism::Kernels* k : ks)
          ASSERT_FALSE(k->round_f32(f, v.data(), 37, got.data())) << k->name << " " << prism::name(f) << " " << bad;
      }
    }
  }
}

// fp16 and e5m2 Kulisch lanes start an op as floats while the op's terms
// span few enough binades for a float to hold every sum exactly (24 - p -
// ceil(log2 R) exponent fields). Terms spanning exactly that many fields,
// and one to three more, with random low bits: every result must be the
// correctly rounded exact sum (double holds these sums exactly).
TEST(KulischFixedNarrow, FloatLanesOnlyWhileTheWindowIsExact) {
  std::mt19937_64 rng(5);
  for (Format f : {Format::FP16, Format::E5M2}) {
    const prism::FormatInfo& fi = prism::info(f);
    const uint32_t R = 8, lanes = 64;
    const int budget = 24 - fi.p - 3;
    const uint32_t hi = (1u << fi.ebits) - 2;  // the largest finite field
    for (int span = budget - 1; span <= budget + 3; ++span) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<std::vector<uint8_t>> p(R, std::vector<uint8_t>(size_t(lanes) * fi.bytes));
        std::vector<double> sum(lanes, 0.0);
        for (uint32_t r = 0; r < R; ++r)
          for (uint32_t i = 0; i < lanes; ++i) {
            const uint32_t field = (r == 0 || rng() % 4 == 0) ? hi : hi - uint32_t(span);
            const uint32_t mant = uint32_t(rng() & ((1u << fi.mbits) - 1)) | 1u;
            const uint32_t code = ((rng() & 1) ? fi.sign_bit : 0) | field << fi.mbits | mant;
            sum[i] += double(prism::to_float(f, code));
            prism::store_bits(f, p[r].data() + size_t(i) * fi.bytes, code);
          }
        OpDesc d;
        d.dtype = f;
        d.out = Format::FP32;
        d.policy = Policy::KULISCH_FIXED;
        d.group = R;
        d.lanes = lanes;
        auto acc = prism::make_accumulator(d);
        for (uint32_t r = 0; r < R; ++r) acc->add(p[r].data(), r);
        const Result got = finalize(*acc);
        for (uint32_t i = 0; i < lanes; ++i)
          ASSERT_EQ(got.bits[i], prism::float_bits(float(sum[i])))
              << prism::name(f) << " span " << span << " lane " << i << " exact sum " << sum[i];
      }
    }
  }
}

// The exponent-range scan, AVX2 against portable, for every float format:
// random codes (zeros, subnormals and specials among them), lengths around
// the vector widths, and windows carried in from an earlier scan.
TEST(Kernels, ExponentRangeAgrees) {
  const std::vector<const prism::Kernels*> sets = prism::kernel_sets();
  if (sets.size() < 2) GTEST_SKIP() << "this CPU has no AVX2";
  const prism::Kernels& port = prism::portable_kernels();
  for (size_t si = 1; si < sets.size(); ++si) {
    const prism::Kernels* avx2 = sets[si];
    std::mt19937_64 rng(9);
    for (Format f :
         {Format::FP32, Format::FP16, Format::BF16, Format::E4M3FN, Format::E4M3FNUZ, Format::E5M2, Format::E5M2FNUZ}) {
      const uint32_t sz = prism::info(f).bytes;
      for (uint32_t n : {0u, 1u, 7u, 8u, 15u, 16u, 31u, 32u, 33u, 64u, 100u, 127u, 128u, 129u, 160u, 255u, 1024u}) {
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<uint8_t> e(size_t(n) * sz);
          for (auto& b : e) b = uint8_t(rng());
          if (trial % 3 == 0)  // mostly zeros and small codes: lo from the subnormals
            for (auto& b : e) b = (rng() % 4) ? 0 : uint8_t(b & 0x83);
          uint32_t lo0 = trial % 2 ? ~0u : uint32_t(rng() % 20), hi0 = trial % 2 ? 0u : uint32_t(rng() % 20);
          uint32_t lo_a = lo0, hi_a = hi0, lo_p = lo0, hi_p = hi0;
          avx2->exp_range(f, e.data(), n, &lo_a, &hi_a);
          port.exp_range(f, e.data(), n, &lo_p, &hi_p);
          // Empty scans may leave lo at any value above every field: compare what the callers use.
          const bool empty_a = lo_a > hi_a, empty_p = lo_p > hi_p;
          ASSERT_EQ(empty_a, empty_p) << avx2->name << " " << prism::name(f) << " n=" << n;
          ASSERT_EQ(hi_a, hi_p) << prism::name(f) << " n=" << n;
          if (!empty_a) {
            ASSERT_EQ(lo_a, lo_p) << prism::name(f) << " n=" << n;
          }
        }
      }
    }
  }
}

// ref::round_to of each double's exact bits into `out`: the codes, and
// whether any of them overflows (the kernels must then refuse the batch).
std::vector<uint32_t> exact_roundings(const Fmt& out, const double* v, uint32_t n, bool* overflow) {
  std::vector<uint32_t> want(n);
  for (uint32_t i = 0; i < n; ++i) {
    const ref::Exact x = ref::exact_of(v[i]);
    const ref::Rounded r = ref::round_to(out, x.neg, ref::Big::from_mag(x.sig), x.exp, false);
    want[i] = r.bits;
    *overflow |= r.overflow;
  }
  return want;
}

// Round-to-odd to float, then the batch rounding into a narrow format, must
// give each double's own correctly rounded value (ref::round_to on its exact
// bits): random doubles across each format's range with all 53 bits set at
// random, the midpoints between neighbouring codes and a double ulp either
// side of them (where rounding twice would go wrong), in 37-lane batches.
// A batch with an overflow is refused by the rounding; a NaN, an infinity or
// a value beyond the float range by the round-to-odd step.
TEST(Kernels, RoundToOddThenNarrowIsTheDoublesOwnRounding) {
  const std::vector<const prism::Kernels*> ks = prism::kernel_sets();
  std::mt19937_64 rng(17);
  for (const Fmt& out : {ref::kFP16, ref::kBF16, ref::kE4M3FN, ref::kE5M2, ref::kE5M2FNUZ}) {
    std::vector<double> v;
    for (int i = 0; i < 20000; ++i) {
      std::uniform_int_distribution<int> ex(out.unit() - 3, std::min(out.emax() + 1, 126));
      const double m = 1.0 + double(rng() >> 12) * 0x1p-52;
      v.push_back(std::ldexp(m, ex(rng)) * ((rng() & 1) ? -1.0 : 1.0));
    }
    for (uint32_t c = 0; c + 1 < (1u << (8 * out.bytes)); c += (out.bytes == 2 ? 13 : 1)) {
      if (ref::is_special_code(out, c) || ref::is_special_code(out, c + 1) || (c + 1) == out.sign_bit()) continue;
      const double a = double(ref::to_f32(out, c)), b = double(ref::to_f32(out, c + 1));
      const double mid = (a + b) / 2;  // exact: a few bits more than the format
      v.insert(v.end(), {mid, std::nextafter(mid, 1e300), std::nextafter(mid, -1e300)});
    }
    v.push_back(0.0);
    v.push_back(-0.0);
    std::shuffle(v.begin(), v.end(), rng);
    size_t taken = 0;
    for (size_t at = 0; at < v.size(); at += 37) {
      const uint32_t n = uint32_t(std::min<size_t>(37, v.size() - at));
      bool overflow = false;
      const std::vector<uint32_t> want = exact_roundings(out, v.data() + at, n, &overflow);
      for (const prism::Kernels* k : ks) {
        std::vector<float> f(n);
        ASSERT_TRUE(k->odd_f64(v.data() + at, n, f.data())) << k->name;
        std::vector<uint8_t> got(size_t(n) * out.bytes);
        const bool ok = k->round_f32(Format(out.code), f.data(), n, got.data());
        ASSERT_EQ(ok, !overflow) << k->name << " " << out.name << " batch at " << at;
        if (!ok) continue;
        for (uint32_t i = 0; i < n; ++i)
          ASSERT_EQ(ref::load_le(&got[size_t(i) * out.bytes], out.bytes), want[i])
              << k->name << " " << out.name << ": " << v[at + i];
      }
      taken += !overflow;
    }
    EXPECT_GT(taken, 50u) << out.name;
  }
  for (double bad : {double(NAN), double(INFINITY), -1e39, 1e300})
    for (uint32_t pos = 0; pos < 9; ++pos) {
      std::vector<double> w(9, 1.0);
      w[pos] = bad;
      std::vector<float> f(9);
      for (const prism::Kernels* k : ks) ASSERT_FALSE(k->odd_f64(w.data(), 9, f.data())) << k->name << " " << bad;
    }
}

// round_f64 (the fused odd_f64 + round_f32) against ref::round_to on each
// double's exact bits. Each batch holds one probe near a midpoint of the
// output format (exactly on it, or a double's step either side, which
// rounds to the midpoint as a float) among values with full 53-bit
// significands, so a step of eight lanes takes the fast path unless the
// probe sends it through round-to-odd: a missed midpoint (normal or
// subnormal range) shows up as a wrong last bit. Batches end at every
// offset in a vector, so the tails are covered too.
TEST(Kernels, RoundF64IsTheDoublesOwnRounding) {
  const std::vector<const prism::Kernels*> ks = prism::kernel_sets();
  std::mt19937_64 rng(29);
  for (const Fmt& out : {ref::kFP16, ref::kBF16, ref::kE5M2, ref::kE4M3FN}) {
    auto random_double = [&] {
      std::uniform_int_distribution<int> ex(out.unit() - 2, out.emax());
      const double m = 1.0 + double(rng() >> 12) * 0x1p-52;
      return std::ldexp(m, ex(rng)) * ((rng() & 1) ? -1.0 : 1.0);
    };
    size_t batches = 0;
    const uint32_t step = out.bytes == 2 ? 5 : 1;
    for (uint32_t c = 0; c + 1 < (1u << (8 * out.bytes)); c += step) {
      if (ref::is_special_code(out, c) || ref::is_special_code(out, c + 1) || (c + 1) == out.sign_bit()) continue;
      const double a = double(ref::to_f32(out, c)), b = double(ref::to_f32(out, c + 1));
      const double mid = (a + b) / 2;
      const double probe = std::array<double, 3>{mid, std::nextafter(mid, 1e300), std::nextafter(mid, -1e300)}[c % 3];
      const uint32_t n = 8 + uint32_t(rng() % 33);
      std::vector<double> v(n);
      for (auto& x : v) x = random_double();
      v[rng() % n] = probe;
      if (c % 7 == 0) v[rng() % n] = (rng() & 1) ? 0.0 : -0.0;
      bool overflow = false;
      const std::vector<uint32_t> want = exact_roundings(out, v.data(), n, &overflow);
      for (const prism::Kernels* k : ks) {
        std::vector<uint8_t> got(size_t(n) * out.bytes);
        const bool ok = k->round_f64(Format(out.code), v.data(), n, got.data());
        ASSERT_EQ(ok, !overflow) << k->name << " " << out.name << " code " << c;
        if (!ok) continue;
        for (uint32_t i = 0; i < n; ++i)
          ASSERT_EQ(ref::load_le(&got[size_t(i) * out.bytes], out.bytes), want[i])
              << k->name << " " << out.name << ": " << v[i] << " (probe near code " << c << ")";
      }
      batches += !overflow;
    }
    EXPECT_GT(batches, 100u) << out.name;
  }
  for (double bad : {double(NAN), double(INFINITY), -1e39, 1e300, 65520.0, -70000.0})
    for (uint32_t pos = 0; pos < 9; ++pos) {
      std::vector<double> w(9, 1.0);
      w[pos] = bad;
      std::vector<uint8_t> got(18);
      for (const prism::Kernels* k : ks)
        ASSERT_FALSE(k->round_f64(Format::FP16, w.data(), 9, got.data())) << k->name << " " << bad << " at " << pos;
    }
}

// The ideal reducer's one-pass add and write against a plain float loop:
// every lane of acc becomes acc + e (one fp32 rounding, the same bits), and
// `out` gets that sum, whether it is another buffer or the elements' own.
TEST(Kernels, AddF32OutAddsThenWritesTheSum) {
  const std::vector<const prism::Kernels*> ks = prism::kernel_sets();
  std::mt19937_64 rng(29);
  for (const prism::Kernels* k : ks) {
    for (uint32_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 64u, 255u, 256u, 257u}) {
      for (bool in_place : {false, true}) {
        std::vector<float> acc(n), x(n), want(n);
        for (uint32_t i = 0; i < n; ++i) {
          acc[i] = float(int64_t(rng() % 20001) - 10000) * 0.001953125f;
          x[i] = std::ldexp(float(int64_t(rng() % 2000001) - 1000000), int(rng() % 20) - 30);
          want[i] = acc[i] + x[i];
        }
        std::vector<uint8_t> e(size_t(n) * 4), other(size_t(n) * 4, 0xAB);
        if (n) std::memcpy(e.data(), x.data(), e.size());  // (memcpy from a null pointer is undefined, even of nothing)
        uint8_t* out = in_place ? e.data() : other.data();
        k->add_f32_out(acc.data(), e.data(), out, n);
        for (uint32_t i = 0; i < n; ++i) {
          float o;
          std::memcpy(&o, out + 4 * size_t(i), 4);
          ASSERT_EQ(std::bit_cast<uint32_t>(acc[i]), std::bit_cast<uint32_t>(want[i]))
              << k->name << " n " << n << " lane " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(o), std::bit_cast<uint32_t>(want[i]))
              << k->name << " n " << n << " lane " << i;
        }
        if (!in_place) {
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), uint32_t(e[4 * i]) | uint32_t(e[4 * i + 1]) << 8 |
                                                         uint32_t(e[4 * i + 2]) << 16 | uint32_t(e[4 * i + 3]) << 24)
                << k->name << ": lane " << i << " of the elements was written";
        }
      }
    }
  }
}

// The fused screen-and-add kernel against a plain float reference built on
// ref::to_f32 (an independent decoder): every non-special lane gets the
// element (first term) or acc + element; every special lane, wherever it
// falls in a vector, is listed in order and left alone (-0 for a first term).
TEST(Kernels, ScreenedAddListsSpecialsAndAddsTheRest) {
  const std::vector<const prism::Kernels*> ks = prism::kernel_sets();
  std::mt19937_64 rng(23);
  for (const Fmt& in : ref::kFloats) {
    for (uint32_t n : {0u, 1u, 7u, 8u, 9u, 16u, 31u, 64u, 257u}) {
      for (int trial = 0; trial < 24; ++trial) {
        const bool first = trial % 2;
        std::vector<uint8_t> e(size_t(n) * in.bytes);
        std::vector<uint32_t> codes(n);
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t c = uint32_t(rng()) & uint32_t((uint64_t(1) << (8 * in.bytes)) - 1);
          if (trial % 3 == 0 && rng() % 5 == 0) {  // a special at a random place
            for (uint32_t t = 0; t < (1u << (8 * std::min(in.bytes, 2))) && !ref::is_special_code(in, c); ++t)
              c = (uint32_t(rng()) & uint32_t((uint64_t(1) << (8 * in.bytes)) - 1)) |
                  (in.bytes == 4 ? 0x7F800000u : 0u);
          } else if (in.bytes == 4) {
            c &= 0xBFFFFFFFu;  // fp32: mostly moderate exponents, so sums are not all overflow
          }
          codes[i] = c;
          for (int b = 0; b < in.bytes; ++b) e[size_t(i) * in.bytes + b] = uint8_t(c >> (8 * b));
        }
        std::vector<float> acc0(n);
        for (auto& a : acc0) a = float(int64_t(rng() % 2001) - 1000) * 0.375f;
        std::vector<float> want = acc0;
        std::vector<uint32_t> want_left;
        for (uint32_t i = 0; i < n; ++i) {
          if (ref::is_special_code(in, codes[i])) {
            if (first) want[i] = -0.0f;
            want_left.push_back(i);
          } else {
            const float x = ref::to_f32(in, codes[i]);
            want[i] = first ? x : acc0[i] + x;
          }
        }
        for (const prism::Kernels* k : ks) {
          std::vector<float> acc = acc0;
          std::vector<uint32_t> left(n + 1, 0xFFFFFFFF);
          const uint32_t got = k->add_f32_screened(Format(in.code), acc.data(), e.data(), n, first, left.data());
          ASSERT_EQ(got, want_left.size()) << k->name << " " << in.name << " n=" << n;
          for (uint32_t j = 0; j < got; ++j) ASSERT_EQ(left[j], want_left[j]) << k->name << " " << in.name;
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_EQ(prism::float_bits(acc[i]), prism::float_bits(want[i]))
                << k->name << " " << in.name << " lane " << i << " first " << first;
          // The double-lane version (Kulisch's fast lanes).
          std::vector<double> dacc(n), dwant(n);
          for (uint32_t i = 0; i < n; ++i) {
            dacc[i] = double(acc0[i]) * 0x1p40 + 0.5;  // wider than a float holds
            const bool sp = ref::is_special_code(in, codes[i]);
            const double x = sp ? 0.0 : double(ref::to_f32(in, codes[i]));
            dwant[i] = first ? (sp ? -0.0 : x) : (sp ? dacc[i] : dacc[i] + x);
          }
          std::fill(left.begin(), left.end(), 0xFFFFFFFF);
          const uint32_t dgot = k->add_f64_screened(Format(in.code), dacc.data(), e.data(), n, first, left.data());
          ASSERT_EQ(dgot, want_left.size()) << k->name << " " << in.name << " n=" << n << " (double lanes)";
          for (uint32_t j = 0; j < dgot; ++j) ASSERT_EQ(left[j], want_left[j]) << k->name << " " << in.name;
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint64_t>(dacc[i]), std::bit_cast<uint64_t>(dwant[i]))
                << k->name << " " << in.name << " double lane " << i;
        }
      }
    }
  }
}

// TwoSum's error term (Knuth): zero exactly when fl(a + b) is the exact sum.
// An independent test of the kernels' own (s - a == b and s - b == a).
template <class T>
bool sum_is_exact(T a, T b) {
  const T s = a + b, bb = s - a;
  if (!std::isfinite(s)) return false;
  return (a - (s - bb)) + (b - bb) == T(0);
}

// The checked adds against that: every lane whose sum is exact takes it,
// every other (a rounding sum, a special element or lane) is left as it was
// and listed in order, at lengths around the 8- and 16-lane vectors. The
// formats whose fast lanes use them: fp32, fp16 and bf16 (KulischWide).
TEST(Kernels, CheckedAddTakesExactlyTheExactSums) {
  std::mt19937_64 rng(31);
  for (const Fmt& in : {ref::kFP32, ref::kFP16, ref::kBF16}) {
    for (uint32_t n : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 64u, 257u}) {
      for (int trial = 0; trial < 16; ++trial) {
        std::vector<uint8_t> e(size_t(n) * in.bytes);
        std::vector<uint32_t> codes(n);
        for (uint32_t i = 0; i < n; ++i) {
          uint32_t c = uint32_t(rng()) & in.mask();
          if (in.bytes == 4 && rng() % 4) c = (c & 0x807FFFFFu) | uint32_t(120 + rng() % 16) << 23;  // near 1
          if (in.bytes == 2 && rng() % 4) c &= ~0x4000u;                                             // fewer specials
          codes[i] = c;
          for (int b = 0; b < in.bytes; ++b) e[size_t(i) * in.bytes + b] = uint8_t(c >> (8 * b));
        }
        std::vector<float> acc0(n);
        std::vector<double> dacc0(n);
        for (uint32_t i = 0; i < n; ++i) {
          // Mostly sums that stay exact in a float, some that round, a few specials in the lanes.
          const int ex = trial % 4 == 0 ? int(rng() % 60) - 30 : int(rng() % 8) - 4;
          acc0[i] = std::ldexp(float(int64_t(rng() % 4001) - 2000), ex);
          dacc0[i] = std::ldexp(double(int64_t(rng() % 4001) - 2000), ex) + (trial % 2 ? 0x1p-60 : 0.0);
          if (rng() % 97 == 0) acc0[i] = dacc0[i] = std::numeric_limits<float>::infinity();
        }
        std::vector<float> want = acc0;
        std::vector<double> dwant = dacc0;
        std::vector<uint32_t> want_left, dwant_left;
        for (uint32_t i = 0; i < n; ++i) {
          const bool sp = ref::is_special_code(in, codes[i]);
          const float x = sp ? 0.0f : ref::to_f32(in, codes[i]);
          if (!sp && sum_is_exact(acc0[i], x))
            want[i] = acc0[i] + x;
          else
            want_left.push_back(i);
          if (!sp && sum_is_exact(dacc0[i], double(x)))
            dwant[i] = dacc0[i] + double(x);
          else
            dwant_left.push_back(i);
        }
        for (const prism::Kernels* k : prism::kernel_sets()) {
          std::vector<float> acc = acc0;
          std::vector<uint32_t> left(n + 1, 0xFFFFFFFF);
          const uint32_t got = k->add_f32_checked(Format(in.code), acc.data(), e.data(), n, left.data());
          ASSERT_EQ(got, want_left.size()) << k->name << " " << in.name << " n=" << n;
          for (uint32_t j = 0; j < got; ++j) ASSERT_EQ(left[j], want_left[j]) << k->name << " " << in.name;
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_EQ(prism::float_bits(acc[i]), prism::float_bits(want[i]))
                << k->name << " " << in.name << " lane " << i;
          std::vector<double> dacc = dacc0;
          std::fill(left.begin(), left.end(), 0xFFFFFFFF);
          const uint32_t dgot = k->add_f64_checked(Format(in.code), dacc.data(), e.data(), n, left.data());
          ASSERT_EQ(dgot, dwant_left.size()) << k->name << " " << in.name << " n=" << n << " (double lanes)";
          for (uint32_t j = 0; j < dgot; ++j) ASSERT_EQ(left[j], dwant_left[j]) << k->name << " " << in.name;
          for (uint32_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint64_t>(dacc[i]), std::bit_cast<uint64_t>(dwant[i]))
                << k->name << " " << in.name << " double lane " << i;
        }
      }
    }
  }
}

// Double lanes rounded once to fp32: against ref::round_to on each double's
// exact bits (an independent rounding), around every binade edge, the
// subnormals and the top of the range; a lane whose result is not finite
// (NaN, infinity, overflow) must make the batch fail wherever it sits.
TEST(Kernels, NarrowDoublesRoundOnceToNearestEven) {
  const std::vector<const prism::Kernels*> ks = prism::kernel_sets();
  std::mt19937_64 rng(29);
  std::vector<double> v;
  for (int i = 0; i < 20000; ++i) {
    const int ex = int(rng() % 290) - 160;  // subnormal floats to just below the overflow
    const double m = 1.0 + double(rng() >> 12) * 0x1p-52;
    v.push_back(std::ldexp(m, std::min(ex, 127)) * ((rng() & 1) ? -1.0 : 1.0));
  }
  for (int k = 0; k < 200; ++k) {  // midpoints between floats, and a double ulp either side
    const float a = std::ldexp(1.0f + float(rng() % 8388608) * 0x1p-23f, int(rng() % 250) - 125);
    const double mid = (double(a) + double(std::nextafter(a, INFINITY))) / 2;
    v.insert(v.end(), {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), -mid});
  }
  v.push_back(0.0);
  v.push_back(-0.0);
  for (size_t at = 0; at < v.size(); at += 37) {
    const uint32_t n = uint32_t(std::min<size_t>(37, v.size() - at));
    for (const prism::Kernels* k : ks) {
      std::vector<float> got(n);
      ASSERT_TRUE(k->narrow_f64(v.data() + at, n, got.data())) << k->name;
      for (uint32_t i = 0; i < n; ++i) {
        const ref::Exact x = ref::exact_of(v[at + i]);
        const ref::Rounded r = ref::round_to(ref::kFP32, x.neg, ref::Big::from_mag(x.sig), x.exp, false);
        ASSERT_EQ(prism::float_bits(got[i]), r.bits) << k->name << ": " << v[at + i];
      }
    }
  }
  for (double bad : {double(NAN), double(INFINITY), -double(INFINITY), 3.5e38, -1e300})
    for (uint32_t pos = 0; pos < 9; ++pos) {
      std::vector<double> w(9, 1.5);
      w[pos] = bad;
      std::vector<float> f(9);
      for (const prism::Kernels* k : ks) ASSERT_FALSE(k->narrow_f64(w.data(), 9, f.data())) << k->name << " " << bad;
    }
}
