#include "arith/partial.hpp"

#include "arith/accumulator.hpp"

namespace prism {

const char* describe(PartialError e) {
  switch (e) {
    case PartialError::None: return "ok";
    case PartialError::Truncated: return "partial payload ends inside a lane record";
    case PartialError::BadLength: return "lane magnitude extends beyond 384 bits";
    case PartialError::NonCanonical: return "lane magnitude is not in canonical form";
    case PartialError::ReservedBits: return "reserved sideband bit set";
    case PartialError::SpecialValue: return "special or negative-zero lane carries a magnitude";
    case PartialError::Unrepresentable: return "element is not a whole number of lane units";
  }
  return "?";
}

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

bool lanes_fit_format(const LaneExact* lanes, uint32_t n, int unit, Format out, uint8_t* elems) {
  const FormatInfo& fo = info(out);
  if (!fo.is_float) {  // int32: a whole value in range, no sideband
    for (uint32_t i = 0; i < n; ++i) {
      const LaneExact& l = lanes[i];
      if ((l.side & ~side::NEG_ZERO_ONLY) || unit != 0 || out != Format::INT32) return false;
      const Wide m = l.value.magnitude();
      if (!l.value.is_zero() && m.msb() >= 31 && !(l.value.negative() && m.msb() == 31 && m.lsb() == 31)) return false;
      store_bits(out, elems + i * fo.bytes, uint32_t(l.value.limb[0]));
    }
    return true;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const LaneExact& l = lanes[i];
    if (l.side & ~side::NEG_ZERO_ONLY) return false;
    if ((l.side & side::NEG_ZERO_ONLY) && !fo.has_neg_zero) return false;
    uint8_t fl = 0;
    const uint32_t bits = round_lane(l, unit, out, Exceptions::IEEE, &fl);
    if (fl) return false;
    // Exact only if the element decodes back to the same lane.
    LaneExact back;
    if (lanes_from_elements(out, reinterpret_cast<const uint8_t*>(&bits), 1, unit, &back) != PartialError::None)
      return false;
    if (!(back.value == l.value)) return false;
    store_bits(out, elems + i * fo.bytes, bits);
  }
  return true;
}

PartialError lanes_from_elements(Format f, const uint8_t* elems, uint32_t n, int unit, LaneExact* out) {
  const FormatInfo& fi = info(f);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t bits = load_bits(f, elems + i * fi.bytes);
    const Decoded d = decode(f, bits);
    LaneExact l;
    l.side = 0;
    switch (d.cls) {
      case FpClass::NaN: l.side = side::NAN_INPUT; break;
      case FpClass::Inf: l.side = d.neg ? side::NEG_INF : side::POS_INF; break;
      case FpClass::Zero: l.side = d.neg ? side::NEG_ZERO_ONLY : 0; break;
      case FpClass::Subnormal:
      case FpClass::Normal: {
        int shift = d.exp - unit;
        uint64_t sig = d.sig;
        if (shift < 0) {
          if (-shift >= 64 || (sig & ((uint64_t(1) << -shift) - 1))) return PartialError::Unrepresentable;
          sig >>= -shift;
          shift = 0;
        }
        if (shift > 300) return PartialError::BadLength;
        l.value.add_shifted(d.neg ? -int64_t(sig) : int64_t(sig), shift);
      }
    }
    out[i] = l;
  }
  return PartialError::None;
}

}  // namespace prism
