// Seed 001's Recursive Halving-Doubling (HCCL's RHD): allreduce as a
// reduce-scatter by vector halving and distance doubling, then an allgather
// by vector doubling and distance halving, over Links, in PRISM's
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
// The reduce-scatter and allgather collectives run the same steps in the
// other order of distances (rhd_reduce_scatter below), so that segments end
// where MPI wants the blocks.
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
// messages); rhd_reduce_scatter and rhd_allgather go in rounds of about
// kRhdBlock elements, a piece of every rank's block each (blocks.hpp).
// Every rank calls the same function with the same op and count;
// a rank that sees another op's partial or a result range of the wrong size
// throws CollectiveError.
// Cost (seed 001's alpha-beta-gamma model: alpha per message, beta per
// byte sent, gamma per byte reduced; n bytes, p ranks, q = 2^floor(log2 p),
// k = log2 q, r = p - q; per block of kRhdBlock elements): see each
// function below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/blocks.hpp"
#include "coll/links.hpp"
#include "coll/partial_message.hpp"

namespace prism::coll {

// The steps behind this algorithm's run function (algorithms.hpp: run_X). Their
// arguments are checked once, before, by coll::run's check_call (formats, root,
// buffers, the chain's m >= 1), and asserted here; call them through
// coll::run or a Group. Only an op the arithmetic does not admit is refused
// (std::invalid_argument) before any message, as check_call does.

inline constexpr uint32_t kRhdBlock = 65536;

// The split of n elements into q contiguous segments: segment s starts at
// rhd_segment_start(n, q, s) (s = q gives n); the first n % q are one larger
// (coll_block_start's rule, blocks.hpp).
size_t rhd_segment_start(size_t n, size_t q, size_t s);

// Every rank gets the sum of every rank's `count` elements of op.dtype (at
// `in`): `out` gets count elements of op.out and `flags` (may be null) one
// status byte per element (flag::OVERFLOW, INVALID, NAN_INPUT).
// Throws std::invalid_argument for an inadmissible op, CollectiveError or
// LinkError when the group fails.
// Cost, power-of-two p: 2 log2 p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma.
// Otherwise (the fold and unfold, whole vectors, around the power-of-two
// algorithm on q ranks): (2k + 2) alpha + (2 (q-1)/q + 2) n beta +
// ((q-1)/q + 1) n gamma.
void rhd_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags);

// Reduce to `root`, as the seed's "ReduceScatter + Gather": the fold, the
// reduce-scatter above, then a gather to the root by vector doubling and
// distance halving (at step k = m-1..0, a rank still holding its range whose
// number differs from the root's in bit k sends it to v ^ 2^k and goes
// idle). The fold's block rank of each pair is the even one, or the odd ones
// when the root is an odd rank below 2r (so the root is always in the block).
// There `out` and `flags` (may be null) get the result, bit-identical to
// rhd_allreduce's; other ranks leave them untouched (they may be null).
// Cost, power-of-two p: 2 log2 p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma;
// otherwise
// (2k + 1) alpha + (2 (q-1)/q + 1) n beta + ((q-1)/q + 1) n gamma.
void rhd_reduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags, int root = 0);

// Sends `bytes` bytes at `data` on the root to every rank, as the seed's
// broadcast: the root's parity picks the fold ranks in the block (as
// rhd_reduce), a binomial broadcast by distance halving inside the block
// (q/2, ..., 1 from the root's number), then one send from each block rank
// below 2r to its pair. Segments of kRhdBlock * 4 bytes.
// Cost: ceil(log2 p) (alpha + n beta).
void rhd_broadcast(Links& t, void* data, size_t bytes, int root = 0);

// MPI's reduce-scatter (uneven split allowed): every rank passes all `count`
// elements of op.dtype at `in`; rank r gets its block of the sum
// (coll_block_start(count, p, r) .. (count, p, r+1)): `out` gets its block's
// elements of op.out (may be null when the block is empty) and `flags` (may
// be null) one status byte per element of the block. Bits as
// rhd_allreduce's per policy (exact ones: one accumulator fed every input,
// rounded once at the owner; fp32 ones: RHD's own order, here the seed's
// distance halving, so not the allreduce's bits).
// The seed's "vector doubling, distance halving to keep the scatter order":
// 1. fold (p not a power of two): 2i+1 sends its whole partial to 2i, i < r;
// 2. on the q block ranks, v exchanges with v ^ q/2, ..., v ^ 1, halving its
//    range of segments each time; segment v is the blocks of the ranks
//    numbered v (2v and 2v+1 for v < r: an uneven split), so v ends owning
//    its own ranks' blocks in rank order (no exchange to put them in order)
//    and rounds them there;
// 3. scatter: 2i sends 2i+1 its finalized block (with flags).
// Cost, power-of-two p: log2 p alpha + (p-1)/p n beta + (p-1)/p n gamma.
// Otherwise: fold alpha + n beta + n gamma; the uneven halving steps
//   k alpha + S n/p (beta + gamma), S = sum_{i=1..k} (2^(k-i) + min(r, 2^(k-i)))
//   (the largest range sent at step i, in blocks: the seed writes
//   sum ceil(p / 2^i), doubles spread evenly; both lie within its bounds
//   k + 2^k - 1 <= S <= 2^(k+1) - 2, equal to them at p = q + 1 and 2q - 1);
// scatter alpha + n/p beta. In all: (k + 2) alpha + (1 + (S + 1)/p) n beta +
// (1 + S/p) n gamma.
void rhd_reduce_scatter(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags);

// MPI's allgather (uneven split allowed): rank r passes its block of `count`
// elements of `elem_bytes` bytes (coll_block_start(count, p, r) ..
// (count, p, r+1), at `my_block`; may be null when empty); every rank gets
// all `count` elements, in rank order, at `out` (count * elem_bytes bytes;
// my_block may not overlap it). The seed's allgather, the reduce-scatter
// reversed:
// 1. gather in the fold pairs: 2i+1 sends its block to 2i, i < r;
// 2. v exchanges its range of segments with v ^ 1, ..., v ^ q/2, doubling it;
// 3. unfold: 2i sends the whole vector to 2i+1.
// Cost, power-of-two p: log2 p alpha + (p-1)/p n beta. Otherwise: alpha +
// n/p beta, k alpha + S n/p beta (S as for the reduce-scatter), alpha + n
// beta: (k + 2) alpha + (1 + (S + 1)/p) n beta. No gamma.
void rhd_allgather(Links& t, const void* my_block, void* out, size_t count, size_t elem_bytes);

}  // namespace prism::coll
