// The host collectives' cost models and `auto`: the predicted time of each
// algorithm for one collective, from parameters measured on the machine
// (calibrate.hpp), in the seeds' formulas; and the choice of the algorithm
// (and the chain's m) whose prediction is lowest.
//
// Parameters (n: a rank's input bytes; for broadcast and allgather, the bytes
// every rank ends with):
//   alpha  seconds per message, one way (half a small ping-pong round trip)
//   g      seconds per message of a stream of them, beyond their bytes (the
//          binomial tree's blocks, which do not wait for each other)
//   beta   seconds per byte on the wire (the ping-pong's slope)
//   gamma  seconds per input byte reduced: a partial encoded by its sender
//          and merged into the receiver's accumulator (partial_message.hpp),
//          for this op's policy and formats: the reducers' own kernels, at
//          the accumulator size the algorithm works on (gamma_at: the
//          binomial tree's 4096 lanes, RHD's and the ring's up to 65536, the
//          chain's segment)
//   w      a partial's bytes per input byte (KULISCH lane records are wider
//          than fp32; the fp32 policies over bf16 carry fp32: 2)
//   local  seconds per input byte of a rank's own input: an accumulator
//          emptied, the input added, the result rounded (every algorithm
//          pays it once per rank: n local on every critical path, p n local
//          of work)
//   o      a result's bytes per input byte, with its status byte (what the
//          allreduces' broadcasts and allgathers carry: fp32 -> fp32 is 5/4)
// so a reduction step over x input bytes costs alpha + x (w beta + gamma)
// and a step that moves x bytes of results alpha + x o beta.
//
// RHD and the ring run their vector in blocks of 65536 elements, each block
// through the whole algorithm in exchanges that wait for each other: their
// alpha terms are paid once per block (B blocks), the n terms once. The
// binomial tree's blocks of 4096 stream (its sends do not wait), so its alpha
// is paid once per level, as the seed counts it, and each of its B blocks a
// gap g at every level (its root takes L of them a block). With L = ceil(log2 p),
// k = floor(log2 p), q = 2^k, f = 1 when p is not a power of two (else 0),
// R = w beta + gamma (a partial holding a sum, sent and merged), R1 = w1 beta
// + gamma1 (a partial of one rank's own input: every algorithm's first hop;
// gamma_single, partial_ratio_single), O = o beta (a result moved):
//
//  binomial (seed 000: ceil(log2 p)(T_start + n T_byte), the plain tree, a
//  step per level; the root's level-0 partial is a leaf's own input; its
//  blocks stream, so the children's encoding overlaps the root's merging and
//  Rm = w beta + merge_share gamma, Rm1 likewise, are on its path):
//    reduce     L (alpha + B g) + n Rm1 + (L - 1) n Rm
//    broadcast  L (alpha + B' g + n beta), B' its segments of 16 KiB
//    allreduce  reduce + L (alpha + B g + n O)
//  chain (seed 000's pipelined chain in m segments:
//  T(n, p, m) = (T_start + n/m T_byte)(p + m - 2), paced by its slowest hop:
//  R from p = 3 on, R1 at p = 2):
//    reduce     (alpha + n/m R)(p + m - 2)              to rank 0 only
//    broadcast  (alpha + n/m beta)(p + m - 2)           from rank 0 only
//    allreduce  (2 alpha + n/m (R + O))(p + m - 2)
//    m for auto: the seed's m = sqrt(n (p - 2) T_byte / T_start) with that
//    phase's T_start and T_byte (allreduce: 2 alpha and the sum of both), but
//    no fewer than count / kChainMaxSegment: a segment is the chain's memory
//    (its accumulator), bounded as the other algorithms' blocks are.
//  RHD (seed 001's table; the fold and unfold are its non-power-of-two
//  terms), with P = n R1 + (q-1)/q n R when it folds (the odd rank's own
//  input) and n/2 R1 + ((q-1)/q - 1/2) n R at a power of two (the first
//  halving step passes the rank's own half):
//    allreduce  (2k + 2f) B alpha + P + (f + (q-1)/q) n O
//    reduce     (2k + f) B alpha + P + (q-1)/q n O
//    broadcast  L (B' alpha + n beta), B' = the 256 KiB segments of n bytes
//    reduce-scatter, p = q: k B alpha + P; otherwise the seed's three steps:
//      B alpha + n R1 (the fold), sum_{i=1..k} (B alpha + s_i/p n R) (the
//      uneven halving), B alpha + n/p O (the odd ranks' blocks), where s_i =
//      2^(k-i) + min(r, 2^(k-i)) rank blocks is the most step i moves (a
//      folded pair's segment is two blocks): the seed writes ceil(p/2^i), which
//      assumes the pairs spread evenly; s_i lies within the seed's bounds and
//      equals it at p = q + 1 and p = 2q - 1
//    allgather  the same with beta for R, R1 and O
//  ring (Open MPI's and NCCL's; the reduce-scatter's first step passes the
//  rank's own input on):
//    allreduce       2(p-1) B alpha + n/p R1 + (p-2)/p n R + (p-1)/p n O
//    reduce-scatter  (p-1) B alpha + n/p R1 + (p-2)/p n R
//    allgather       (p-1) B alpha + (p-1)/p n beta
//  switch (measured end to end through the PRISM switch: a rank sends n and
//  receives the result at once, the switch reduces in flight):
//    allreduce, reduce  switch_alpha + n switch_beta
// Every host algorithm's reduction adds n local (a rank's own input).
//
// The work bound. The formulas above are critical paths: they assume every
// rank has a core of its own. Where ranks share a host, they also cannot
// finish before the host has done their work: every algorithm's time is at
// least W * ranks_per_host / (p * host_cores), W being the per-byte work of
// every rank together (each partial moved and merged, each result moved; the
// alpha terms are waiting, not work):
//    allreduce  s n R1 + (p-1-s) n R + (p-1) n O + p n local   (any algorithm:
//               p-1 merges and p-1 copies per element; s of the partials carry
//               one rank's own input: floor(p/2) for the binomial tree, 1 for
//               the chain and the ring, r + (q-r)/2 for RHD)
//    reduce     the same without the copies (+ n O for RHD's gather)
//    reduce-scatter the same without the copies; allgather, broadcast (p-1) n beta
// (gamma at the algorithm's accumulator size). With one rank per core it
// never binds (a rank's share is at most its critical path); with more
// ranks than cores (the benchmark's p > 2 on two vCPUs) it is Brent's lower
// bound T >= T_1 / P, and to it come the wake-ups: each message the
// algorithm waits for, one after another (its critical path's alpha terms:
// the ring 2 (p-1) B, RHD (2k + 2f) B, the chain 2 (p + m - 2), the binomial
// tree 2 L (1 + B) for an allreduce), finds its sender off a core with the
// odds 1 - host_cores / ranks_per_host and costs alpha:
//    T = max(path, W * share + (1 - host_cores / ranks_per_host) * waits * alpha)
// (tools/auto_replay.py scores this against recorded runs: 70% -> 78% of
// cells within 10% of the fastest over six runs, docs/HOST_COLLECTIVES.md).
// With p = 1 every collective costs 0 (no message).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "prism/types.hpp"

namespace prism::coll {

// Algorithm and Collective are prism/types.hpp's; their tables (names, what
// runs what, each algorithm's run and predict functions) are algorithms.hpp's.

struct CostParams {
  double alpha = 0;          // s per message
  double beta = 0;           // s per byte on the wire between hosts
  double gamma = 0;          // s per input byte reduced (encode + merge a partial), for this op, at
                             // accumulators of kGammaSmallLanes lanes (cache-resident)
  double gamma_large = -1;   // the same at kGammaLargeLanes lanes (< 0: as gamma)
  double partial_ratio = 1;  // w: partial bytes per input byte
  // The same two for a partial of one rank's own input, which takes the cheap
  // encoding (KULISCH over fp32: the elements themselves): every algorithm's
  // first hop (< 0: as gamma, partial_ratio).
  double gamma_single = -1, partial_ratio_single = -1;
  // s per input byte of what every rank does to its own input whatever the
  // algorithm: an accumulator emptied, the input added, the result rounded
  // (at kGammaSmallLanes lanes; local_large at kGammaLargeLanes, < 0: as local).
  double local = 0, local_large = -1;
  // Merging's part of gamma (and of gamma_single); encoding is the rest. The
  // binomial tree's blocks stream, so a parent merges one block while its
  // child encodes the next: only the merges are on the root's path.
  double merge_share = 1, merge_share_single = 1;
  // s per message of a stream, beyond its bytes (what the binomial tree's
  // blocks pay at the rank that takes them: they do not wait for each
  // other, so alpha is not theirs, but each is still a call).
  double gap = 0;
  double out_ratio = 1;  // o: result bytes per input byte
  // Ranks that share a host share its cores: the most ranks on one host, and
  // that host's cores (the work bound below).
  double ranks_per_host = 1, host_cores = 1;
  // Through the switch, when one is a candidate: a collective of n input
  // bytes takes switch_alpha + n * switch_beta.
  bool have_switch = false;
  double switch_alpha = 0, switch_beta = 0;
};

// gamma is measured at two accumulator sizes: the binomial tree's blocks and
// RHD's and the ring's (which may not fit a cache: KULISCH fp32 keeps about
// 55 bytes a lane). gamma_at interpolates in log2(lanes) between them.
inline constexpr size_t kGammaSmallLanes = 4096, kGammaLargeLanes = 65536;
double gamma_at(const CostParams& c, double lanes);
double local_at(const CostParams& c, double lanes);

struct Problem {
  Collective coll = Collective::ALLREDUCE;
  int p = 1;              // ranks
  size_t count = 0;       // elements per rank (broadcast, allgather: in the whole vector)
  size_t elem_bytes = 4;  // input element size (broadcast, allgather: the element size moved)
  int root = 0;           // reduce and broadcast
};

// The predicted seconds of `algo` for `pr` (with m = `segments` for the
// chain; 0 means the model's m), or nothing when `algo` does not run that
// collective (its row in kAlgorithms says which it runs; the switch's
// prediction also needs have_switch). Throws std::invalid_argument for AUTO.
std::optional<double> predict(Algorithm algo, const Problem& pr, const CostParams& c, size_t segments = 0);

// The chain's m for `pr`: the seed's optimum (chain_optimal_segments) with
// T_start and T_byte as above, at least count / kChainMaxSegment, at most the
// element count.
size_t model_segments(const Problem& pr, const CostParams& c);

// What every algorithm's prediction is built from (the algorithms' own
// predict functions, in their files, use them).
namespace model {

int ceil_log2(int p);
int floor_log2(int p);
double blocks(size_t count, size_t block);            // count / block, rounded up, at least 1
double block_lanes(const Problem& pr, size_t block);  // the accumulator's lanes: min(count, block)

// The per-byte costs of the two kinds of step.
struct Rates {
  double reduce;  // w beta + gamma: a partial sent and merged, per input byte
  double result;  // o beta: a result moved, per input byte
  double raw;     // beta: bytes moved as they are (broadcast, allgather)
  double first;   // w1 beta + gamma1: a partial of one rank's own input
};
// With gamma at an accumulator of `lanes` lanes.
Rates rates(const CostParams& c, double lanes);

// A host algorithm's prediction from its critical path `path` (seconds, or
// nothing when it does not run `pr`): + each rank's own input (n local), and
// no less than the work bound, where `own` of the p - 1 partials per element
// carry one rank's own input, the accumulators have `lanes` lanes and
// `extra_work` seconds of the algorithm's own are added to the group's work
// (p = 1: 0).
std::optional<double> host(const Problem& pr, const CostParams& c, std::optional<double> path, double waits, double own,
                           double lanes, double extra_work = 0);

}  // namespace model

struct Choice {
  Algorithm algo = Algorithm::BINOMIAL;
  size_t segments = 0;  // the chain's m (0 for the others)
  double seconds = 0;   // predicted
};

// Every algorithm of `allowed` that runs `pr`, with its prediction (the chain
// at model_segments), in `allowed`'s order.
std::vector<Choice> candidates(const Problem& pr, const CostParams& c, std::span<const Algorithm> allowed);

// `auto`: the candidate with the lowest prediction (the first of `allowed`
// on a tie). Throws std::invalid_argument when none runs `pr`.
Choice choose(const Problem& pr, const CostParams& c, std::span<const Algorithm> allowed);

// The most elements model_segments puts in one chain segment.
inline constexpr size_t kChainMaxSegment = 65536;

}  // namespace prism::coll
