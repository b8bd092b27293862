// Accumulators: the state of one chunk of one operation, one lane per element.
//
// add() takes one contribution (a packet's worth of elements, lane i from
// element i) and is the hot path; finalize() rounds once into the output
// format. state()/add_exact() move the exact state between accumulators, which
// is how lossless partials merge in a tree of switches.
//
// Implementations, chosen by make_accumulator() from the descriptor: the
// narrowest lane that holds every possible sum exactly, where one exists.
// W = W_mag + ceil(log2 R) is the bits an exact sum of R terms can need.
//  - KULISCH_FIXED, W <= 24 (e4m3 up to 64 ranks): a float per lane, exact by
//    construction. 4 bytes per lane.
//  - KULISCH_FIXED, W <= 53 (fp16 up to 8192 ranks, every other fp8): a double
//    per lane, exact by construction. 8 bytes per lane.
//  - KULISCH_FIXED, wider (fp32, bf16, fp16 beyond 8192 ranks): a fast lane
//    (double for fp32, float for bf16/fp16) that takes every addition it can
//    do exactly, plus a Bank of deferred-carry digits that receives the exact
//    rounding error of the rest. While the whole op's exponent window proves
//    every sum exact, the adds are plain vector adds; otherwise each add is
//    checked (s - a == b and s - b == a). A double fast lane has a second
//    double that takes the rounding errors first (TwoSum, while their sum is
//    exact): sums over 60 binades stay in two doubles, out of the bank.
//    46 (float) or 58 (double) bytes per lane.
//  - Integer inputs (any policy): an int64 per lane. 8 bytes per lane.
//  - FP32_ARRIVAL: a float per lane plus a flag byte. 5 bytes per lane.
//  - FP32_BINOMIAL: a row per contribution, folded as the tree's subtrees
//    complete (4*R bytes per lane): the baseline that fixes the FP32 order
//    instead of removing it.
// Specials never reach the fixed-point path: a lane that has seen a NaN or an
// infinity holds a quiet NaN whose payload carries the sideband bits.
// One file per family: accumulator_kulisch.cpp, accumulator_fp32.cpp,
// accumulator_int.cpp; their shared helpers are accumulator_impl.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "arith/kernels.hpp"
#include "arith/lanes.hpp"
#include "arith/op.hpp"

namespace prism {

// The form an accumulator's state takes as a partial (AUTO's rule,
// lanes_fit_format()): elements of a format when every lane is exactly one;
// otherwise the exact lanes, as doubles where every lane is one (see
// state_as()) or as LaneExact; None for a policy without lossless state.
enum class StateForm : uint8_t { None, Elements, Doubles, Pairs, Lanes };

class Accumulator {
 public:
  explicit Accumulator(const OpDesc& d) : d_(d) {}
  virtual ~Accumulator() = default;
  Accumulator(const Accumulator&) = delete;
  Accumulator& operator=(const Accumulator&) = delete;

  const OpDesc& desc() const { return d_; }

  // One contribution: desc().lanes elements of desc().dtype, little-endian.
  // `index` is the contribution's place in FP32_BINOMIAL's order (the sender's
  // rank, 0..R-1); the other policies ignore it.
  virtual void add(const uint8_t* elems, uint32_t index) = 0;

  // Adds desc().lanes exact lane states (a decoded partial). Returns false and
  // changes nothing when a value cannot be taken exactly (out of range for this
  // op, or a policy without lossless partials: FP32_BINOMIAL).
  virtual bool add_exact(const LaneExact* lanes) = 0;

  // The exact state of every lane (lossless). False for FP32_BINOMIAL.
  virtual bool state(LaneExact* out) const = 0;

  // Partials in one step (the host collectives' hot path, coll/partial_message.cpp).
  // Each gives exactly what its generic path below gives; a family overrides
  // it where it can test, copy or add its lanes directly instead of building
  // every lane's exact state (a Wide per lane, a rounding and a decode each).
  //
  // state_as: when every lane is exactly an element of `f`, writes desc().lanes
  // elements to `elems` and returns Elements. Otherwise, when `doubles` is
  // not null and the family holds every lane as a double (a finite value, a
  // whole number of lane units, sideband at most NEG_ZERO_ONLY, written as
  // -0), may write the lanes' values there and return Doubles; else writes
  // state() to `lanes` and returns Lanes. `elems` is unspecified unless
  // Elements. None for a policy without lossless state.
  // `view` (may be null): a family whose lanes are doubles in its own memory
  // may set *view to them and return Doubles without copying them to
  // `doubles` (a NaN lane among them then possible: the caller checks).
  // `low` (may be null, with view): a family that holds every lane as two
  // doubles hi + lo (lo = 0 where the lane is hi alone; |lo| at most half an
  // ulp of hi otherwise, so a lane with a non-zero lo needs more than 53
  // bits) may set *view to the his and *low to the los and return Pairs.
  virtual StateForm state_as(Format f, uint8_t* elems, LaneExact* lanes, double* doubles, const double** view = nullptr,
                             const double** low = nullptr) const;
  // add_elements_exact: adds desc().lanes elements of `f` (a partial that
  // travelled as elements) as lanes_from_elements() then add_exact() would,
  // `scratch` holding desc().lanes lanes. False when they do not decode
  // (*err says why; nothing changed) or cannot be taken (*err = None).
  virtual bool add_elements_exact(Format f, const uint8_t* elems, LaneExact* scratch, PartialError* err);
  // add_exact_doubles: adds desc().lanes exact lane values given as doubles
  // (each a whole number of lane units; -0 a NEG_ZERO_ONLY lane) as
  // add_exact() adds their lanes: false, nothing changed, when one cannot
  // be taken. `scratch` holds desc().lanes lanes.
  // `bound` (may be infinite): every |v[i]| is below it, known to the caller
  // (a packed partial's sub-block widths), which can spare a range scan.
  virtual bool add_exact_doubles(const double* v, LaneExact* scratch, double bound = INFINITY);

  // Rounds every lane once into desc().out: `out` gets lanes elements, `flags`
  // (may be null) one status byte per lane (flag::OVERFLOW, INVALID, NAN_INPUT).
  virtual void finalize(uint8_t* out, uint8_t* flags) const = 0;

  // Back to the empty state, keeping the memory.
  virtual void reset() = 0;

  // Accumulator memory per lane, in bytes.
  virtual size_t bytes_per_lane() const = 0;

 protected:
  OpDesc d_;
};

// Throws std::invalid_argument with admission_error()'s message when the
// descriptor is not admissible at kMaxWidth.
std::unique_ptr<Accumulator> make_accumulator(const OpDesc& d, const Kernels& k = best_kernels());

// The generic paths of Accumulator::state_as(), add_elements_exact() and
// add_exact_doubles(), through state()/lanes_fit_format(),
// lanes_from_elements() and add_exact(): the defaults, and the reference the
// families' fast paths are tested against. state_as_generic() never returns Doubles.
StateForm state_as_generic(const Accumulator& acc, Format f, uint8_t* elems, LaneExact* lanes);
bool add_elements_exact_generic(Accumulator& acc, Format f, const uint8_t* elems, LaneExact* scratch,
                                PartialError* err);
bool add_exact_doubles_generic(Accumulator& acc, const double* v, LaneExact* scratch);
// A lane value given as a double (see add_exact_doubles()) as its exact lane.
LaneExact lane_of_double(double v, int unit);

// Exact value of a finite double as a lane value in units of 2^unit (the
// double must be a multiple of 2^unit).
void add_double_to_wide(Wide& w, double d, int unit);

// Rounds an exact lane state into `out`; returns the element bits and ORs result flags into *flags.
uint32_t round_lane(const LaneExact& l, int unit, Format out, Exceptions ex, uint8_t* flags);

}  // namespace prism
