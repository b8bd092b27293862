// The accumulators' factory: make_accumulator() picks the family and lane
// type for a descriptor (accumulator.hpp lists them); and the exact lane
// helpers the families and the partial codecs share.
#include "arith/accumulator.hpp"

#include <cmath>
#include <stdexcept>

#include "arith/accumulator_impl.hpp"

namespace prism {

void add_double_to_wide(Wide& w, double d, int unit) {
  if (d == 0) return;
  int64_t v;
  int shift;
  acc::split_double(d, unit, &v, &shift);
  w.add_shifted(v, shift);
}

StateForm state_as_generic(const Accumulator& acc, Format f, uint8_t* elems, LaneExact* lanes) {
  const OpDesc& d = acc.desc();
  if (!acc.state(lanes)) return StateForm::None;
  return lanes_fit_format(lanes, d.lanes, unit_exp(d.dtype), f, elems) ? StateForm::Elements : StateForm::Lanes;
}

bool add_elements_exact_generic(Accumulator& acc, Format f, const uint8_t* elems, LaneExact* scratch,
                                PartialError* err) {
  const OpDesc& d = acc.desc();
  *err = lanes_from_elements(f, elems, d.lanes, unit_exp(d.dtype), scratch);
  return *err == PartialError::None && acc.add_exact(scratch);
}

LaneExact lane_of_double(double v, int unit) {
  LaneExact l;
  l.side = std::signbit(v) && v == 0 ? side::NEG_ZERO_ONLY : 0;
  add_double_to_wide(l.value, v, unit);
  return l;
}

bool add_exact_doubles_generic(Accumulator& acc, const double* v, LaneExact* scratch) {
  const OpDesc& d = acc.desc();
  const int unit = unit_exp(d.dtype);
  // A value a lane's Wide cannot hold (2^380 units and up: far beyond every
  // accumulator's range, which add_exact() would refuse) or not a number:
  // refused here, before it is converted.
  const double limit = std::ldexp(1.0, 380 + unit);
  for (uint32_t i = 0; i < d.lanes; ++i)
    if (!(std::fabs(v[i]) < limit)) return false;
  for (uint32_t i = 0; i < d.lanes; ++i) scratch[i] = lane_of_double(v[i], unit);
  return acc.add_exact(scratch);
}

StateForm Accumulator::state_as(Format f, uint8_t* elems, LaneExact* lanes, double*, const double**,
                                const double**) const {
  return state_as_generic(*this, f, elems, lanes);
}

bool Accumulator::add_exact_doubles(const double* v, LaneExact* scratch, double) {
  return add_exact_doubles_generic(*this, v, scratch);
}

bool Accumulator::add_elements_exact(Format f, const uint8_t* elems, LaneExact* scratch, PartialError* err) {
  return add_elements_exact_generic(*this, f, elems, scratch, err);
}

uint32_t round_lane(const LaneExact& l, int unit, Format out, Exceptions ex, uint8_t* flags) {
  uint32_t bits;
  if (acc::special_result(l.side, out, ex, &bits, flags)) return bits;
  const Encoded en = acc::encode_wide(out, ex, l.value, unit, l.side & side::NEG_ZERO_ONLY);
  if (en.overflow) *flags |= flag::OVERFLOW;
  return en.bits;
}

std::unique_ptr<Accumulator> make_accumulator(const OpDesc& d, const Kernels& k) {
  if (auto err = admission_error(d, kMaxWidth)) throw std::invalid_argument(*err);
  if (!is_float(d.dtype)) return acc::make_integer_sum(d, k);
  switch (d.policy) {
    case Policy::FP32_ARRIVAL: return acc::make_fp32_arrival(d, k);
    case Policy::FP32_BINOMIAL: return acc::make_fp32_binomial(d, k);
    case Policy::KULISCH_FIXED: return acc::make_kulisch(d, k);
  }
  throw std::invalid_argument("make_accumulator: policy code " + std::to_string(unsigned(d.policy)) +
                              " is not a policy");
}

}  // namespace prism
