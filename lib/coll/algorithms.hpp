// The algorithms a Group runs its collectives with: one table, as Open MPI's
// coll/tuned keeps allreduce_algorithms[] and NCCL its tuning table. The
// user's flag (--algo, GroupOptions), its help, the dispatch, the cost
// model's predictions, auto's candidates, the unit matrix and the benchmark
// tools (prism-rank --list-algos --json) all come from kAlgorithms.
//
// Each algorithm is one file with one entry point of one shape (RunFn) and
// its prediction (PredictFn, built from cost_model.hpp's model:: terms):
//   via_switch.cpp  through the PRISM switch (libprism)
//   binomial.cpp  seed 000's binomial tree
//   chain.cpp     seed 000's pipelined chain
//   rhd.cpp       seed 001's recursive halving-doubling, with HCCL's fold
//   ring.cpp      the ring (Open MPI's and NCCL's)
// Adding one: its file, a value in prism/types.hpp's Algorithm, a row here.
// Nothing else: the static_asserts below and tests/unit/test_group.cpp
// fail when a row lacks a run or predict function or a name, and the unit
// matrix (test_coll_matrix) runs every (algorithm, collective) a row offers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "coll/call.hpp"
#include "coll/cost_model.hpp"

namespace prism::coll {

// Runs `c` (checked by check_call) on this rank, with `ctx`'s links or switch.
using RunFn = void (*)(Context& ctx, const Call& c);
// The predicted seconds of `pr` (`param`: the algorithm's own parameter, the
// chain's m; 0: the model's), or nothing when the algorithm cannot run it.
using PredictFn = std::optional<double> (*)(const Problem& pr, const CostParams& c, size_t param);
// The model's choice of the algorithm's parameter (the chain's m), or null.
using TuneFn = size_t (*)(const Problem& pr, const CostParams& c);

// Which roots a rooted collective (reduce, broadcast) may have.
enum class Roots : uint8_t { ANY, ZERO };

constexpr uint32_t bit(Collective c) { return 1u << uint8_t(c); }

struct AlgorithmInfo : Entry<Algorithm> {
  uint32_t runs = 0;  // bit(c) for each collective it runs
  Roots roots = Roots::ANY;
  bool hosts = true;  // among the hosts, over the group's links (false: through the switch)
  RunFn run = nullptr;
  PredictFn predict = nullptr;
  TuneFn tune = nullptr;
};

// The entry points (each in its algorithm's file).
void run_switch(Context& ctx, const Call& c);
void run_binomial(Context& ctx, const Call& c);
void run_chain(Context& ctx, const Call& c);
void run_rhd(Context& ctx, const Call& c);
void run_ring(Context& ctx, const Call& c);
std::optional<double> predict_switch(const Problem& pr, const CostParams& c, size_t);
std::optional<double> predict_binomial(const Problem& pr, const CostParams& c, size_t);
std::optional<double> predict_chain(const Problem& pr, const CostParams& c, size_t segments);
std::optional<double> predict_rhd(const Problem& pr, const CostParams& c, size_t);
std::optional<double> predict_ring(const Problem& pr, const CostParams& c, size_t);

namespace detail {
using C = Collective;
inline constexpr uint32_t kReductions = bit(C::ALLREDUCE) | bit(C::REDUCE);
}  // namespace detail

inline constexpr size_t kAlgorithmCount = 5;  // every Algorithm but AUTO
inline constexpr AlgorithmInfo kAlgorithms[] = {
    {{Algorithm::SWITCH, "switch", "through the PRISM switch (libprism): the switch reduces in flight"},
     detail::kReductions | bit(Collective::BARRIER),
     Roots::ANY,
     false,
     run_switch,
     predict_switch},
    {{Algorithm::BINOMIAL, "binomial", "seed 000's binomial tree"},
     detail::kReductions | bit(Collective::BROADCAST) | bit(Collective::BARRIER),
     Roots::ANY,
     true,
     run_binomial,
     predict_binomial},
    {{Algorithm::CHAIN, "chain", "seed 000's pipelined chain in m segments (to and from rank 0)"},
     detail::kReductions | bit(Collective::BROADCAST),
     Roots::ZERO,
     true,
     run_chain,
     predict_chain,
     model_segments},
    {{Algorithm::RHD, "rhd", "seed 001's recursive halving-doubling, with the fold for p not a power of two"},
     detail::kReductions | bit(Collective::BROADCAST) | bit(Collective::REDUCE_SCATTER) | bit(Collective::ALLGATHER),
     Roots::ANY,
     true,
     run_rhd,
     predict_rhd},
    {{Algorithm::RING, "ring", "the ring (allreduce, reduce_scatter, allgather)"},
     bit(Collective::ALLREDUCE) | bit(Collective::REDUCE_SCATTER) | bit(Collective::ALLGATHER),
     Roots::ANY,
     true,
     run_ring,
     predict_ring},
};
}  // namespace prism::coll

namespace prism {
// The closed-set hook (util/closed_set.hpp, found by argument-dependent
// lookup beside Algorithm): name(), from_name(), choices() of Algorithm.
constexpr std::span<const coll::AlgorithmInfo> entries(Algorithm) { return coll::kAlgorithms; }
}  // namespace prism

namespace prism::coll {

static_assert(std::size(kAlgorithms) == kAlgorithmCount, "every Algorithm but AUTO has a row in kAlgorithms");
static_assert(codes_in_order<Algorithm>(1), "kAlgorithms lists the algorithms in code order, from SWITCH = 1");
constexpr bool every_row_complete() {
  for (const AlgorithmInfo& a : kAlgorithms)
    if (!a.name || !a.doc || !a.runs) return false;
  return true;
}
// (Its run and predict functions: test_group's EveryAlgorithmRowHasAModelForWhatItOffers. A function
// pointer's comparison with null is no constant expression under -fsanitize=undefined.)
static_assert(every_row_complete(), "every row of kAlgorithms has a name, a doc and the collectives it runs");

constexpr std::span<const AlgorithmInfo> algorithms() { return kAlgorithms; }

// Every algorithm, in table order.
std::vector<Algorithm> all_algorithms();

// The row of `a` (null for AUTO or a value that is not an algorithm).
const AlgorithmInfo* algorithm_info(Algorithm a);

// Whether `a` runs `coll` with this root (its row; not whether the group has a switch).
bool runs(Algorithm a, Collective coll, int root = 0);

// Runs `c` with algorithm `a`: check_call first, then the broadcast's root
// copy (in to out), then the row's run. Throws std::invalid_argument when `a`
// does not run `c` (saying which algorithms do).
void run(Algorithm a, Context& ctx, const Call& c);

// "allreduce runs by switch, binomial, ..." (for messages).
std::string who_runs(Collective coll);
// Why `a` does not run `coll` at `root`, and what to do (for messages).
std::string why_not(Algorithm a, Collective coll, int root);

}  // namespace prism::coll
