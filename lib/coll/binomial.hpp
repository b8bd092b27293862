// Seed 000's binomial tree: reduce, broadcast (its reverse) and allreduce
// (reduce, then broadcast of the result) over Links, in PRISM's
// arithmetic, for any number of ranks p.
//
// Reduce, in ceil(log2 p) steps, with ranks relabelled v = (rank - root) mod p
// so that the root is v = 0: at step k, v with bit k set (its lower bits are
// clear, or it went idle earlier) sends x_v to v - 2^k and goes idle;
// otherwise, when v + 2^k < p, it receives x_{v+2^k} and sets
// x_v <- x_v (+) x_{v+2^k}. The result is at v = 0.
// Broadcast runs the same edges backwards, the highest step first.
//
// What (+) is, per policy:
//  - KULISCH_FIXED and integer inputs: x_v is an accumulator's exact state;
//    partials travel losslessly (partial_message.hpp) and the root rounds
//    once, so the result is bit-identical to one accumulator fed every
//    rank's input, for any p and root.
//  - FP32_ARRIVAL and FP32_BINOMIAL: x_v is a rounded fp32 sum, and (+) an
//    fp32 addition. The tree's pairing is the seed's, which is the one
//    FP32_BINOMIAL's accumulator folds (accumulator_fp32.cpp: x_i <- x_i +
//    x_{i+2^k} for i a multiple of 2^(k+1)) over the relabelled ranks, so both
//    policies give that accumulator's bits (with rank index v as the
//    contribution index): FP32_ARRIVAL's "arrival order" here is the tree's.
//
// The vector goes in blocks of kBinomialBlock elements, each reduced through
// the whole tree before the next (memory per rank: one block's accumulator
// and messages). Sends do not wait for the receiver, so blocks pipeline down
// the tree. Every rank of the group calls the same function with the same op,
// count and root; a rank that sees another op's partial throws
// CollectiveError, and one that gets a message of another call (another
// count or root: the links' call tags, links.hpp) a LinkError naming both.
// Cost (plain binomial tree, seed 000's model for this shape, not the
// pipelined chain's): ceil(log2 p) * (T_start + n * T_byte) for n bytes, plus
// the same again for the broadcast of allreduce.
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

inline constexpr uint32_t kBinomialBlock = 4096;

// Reduces `count` elements of op.dtype (little-endian, at `in` on every
// rank) to the root: there `out` gets count elements of op.out and `flags`
// (may be null) one status byte per element (flag::OVERFLOW, INVALID,
// NAN_INPUT); other ranks leave both untouched (they may be null there).
// Throws std::invalid_argument for an inadmissible op,
// CollectiveError or LinkError when the group fails.
void binomial_reduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                     int root = 0);

// Sends `bytes` bytes at `data` on the root to `data` on every rank, down
// the binomial tree, in segments of kBinomialBlock * 4 bytes.
void binomial_broadcast(Links& t, void* data, size_t bytes, int root = 0);

// Every rank gets the root's reduce result: `out` (count elements of op.out)
// and `flags` (may be null on any rank). The broadcast carries the finalized
// elements (and the flags, when any is set) block by block.
void binomial_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                        int root = 0);

}  // namespace prism::coll
