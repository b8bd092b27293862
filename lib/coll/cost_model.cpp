#include "coll/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "coll/algorithms.hpp"

namespace prism::coll {
namespace model {

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

double block_lanes(const Problem& pr, size_t block) { return double(std::min<size_t>(pr.count, block)); }

Rates rates(const CostParams& c, double lanes) {
  const double g = gamma_at(c, lanes);
  const double g1 = c.gamma_single < 0 ? g : (c.gamma > 0 ? c.gamma_single * g / c.gamma : c.gamma_single);
  const double w1 = c.partial_ratio_single < 0 ? c.partial_ratio : c.partial_ratio_single;
  return {c.partial_ratio * c.beta + g, c.out_ratio * c.beta, c.beta, w1 * c.beta + g1};
}

namespace {

// The per-byte work of every rank together (the work bound, cost_model.hpp):
// p - 1 partials per element, `own` of them one rank's own input; an
// allreduce's p - 1 copies of the result.
double total_work(const Problem& pr, const CostParams& c, double n, double own, double lanes) {
  const Rates r = rates(c, lanes);
  const double others = pr.p - 1;
  const double partials = own * n * r.first + (others - own) * n * r.reduce;
  switch (pr.coll) {
    case Collective::ALLREDUCE: return partials + others * n * r.result;
    case Collective::REDUCE:
    case Collective::REDUCE_SCATTER: return partials;
    case Collective::BROADCAST:
    case Collective::ALLGATHER: return others * n * r.raw;
    case Collective::BARRIER: return 0;
  }
  return 0;
}

}  // namespace

std::optional<double> host(const Problem& pr, const CostParams& c, std::optional<double> path, double waits, double own,
                           double lanes, double extra_work) {
  if (!path) return std::nullopt;
  if (pr.p == 1) return 0.0;
  const double n = double(pr.count) * double(pr.elem_bytes);
  // Each rank's own input (not a broadcast's or an allgather's: those only move bytes).
  const double mine = reduces(pr.coll) ? n * local_at(c, lanes) : 0;
  const double share = std::max(1.0, c.ranks_per_host) / (double(pr.p) * std::max(1.0, c.host_cores));
  // With more ranks than cores, a rank that waits for a message finds its sender off a core with
  // the odds of a rank being off one, and pays a wake-up (alpha) on top of the host's work.
  const double off = c.ranks_per_host > c.host_cores ? 1 - c.host_cores / c.ranks_per_host : 0;
  return std::max(*path + mine,
                  (total_work(pr, c, n, own, lanes) + extra_work + pr.p * mine) * share + off * waits * c.alpha);
}

}  // namespace model

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

std::optional<double> predict(Algorithm algo, const Problem& pr, const CostParams& c, size_t segments) {
  if (pr.p < 1) throw std::invalid_argument("a group of " + std::to_string(pr.p) + " ranks");
  const AlgorithmInfo* a = algorithm_info(algo);
  if (!a) throw std::invalid_argument("predict: auto (or a value that is not an algorithm) has no prediction");
  if (!runs(algo, pr.coll, pr.root)) return std::nullopt;
  return a->predict(pr, c, segments);
}

std::vector<Choice> candidates(const Problem& pr, const CostParams& c, std::span<const Algorithm> allowed) {
  std::vector<Choice> out;
  for (Algorithm a : allowed) {
    const AlgorithmInfo* row = algorithm_info(a);
    const size_t m = row && row->tune && runs(a, pr.coll, pr.root) ? row->tune(pr, c) : 0;
    if (const auto t = predict(a, pr, c, m)) out.push_back({a, m, *t});
  }
  return out;
}

Choice choose(const Problem& pr, const CostParams& c, std::span<const Algorithm> allowed) {
  const std::vector<Choice> all = candidates(pr, c, allowed);
  if (all.empty())
    throw std::invalid_argument(std::string("no allowed algorithm runs ") + name(pr.coll) +
                                (pr.root ? " with a root other than rank 0" : "") + " (" + who_runs(pr.coll) + ")");
  // At p = 2 on an exact tie, the ring: there it and RHD are the same
  // exchange (one message each way, each rank merging half) and the model
  // gives them the same time; measured, the ring is 5% faster in the median
  // (RHD / ring 1.05 over 40 (size, links, policy) cells of two bench_coll
  // runs). Other ties: the first listed.
  const bool ring_on_tie = pr.p == 2;
  Choice best = all.front();
  for (const Choice& ch : all)
    if (ch.seconds < best.seconds || (ring_on_tie && ch.seconds == best.seconds && ch.algo == Algorithm::RING))
      best = ch;
  return best;
}

}  // namespace prism::coll
