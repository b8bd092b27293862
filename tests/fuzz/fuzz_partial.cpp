// libFuzzer target: Kulisch lane records (payload encoding 3) on arbitrary
// bytes (lib/proto/partial.hpp, docs/PROTOCOL.md "Kulisch partial").
//
// Input: byte 0 picks options (below), the rest is lane records. The records
// are decoded one by one (decode_kulisch_lane) as far as they are valid, at
// most kMaxLanes; then:
//  - decode_kulisch_lanes over the same bytes for that many lanes must agree
//    (same lanes, same bytes used), and asking for one lane more must fail
//    when the bytes after them are not a valid record;
//  - canonical form: encode_kulisch_lanes gives back exactly the bytes that
//    were decoded, and kulisch_lane_size agrees record by record;
//  - kulisch_fragments cuts the lanes into fragments of at most max_body
//    bytes whose records, concatenated, are those bytes again;
//  - merging the lanes into an empty KULISCH_FIXED fp32 accumulator
//    (add_exact) must not crash; when it accepts them, state() gives them
//    back (value, specials, NEG_ZERO_ONLY; the fp32-policy bits INVALID and
//    OVERFLOW mean nothing to KULISCH_FIXED), a second merge doubles the
//    values, and finalize() must not crash;
//  - the same merge into a second accumulator picked by byte 0 (another
//    dtype and/or policy) must not crash;
//  - lanes_fit_format for every output format must not crash; when it says
//    yes, the elements it wrote decode back (lanes_from_elements) to the
//    lanes' values.
#include <cstring>
#include <memory>
#include <vector>

#include "arith/accumulator.hpp"
#include "fuzz_check.hpp"
#include "proto/fragment.hpp"
#include "proto/partial.hpp"

namespace {

using namespace prism;  // NOLINT

constexpr uint32_t kMaxLanes = 1024;
constexpr uint8_t kSpecials = side::NAN_INPUT | side::POS_INF | side::NEG_INF;

bool is_special(const LaneExact& l) { return (l.side & kSpecials) != 0; }

// What KULISCH_FIXED keeps of a lane: the specials alone when there are any,
// else the value and NEG_ZERO_ONLY (only meaningful on a zero value).
LaneExact kept(const LaneExact& l) {
  LaneExact k;
  k.side = is_special(l) ? uint8_t(l.side & kSpecials) : uint8_t(l.side & side::NEG_ZERO_ONLY);
  if (!is_special(l)) k.value = l.value;
  return k;
}

bool same(const LaneExact& a, const LaneExact& b) { return a.side == b.side && a.value == b.value; }

// Second accumulator: byte 0 bits 0..3 pick the dtype (1..9), bits 4..5 the policy.
std::unique_ptr<Accumulator> other_accumulator(uint8_t sel, uint32_t lanes) {
  OpDesc d;
  d.dtype = Format(1 + (sel & 0x0F) % kFormatCount);
  d.out = is_float(d.dtype) ? d.dtype : Format::INT32;
  const uint8_t pol = uint8_t((sel >> 4) & 3);
  d.policy = pol == 1 ? Policy::FP32_ARRIVAL : pol == 2 ? Policy::FP32_BINOMIAL : Policy::KULISCH_FIXED;
  d.exceptions = (sel & 0x80) ? Exceptions::SATURATE : Exceptions::IEEE;
  d.group = (sel & 0x40) && d.policy != Policy::FP32_BINOMIAL ? 65535 : 2;  // binomial keeps a row per rank
  d.lanes = lanes;
  if (admission_error(d, kMaxWidth)) d.group = 2;
  if (admission_error(d, kMaxWidth)) return nullptr;
  return make_accumulator(d);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  // Records in a buffer of exactly their size, so ASan sees any read past them.
  std::vector<uint8_t> rec(data + 1, data + size);
  const uint8_t* p = rec.data();
  const size_t len = rec.size();

  // One by one.
  std::vector<LaneExact> lanes;
  size_t at = 0;
  PartialError stop = PartialError::None;
  while (lanes.size() < kMaxLanes) {
    LaneExact l;
    size_t used = 0;
    stop = decode_kulisch_lane(p + at, len - at, &l, &used);
    (void)describe(stop);
    if (stop != PartialError::None) break;
    FUZZ_CHECK(used >= kLaneHeader && used <= kMaxLaneBytes && used <= len - at);
    FUZZ_CHECK(used == kulisch_lane_size(l));
    FUZZ_CHECK(!(is_special(l) || (l.side & side::NEG_ZERO_ONLY)) || l.value.is_zero());
    lanes.push_back(l);
    at += used;
  }
  const uint32_t n = uint32_t(lanes.size());

  // As a whole chunk.
  std::vector<LaneExact> whole(n + 1);
  size_t used = 0;
  FUZZ_CHECK(decode_kulisch_lanes(p, len, n, whole.data(), &used) == PartialError::None);
  FUZZ_CHECK(used == at);
  for (uint32_t i = 0; i < n; ++i) FUZZ_CHECK(same(whole[i], lanes[i]));
  if (stop != PartialError::None) {
    size_t u2 = 0;
    FUZZ_CHECK(decode_kulisch_lanes(p, len, n + 1, whole.data(), &u2) == stop);
  }
  if (n == 0) return 0;

  // Canonical form: the same bytes come back.
  std::vector<uint8_t> enc(size_t(n) * kMaxLaneBytes);
  const size_t m = encode_kulisch_lanes(lanes.data(), n, enc.data());
  FUZZ_CHECK(m == at);
  FUZZ_CHECK(std::memcmp(enc.data(), p, m) == 0);

  // Fragments of at most max_body bytes.
  const size_t max_body = wire::kFragmentHeader + kMaxLaneBytes + size_t(sel) * 8;
  const auto frags = wire::kulisch_fragments(lanes.data(), n, max_body);
  std::vector<uint8_t> joined;
  uint32_t next = 0;
  for (const auto& f : frags) {
    FUZZ_CHECK(f.first == next && f.count >= 1 && f.body.size() <= max_body);
    FUZZ_CHECK(f.body.size() >= wire::kFragmentHeader);
    FUZZ_CHECK((f.body[0] << 8 | f.body[1]) == f.first && uint32_t(f.body[2] << 8 | f.body[3]) == n);
    joined.insert(joined.end(), f.body.begin() + wire::kFragmentHeader, f.body.end());
    next += f.count;
  }
  FUZZ_CHECK(next == n && joined.size() == m && std::memcmp(joined.data(), p, m) == 0);

  // Merging into a KULISCH_FIXED fp32 accumulator.
  {
    OpDesc d;
    d.dtype = Format::FP32;
    d.out = Format::FP32;
    d.policy = Policy::KULISCH_FIXED;
    d.group = 65535;
    d.lanes = n;
    auto acc = make_accumulator(d);
    std::vector<LaneExact> st(n);
    std::vector<uint8_t> out(size_t(n) * 4), flags(n);
    if (acc->add_exact(lanes.data())) {
      FUZZ_CHECK(acc->state(st.data()));
      for (uint32_t i = 0; i < n; ++i) FUZZ_CHECK(same(st[i], kept(lanes[i])));
      acc->finalize(out.data(), flags.data());
      if (acc->add_exact(lanes.data())) {
        FUZZ_CHECK(acc->state(st.data()));
        for (uint32_t i = 0; i < n; ++i) {
          LaneExact want = kept(lanes[i]);
          want.value.add(lanes[i].value);
          if (is_special(lanes[i])) want.value = Wide{};
          FUZZ_CHECK(same(st[i], want));
        }
      }
      acc->finalize(out.data(), flags.data());
    } else {
      // Refused: nothing changed, the accumulator is still empty.
      FUZZ_CHECK(acc->state(st.data()));
      for (uint32_t i = 0; i < n; ++i) FUZZ_CHECK(st[i].side == side::NEG_ZERO_ONLY && st[i].value.is_zero());
    }
  }
  if (auto acc = other_accumulator(sel, n)) {
    if (acc->add_exact(lanes.data())) {
      std::vector<LaneExact> st(n);
      (void)acc->state(st.data());
    }
    std::vector<uint8_t> out(size_t(n) * 4), flags(n);
    acc->finalize(out.data(), flags.data());
  }

  // AUTO's question, for every output format and the unit of every input format.
  std::vector<uint8_t> elems(size_t(n) * 4);
  std::vector<LaneExact> back(n);
  for (int o = 1; o <= kFormatCount; ++o) {
    const Format out = Format(o);
    const int unit = unit_exp(Format(1 + (sel + o) % kFormatCount));
    if (!lanes_fit_format(lanes.data(), n, unit, out, elems.data())) continue;
    FUZZ_CHECK(lanes_from_elements(out, elems.data(), n, unit, back.data()) == PartialError::None);
    for (uint32_t i = 0; i < n; ++i) {
      FUZZ_CHECK(!is_special(lanes[i]) && back[i].value == lanes[i].value);
      // -0 survives where the format has one; elsewhere an all -0 lane is plain 0.
      if (info(out).has_neg_zero && lanes[i].value.is_zero())
        FUZZ_CHECK((lanes[i].side & side::NEG_ZERO_ONLY) == (back[i].side & side::NEG_ZERO_ONLY));
    }
  }
  return 0;
}
