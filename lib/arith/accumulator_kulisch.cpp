// KULISCH_FIXED over float formats: the exact sum, rounded once. Narrow
// formats sum in a float or double lane that is exact by construction; wide
// ones (fp32, bf16, fp16 at many ranks) in a fast lane plus a Bank of
// deferred-carry digits for the rounding error of each add it cannot take.
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "arith/accumulator_impl.hpp"

namespace prism::acc {
namespace {

static_assert(Bank::kAddsBeforeCarry <= std::numeric_limits<uint8_t>::max(), "a lane's add count is 8 bits");

// ---------------------------------------------------------------------------
// KULISCH_FIXED, wide formats: a fast lane (double for fp32, float for bf16
// and fp16) that takes every addition it can do exactly, plus a bank of
// deferred-carry digits for the exact error of the rest.
template <class T>
class KulischWide final : public Accumulator {
  using LB = LaneBits<T>;
  static constexpr int kFastBits = sizeof(T) == 4 ? 24 : 53;

 public:
  KulischWide(const OpDesc& d, const Kernels& k)
      : Accumulator(d),
        k_(k),
        unit_(unit_exp(d.dtype)),
        budget_(kFastBits - info(d.dtype).p - ceil_log2(d.group)),
        special_field_((1u << info(d.dtype).ebits) - 1),
        fast_(d.lanes),
        low_(sizeof(T) == 8 ? d.lanes : 0),
        bank_(d.lanes),
        adds_(d.lanes),
        dirty_(d.lanes) {
    dirty_.fill(1);  // the lanes are uninitialised: clear them all once
    reset();
  }

  // Cost: the banks of the lanes that used theirs (a bank and its add count
  // change only with dirty_ set). The fast lanes' -0 start is written only
  // where an op needs it (settle()): a certified first term is stored whole.
  void reset() override {
    certified_ = true;
    lo_ = ~0u;
    hi_ = 0;
    fresh_ = true;
    if (any_low_) {
      low_.fill(T(0));
      any_low_ = false;
    }
    if (any_dirty_) {
      for (uint32_t i = 0; i < d_.lanes; ++i)
        if (dirty_[i]) {
          bank_[i].clear();
          adds_[i] = 0;
        }
      dirty_.fill(0);
      any_dirty_ = false;
    }
  }

  size_t bytes_per_lane() const override {
    return (sizeof(T) == 8 ? 2 : 1) * sizeof(T) + sizeof(Bank) + sizeof(uint8_t) + 1;
  }

  // Cost: while every term of the op so far lies in an exponent window the
  // fast lane holds exactly (hi - lo + p + ceil(log2 R) <= 53 for a double,
  // 24 for a float, over the whole op, so every lane's sum is exact), a range
  // scan and a plain add per lane. Otherwise the checked add (add, two subs,
  // two compares per lane, a vector at a time); a lane whose sum would round
  // pays a TwoSum and one bank add instead.
  void add(const uint8_t* e, uint32_t) override {
    if (certified_) {
      uint32_t lo = lo_, hi = hi_;
      k_.exp_range(d_.dtype, e, d_.lanes, &lo, &hi);
      // A float lane must also keep the sum below its own overflow: hi + log2 R < 255.
      const bool in_range = sizeof(T) == 8 || hi + uint32_t(ceil_log2(d_.group)) < 255;
      if (hi < special_field_ && in_range && (lo > hi || int(hi) - int(lo) <= budget_)) {
        lo_ = lo;
        hi_ = hi;
        if (fresh_) {  // the op's first term, stored (-0 + x == x); the window excludes specials
          uint32_t none[kBlock];
          for (uint32_t b = 0; b < d_.lanes; b += kBlock) {
            const uint32_t n = std::min(kBlock, d_.lanes - b), sz = info(d_.dtype).bytes;
            if constexpr (sizeof(T) == 4)
              k_.add_f32_screened(d_.dtype, fast_.data() + b, e + size_t(b) * sz, n, true, none);
            else
              k_.add_f64_screened(d_.dtype, fast_.data() + b, e + size_t(b) * sz, n, true, none);
          }
          fresh_ = false;
        } else if constexpr (sizeof(T) == 4) {
          k_.add_f32(d_.dtype, fast_.data(), e, d_.lanes);
        } else {
          k_.add_f64(d_.dtype, fast_.data(), e, d_.lanes);
        }
        return;
      }
      certified_ = false;  // the window no longer proves exactness: check every add from here on
    }
    settle();
    const uint32_t sz = info(d_.dtype).bytes;
    uint32_t left[kBlock];
    for (uint32_t b = 0; b < d_.lanes; b += kBlock) {
      const uint32_t n = std::min(kBlock, d_.lanes - b);
      uint32_t k;
      if constexpr (sizeof(T) == 4)
        k = k_.add_f32_checked(d_.dtype, fast_.data() + b, e + b * sz, n, left);
      else  // fp32, the only format of double lanes: the sums that round keep their error in low_
        k = k_.add_f32_pairs(fast_.data() + b, low_.data() + b, e + b * sz, n, left, &any_low_);
      for (uint32_t j = 0; j < k; ++j) {
        const uint32_t lane = b + left[j];
        slow_add(lane, load_bits(d_.dtype, e + lane * sz));
      }
    }
  }

  // A lane whose partial value a T holds and whose sum with the fast lane is
  // exact takes it there (as a checked add() does); the rest go to the bank.
  // Either way the lane's value is the same exact sum.
  bool add_exact(const LaneExact* in) override {
    settle();
    certified_ = false;
    for (uint32_t i = 0; i < d_.lanes; ++i)
      if (!(in[i].side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF)) && !in[i].value.is_zero() &&
          in[i].value.magnitude().msb() >= Bank::kWords * Bank::kDigitBits - 4)
        return false;
    for (uint32_t i = 0; i < d_.lanes; ++i) take_lane(i, in[i]);
    return true;
  }

  bool state(LaneExact* out) const override {
    settle();
    for (uint32_t i = 0; i < d_.lanes; ++i) out[i] = lane_state(i);
    return true;
  }

  // A lane whose bank is unused holds its sum as its fast value (a whole
  // number of lane units by construction): an fp32 element when that value
  // is exactly a float, a bf16 one when that float's low half is 0 too (a
  // NaN lane never is). A lane that used its bank is tested on its exact
  // state (lanes_fit_format, one lane). Doubles where every lane's value is
  // one. Cost per clean lane: a conversion, a compare and a store, stopping
  // at the first lane that is not an element; then a copy as doubles.
  // A lane with a low part after normalize_low() needs more than 53 bits:
  // no element, no double. Such lanes, with no bank in use, go as Pairs.
  StateForm state_as(Format f, uint8_t* elems, LaneExact* lanes, double* doubles, const double** view,
                     const double** low_view) const override {
    settle();
    fold_banks();
    normalize_low();
    if (any_low_) {
      if constexpr (sizeof(T) == 8) {
        if (view && low_view && !any_dirty_) {
          *view = fast_.data();
          *low_view = low_.data();
          return StateForm::Pairs;
        }
      }
      state(lanes);
      return StateForm::Lanes;
    }
    if (f != Format::FP32 && f != Format::BF16) return state_as_generic(*this, f, elems, lanes);
    static_assert(std::endian::native == std::endian::little);
    if (sizeof(T) == 8 && f == Format::FP32 &&
        !any_dirty_) {  // fp32 elements from clean lanes: 256 at a time, no branch a lane
      bool all = true;  // the first block that is not fp32 ends it (most sums: the first)
      for (uint32_t b = 0; b < d_.lanes && all; b += kBlock) {
        const uint32_t n = std::min(kBlock, d_.lanes - b);
        all = k_.exact_f32(reinterpret_cast<const double*>(fast_.data()) + b, n, elems + size_t(b) * 4);
      }
      if (all) return StateForm::Elements;
      if constexpr (sizeof(T) == 8) {
        if (view) {  // the fast lanes themselves: every lane's sum, no bank in use
          *view = fast_.data();
          return StateForm::Doubles;
        }
      }
      if (doubles && lanes_as_doubles(doubles)) return StateForm::Doubles;
      state(lanes);
      return StateForm::Lanes;
    }
    const uint32_t low = f == Format::BF16 ? 0xFFFFu : 0, esz = info(f).bytes;
    uint32_t i = 0;
    for (; i < d_.lanes; ++i) {
      uint8_t* el = elems + size_t(i) * esz;
      if (dirty_[i]) {
        const LaneExact l = lane_state(i);
        if (!lanes_fit_format(&l, 1, unit_, f, el)) break;
        continue;
      }
      const float x = float(fast_[i]);
      const uint32_t b = float_bits(x);
      if (double(x) != double(fast_[i]) || (b & low)) break;
      store_bits(f, el, f == Format::BF16 ? b >> 16 : b);
    }
    if (i == d_.lanes) return StateForm::Elements;
    if (doubles && lanes_as_doubles(doubles)) return StateForm::Doubles;
    state(lanes);
    return StateForm::Lanes;
  }

  // Exact lane values as doubles: each sum taken in the fast lane where it
  // is exact (as a checked add() does), the rest as add_exact() takes them.
  // Cost: a range screen, then an add, two subs and two compares per lane.
  bool add_exact_doubles(const double* v, LaneExact* scratch, double bound) override {
    settle();
    const double limit = std::ldexp(1.0, Bank::kWords * Bank::kDigitBits - 4 + unit_);  // add_exact()'s bound
    bool neg_zero = false;  // (unused) the largest magnitude, a NaN's above every number's: one vector pass
    if (!(bound <= limit) && k_.scan_f64(v, d_.lanes, &neg_zero) >= std::bit_cast<uint64_t>(limit))
      return add_exact_doubles_generic(*this, v, scratch);
    certified_ = false;
    if constexpr (sizeof(T) == 8) {
      uint32_t left[kBlock];
      for (uint32_t b = 0; b < d_.lanes; b += kBlock) {
        const uint32_t n = std::min(kBlock, d_.lanes - b);
        const uint32_t k = k_.add_pairs(fast_.data() + b, low_.data() + b, v + b, n, left, &any_low_);
        for (uint32_t j = 0; j < k; ++j) take_lane(b + left[j], lane_of_double(v[b + left[j]], unit_));
      }
      return true;
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const T a = fast_[i], b = T(v[i]), s = a + b;
      if (double(b) == v[i] && s - a == b && s - b == a) {
        fast_[i] = s;
      } else {
        take_lane(i, lane_of_double(v[i], unit_));
      }
    }
    return true;
  }

  // fp32 or bf16 elements (whole lane units) into the fast lanes: each sum
  // taken where it is exact (add()'s checked add: s - a == b and s - b == a),
  // the lanes left (a special, a NaN lane, a sum that would round) one by
  // one as add_exact() takes them. Such elements are always in the bank's
  // range: none is refused. Cost: fp32 into double lanes, the AVX2 checked
  // add (~13 uops per 4 lanes); otherwise a scalar add, two subs and two
  // compares per lane.
  bool add_elements_exact(Format f, const uint8_t* e, LaneExact* scratch, PartialError* err) override {
    settle();
    if ((f != Format::FP32 && f != Format::BF16) || (f == Format::FP32 && !fp32_whole_units(e, d_.lanes, unit_)))
      return add_elements_exact_generic(*this, f, e, scratch, err);
    certified_ = false;
    *err = PartialError::None;
    const uint32_t esz = info(f).bytes;
    auto left_over = [&](uint32_t lane) {
      LaneExact l;
      lanes_from_elements(f, e + size_t(lane) * esz, 1, unit_, &l);
      take_lane(lane, l);
    };
    if constexpr (sizeof(T) == 8) {
      if (f == Format::FP32) {
        uint32_t left[kBlock];
        for (uint32_t b = 0; b < d_.lanes; b += kBlock) {
          const uint32_t n = std::min(kBlock, d_.lanes - b);
          const uint32_t k = k_.add_f32_pairs(fast_.data() + b, low_.data() + b, e + size_t(b) * 4, n, left, &any_low_);
          for (uint32_t j = 0; j < k; ++j) left_over(b + left[j]);
        }
        return true;
      }
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const float x = to_float(f, load_bits(f, e + size_t(i) * esz));  // exact
      const T a = fast_[i], b = T(x), s = a + b;
      if (std::isfinite(x) && s - a == b && s - b == a)
        fast_[i] = s;
      else
        left_over(i);
    }
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    settle();
    if (finalize_plain(out, flags)) return;
    if (finalize_mostly_plain(out, flags)) return;
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      uint32_t bits;
      const T f = fast_[i];
      if (std::isnan(f)) {
        special_result(LB::side_of(f), d_.out, d_.exceptions, &bits, &fl);
      } else if (!dirty_[i] && low(i) == 0) {  // every addition was exact: the fast lane is the sum
        const double v = double(f);
        const float fv = float(v);
        if (d_.out == Format::FP32 || double(fv) != v || !round_float_to(d_.out, fv, &bits)) {
          const Encoded en = encode_double(d_.out, d_.exceptions, v);
          bits = en.bits;
          if (en.overflow) fl |= flag::OVERFLOW;
        }
      } else {
        bits = round_lane(lane_state(i), unit_, d_.out, d_.exceptions, &fl);
      }
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  // The fast lanes' -0 start, once an op that has stored no term yet needs them.
  void settle() const {
    if (fresh_) {
      fast_.fill(T(-0.0));
      fresh_ = false;
    }
  }

  // FP32 out with every lane's sum in its fast lane (no bank used, no
  // special): the correctly rounded result is the hardware's RNE conversion
  // of each exact sum, subnormals included. A lane that overflows fp32 sends
  // the whole op down the per-lane path (its flag and the exceptions mode).
  bool finalize_plain(uint8_t* out, uint8_t* flags) const {
    if (d_.out != Format::FP32 || any_dirty_) return false;
    if constexpr (sizeof(T) == 8) {
      if (any_low_) {  // pairs: hi + lo rounded to odd in a double, then to fp32 (one rounding)
        if (!narrow_pairs(out)) return false;
        if (flags) std::memset(flags, 0, d_.lanes);
        return true;
      }
    }
    // Written straight into `out` (little-endian, as the wire): when a lane
    // turns out bad (a NaN-boxed special, an overflow), the per-lane path
    // rewrites every lane.
    static_assert(std::endian::native == std::endian::little);
    if constexpr (sizeof(T) == 8) {
      if (!k_.narrow_f64(fast_.data(), d_.lanes, reinterpret_cast<float*>(out))) return false;
    } else {
      uint32_t bad = 0;
      for (uint32_t i = 0; i < d_.lanes; ++i) {
        std::memcpy(out + size_t(i) * 4, &fast_[i], 4);
        bad |= (float_bits(fast_[i]) & 0x7F800000u) == 0x7F800000u;
      }
      if (bad) return false;
    }
    if (flags) std::memset(flags, 0, d_.lanes);
    return true;
  }

  // A narrow float result: every lane's fast value rounded in one batch
  // (right for the lanes that never left it), then the lanes that used their
  // bank rewritten one by one. False when the batch meets a NaN or an
  // overflow: the per-lane path does it all.
  bool finalize_mostly_plain(uint8_t* out, uint8_t* flags) const {
    if (d_.out == Format::FP32 || !is_float(d_.out)) return false;
    normalize_low();  // a lane's fast value is then its value rounded (lo = 0) or not its value (lo != 0)
    if (!round_lanes(k_, d_.out, fast_.data(), d_.lanes, out)) return false;
    if (flags) std::memset(flags, 0, d_.lanes);
    if (!any_dirty_ && !any_low_) return true;
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      if (!dirty_[i] && low(i) == 0) continue;
      uint8_t fl = 0;
      store_bits(d_.out, out + i * osz, round_lane(lane_state(i), unit_, d_.out, d_.exceptions, &fl));
      if (flags) flags[i] = fl;
    }
    return true;
  }

  // Every lane's value as a double (see Accumulator::state_as()); false when
  // some lane is a special or needs more than 53 bits.
  bool lanes_as_doubles(double* out) const {
    normalize_low();
    if (any_low_) return false;  // a lane needs a second double
    if (!any_dirty_) {           // every lane's sum is its fast value: a copy, and no NaN among them
      bool nan = false;
      for (uint32_t i = 0; i < d_.lanes; ++i) {
        out[i] = double(fast_[i]);
        nan |= fast_[i] != fast_[i];
      }
      return !nan;
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      if (!dirty_[i]) {
        out[i] = double(fast_[i]);
        if (std::isnan(fast_[i])) return false;
        continue;
      }
      const LaneExact l = lane_state(i);
      if (l.side & ~side::NEG_ZERO_ONLY) return false;
      if (l.side && !l.value.is_zero()) return false;
      if (!wide_to_double(l.value, unit_, &out[i])) return false;
      if (l.side) out[i] = -0.0;
    }
    return true;
  }

  // add_exact() for one lane in range.
  void take_lane(uint32_t i, const LaneExact& l) {
    const uint8_t sp = l.side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF);
    if (sp || std::isnan(fast_[i])) {
      fast_[i] = LB::merge(fast_[i], sp);
      return;
    }
    if (l.value.is_zero()) {
      if (!(l.side & side::NEG_ZERO_ONLY)) fast_[i] += T(0);  // -0 stays only while every term is -0
      return;
    }
    double bd;
    if (wide_to_double(l.value, unit_, &bd) && double(T(bd)) == bd) {
      const T a = fast_[i], b = T(bd), s = a + b;
      if (s - a == b && s - b == a) {  // exact (and finite): the fast lane takes it
        fast_[i] = s;
        return;
      }
      if (take_pair(i, b)) return;
    }
    fast_[i] += T(0);
    Bank& bk = bank_[i];
    bk.normalize();
    const bool neg = l.value.negative();
    const Wide m = l.value.magnitude();  // < 2^296, checked by the caller
    int since = 0;                       // the bank's contract: carries settled every kAddsBeforeCarry adds
    for (int pos = 0; pos <= m.msb(); pos += 32) {
      const int64_t piece = int64_t(m.bits_at(pos) & 0xFFFFFFFFu);
      if (!piece) continue;
      bk.add(neg ? -piece : piece, pos);
      if (++since == Bank::kAddsBeforeCarry) bk.normalize(), since = 0;
    }
    bk.normalize();
    adds_[i] = 0;
    dirty_[i] = 1;
    any_dirty_ = true;
  }

  LaneExact lane_state(uint32_t i) const {
    LaneExact l;
    const T f = fast_[i];
    if (std::isnan(f)) {
      l.side = LB::side_of(f);
      return l;
    }
    const T lo = low(i);
    l.side = LB::neg_zero(f) && lo == 0 ? side::NEG_ZERO_ONLY : 0;
    if (dirty_[i]) l.value = bank_[i].to_wide();
    add_double_to_wide(l.value, double(f), unit_);
    if (lo != 0) add_double_to_wide(l.value, double(lo), unit_);
    return l;
  }

  void slow_add(uint32_t lane, uint32_t bits) {
    const Decoded x = decode(d_.dtype, bits);
    T& a = fast_[lane];
    if (const uint8_t sp = special_side(x); sp || std::isnan(a)) {
      a = LB::merge(a, sp);
      return;
    }
    const T b = T(std::ldexp(double(x.sig), x.exp) * (x.neg ? -1.0 : 1.0));  // exact: p <= the lane's precision
    const T s = a + b;
    if (std::isinf(s)) {  // beyond a float lane's range: both terms go to the bank
      to_bank(lane, a);
      to_bank(lane, b);
      a = T(0);  // +0: not every term was -0
      return;
    }
    const T err = two_sum_err(a, b, s);
    a = s;
    if (add_low(lane, err)) return;
    to_bank(lane, err);
  }

  // TwoSum (Knuth): a + b == s + err exactly, for s = a + b rounded and finite.
  static T two_sum_err(T a, T b, T s) {
    const T bb = s - a;
    return (a - (s - bb)) + (b - bb);
  }

  // The lane's low part (0 for float lanes, which have none).
  T low(uint32_t i) const {
    if constexpr (sizeof(T) == 8)
      return low_[i];
    else
      return T(0);
  }

  // low_[i] += err when that add is exact (double lanes): the lane's value
  // is unchanged and no bank is used. False: nothing changed.
  bool add_low(uint32_t i, T err) {
    if constexpr (sizeof(T) == 8) {
      const T l = low_[i], t = l + err;
      if (t - l != err || t - err != l) return false;
      low_[i] = t;
      any_low_ = true;
      return true;
    } else {
      return false;
    }
  }

  // Lane i (a number, not a NaN lane) += b for a finite b by TwoSum: the
  // rounded sum in the fast lane, its exact error into the low part, when
  // that add is exact. False: nothing changed (the bank's turn).
  bool take_pair(uint32_t i, T b) {
    if constexpr (sizeof(T) == 8) {
      const T a = fast_[i], s = a + b;
      if (!std::isfinite(s)) return false;
      if (!add_low(i, two_sum_err(a, b, s))) return false;
      fast_[i] = s;
      return true;
    } else {
      return false;
    }
  }

  // Lanes whose bank is in use but whose value two doubles hold go back to
  // their fast and low parts (hi = the value rounded, lo the rest), the bank
  // cleared: a partial's form then follows the values alone, not the path
  // they took. A representation change only (hence const).
  void fold_banks() const {
    if constexpr (sizeof(T) == 8) {
      if (!any_dirty_) return;
      bool still = false;
      for (uint32_t i = 0; i < d_.lanes; ++i) {
        if (!dirty_[i]) continue;
        const LaneExact l = lane_state(i);
        double h, lo;
        if ((l.side & ~side::NEG_ZERO_ONLY) || !wide_to_pair(l.value, unit_, &h, &lo)) {
          still = true;
          continue;
        }
        fast_[i] = (l.side && h == 0) ? -0.0 : h;
        low_[i] = lo;
        if (lo != 0) any_low_ = true;
        bank_[i].clear();
        adds_[i] = 0;
        dirty_[i] = 0;
      }
      any_dirty_ = still;
    }
  }

  // Every pair as (RN(hi + lo), the exact rest) by TwoSum: a lane's low part
  // is then non-zero only when its value needs more than 53 bits, and its
  // fast lane is that value correctly rounded. A NaN lane's low part is
  // dropped (its value is its specials). Clears any_low_ when no lane keeps one.
  void normalize_low() const {
    if constexpr (sizeof(T) == 8) {
      if (any_low_) any_low_ = k_.normalize_pairs(fast_.data(), low_.data(), d_.lanes);
    }
  }

  // FP32 results of pairs (no bank in use): each hi + lo rounded to odd in a
  // double, then to the nearest float: the exact sum rounded once (53 >= 24 +
  // 2 bits; kernels.hpp). False when a result is not finite.
  bool narrow_pairs(uint8_t* out) const {
    if constexpr (sizeof(T) == 8)
      return k_.narrow_pairs(fast_.data(), low_.data(), d_.lanes, out);
    else
      return false;
  }

  void to_bank(uint32_t lane, T v) {
    if (v == 0) return;
    int64_t m;
    int shift;
    split_double(double(v), unit_, &m, &shift);
    bank_[lane].add(m, shift);
    dirty_[lane] = 1;
    any_dirty_ = true;
    if (++adds_[lane] == Bank::kAddsBeforeCarry) {
      bank_[lane].normalize();
      adds_[lane] = 0;
    }
  }

  const Kernels& k_;
  int unit_;
  int budget_;              // exponent fields a window may span and keep the fast lane's sums exact
  uint32_t special_field_;  // the all-ones exponent field: Inf/NaN
  bool certified_;          // every add so far fell inside the window [lo_, hi_]
  uint32_t lo_, hi_;
  mutable bool fresh_;  // the op has no term yet and fast_ is not written
  mutable Lanes<T> fast_;
  // Double lanes: each lane's second double, the exact sum of the rounding
  // errors of the adds its fast lane could not take exactly (TwoSum), as long
  // as that sum is itself exact; a lane's value is fast_ + low_ (+ its bank).
  // Sums over 60 binades stay in two doubles instead of the bank. Float lanes: empty.
  mutable Lanes<T> low_;
  mutable bool any_low_ = true;  // some low_ lane may not be 0 (at first: unwritten)
  mutable Lanes<Bank> bank_;
  mutable bool any_dirty_ = true;  // some lane's bank is in use (dirty_ has a 1)
  mutable Lanes<uint8_t> adds_;
  mutable Lanes<uint8_t> dirty_;
};

// ---------------------------------------------------------------------------
// KULISCH_FIXED, narrow formats: one float or double per lane, exact by
// construction: every term is a multiple of the format's unit and the sum of R
// terms needs W_mag + ceil(log2 R) bits, at most 24 (float) or 53 (double).
//
// Double lanes (fp16, e5m2) start each op as floats in the first half of the
// same memory, as KulischWide's fast lanes do: while every term of the op
// lies in an exponent window that a float holds exactly (hi - lo + p +
// ceil(log2 R) <= 24 over the whole op), the sums are exact in float lanes,
// at twice the lanes per vector. The first term outside the window widens
// the lanes to doubles in place, and the op goes on there.
template <class T>
class KulischNarrow final : public Accumulator {
  using LB = LaneBits<T>;
  static constexpr bool kHalves = sizeof(T) == 8;  // double lanes that can run as floats

 public:
  KulischNarrow(const OpDesc& d, const Kernels& k)
      : Accumulator(d),
        k_(k),
        unit_(unit_exp(d.dtype)),
        budget_(24 - info(d.dtype).p - ceil_log2(d.group)),
        special_field_((1u << info(d.dtype).ebits) - 1),
        screen_(d.dtype == Format::E4M3FNUZ || d.dtype == Format::E5M2FNUZ),
        limit_(std::ldexp(1.0, (sizeof(T) == 8 ? 53 : 24) + unit_)),
        fast_(d.lanes),
        left_(kHalves ? d.lanes : 0) {
    reset();
  }
  void reset() override {
    // Data wider than the window widens every op: after an op that did, the
    // next 16 start as doubles (one op in 17 pays the scan and the widening).
    if (outgrew_)
      skip_ = 16;
    else if (skip_)
      --skip_;
    outgrew_ = false;
    fresh_ = false;
    if (kHalves && budget_ >= 0 && !skip_) {
      halves_ = true;
      lo_ = ~0u;
      hi_ = 0;
      std::fill_n(floats(), d_.lanes, -0.0f);
    } else {
      halves_ = false;
      if constexpr (kHalves)
        fresh_ = true;  // the lanes' -0 start is written by the op's first add (or settle())
      else
        fast_.fill(T(-0.0));
    }
  }
  size_t bytes_per_lane() const override { return sizeof(T); }

  // Cost: a scan for specials and one exact add per lane (AVX2: 8 lanes per
  // float add, 4 per double add); double lanes running as floats scan the
  // exponent range instead. A packet with a special takes the per-lane path.
  void add(const uint8_t* e, uint32_t) override {
    if (halves_) {
      uint32_t lo = lo_, hi = hi_;
      k_.exp_range(d_.dtype, e, d_.lanes, &lo, &hi);
      if (hi < special_field_ && (lo > hi || int(hi) - int(lo) <= budget_) &&
          !(screen_ && k_.any_special(d_.dtype, e, d_.lanes))) {
        lo_ = lo;
        hi_ = hi;
        k_.add_f32(d_.dtype, floats(), e, d_.lanes);
        return;
      }
      outgrew_ = true;
      widen();
    }
    const uint32_t sz = info(d_.dtype).bytes;
    if constexpr (sizeof(T) == 8) {
      // One pass: the finite elements are added (a NaN lane, holding its
      // specials in its payload, stays that NaN), the specials merged here.
      // The op's first term is stored, not added to -0 (the same, one pass less).
      const uint32_t k = k_.add_f64_screened(d_.dtype, fast_.data(), e, d_.lanes, fresh_, left_.data());
      fresh_ = false;
      for (uint32_t j = 0; j < k; ++j) {
        const uint32_t i = left_[j];
        fast_[i] = LB::merge(fast_[i], special_side(decode(d_.dtype, load_bits(d_.dtype, e + i * sz))));
      }
      return;
    } else {
      if (!k_.any_special(d_.dtype, e, d_.lanes)) {
        k_.add_f32(d_.dtype, fast_.data(), e, d_.lanes);
        return;
      }
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const Decoded x = decode(d_.dtype, load_bits(d_.dtype, e + i * sz));
      T& a = fast_[i];
      if (const uint8_t sp = special_side(x); sp || std::isnan(a))
        a = LB::merge(a, sp);
      else
        a += T(std::ldexp(double(x.sig), x.exp) * (x.neg ? -1.0 : 1.0));
    }
  }

  bool add_exact(const LaneExact* in) override {
    widen();
    settle();
    std::vector<T> next(d_.lanes);
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      const LaneExact& l = in[i];
      const uint8_t sp = l.side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF);
      const T a = fast_[i];
      if (sp || std::isnan(a)) {
        next[i] = LB::merge(a, sp);
        continue;
      }
      double bd;
      if (!wide_to_double(l.value, unit_, &bd) || double(T(bd)) != bd) return false;
      T b = T(bd);
      if (b == 0 && (l.side & side::NEG_ZERO_ONLY)) b = T(-0.0);
      const T s = a + b;
      // A partial too large to be genuine: a sum that rounds, or one beyond the
      // lane's exact range (which no R inputs reach, and lane records could
      // not carry).
      if (s - a != b || s - b != a || !(std::fabs(double(s)) < limit_)) return false;
      next[i] = s;
    }
    std::memcpy(fast_.data(), next.data(), d_.lanes * sizeof(T));
    return true;
  }

  bool state(LaneExact* out) const override {
    widen();
    settle();
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      LaneExact l;
      const T f = fast_[i];
      if (std::isnan(f)) {
        l.side = LB::side_of(f);
      } else {
        l.side = LB::neg_zero(f) ? side::NEG_ZERO_ONLY : 0;
        add_double_to_wide(l.value, double(f), unit_);
      }
      out[i] = l;
    }
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    settle();
    if (finalize_plain(out)) {
      if (flags) std::memset(flags, 0, d_.lanes);
      return;
    }
    widen();
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      uint32_t bits;
      if (std::isnan(fast_[i])) {
        special_result(LB::side_of(fast_[i]), d_.out, d_.exceptions, &bits, &fl);
      } else {
        // The exact sum; when fp32 holds it, the hardware's rounding (round_float_to).
        const double v = double(fast_[i]);
        const float fv = float(v);
        if (double(fv) == v && d_.out == Format::FP32) {
          bits = float_bits(fv);
        } else if (double(fv) != v || !round_float_to(d_.out, fv, &bits)) {
          const Encoded en = encode_double(d_.out, d_.exceptions, v);
          bits = en.bits;
          if (en.overflow) fl |= flag::OVERFLOW;
        }
      }
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  // The common case of a narrow float result: no lane a NaN or out of the
  // output's range. Then the result is the hardware's rounding of each sum
  // (the per-lane path's, in one batch).
  bool finalize_plain(uint8_t* out) const {
    if (halves_) {  // finite float sums, each exact
      if (d_.out == Format::FP32) {
        std::memcpy(out, floats(), size_t(d_.lanes) * 4);
        return true;
      }
      return is_float(d_.out) && k_.round_f32(d_.out, floats(), d_.lanes, out);
    }
    return d_.out != Format::FP32 && is_float(d_.out) && round_lanes(k_, d_.out, fast_.data(), d_.lanes, out);
  }
  // The float lanes in the first half of fast_'s memory (halves_ only).
  float* floats() const { return reinterpret_cast<float*>(const_cast<T*>(fast_.data())); }
  // Float lanes to doubles, in place: lane i's double covers floats 2i and
  // 2i+1, which lanes >= i held, so going down every float is read before
  // it is overwritten. A change of representation only (hence const).
  void widen() const {
    if (!halves_) return;
    auto* b = reinterpret_cast<unsigned char*>(floats());
    for (uint32_t i = d_.lanes; i-- > 0;) {
      float f;
      std::memcpy(&f, b + size_t(i) * 4, 4);
      const T v = T(f);
      std::memcpy(b + size_t(i) * sizeof(T), &v, sizeof(T));
    }
    halves_ = false;
  }
  // Double lanes of an op with no term yet are -0: written here when read.
  void settle() const {
    if (fresh_) {
      fast_.fill(T(-0.0));
      fresh_ = false;
    }
  }
  const Kernels& k_;
  int unit_;
  int budget_;              // exponent-field span the float lanes hold exactly (kHalves)
  uint32_t special_field_;  // the format's all-ones exponent field
  bool screen_;             // its NaN is not in that field (FNUZ: 0x80): scan for it
  double limit_;            // 2^(the lane's precision) units: every genuine sum is below
  uint32_t lo_ = ~0u, hi_ = 0;
  bool outgrew_ = false;  // this op's terms left the float window
  uint8_t skip_ = 0;      // ops still to start as doubles
  mutable bool halves_ = false;
  mutable bool fresh_ = false;  // double lanes, no term yet: not written (see settle())
  mutable Lanes<T> fast_;
  Lanes<uint32_t> left_;  // add()'s scratch: lanes whose element is a special
};

}  // namespace

std::unique_ptr<Accumulator> make_kulisch(const OpDesc& d, const Kernels& k) {
  // The narrowest lane that holds every possible sum exactly.
  const FormatInfo& fi = info(d.dtype);
  const int bits = fi.emax - fi.emin + fi.p + ceil_log2(d.group);  // W_mag + ceil(log2 R)
  if (bits <= 24) return std::make_unique<KulischNarrow<float>>(d, k);
  if (bits <= 53) return std::make_unique<KulischNarrow<double>>(d, k);
  // bf16, fp16 beyond 8192 ranks: a float fast lane. (A double one keeps bf16 gradients out of
  // the bank, but its adds run 4 lanes a vector: measured slower at 1 KiB, R = 8.)
  if (fi.p <= 11) return std::make_unique<KulischWide<float>>(d, k);
  return std::make_unique<KulischWide<double>>(d, k);
}

}  // namespace prism::acc
