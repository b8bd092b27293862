#include "proto/partial.hpp"

#include <bit>
#include <cstring>

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

namespace {
// 2^e as a double, for -1022 <= e <= 1023.
double pow2(int e) { return std::bit_cast<double>(uint64_t(e + 1023) << 52); }
}  // namespace

size_t encode_kulisch_lanes_f64(const double* v, uint32_t n, int unit, uint8_t* out) {
  size_t at = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t b = std::bit_cast<uint64_t>(v[i]);
    const int field = int(b >> 52) & 0x7FF;
    uint64_t sig = b & ((uint64_t(1) << 52) - 1);
    if (field) sig |= uint64_t(1) << 52;
    uint8_t* r = out + at;
    if (sig == 0) {  // +0, or -0: a lane whose every term was -0
      r[0] = (b >> 63) ? side::NEG_ZERO_ONLY : 0;
      r[1] = r[2] = 0;
      at += kLaneHeader;
      continue;
    }
    const int tz = std::countr_zero(sig);
    const int lsb = (field ? field : 1) - 1075 + tz - unit;  // the magnitude's lowest set bit, in lane units
    const uint64_t m = (sig >> tz) << (lsb % 8);             // < 2^60: bytes from the lowest non-zero one
    const int bytes = (64 - std::countl_zero(m) + 7) / 8;
    r[0] = (b >> 63) ? kSign : 0;
    r[1] = uint8_t(bytes);
    r[2] = uint8_t(lsb / 8);
    for (int k = 0; k < bytes; ++k) r[kLaneHeader + k] = uint8_t(m >> (8 * k));
    at += kLaneHeader + size_t(bytes);
  }
  return at;
}

bool decode_kulisch_lanes_f64(const uint8_t* p, size_t len, uint32_t n, int unit, double* out) {
  static_assert(std::endian::native == std::endian::little);
  size_t at = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (len - at < kLaneHeader) return false;
    const uint8_t s = p[at], nb = p[at + 1], off = p[at + 2];
    if (nb == 0) {
      if (off != 0 || (s != 0 && s != side::NEG_ZERO_ONLY)) return false;
      out[i] = s ? -0.0 : 0.0;
      at += kLaneHeader;
      continue;
    }
    if ((s & ~kSign) || nb > 8 || len - at - kLaneHeader < nb || size_t(nb) + off > size_t(kMaxBytes) - 1) return false;
    const uint8_t* mb = p + at + kLaneHeader;
    if (mb[0] == 0 || mb[nb - 1] == 0) return false;
    uint64_t m = 0;
    std::memcpy(&m, mb, nb);  // little-endian, as the record
    if (64 - std::countl_zero(m) - std::countr_zero(m) > 53) return false;
    const double d = double(m) * pow2(8 * off + unit);  // exact: <= 53 bits, a normal double's range
    out[i] = (s & kSign) ? -d : d;
    at += kLaneHeader + nb;
  }
  return at == len;
}

}  // namespace prism
