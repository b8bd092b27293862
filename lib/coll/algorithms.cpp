#include "coll/algorithms.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace prism::coll {

std::vector<Algorithm> all_algorithms() {
  std::vector<Algorithm> out;
  for (const AlgorithmInfo& row : kAlgorithms) out.push_back(row.value);
  return out;
}

const AlgorithmInfo* algorithm_info(Algorithm a) {
  for (const AlgorithmInfo& row : kAlgorithms)
    if (row.value == a) return &row;
  return nullptr;
}

bool runs(Algorithm a, Collective coll, int root) {
  const AlgorithmInfo* row = algorithm_info(a);
  if (!row || !(row->runs & bit(coll))) return false;
  return !(rooted(coll) && row->roots == Roots::ZERO && root != 0);
}

std::string who_runs(Collective coll) {
  std::string out;
  for (const AlgorithmInfo& row : kAlgorithms) {
    if (!(row.runs & bit(coll))) continue;
    if (!out.empty()) out += ", ";
    out += row.name;
    if (rooted(coll) && row.roots == Roots::ZERO) out += " (root 0 only)";
  }
  return std::string(name(coll)) + " runs by " + (out.empty() ? "no algorithm" : out);
}

std::string why_not(Algorithm a, Collective coll, int root) {
  const AlgorithmInfo* row = algorithm_info(a);
  if (!row) return "auto is not an algorithm";
  if ((row->runs & bit(coll)) && rooted(coll) && row->roots == Roots::ZERO && root != 0)
    return std::string(row->name) + (coll == Collective::REDUCE ? " reduces to" : " broadcasts from") +
           " rank 0 only: give root 0 (or another algorithm: " + who_runs(coll) + ")";
  return std::string(row->name) + " runs no " + name(coll) + " (" + who_runs(coll) + ")";
}

void run(Algorithm a, Context& ctx, const Call& c) {
  const AlgorithmInfo* row = algorithm_info(a);
  if (!row) throw std::invalid_argument("auto is chosen by the group (Group::choose), not run: name an algorithm");
  if (!runs(a, c.coll, c.root)) throw std::invalid_argument(why_not(a, c.coll, c.root));
  if (row->hosts && !ctx.links)
    throw std::invalid_argument(std::string(row->name) +
                                ": this group has no links between its ranks (it was made for the switch alone)");
  const int p = ctx.links ? ctx.links->size() : ctx.size, me = ctx.links ? ctx.links->rank() : ctx.rank;
  check_call(c, me, p);
  if (c.coll == Collective::BROADCAST && me == c.root && c.in != c.out && c.count)
    std::memcpy(c.out, c.in, c.count * info(c.op.dtype).bytes);
  row->run(ctx, c);
}

}  // namespace prism::coll
