// Helpers shared by the accumulator and partial tests: running an
// accumulator over reference data and comparing lanes with the reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "ref.hpp"

namespace acc_util {

using prism::Exceptions;
using prism::Format;
using prism::OpDesc;
using prism::Policy;
using ref::Fmt;

inline Format F(const Fmt& f) { return Format(f.code); }

inline std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%X", v);
  return b;
}

inline const char* policy_name(Policy p) {
  switch (p) {
    case Policy::FP32_ARRIVAL: return "FP32_ARRIVAL";
    case Policy::KULISCH_FIXED: return "KULISCH_FIXED";
    case Policy::FP32_BINOMIAL: return "FP32_BINOMIAL";
  }
  return "?";
}

inline OpDesc desc(const Fmt& in, const Fmt& out, Policy p, bool sat, uint32_t R, uint32_t lanes) {
  OpDesc d;
  d.dtype = F(in);
  d.out = F(out);
  d.policy = p;
  d.exceptions = sat ? Exceptions::SATURATE : Exceptions::IEEE;
  d.group = R;
  d.lanes = lanes;
  return d;
}

inline std::string describe(const OpDesc& d) {
  std::ostringstream os;
  os << ref::fmt(uint8_t(d.dtype)).name << "->" << ref::fmt(uint8_t(d.out)).name << " " << policy_name(d.policy)
     << (d.exceptions == Exceptions::SATURATE ? " saturate" : " ieee") << " R=" << d.group << " lanes=" << d.lanes;
  return os.str();
}

// One packet per contribution, elements little-endian.
inline std::vector<std::vector<uint8_t>> packets(const Fmt& in, const ref::Data& d) {
  std::vector<std::vector<uint8_t>> p;
  p.reserve(d.size());
  for (const auto& row : d) p.push_back(ref::pack(in, row));
  return p;
}

inline std::vector<uint32_t> identity_order(uint32_t R) {
  std::vector<uint32_t> o(R);
  for (uint32_t r = 0; r < R; ++r) o[r] = r;
  return o;
}
inline std::vector<uint32_t> random_order(uint32_t R, ref::Rng& rng) {
  std::vector<uint32_t> o = identity_order(R);
  std::shuffle(o.begin(), o.end(), rng);
  return o;
}

struct Result {
  std::vector<uint32_t> bits;
  std::vector<uint8_t> flags;
};

inline Result finalize(const prism::Accumulator& acc) {
  const OpDesc& d = acc.desc();
  const Fmt& out = ref::fmt(uint8_t(d.out));
  std::vector<uint8_t> bytes(size_t(d.lanes) * size_t(out.bytes) + 16, 0xA5);
  Result r;
  r.flags.assign(d.lanes, 0xEE);
  acc.finalize(bytes.data(), r.flags.data());
  for (uint32_t i = 0; i < d.lanes; ++i)
    r.bits.push_back(ref::load_le(&bytes[size_t(i) * size_t(out.bytes)], out.bytes));
  for (size_t i = size_t(d.lanes) * size_t(out.bytes); i < bytes.size(); ++i)
    if (bytes[i] != 0xA5) ADD_FAILURE() << "finalize wrote past its " << d.lanes << " elements";
  return r;
}

inline void add_all(prism::Accumulator& acc, const std::vector<std::vector<uint8_t>>& p,
                    const std::vector<uint32_t>& order) {
  for (uint32_t r : order) acc.add(p[r].data(), r);
}

inline Result run(const OpDesc& d, const std::vector<std::vector<uint8_t>>& p, const std::vector<uint32_t>& order,
                  const prism::Kernels& k = prism::best_kernels()) {
  auto acc = prism::make_accumulator(d, k);
  add_all(*acc, p, order);
  return finalize(*acc);
}

// The inputs of one lane, for failure messages.
inline std::string lane_inputs(const ref::Data& data, uint32_t lane, const std::vector<uint32_t>& order) {
  std::ostringstream os;
  os << " inputs in add order:";
  size_t n = 0;
  for (uint32_t r : order) {
    if (++n > 12) {
      os << " ... (" << order.size() << " in all)";
      break;
    }
    os << ' ' << hex(data[r][lane]);
  }
  return os.str();
}

// Compares every lane's bits and flags; reports the first few differences.
inline ::testing::AssertionResult same_lanes(const Result& got, const std::vector<ref::Out>& want,
                                             const ref::Data* data = nullptr,
                                             const std::vector<uint32_t>* order = nullptr) {
  if (got.bits.size() != want.size()) return ::testing::AssertionFailure() << "lane count differs";
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got.bits[i] == want[i].bits && got.flags[i] == want[i].flags) continue;
    if (bad++ < 3) {
      os << "\n  lane " << i << ": want " << hex(want[i].bits) << " flags " << int(want[i].flags) << ", got "
         << hex(got.bits[i]) << " flags " << int(got.flags[i]);
      if (data && order) os << lane_inputs(*data, uint32_t(i), *order);
    }
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " lanes differ:" << os.str();
}

inline ::testing::AssertionResult same_runs(const Result& a, const Result& b) {
  for (size_t i = 0; i < a.bits.size(); ++i)
    if (a.bits[i] != b.bits[i] || a.flags[i] != b.flags[i])
      return ::testing::AssertionFailure() << "lane " << i << ": " << hex(a.bits[i]) << "/" << int(a.flags[i]) << " vs "
                                           << hex(b.bits[i]) << "/" << int(b.flags[i]);
  return ::testing::AssertionSuccess();
}

// The exact truth of every lane of a data set.
struct Truth {
  bool nan, pinf, ninf, all_neg_zero;
  ref::Big sum;  // units of 2^unit(in)
  uint8_t side;
};
inline std::vector<Truth> truth(const Fmt& in, const ref::Data& d) {
  const uint32_t lanes = d.empty() ? 0 : uint32_t(d[0].size());
  std::vector<Truth> t;
  for (uint32_t i = 0; i < lanes; ++i) {
    ref::LaneRef l(in);
    for (const auto& row : d) l.add(row[i]);
    t.push_back({l.nan(), l.pinf(), l.ninf(), l.all_neg_zero(), l.sum(), l.side()});
  }
  return t;
}
inline std::vector<ref::Out> kulisch_expect(const std::vector<Truth>& t, const Fmt& in, const Fmt& out, bool sat) {
  std::vector<ref::Out> w;
  for (const Truth& x : t)
    w.push_back(ref::kulisch_result(x.nan, x.pinf, x.ninf, x.all_neg_zero, x.sum, in.unit(), out, sat));
  return w;
}

}  // namespace acc_util
