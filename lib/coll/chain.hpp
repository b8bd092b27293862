// Seed 000's pipelined reduction along a chain (linear array): reduce,
// broadcast and allreduce over Links, in PRISM's arithmetic, for any
// number of ranks p and segments m.
//
// The vector is split into m contiguous segments (n / m elements each, one
// more for the first n % m; empty segments when n < m are skipped by every
// rank). The ranks form the chain p-1 -> p-2 -> ... -> 0, so the result ends
// at rank 0, the root the seed's reduce leaves it at. Reduce: for segment
// s = 0..m-1, rank p-1 sends its part of s to p-2; every other rank r adds
// its own part of s to the partial it receives from r+1 and passes it on to
// r-1; rank 0 rounds. Segment s leaves rank r at step s + (p-1-r) + 1, so the
// pipeline is p + m - 2 steps deep, as the seed's formula counts.
// Broadcast runs the chain backwards (0 -> 1 -> ... -> p-1), segment by
// segment; allreduce = reduce + broadcast of the finalized segments (with
// their flags).
//
// What a partial is, per policy (as binomial.hpp):
//  - KULISCH_FIXED and integer inputs: the accumulator's exact state
//    (partial_message.hpp); rank 0 rounds once, so every rank's result is
//    bit-identical to one accumulator fed every rank's input.
//  - FP32_ARRIVAL and FP32_BINOMIAL: a rounded fp32 sum; each rank's add
//    rounds (fl32(x_r + partial)). These bits are the chain's own order.
//
// Memory per rank: one segment's accumulator and messages (count / m
// elements): m is also the memory knob.
// Cost (seed 000's model of the pipelined chain, n bytes, m segments):
// T(n, p, m) = (T_start + n/m * T_byte)(p + m - 2), least at
// m = sqrt(n (p-2) T_byte / T_start); allreduce pays it twice.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/links.hpp"
#include "coll/partial_message.hpp"

namespace prism::coll {

// The steps behind this algorithm's run function (algorithms.hpp: run_X). Their
// arguments are checked once, before, by coll::run's check_call (formats, root,
// buffers, the chain's m >= 1), and asserted here; call them through
// coll::run or a Group. Only an op the arithmetic does not admit is refused
// (std::invalid_argument) before any message, as check_call does.

// The split of n elements into m segments: segment s starts at
// chain_segment_start(n, m, s) (s = m gives n); the first n % m are one larger.
size_t chain_segment_start(size_t n, size_t m, size_t s);

// Reduces `count` elements of op.dtype (at `in` on every rank) to rank 0 in
// `segments` (>= 1) pipelined segments: there `out` gets count elements of
// op.out and `flags` (may be null) one status byte per element; other ranks
// leave both untouched (they may be null there). Throws
// std::invalid_argument for an inadmissible op,
// CollectiveError or LinkError when the group fails.
void chain_reduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                  size_t segments);

// Sends `bytes` bytes at `data` on rank 0 to `data` on every rank, up the
// chain 0 -> 1 -> ... -> p-1 in `segments` pipelined segments.
void chain_broadcast(Links& t, void* data, size_t bytes, size_t segments);

// Every rank gets rank 0's reduce result (`out`, and `flags`: may be null).
void chain_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                     size_t segments);

// The chain's m without a model: 8, and at most kChainMaxSegment elements a segment.
size_t chain_default_segments(size_t count);

// The pipelined chain's model (seed 000): T(n, p, m) = (T_start + n/m *
// T_byte)(p + m - 2) for n bytes over p ranks in m segments.
double chain_model_time(double n, int p, double m, double t_start, double t_byte);

// The seed's optimal m = sqrt(n (p-2) T_byte / T_start), as an integer: of
// the two integers around it, the one with the smaller model time (the
// smaller on a tie), clamped to 1..n (1 when p <= 2 or n <= 1).
size_t chain_optimal_segments(size_t n, int p, double t_start, double t_byte);

}  // namespace prism::coll
