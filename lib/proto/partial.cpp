#include "proto/partial.hpp"

namespace prism {

namespace {
constexpr uint8_t kSign = 0x80, kReserved = 0x40;
constexpr int kMaxBytes = Wide::kLimbs * 8;

uint8_t byte_at(const Wide& m, int i) { return uint8_t(m.limb[i / 8] >> (8 * (i % 8))); }
}  // namespace

size_t kulisch_lane_size(const LaneExact& l) {
  if (l.value.is_zero()) return kLaneHeader;
  const Wide m = l.value.magnitude();
  return kLaneHeader + size_t(m.msb() / 8 - m.lsb() / 8 + 1);
}

size_t encode_kulisch_lane(const LaneExact& l, uint8_t* out) {
  out[0] = l.side & side::ALL;
  out[1] = 0;
  out[2] = 0;
  if (l.value.is_zero()) return kLaneHeader;
  const Wide m = l.value.magnitude();
  const int lo = m.lsb() / 8, hi = m.msb() / 8;
  if (l.value.negative()) out[0] |= kSign;
  out[1] = uint8_t(hi - lo + 1);
  out[2] = uint8_t(lo);
  for (int i = lo; i <= hi; ++i) out[kLaneHeader + i - lo] = byte_at(m, i);
  return kLaneHeader + size_t(hi - lo + 1);
}

PartialError decode_kulisch_lane(const uint8_t* p, size_t len, LaneExact* out, size_t* used) {
  if (len < kLaneHeader) return PartialError::Truncated;
  const uint8_t s = p[0], n = p[1], off = p[2];
  if (s & kReserved) return PartialError::ReservedBits;
  if (size_t(n) + off > size_t(kMaxBytes) - 1) return PartialError::BadLength;  // keep the sign bit free
  if (len < kLaneHeader + n) return PartialError::Truncated;
  LaneExact l;
  l.side = s & side::ALL;
  if (n == 0) {
    if (off != 0 || (s & kSign)) return PartialError::NonCanonical;
  } else {
    if (l.side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF | side::NEG_ZERO_ONLY))
      return PartialError::SpecialValue;
    const uint8_t* m = p + kLaneHeader;
    if (m[0] == 0 || m[n - 1] == 0) return PartialError::NonCanonical;
    for (int i = 0; i < n; ++i) l.value.limb[(off + i) / 8] |= uint64_t(m[i]) << (8 * ((off + i) % 8));
    if (s & kSign) l.value.negate();
  }
  *out = l;
  *used = kLaneHeader + n;
  return PartialError::None;
}

size_t encode_kulisch_lanes(const LaneExact* lanes, uint32_t n, uint8_t* out) {
  size_t at = 0;
  for (uint32_t i = 0; i < n; ++i) at += encode_kulisch_lane(lanes[i], out + at);
  return at;
}

PartialError decode_kulisch_lanes(const uint8_t* p, size_t len, uint32_t n, LaneExact* out, size_t* used) {
  size_t at = 0;
  for (uint32_t i = 0; i < n; ++i) {
    size_t u;
    if (auto e = decode_kulisch_lane(p + at, len - at, &out[i], &u); e != PartialError::None) return e;
    at += u;
  }
  *used = at;
  return PartialError::None;
}

}  // namespace prism
