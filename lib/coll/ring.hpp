// Ring allreduce (as Open MPI's and NCCL's ring): a reduce-scatter then an
// allgather around the ring r -> r+1 (mod p), p-1 steps each, over a
// Links, in PRISM's arithmetic, for any number of ranks p.
//
// A block of n elements is split into p contiguous segments (n / p elements,
// one more for the first n % p; empty ones, when n < p, are not sent).
//  - Reduce-scatter, step k = 0..p-2: rank r sends its partial of segment
//    (r - k) mod p to r+1 and adds the partial of segment (r - k - 1) mod p
//    from r-1 into its own. After p-1 steps r holds segment (r + 1) mod p
//    summed over every rank and rounds it there: the one rounding.
//  - Allgather, step k = 0..p-2: r sends the finalized segment
//    (r + 1 - k) mod p (with its flags) to r+1 and takes (r - k) mod p from
//    r-1.
//
// What a partial is, per policy (as binomial.hpp):
//  - KULISCH_FIXED and integer inputs: the accumulator's exact state
//    (partial_message.hpp), so every rank's result is bit-identical to one
//    accumulator fed every rank's input.
//  - FP32_ARRIVAL and FP32_BINOMIAL: a rounded fp32 sum, each step an fp32
//    addition in the ring's order (segment s is summed over ranks s, s+1,
//    ..., s-1 mod p): the ring's own bits, the same on every rank (the
//    allgather copies one rounding to all).
//
// The vector goes in blocks of ring_block(p) elements, each through the whole
// ring before the next; ring_reduce_scatter and ring_allgather go in rounds
// of about ring_block(p) elements, a piece of every rank's block each
// (blocks.hpp), and shift the segments by one so that rank r ends with
// segment r (its block): step k sends (r - 1 - k) and adds (r - 2 - k) in
// the reduce-scatter, sends (r - k) and takes (r - 1 - k) in the allgather.
// Cost (alpha-beta-gamma, n bytes per block):
// 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma.
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

// The block: 65536 elements at p = 2, 262144 above. Every block is a full
// pass of 2(p - 1) steps, each waiting for a peer's wake-up: at p = 3..8 the
// larger block ran the ring 1.15x (FP32_ARRIVAL) and 1.11x (KULISCH) faster
// in the median over 1-64 MiB, TCP and shared memory (two bench_coll runs of
// each; docs/HOST_COLLECTIVES.md); at p = 2, one step each way, it lost
// 5-17% over shared memory (a KULISCH accumulator of 131072 lanes a segment
// no longer in cache) for 10-25% over TCP: kept small there.
inline constexpr uint32_t kRingBlock = 65536;
inline constexpr uint32_t kRingBlockWide = 262144;
inline constexpr uint32_t ring_block(int p) { return p <= 2 ? kRingBlock : kRingBlockWide; }

// Every rank gets the sum of every rank's `count` elements of op.dtype (at
// `in`): `out` gets count elements of op.out and `flags` (may be null) one
// status byte per element. Throws std::invalid_argument for an inadmissible
// op, CollectiveError or LinkError when the group fails.
void ring_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags);

// MPI's reduce-scatter (uneven split allowed): every rank passes all `count`
// elements; rank r gets its block (coll_block_start(count, p, r) ..
// (count, p, r+1)) of the sum: `out` its block's elements of op.out (may be
// null when the block is empty), `flags` (may be null) a status byte each.
// Exact policies: one accumulator's bits; fp32 ones: segment s summed over
// ranks s+1, ..., s (mod p), not the allreduce's order.
// Cost: (p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma (with an uneven
// split, a step moves the largest block: n/p -> ceil(count/p) elements).
void ring_reduce_scatter(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags);

// MPI's allgather (uneven split allowed): rank r passes its block of `count`
// elements of `elem_bytes` bytes at `my_block` (may be null when empty);
// every rank gets all count elements in rank order at `out` (not
// overlapping my_block). Cost: (p-1) alpha + (p-1)/p n beta.
void ring_allgather(Links& t, const void* my_block, void* out, size_t count, size_t elem_bytes);

}  // namespace prism::coll
