// Seed 001's Recursive Halving-Doubling (HCCL's RHD): allreduce as a
// reduce-scatter by vector halving and distance doubling, then an allgather
// by vector doubling and distance halving, over a Transport, in PRISM's
// arithmetic, for any number of ranks p.
//
// Non-power-of-two p (HCCL's fold): q = 2^floor(log2 p), r = p - q. First
// the 2r lowest ranks fold in pairs: rank 2i+1 sends its whole vector to 2i
// (i < r) and waits. The q remaining ranks (2i for i < r, and every rank
// >= 2r) are renumbered v = i for rank 2i, v = rank - r above 2r, and run the
// power-of-two algorithm; at the end 2i sends the whole result to 2i+1 (the
// unfold).
//
// The power-of-two algorithm, m = log2 q steps each way. The vector is split
// into q contiguous segments; with n elements, segment s has n / q elements,
// one more for the first n % q segments (so segments may be empty when
// n < q). Rank v starts owning segments [0, q).
//  - Reduce-scatter, step k = 0..m-1: v exchanges with v ^ 2^k (distance
//    1, 2, 4, ...): its range [lo, hi) is halved at mid = (lo + hi) / 2; v
//    with bit k clear keeps [lo, mid) and sends [mid, hi), v with bit k set
//    the reverse; what it keeps, it adds the partner's partial to. After m
//    steps v owns one segment (the bit reversal of v), fully reduced, and
//    rounds it there: the one rounding.
//  - Allgather, step k = m-1..0: v exchanges with v ^ 2^k (distance q/2,
//    ..., 1) its finalized range for the partner's, doubling it.
//
// What a partial is, per policy (as binomial.hpp):
//  - KULISCH_FIXED and integer inputs: the accumulator's exact state
//    (partial_message.hpp), in the fold and in every reduce-scatter step, so
//    every rank's result is bit-identical to one accumulator fed every
//    rank's input, for any p.
//  - FP32_ARRIVAL and FP32_BINOMIAL: a rounded fp32 sum, and each step an
//    fp32 addition in RHD's order (the fold, then the halving steps). These
//    bits are RHD's own: they equal neither the switch's arrival order nor
//    the accumulator's FP32_BINOMIAL order in general, only each other on
//    every rank (the allgather copies one rounding to all).
//
// The vector goes in blocks of kRhdBlock elements, each through the whole
// algorithm before the next (memory per rank: one block's accumulators and
// messages). Every rank calls the same function with the same op and count;
// a rank that sees another op's partial or a result range of the wrong size
// throws CollectiveError.
// Cost (seed 001's model, per block of n bytes, power-of-two p):
// reduce-scatter log2 p * alpha + (p-1)/p * n * (beta + gamma), allgather
// log2 p * alpha + (p-1)/p * n * beta; the fold and unfold add
// 2 * (alpha + n * beta) and n * gamma when p is not a power of two.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/partial_message.hpp"
#include "coll/transport.hpp"

namespace prism::coll {

inline constexpr uint32_t kRhdBlock = 65536;

// The split of n elements into q contiguous segments: segment s starts at
// rhd_segment_start(n, q, s) (s = q gives n); the first n % q are one larger.
size_t rhd_segment_start(size_t n, size_t q, size_t s);

// Every rank gets the sum of every rank's `count` elements of op.dtype (at
// `in`): `out` gets count elements of op.out and `flags` (may be null) one
// status byte per element (flag::OVERFLOW, INVALID, NAN_INPUT).
// Throws std::invalid_argument for an inadmissible op, CollectiveError or
// TransportError when the group fails.
void rhd_allreduce(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags);

// Reduce to `root`, as the seed's "ReduceScatter + Gather": the fold, the
// reduce-scatter above, then a gather to the root by vector doubling and
// distance halving (at step k = m-1..0, a rank still holding its range whose
// number differs from the root's in bit k sends it to v ^ 2^k and goes
// idle). The fold's block rank of each pair is the even one, or the odd ones
// when the root is an odd rank below 2r (so the root is always in the block).
// There `out` and `flags` (may be null) get the result, bit-identical to
// rhd_allreduce's; other ranks leave them untouched (they may be null).
void rhd_reduce(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                int root = 0);

// Sends `bytes` bytes at `data` on the root to every rank, as the seed's
// broadcast: the root's parity picks the fold ranks in the block (as
// rhd_reduce), a binomial broadcast by distance halving inside the block
// (q/2, ..., 1 from the root's number), then one send from each block rank
// below 2r to its pair. Segments of kRhdBlock * 4 bytes.
void rhd_broadcast(Transport& t, void* data, size_t bytes, int root = 0);

}  // namespace prism::coll
