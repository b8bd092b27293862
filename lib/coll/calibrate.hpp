// Measuring the cost model's parameters (cost_model.hpp) on this machine,
// each alone (the other ranks wait), as the model's critical paths assume:
//  - alpha by a token of 8 bytes passed around every rank, 32 laps: the
//    median lap over p (each rank waits for its peer, idle, as in a
//    collective: on a VM a halted vCPU takes tens of microseconds to wake,
//    one that has just gone idle a few; a lone ping-pong sees mostly the
//    second, the collectives mostly the first);
//  - beta by ping-pong between ranks 0 and 1 over the group's own
//    Links: the least-squares slope of the half round trip over messages
//    of 64 KiB to 4 MiB (each size's median of several round trips);
//  - the gap g by ranks 0 and 1 too: 64 messages of the binomial tree's
//    blocks (16 KiB) one way and 8 bytes back, the median time per message
//    less its bytes (beta) and the round trip's share;
//  - gamma, w and o by the reducers' own code on a sample of rank 0's input:
//    one accumulator holding x, another holding x + y (y: x shifted by one
//    element, so the partial is a real sum), and the median time of
//    encode_partial of the second plus merge_partial into the first, per
//    input byte, at kGammaSmallLanes lanes (gamma) and at kGammaLargeLanes
//    (gamma_large), and with the second holding x alone (gamma_single and
//    partial_ratio_single: one rank's own input, every algorithm's first
//    hop); w is that partial's size per input byte, o a result
//    element's bytes and its status byte (what the chain, RHD and ring move;
//    the binomial tree leaves the status bytes out of a block without flags)
//    over the input element's;
//  - the hosts: every rank tells rank 0 its host (the kernel's boot id, the
//    same in every network namespace of one machine) and the cores it may
//    run on; ranks_per_host is the most ranks on one host, host_cores that
//    host's cores (the model's work bound).
// Collective: every rank of the group calls it, and rank 0's figures reach
// every rank (a binomial broadcast), so every rank's `auto` makes the same
// choice.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coll/cost_model.hpp"
#include "coll/links.hpp"
#include "coll/partial_message.hpp"

namespace prism::coll {

struct PingPoint {
  size_t bytes = 0;
  double half_rtt = 0;  // seconds: the median round trip, halved
};

struct Calibration {
  CostParams params;
  std::vector<PingPoint> ping;  // rank 0's measurements (empty elsewhere and for p = 1)
};

struct CalibrateOptions {
  int round_trips = 8;  // per message size (4 MiB: a quarter of that, at least 2)
  int reduce_runs = 5;
};

// Measures alpha and beta (0 for p = 1) and gamma, w and o
// for `op` from `sample` (the first `count` elements of op.dtype of rank 0's
// input: at most kGammaLargeLanes are used), and gives every rank rank 0's figures.
// Throws LinkError when the group fails.
Calibration calibrate(Links& t, const ReduceOp& op, const void* sample, size_t count, const CalibrateOptions& o = {});

// gamma, w and o alone (no messages): CostParams with alpha = beta = 0.
CostParams measure_reduce(const ReduceOp& op, int p, const void* sample, size_t count, int runs = 5);

// CostParams as one JSON object ({"alpha": ..., ...}) and back (yaml-cpp
// reads it); parse throws std::invalid_argument naming a missing or bad key.
std::string to_json(const CostParams& c);
CostParams cost_params_from_json(const std::string& text);

// A calibration file: the parameters with what they were measured for. gamma
// and w belong to one op, the host figures (ranks per host) to one group
// size, so a file records both and reading it for another op or group size
// is refused (it would predict another machine's costs).
//   {"op": "fp32->fp32 kulisch ieee", "ranks": 4, "alpha": ..., ...}
struct CalibrationFile {
  std::string op;  // op_key() of the op it was measured for ("" in an older file: any)
  int ranks = 0;   // the group's size when measured (0 in an older file: any)
  CostParams params;
};
std::string op_key(const ReduceOp& op);  // "fp32->fp32 kulisch ieee"
std::string calibration_json(const CalibrationFile& f);
// Throws std::invalid_argument naming the key that is missing or bad.
CalibrationFile calibration_from_json(const std::string& text);
// Reads `path` for `op` in a group of `ranks`. Throws std::invalid_argument
// saying what is wrong (unreadable, malformed, another op, another group
// size) and how to make a right one.
CostParams read_calibration(const std::string& path, const ReduceOp& op, int ranks);

}  // namespace prism::coll
