// One block's partial sum as a message between ranks, for the host
// collectives that combine partials (binomial.hpp; later the chain, RHD and
// ring): what a rank sends is its accumulator's exact state, so the one
// rounding happens where the result is finalized and the bits equal one
// accumulator fed every rank's input (the switch's result).
//
// Message: a 12-byte header (the op's dtype, out, policy and exceptions
// codes, the payload's encoding, 3 zero bytes, the block's element count as
// a little-endian uint32), then the lanes, in the smallest lossless
// encoding (AUTO's rule, proto/partial.hpp):
//  - encoding = a format code: elements of that format, when every lane is
//    exactly one (FP32 for the fp32 policies over floats: the rounded fp32
//    sums those policies pass on; the output format otherwise);
//  - encoding = 0x40: packed lanes (proto/packed_lanes.hpp) when every lane
//    is a double: fixed-point sub-blocks of 256 lanes, each as wide as its
//    values' range (Kulisch fp32 sums of gradients: about 5 bytes a lane);
//  - encoding = 0x41: packed pairs (docs/ARITHMETIC.md) when every lane is
//    two doubles, hi (the lane rounded) + lo (the rest), some lo not 0 (fp32
//    sums over a wide exponent range): uint32 length, the his packed, a
//    bitmap of the lanes whose lo is not 0, those los packed;
//  - encoding = 0: Kulisch lane records (a lane with a special or a flag in
//    its sideband, or a sum beyond two doubles).
// The header lets a receiver refuse a partial of another op (ranks called
// with different descriptions) with a clear error instead of wrong bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "arith/accumulator.hpp"
#include "arith/op.hpp"

namespace prism::coll {

// A reduction as the host collectives take it: the OpDesc without group and
// lanes (the collective sets them: the ranks of the group, the block size).
struct ReduceOp {
  Format dtype = Format::FP32;
  Format out = Format::FP32;
  Policy policy = Policy::KULISCH_FIXED;
  Exceptions exceptions = Exceptions::IEEE;
};

// Something a collective cannot go on from: ranks that disagree, a partial
// that does not decode. The message says which rank and what differed.
struct CollectiveError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The accumulator descriptor for `lanes` elements of `op` over a group of
// `group` ranks. Throws std::invalid_argument with admission_error()'s
// message when the op is not admissible (at kMaxWidth).
OpDesc block_desc(const ReduceOp& op, uint32_t group, uint32_t lanes);

inline constexpr size_t kPartialHeader = 12;
// The most bytes a partial of `lanes` lanes takes.
size_t max_partial_bytes(uint32_t lanes);

// The memory a partial's encoding and merging work in, reused between calls
// (the collectives take it from their group's buffer cache).
struct PartialScratch {
  std::vector<LaneExact>& lanes;
  std::vector<double>& doubles;
};

// Encodes `acc`'s exact state into `msg` and returns the message's length:
// the first bytes of msg, which only grows (never shrunk, so never
// zero-filled again on the next call). Throws std::logic_error for an
// accumulator without a lossless state (FP32_BINOMIAL: a tree runs it as
// FP32_ARRIVAL per node).
size_t encode_partial(const Accumulator& acc, const ReduceOp& op, PartialScratch scratch, std::vector<uint8_t>& msg);
// The same into `out`, which holds max_partial_bytes(acc.desc().lanes) bytes.
size_t encode_partial(const Accumulator& acc, const ReduceOp& op, PartialScratch scratch, uint8_t* out);

// Adds the partial in [msg, msg + len) into `acc` exactly (add_exact).
// Throws CollectiveError naming `from` when the header is not this op's or
// the lanes do not decode or cannot be taken.
void merge_partial(Accumulator& acc, const ReduceOp& op, const uint8_t* msg, size_t len, int from,
                   PartialScratch scratch);

// The same with lane scratch only (the doubles made per call), msg resized
// to the message: for tests and one-off use.
inline void encode_partial(const Accumulator& acc, const ReduceOp& op, std::vector<LaneExact>& lanes,
                           std::vector<uint8_t>& msg) {
  std::vector<double> doubles;
  msg.resize(encode_partial(acc, op, PartialScratch{lanes, doubles}, msg));
}
inline void merge_partial(Accumulator& acc, const ReduceOp& op, const uint8_t* msg, size_t len, int from,
                          std::vector<LaneExact>& lanes) {
  std::vector<double> doubles;
  merge_partial(acc, op, msg, len, from, PartialScratch{lanes, doubles});
}

}  // namespace prism::coll
