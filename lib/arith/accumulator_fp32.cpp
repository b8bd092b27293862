// The FP32 policies over float formats: fp32 additions in arrival order
// (FP32_ARRIVAL) or in a fixed binomial tree over the ranks (FP32_BINOMIAL),
// with the flags IEEE arithmetic raises on the way.
#include <cstring>
#include <stdexcept>
#include <vector>

#include "arith/accumulator_impl.hpp"

namespace prism::acc {
namespace {

// ---------------------------------------------------------------------------
// FP32 arithmetic shared by FP32_ARRIVAL and FP32_BINOMIAL.
namespace f32 {
constexpr uint8_t kInfSeen = side::POS_INF | side::NEG_INF;

// Records what an input brings: a NaN, an infinity.
inline void note_input(float x, uint8_t& fl) {
  if (std::isnan(x)) fl |= side::NAN_INPUT;
  if (std::isinf(x)) fl |= x > 0 ? side::POS_INF : side::NEG_INF;
}

// a = fl32(a + x), keeping the exceptions IEEE arithmetic raises: INVALID
// when two non-NaN operands give NaN, OVERFLOW when two finite ones give Inf.
inline void add(float& a, float x, uint8_t& fl) {
  const float s = a + x;
  if (std::isnan(s) && !std::isnan(a) && !std::isnan(x)) fl |= side::INVALID;
  if (std::isinf(s) && std::isfinite(a) && std::isfinite(x)) fl |= side::OVERFLOW;
  a = s;
}

uint32_t result(float a, uint8_t fl, Format out, Exceptions ex, uint8_t* rfl) {
  const FormatInfo& fo = info(out);
  if (fl & side::NAN_INPUT) *rfl |= flag::NAN_INPUT;
  if (fl & side::INVALID) *rfl |= flag::INVALID;
  if (fl & side::OVERFLOW) *rfl |= flag::OVERFLOW;
  if (std::isnan(a)) return fo.canonical_nan;
  const bool neg = std::signbit(a);
  if (std::isinf(a)) {
    if (fl & kInfSeen) {  // an input infinity
      if (fo.has_inf) return fo.inf | (neg ? fo.sign_bit : 0);
      *rfl |= flag::OVERFLOW;
      return overflow_bits(out, neg, ex);
    }
    *rfl |= flag::OVERFLOW;  // a finite sum overflowed
    return overflow_bits(out, neg, ex);
  }
  if (out == Format::FP32) return float_bits(a);
  if (a == 0) return zero_bits(out, neg);
  int e;
  const float m = std::frexp(std::fabs(a), &e);
  const Encoded en = encode_float(out, neg, uint64_t(std::ldexp(m, 24)), e - 24, false, ex);
  if (en.overflow) *rfl |= flag::OVERFLOW;
  return en.bits;
}

// The common case of an FP32-policy result: no lane flagged, every sum
// finite and in the output's range. Then each result is the sum as it is
// (fp32 out: one copy; little-endian on the wire as in memory here) or its
// rounding by round_float_to(): no per-lane decisions. False when the
// per-lane path must run.
inline bool finalize_plain(const Kernels& k, const float* acc, const uint8_t* fl, uint32_t n, Format out, uint8_t* dst,
                           uint8_t* flags) {
  static_assert(std::endian::native == std::endian::little);
  if (!is_float(out)) return false;
  uint8_t any = 0;
  for (uint32_t i = 0; i < n; ++i) any |= fl[i];
  // A NaN or infinite sum (an all-ones exponent), by the kernels' screen: 32 lanes an AVX2 step.
  if (any || k.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(acc), n)) return false;
  if (out == Format::FP32)
    std::memcpy(dst, acc, size_t(n) * 4);
  else if (!k.round_f32(out, acc, n, dst))  // an overflow: the per-lane path flags it
    return false;
  if (flags) std::memset(flags, 0, n);
  return true;
}

// The FP32 policies' lane state (lossless, see Fp32Arrival::state()): the
// sideband holds the lane's flags as they are (NAN_INPUT, POS_INF/NEG_INF =
// input infinities seen, INVALID, OVERFLOW) and the value the sum when it is
// finite. A NaN sum is implied by NAN_INPUT or INVALID, an infinite one by a
// single input infinity; an infinity that only overflow explains is marked by
// OVERFLOW and a value of +-1 giving its sign.
inline float from_lane(const LaneExact& l, int unit, bool* ok) {
  const uint8_t s = l.side;
  if (s & (side::NAN_INPUT | side::INVALID)) return NAN;
  if ((s & side::POS_INF) && (s & side::NEG_INF)) return NAN;
  if (s & side::POS_INF) return INFINITY;
  if (s & side::NEG_INF) return -INFINITY;
  double d;
  if (!wide_to_double(l.value, unit, &d) || double(float(d)) != d) {
    *ok = false;
    return 0;
  }
  if (s & side::OVERFLOW) {
    if (d == 0) {
      *ok = false;  // an overflow marker must carry a sign
      return 0;
    }
    return d < 0 ? -INFINITY : INFINITY;
  }
  if (d == 0) return (s & side::NEG_ZERO_ONLY) ? -0.0f : 0.0f;
  return float(d);
}
}  // namespace f32

class Fp32Arrival final : public Accumulator {
 public:
  Fp32Arrival(const OpDesc& d, const Kernels& k)
      : Accumulator(d), k_(k), unit_(unit_exp(d.dtype)), acc_(d.lanes), fl_(d.lanes), left_(d.lanes) {
    flagged_ = true;  // the lanes are uninitialised: clear the flags once
    reset();
  }
  // Cost: nothing per lane for an fp32 op: its first term is copied in (the
  // lanes' -0 start is written only where an op needs it), and the flags are
  // cleared only after an op that raised one.
  void reset() override {
    fresh_ = true;
    if (flagged_) {
      fl_.fill(0);
      flagged_ = false;
    }
  }
  size_t bytes_per_lane() const override { return sizeof(float) + 1; }

  // Cost: one pass, one fp32 add per lane with the specials screened in it
  // (AVX2: 8 lanes per add); the op's first term is stored rather than added.
  // Only the lanes whose element is a NaN or an infinity take the per-lane path.
  void add(const uint8_t* e, uint32_t) override {
    const uint32_t k = k_.add_f32_screened(d_.dtype, acc_.data(), e, d_.lanes, fresh_, left_.data());
    fresh_ = false;
    if (k == 0) return;
    flagged_ = true;
    const uint32_t sz = info(d_.dtype).bytes;
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = left_[j];
      add_one(i, to_float(d_.dtype, load_bits(d_.dtype, e + i * sz)));
    }
  }

  bool add_exact(const LaneExact* in) override {
    settle();
    flagged_ = true;
    bool ok = true;
    std::vector<float> v(d_.lanes);
    for (uint32_t i = 0; i < d_.lanes && ok; ++i) v[i] = f32::from_lane(in[i], unit_, &ok);
    if (!ok) return false;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      // The partial's sum is one more fp32 term; its flags (input infinities
      // included) are the child's, not raised by this addition.
      if (std::isinf(acc_[i]) && !(fl_[i] & f32::kInfSeen)) fl_[i] |= side::OVERFLOW;
      fl_[i] |= in[i].side & (side::NAN_INPUT | f32::kInfSeen | side::INVALID | side::OVERFLOW);
      f32::add(acc_[i], v[i], fl_[i]);
    }
    return true;
  }

  bool state(LaneExact* out) const override {
    settle();
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      LaneExact l;
      const float a = acc_[i];
      uint8_t fl = fl_[i];
      if (std::isinf(a) && !(fl & f32::kInfSeen)) fl |= side::OVERFLOW;
      l.side = fl & (side::INVALID | side::OVERFLOW | side::NAN_INPUT | f32::kInfSeen);
      if (std::isinf(a) && !(fl & f32::kInfSeen)) {
        l.value.add_shifted(a < 0 ? -1 : 1, 0);  // an overflow's infinity: its sign
      } else if (!std::isfinite(a)) {
        // NaN or an input infinity: implied by the sideband
      } else {
        if (float_bits(a) == 0x80000000u) l.side |= side::NEG_ZERO_ONLY;
        add_double_to_wide(l.value, double(a), unit_);
      }
      out[i] = l;
    }
    return true;
  }

  // A partial of fp32 sums with no lane flagged and none a NaN or an
  // infinity: every lane is exactly its float (a whole number of lane units:
  // checked for inputs narrower than fp32), so the elements are the lanes as
  // they are. Cost: a flag scan (only after an op that raised one), the
  // specials screen (AVX2: 32 lanes a step) and a copy.
  StateForm state_as(Format f, uint8_t* elems, LaneExact* lanes, double*, const double**,
                     const double**) const override {
    if (f != Format::FP32) return state_as_generic(*this, f, elems, lanes);
    settle();
    static_assert(std::endian::native == std::endian::little);
    const auto* acc = reinterpret_cast<const uint8_t*>(acc_.data());
    if (any_flag() || k_.any_special(Format::FP32, acc, d_.lanes) || !fp32_whole_units(acc, d_.lanes, unit_))
      return state_as_generic(*this, f, elems, lanes);
    std::memcpy(elems, acc, size_t(d_.lanes) * 4);
    return StateForm::Elements;
  }

  // fp32 elements into fp32 sums: one more fp32 term per lane, as add_exact()
  // adds it. With no NaN or infinity among the elements or the sums (and
  // every element whole lane units), that is a vector add (the op's first
  // term: a copy, -0 + x == x) and an OVERFLOW flag where two finite values
  // gave an infinity; otherwise the generic path.
  // Cost (AVX2): two specials screens and one add per 8 lanes.
  bool add_elements_exact(Format f, const uint8_t* e, LaneExact* scratch, PartialError* err) override {
    if (f != Format::FP32 || k_.any_special(Format::FP32, e, d_.lanes) || !fp32_whole_units(e, d_.lanes, unit_) ||
        (!fresh_ && k_.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(acc_.data()), d_.lanes)))
      return add_elements_exact_generic(*this, f, e, scratch, err);
    *err = PartialError::None;
    if (fresh_) {
      std::memcpy(acc_.data(), e, size_t(d_.lanes) * 4);
      fresh_ = false;
      return true;
    }
    k_.add_f32(Format::FP32, acc_.data(), e, d_.lanes);
    if (k_.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(acc_.data()), d_.lanes)) {
      flagged_ = true;
      for (uint32_t i = 0; i < d_.lanes; ++i)
        if (std::isinf(acc_[i])) fl_[i] |= side::OVERFLOW;  // two finite operands gave Inf
    }
    return true;
  }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    settle();
    if (f32::finalize_plain(k_, acc_.data(), fl_.data(), d_.lanes, d_.out, out, flags)) return;
    const uint32_t osz = info(d_.out).bytes;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t fl = 0;
      const uint32_t bits = f32::result(acc_[i], fl_[i], d_.out, d_.exceptions, &fl);
      store_bits(d_.out, out + i * osz, bits);
      if (flags) flags[i] = fl;
    }
  }

 private:
  void add_one(uint32_t i, float x) {
    // An infinity that no input brought came from an overflow in the vector path.
    if (std::isinf(acc_[i]) && !(fl_[i] & f32::kInfSeen)) fl_[i] |= side::OVERFLOW;
    f32::note_input(x, fl_[i]);
    f32::add(acc_[i], x, fl_[i]);
  }

  bool any_flag() const {
    if (!flagged_) return false;
    uint8_t any = 0;
    for (uint32_t i = 0; i < d_.lanes; ++i) any |= fl_[i];
    return any != 0;
  }

  const Kernels& k_;
  int unit_;
  // An op with no term yet: its lanes are -0 (written on demand).
  void settle() const {
    if (fresh_) {
      acc_.fill(-0.0f);
      fresh_ = false;
    }
  }

  mutable Lanes<float> acc_;
  Lanes<uint8_t> fl_;
  Lanes<uint32_t> left_;  // add()'s scratch: the lanes whose element is a special
  mutable bool fresh_ = true;
  bool flagged_ = false;  // some flag byte may be set
};

// The seed's binomial reduce over contribution index: at step k, x_i <- x_i +
// x_{i+2^k} for every i that is a multiple of 2^(k+1) with i + 2^k < R. The
// tree is folded in as contributions arrive: a subtree's sum is formed as
// soon as both halves are complete (row adds across lanes), so finalize()
// only reads row 0. Memory: 4*R bytes per lane.
class Fp32Binomial final : public Accumulator {
 public:
  Fp32Binomial(const OpDesc& d, const Kernels& k)
      : Accumulator(d), k_(k), rows_(size_t(d.group) * d.lanes), fl_(d.lanes), level_(d.group) {
    reset();
  }
  void reset() override {
    fl_.fill(0);
    level_.fill(kAbsent);
    present_ = 0;
  }
  size_t bytes_per_lane() const override { return sizeof(float) * d_.group + 1; }

  // Cost: one conversion pass, then on average one fp32 row add per contribution.
  void add(const uint8_t* e, uint32_t index) override {
    if (index >= d_.group || level_[index] != kAbsent) return;  // out of range or a repeat: no effect
    float* row = this->row(index);
    if (!k_.any_special(d_.dtype, e, d_.lanes)) {
      std::fill(row, row + d_.lanes, -0.0f);  // -0 + x == x: the kernel converts exactly
      k_.add_f32(d_.dtype, row, e, d_.lanes);
    } else {
      const uint32_t sz = info(d_.dtype).bytes;
      for (uint32_t i = 0; i < d_.lanes; ++i) {
        row[i] = to_float(d_.dtype, load_bits(d_.dtype, e + i * sz));
        f32::note_input(row[i], fl_[i]);
      }
    }
    ++present_;
    climb(rows_.data(), level_.data(), fl_.data(), index);
  }
  bool add_exact(const LaneExact*) override { return false; }
  bool state(LaneExact*) const override { return false; }

  void finalize(uint8_t* out, uint8_t* flags) const override {
    const uint32_t osz = info(d_.out).bytes;
    if (present_ != d_.group) return finalize_incomplete(out, flags);
    const float* x = rows_.data();
    if (f32::finalize_plain(k_, x, fl_.data(), d_.lanes, d_.out, out, flags)) return;
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t rfl = 0;
      store_bits(d_.out, out + i * osz, f32::result(x[i], fl_[i], d_.out, d_.exceptions, &rfl));
      if (flags) flags[i] = rfl;
    }
  }

 private:
  static constexpr uint8_t kAbsent = 0xFF;
  float* row(uint32_t r) { return &rows_[size_t(r) * d_.lanes]; }

  // Folds row `r` (just arrived) upward while the sibling subtree at each
  // level is complete: the seed's x_i <- x_i + x_{i+2^k}.
  void climb(float* rows, uint8_t* level, uint8_t* fl, uint32_t r) const {
    const uint32_t L = d_.lanes;
    int k = 0;
    level[r] = 0;
    for (;;) {
      const uint32_t step = 1u << k;
      if (step >= d_.group) break;
      if (r & step) {  // r is the right half of (r - step)'s subtree
        const uint32_t left = r - step;
        if (level[left] == kAbsent || level[left] < k) break;
        add_rows(rows + size_t(left) * L, rows + size_t(r) * L, fl);
        r = left;
      } else if (r + step < d_.group) {
        if (level[r + step] == kAbsent || level[r + step] < k) break;
        add_rows(rows + size_t(r) * L, rows + size_t(r + step) * L, fl);
      }
      level[r] = uint8_t(++k);
    }
  }

  // dst = fl32(dst + src) lane by lane, with IEEE's flags.
  void add_rows(float* dst, const float* src, uint8_t* fl) const {
    const auto* sb = reinterpret_cast<const uint8_t*>(src);
    if (k_.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(dst), d_.lanes) ||
        k_.any_special(Format::FP32, sb, d_.lanes)) {
      for (uint32_t i = 0; i < d_.lanes; ++i) f32::add(dst[i], src[i], fl[i]);
      return;
    }
    k_.add_f32(Format::FP32, dst, sb, d_.lanes);
    if (k_.any_special(Format::FP32, reinterpret_cast<const uint8_t*>(dst), d_.lanes))
      for (uint32_t i = 0; i < d_.lanes; ++i)
        if (std::isinf(dst[i])) fl[i] |= side::OVERFLOW;  // two finite operands gave Inf
  }

  // Missing contributions count as -0, the sum's neutral element: fold them
  // into a copy of the tree.
  void finalize_incomplete(uint8_t* out, uint8_t* flags) const {
    const uint32_t osz = info(d_.out).bytes;
    std::vector<float> rows(rows_.data(), rows_.data() + size_t(d_.group) * d_.lanes);
    std::vector<uint8_t> level(level_.data(), level_.data() + d_.group), fl(fl_.data(), fl_.data() + d_.lanes);
    for (uint32_t r = 0; r < d_.group; ++r) {
      if (level[r] != kAbsent) continue;
      std::fill(rows.begin() + size_t(r) * d_.lanes, rows.begin() + size_t(r + 1) * d_.lanes, -0.0f);
      climb(rows.data(), level.data(), fl.data(), r);
    }
    for (uint32_t i = 0; i < d_.lanes; ++i) {
      uint8_t rfl = 0;
      store_bits(d_.out, out + i * osz, f32::result(rows[i], fl[i], d_.out, d_.exceptions, &rfl));
      if (flags) flags[i] = rfl;
    }
  }

  const Kernels& k_;
  Lanes<float> rows_;
  Lanes<uint8_t> fl_;
  Lanes<uint8_t> level_;  // per row: the level of the complete subtree it holds, kAbsent before it arrives
  uint32_t present_ = 0;
};

}  // namespace

std::unique_ptr<Accumulator> make_fp32_arrival(const OpDesc& d, const Kernels& k) {
  return std::make_unique<Fp32Arrival>(d, k);
}
std::unique_ptr<Accumulator> make_fp32_binomial(const OpDesc& d, const Kernels& k) {
  return std::make_unique<Fp32Binomial>(d, k);
}

}  // namespace prism::acc
