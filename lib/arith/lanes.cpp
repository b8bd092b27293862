#include "arith/lanes.hpp"

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
