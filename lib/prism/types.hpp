// PRISM's vocabulary: the closed sets a program names when it asks for a
// collective, with their wire codes where they have one (docs/PROTOCOL.md). The library uses
// these very enums (lib/format/format.hpp, lib/arith/op.hpp and
// lib/coll/algorithms.hpp add their tables: names, docs, parsing, dispatch), so the public API and the library speak
// one language, with no casts between them.
//
// Self-contained (the standard library only): installed as <prism/types.hpp>
// beside prism.hpp.
#pragma once

#include <cstdint>

namespace prism {

// Element formats (docs/ARITHMETIC.md).
enum class Format : uint8_t {
  FP32 = 1,
  FP16 = 2,
  BF16 = 3,
  E4M3FN = 4,
  E4M3FNUZ = 5,
  E5M2 = 6,
  E5M2FNUZ = 7,
  INT8 = 8,
  INT32 = 9,
};

// How a sum is made: fp32 in arrival order, exact with one rounding, or fp32
// in the fixed binomial order over the ranks.
enum class Policy : uint8_t { FP32_ARRIVAL = 1, KULISCH_FIXED = 2, FP32_BINOMIAL = 3 };

// How a partial sum is encoded when it travels (between switches of a tree):
// rounded to the output format, as exact lane records, or the smaller of the
// two where rounding is exact.
enum class PartialTransport : uint8_t { ROUNDED = 1, KULISCH = 2, AUTO = 3 };

// What a result outside the output format's range becomes.
enum class Exceptions : uint8_t { IEEE = 1, SATURATE = 2 };

// The collectives a Group runs (prism/group.hpp).
enum class Collective : uint8_t { ALLREDUCE, REDUCE, BROADCAST, REDUCE_SCATTER, ALLGATHER, BARRIER };

// How a Group runs a collective: through the PRISM switch, or among the hosts
// by one of the seeds' algorithms; AUTO lets the cost model choose.
enum class Algorithm : uint8_t { AUTO = 0, SWITCH = 1, BINOMIAL = 2, CHAIN = 3, RHD = 4, RING = 5 };

}  // namespace prism
