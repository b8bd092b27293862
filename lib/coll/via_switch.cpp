// The switch as one of the group's algorithms: the PRISM switch reduces the
// ranks' contributions in flight (docs/PROTOCOL.md); the group gives the
// switch path (lib/group: libprism's Communicator).
#include <stdexcept>

#include "coll/algorithms.hpp"

namespace prism::coll {

void run_switch(Context& ctx, const Call& c) {
  if (!ctx.via_switch)
    throw std::invalid_argument(
        "switch: this group has no switch (create it with a switch: a config with the job's members, or a pool)");
  ctx.via_switch->run(c);
}

// Measured end to end (the group's calibration): a rank sends n bytes and
// receives the result at once.
std::optional<double> predict_switch(const Problem& pr, const CostParams& c, size_t) {
  if (!c.have_switch) return std::nullopt;
  const double n = double(pr.count) * double(pr.elem_bytes);
  switch (pr.coll) {
    case Collective::ALLREDUCE:
    case Collective::REDUCE: return c.switch_alpha + n * c.switch_beta;
    case Collective::BARRIER: return c.switch_alpha;
    case Collective::BROADCAST:
    case Collective::REDUCE_SCATTER:
    case Collective::ALLGATHER: break;
  }
  return std::nullopt;
}

}  // namespace prism::coll
