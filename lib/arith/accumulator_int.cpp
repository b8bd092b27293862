// Integer inputs (int8, int32) under every policy: exact int64 sums.
#include <cstring>
#include <stdexcept>
#include <vector>

#include "arith/accumulator_impl.hpp"

namespace prism::acc {
namespace {

// ---------------------------------------------------------------------------
// Integer inputs, every policy: exact int64 sums.
class IntegerSum final : public Accumulator {
 public:
  IntegerSum(const OpDesc& d, const Kernels& k) : Accumulator(d), k_(k), acc_(d.lanes) { reset(); }
  void reset() override { acc_.fill(0); }
  size_t bytes_per_lane() const override { return sizeof(int64_t); }
  void add(const uint8_t* e, uint32_t) override { k_.add_i64(d_.dtype, acc_.data(), e, d_.lanes); }

  bool add_exact(const LaneExact* in) override {
    constexpr int64_t kLimit = int64_t(1) << 48;  // 65535 * 2^31 < 2^47
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      if (in[i].side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF)) return false;
      const Wide& v = in[i].value;
      if (!v.is_zero() && v.magnitude().msb() >= 48) return false;
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) acc_[i] += int64_t(in[i].value.limb[0]);
    (void)kLimit;
    return true;
  }

  bool state(LaneExact* out) const override {
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      out[i] = LaneExact{0, {}};
      out[i].value.add_shifted(acc_[i], 0);
    }
    return true;
  }

  // int32 elements when every sum is in int32's range (the generic rule: no
  // sideband, a whole value in [-2^31, 2^31)). Cost: a compare and a store per lane.
  StateForm state_as(Format f, uint8_t* elems, LaneExact* lanes, double*, const double**,
                     const double**) const override {
    if (f != Format::INT32) return state_as_generic(*this, f, elems, lanes);
    bool fit = true;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const int64_t v = acc_[i];
      fit &= v >= INT32_MIN && v <= INT32_MAX;
      store_bits(Format::INT32, elems + size_t(i) * 4, uint32_t(int32_t(v)));
    }
    if (fit) return StateForm::Elements;
    state(lanes);
    return StateForm::Lanes;
  }

  // int32 elements: an int64 add per lane (add()'s kernel). Every int32 is a
  // whole lane value well inside add_exact()'s 2^48 bound, so none is refused.
  bool add_elements_exact(Format f, const uint8_t* e, LaneExact* scratch, PartialError* err) override {
    if (f != Format::INT32) return add_elements_exact_generic(*this, f, e, scratch, err);
    *err = PartialError::None;
    k_.add_i64(Format::INT32, acc_.data(), e, d_.lanes);
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      uint32_t bits;
      const int64_t v = acc_[i];
      if (d_.out == Format::INT32) {
        const int64_t c = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v;
        if (c != v) fl |= flag::OVERFLOW;
        bits = uint32_t(int32_t(c));
      } else {
        const uint64_t mag = v < 0 ? 0 - uint64_t(v) : uint64_t(v);
        const Encoded en = encode_float(d_.out, v < 0, mag, 0, false, d_.exceptions);
        bits = en.bits;
        if (en.overflow) fl |= flag::OVERFLOW;
      }
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  const Kernels& k_;
  Lanes<int64_t> acc_;
};

}  // namespace

std::unique_ptr<Accumulator> make_integer_sum(const OpDesc& d, const Kernels& k) {
  return std::make_unique<IntegerSum>(d, k);
}

}  // namespace prism::acc
