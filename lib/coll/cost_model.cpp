#include "coll/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "coll/binomial.hpp"
#include "coll/chain.hpp"
#include "coll/rhd.hpp"
#include "coll/ring.hpp"

namespace prism::coll {
namespace {

using C = CollectiveKind;

int ceil_log2(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

int floor_log2(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

double blocks(size_t count, size_t block) { return double(std::max<size_t>(1, (count + block - 1) / block)); }

// The per-byte costs of the two kinds of step.
struct Rates {
  double reduce;  // w beta + gamma: a partial sent and merged, per input byte
  double result;  // o beta: a result moved, per input byte
  double raw;     // beta: bytes moved as they are (broadcast, allgather)
  double first;   // w1 beta + gamma1: a partial of one rank's own input
};

// With gamma at an accumulator of `lanes` lanes.
Rates rates(const CostParams& c, double lanes) {
  const double g = gamma_at(c, lanes);
  const double g1 = c.gamma_single < 0 ? g : (c.gamma > 0 ? c.gamma_single * g / c.gamma : c.gamma_single);
  const double w1 = c.partial_ratio_single < 0 ? c.partial_ratio : c.partial_ratio_single;
  return {c.partial_ratio * c.beta + g, c.out_ratio * c.beta, c.beta, w1 * c.beta + g1};
}

double block_lanes(const Problem& pr, size_t block) { return double(std::min<size_t>(pr.count, block)); }

// Sends do not wait for the receiver: the blocks stream down the tree, and
// alpha is paid once per level, as the seed counts it.
// The root's first partial (level 0) is one rank's own input.
std::optional<double> binomial(const Problem& pr, const CostParams& c, double n) {
  const double L = ceil_log2(pr.p);
  const Rates r = rates(c, block_lanes(pr, kBinomialBlock));
  // The children encode the next block while the root merges this one: on
  // the root's path, each partial's bytes and its merge.
  const double w1 = c.partial_ratio_single < 0 ? c.partial_ratio : c.partial_ratio_single;
  const double merge = c.partial_ratio * c.beta + c.merge_share * (r.reduce - c.partial_ratio * c.beta);
  const double merge1 = w1 * c.beta + c.merge_share_single * (r.first - w1 * c.beta);
  const double reduce = L * c.alpha + n * merge1 + (L - 1) * n * merge;
  switch (pr.coll) {
    case C::REDUCE: return reduce;
    case C::BROADCAST: return L * (c.alpha + n * r.raw);
    case C::ALLREDUCE: return reduce + L * (c.alpha + n * r.result);
    default: return std::nullopt;
  }
}

// T_start and T_byte of the chain's model for this collective, with gamma at
// segments of `lanes` lanes. The pipeline's pace is its slowest hop: one that
// passes a sum on (p >= 3), or at p = 2 the one hop, rank 1's own input.
std::optional<std::pair<double, double>> chain_terms(const Problem& pr, const CostParams& c, double lanes) {
  const Rates r = rates(c, lanes);
  const double hop = pr.p >= 3 ? r.reduce : r.first;
  switch (pr.coll) {
    case C::REDUCE:
      if (pr.root != 0) return std::nullopt;
      return std::pair{c.alpha, hop};
    case C::BROADCAST:
      if (pr.root != 0) return std::nullopt;
      return std::pair{c.alpha, r.raw};
    case C::ALLREDUCE: return std::pair{2 * c.alpha, hop + r.result};
    default: return std::nullopt;
  }
}

std::optional<double> rhd(const Problem& pr, const CostParams& c, double n) {
  const int k = floor_log2(pr.p), q = 1 << k;
  const double f = pr.p != q ? 1 : 0, B = blocks(pr.count, kRhdBlock), half = double(q - 1) / q;
  const Rates r = rates(c, block_lanes(pr, kRhdBlock));
  // The seed's reduce-scatter (and, with `rate` = beta, allgather) for p not a power of two: the
  // fold, k halving steps, the odd ranks' blocks. Step i moves at most 2^(k-i) + min(r, 2^(k-i))
  // rank blocks (a folded pair's segment is two): the seed's ceil(p / 2^i) where the pairs spread
  // evenly, within its bounds otherwise.
  const auto uneven = [&](double fold, double rate, double last) {
    const int r = pr.p - q;
    double t = B * c.alpha + n * fold;
    for (int i = 1; i <= k; ++i) {
      const int half = 1 << (k - i);
      t += B * c.alpha + double(half + std::min(r, half)) / pr.p * n * rate;
    }
    return t + B * c.alpha + n / pr.p * last;
  };
  // The partials on the critical path: the fold's (the odd rank's own input)
  // and the halving steps' sums; at a power of two the first step's half is
  // the rank's own input.
  const double partials = f ? n * r.first + half * n * r.reduce : n / 2 * r.first + (half - 0.5) * n * r.reduce;
  switch (pr.coll) {
    case C::ALLREDUCE: return (2 * k + 2 * f) * B * c.alpha + partials + (f + half) * n * r.result;
    case C::REDUCE: return (2 * k + f) * B * c.alpha + partials + half * n * r.result;
    case C::BROADCAST: return ceil_log2(pr.p) * (blocks(size_t(n), kRhdBlock * 4) * c.alpha + n * r.raw);
    case C::REDUCE_SCATTER: return f ? uneven(r.first, r.reduce, r.result) : k * B * c.alpha + partials;
    case C::ALLGATHER: return f ? uneven(r.raw, r.raw, r.raw) : k * B * c.alpha + half * n * r.raw;
  }
  return std::nullopt;
}

std::optional<double> ring(const Problem& pr, const CostParams& c, double n) {
  const double steps = pr.p - 1, B = blocks(pr.count, kRingBlock), frac = steps / pr.p;
  const Rates r = rates(c, block_lanes(pr, kRingBlock));
  // The reduce-scatter's first step passes the rank's own input on, the others sums.
  const double partials = n / pr.p * r.first + (steps - 1) / pr.p * n * r.reduce;
  switch (pr.coll) {
    case C::ALLREDUCE: return 2 * steps * B * c.alpha + partials + frac * n * r.result;
    case C::REDUCE_SCATTER: return steps * B * c.alpha + partials;
    case C::ALLGATHER: return steps * B * c.alpha + frac * n * r.raw;
    default: return std::nullopt;
  }
}

// The per-byte work of every rank together (the work bound, cost_model.hpp),
// with gamma at `lanes`.
double total_work(Algorithm algo, const Problem& pr, const CostParams& c, double n, double lanes) {
  const Rates r = rates(c, lanes);
  const double others = pr.p - 1;
  // Of the p - 1 partials per element, how many carry one rank's own input.
  const int q = 1 << floor_log2(pr.p);
  const double own = algo == Algorithm::BINOMIAL ? pr.p / 2
                     : algo == Algorithm::RHD    ? (pr.p - q) + (q - (pr.p - q)) / 2.0
                                                 : 1;
  const double partials = own * n * r.first + (others - own) * n * r.reduce;
  switch (pr.coll) {
    case C::ALLREDUCE: return partials + others * n * r.result;
    case C::REDUCE: return partials + (algo == Algorithm::RHD ? n * r.result : 0);
    case C::REDUCE_SCATTER: return partials;
    case C::BROADCAST:
    case C::ALLGATHER: return others * n * r.raw;
  }
  return 0;
}

// The accumulator size an algorithm works on (gamma_at).
double work_lanes(Algorithm algo, const Problem& pr, size_t segments) {
  switch (algo) {
    case Algorithm::BINOMIAL: return block_lanes(pr, kBinomialBlock);
    case Algorithm::CHAIN: return double(pr.count) / double(std::max<size_t>(1, segments));
    case Algorithm::RHD: return block_lanes(pr, kRhdBlock);
    default: return block_lanes(pr, kRingBlock);
  }
}

}  // namespace

namespace {

// Between a figure at kGammaSmallLanes lanes and one at kGammaLargeLanes, in log2(lanes).
double by_lanes(double at_small, double at_large, double lanes) {
  const double small = kGammaSmallLanes, large = kGammaLargeLanes;
  if (lanes <= small || at_large < 0) return at_small;
  if (lanes >= large) return at_large;
  const double f = std::log2(lanes / small) / std::log2(large / small);
  return at_small + f * (at_large - at_small);
}

}  // namespace

double gamma_at(const CostParams& c, double lanes) { return by_lanes(c.gamma, c.gamma_large, lanes); }
double local_at(const CostParams& c, double lanes) { return by_lanes(c.local, c.local_large, lanes); }

const char* name(Algorithm a) {
  switch (a) {
    case Algorithm::SWITCH: return "switch";
    case Algorithm::BINOMIAL: return "binomial";
    case Algorithm::CHAIN: return "chain";
    case Algorithm::RHD: return "rhd";
    case Algorithm::RING: return "ring";
  }
  return "?";
}

const char* name(CollectiveKind c) {
  switch (c) {
    case C::ALLREDUCE: return "allreduce";
    case C::REDUCE: return "reduce";
    case C::BROADCAST: return "broadcast";
    case C::REDUCE_SCATTER: return "reduce_scatter";
    case C::ALLGATHER: return "allgather";
  }
  return "?";
}

size_t model_segments(const Problem& pr, const CostParams& c) {
  // gamma depends on the segment's size, the segment on gamma: the seed's m at
  // the largest segment's gamma, then once more at the segment that gives.
  const size_t bytes = pr.count * pr.elem_bytes;
  const size_t fewest = (pr.count + kChainMaxSegment - 1) / kChainMaxSegment;  // bounded memory
  size_t m = fewest;
  for (int round = 0; round < 2; ++round) {
    const auto terms = chain_terms(pr, c, double(pr.count) / double(std::max<size_t>(1, m)));
    if (!terms) return 1;
    m = chain_optimal_segments(bytes, pr.p, terms->first, terms->second);
    m = std::clamp<size_t>(std::max(m, fewest), 1, std::max<size_t>(1, pr.count));
  }
  return m;
}

std::optional<double> predict(Algorithm algo, const Problem& pr, const CostParams& c, size_t segments) {
  if (pr.p < 1) throw std::invalid_argument("a group of " + std::to_string(pr.p) + " ranks");
  const double n = double(pr.count) * double(pr.elem_bytes);
  std::optional<double> t;
  switch (algo) {
    case Algorithm::SWITCH:
      if (c.have_switch && (pr.coll == C::ALLREDUCE || pr.coll == C::REDUCE)) t = c.switch_alpha + n * c.switch_beta;
      break;
    case Algorithm::BINOMIAL: t = binomial(pr, c, n); break;
    case Algorithm::CHAIN:
      if (chain_terms(pr, c, 1)) {
        if (!segments) segments = model_segments(pr, c);
        const auto terms = chain_terms(pr, c, double(pr.count) / double(segments));
        t = chain_model_time(n, pr.p, double(segments), terms->first, terms->second);
      }
      break;
    case Algorithm::RHD: t = rhd(pr, c, n); break;
    case Algorithm::RING: t = ring(pr, c, n); break;
  }
  if (!t || algo == Algorithm::SWITCH) return t;
  if (pr.p == 1) return 0.0;
  const double lanes = work_lanes(algo, pr, segments);
  // Each rank's own input (not a broadcast's or an allgather's: those only move bytes).
  const bool reduces = pr.coll != C::BROADCAST && pr.coll != C::ALLGATHER;
  const double own = reduces ? n * local_at(c, lanes) : 0;
  const double share = std::max(1.0, c.ranks_per_host) / (double(pr.p) * std::max(1.0, c.host_cores));
  return std::max(*t + own, (total_work(algo, pr, c, n, lanes) + pr.p * own) * share);
}

std::vector<Choice> candidates(const Problem& pr, const CostParams& c, std::span<const Algorithm> allowed) {
  std::vector<Choice> out;
  for (Algorithm a : allowed) {
    const size_t m = a == Algorithm::CHAIN ? model_segments(pr, c) : 0;
    if (const auto t = predict(a, pr, c, m)) out.push_back({a, m, *t});
  }
  return out;
}

Choice choose(const Problem& pr, const CostParams& c, std::span<const Algorithm> allowed) {
  const std::vector<Choice> all = candidates(pr, c, allowed);
  if (all.empty())
    throw std::invalid_argument(std::string("no allowed algorithm runs ") + name(pr.coll) +
                                (pr.root ? " with a root other than rank 0" : ""));
  Choice best = all.front();
  for (const Choice& ch : all)
    if (ch.seconds < best.seconds) best = ch;
  return best;
}

}  // namespace prism::coll
