// One collective call, as every algorithm takes it (one shape: algorithms.hpp's
// RunFn), and the checks made once for every algorithm before it runs.
//
// Buffers, per collective (count: elements of the whole vector):
//   allreduce       in: count of op.dtype; out: count of op.out (every rank)
//   reduce          in: count of op.dtype; out: count of op.out (the root; null elsewhere)
//   broadcast       in: count of op.dtype (the root; null elsewhere); out: count of op.dtype (every rank;
//                   the root's may be `in` itself)
//   reduce_scatter  in: count of op.dtype; out: this rank's block of op.out (blocks.hpp's split)
//   allgather       in: this rank's block of op.dtype; out: count of op.dtype
//   barrier         none (count 0)
// `flags`, when not null, gets a status byte (flag::OVERFLOW, INVALID,
// NAN_INPUT) per element of this rank's reduced result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>

#include "coll/links.hpp"
#include "coll/partial_message.hpp"
#include "prism/types.hpp"
#include "util/closed_set.hpp"

namespace prism {

inline constexpr size_t kCollectiveCount = 6;
inline constexpr Entry<Collective> kCollectives[] = {
    {Collective::ALLREDUCE, "allreduce", "every rank receives the sum"},
    {Collective::REDUCE, "reduce", "the root receives the sum"},
    {Collective::BROADCAST, "broadcast", "every rank receives the root's input"},
    {Collective::REDUCE_SCATTER, "reduce_scatter",
     "rank r receives block r of the sum (blocks in rank order, the first count % p one larger)"},
    {Collective::ALLGATHER, "allgather", "every rank receives block r of rank r's input, for every r"},
    {Collective::BARRIER, "barrier", "no rank leaves before every rank has entered"},
};
static_assert(std::size(kCollectives) == kCollectiveCount, "every Collective has a row in kCollectives");
constexpr std::span<const Entry<Collective>> entries(Collective) { return kCollectives; }

namespace coll {

struct Call {
  Collective coll = Collective::ALLREDUCE;
  const void* in = nullptr;
  void* out = nullptr;
  uint8_t* flags = nullptr;
  size_t count = 0;
  ReduceOp op;
  int root = 0;         // reduce and broadcast
  size_t segments = 0;  // the chain's m (0: the model's, when the group has a calibration, else its default)
};

// Whether a collective reduces (has an op and flags), has a root.
constexpr bool reduces(Collective c) {
  return c == Collective::ALLREDUCE || c == Collective::REDUCE || c == Collective::REDUCE_SCATTER;
}
constexpr bool rooted(Collective c) { return c == Collective::REDUCE || c == Collective::BROADCAST; }

// This rank's result of `c` in a group of `p`: its elements, their size and
// where they start in the whole vector (0 elements: a reduce's other ranks).
struct ResultShape {
  size_t elems = 0, esz = 0, first = 0;
};
ResultShape result_shape(const Call& c, int rank, int p);

// What this rank's input is: elements and their size (allgather: its block).
ResultShape input_shape(const Call& c, int rank, int p);

// The checks every algorithm would make, made once: the formats and the op's
// admission (reducing collectives), the root, the buffers this rank needs.
// Throws std::invalid_argument saying what is wrong and what to give.
void check_call(const Call& c, int rank, int p);

// The switch, as an algorithm sees it: libprism's Communicator, given by the
// group that has one (lib/group). run() makes an allreduce, reduce or barrier.
class SwitchPath {
 public:
  virtual ~SwitchPath() = default;
  virtual void run(const Call& c) = 0;
};

// What an algorithm runs on.
struct Context {
  int rank = 0, size = 1;            // this rank in its group
  Links* links = nullptr;            // the group's links to its other ranks (null: a switch-only group)
  SwitchPath* via_switch = nullptr;  // the group's switch, when it has one
};

}  // namespace coll
}  // namespace prism
