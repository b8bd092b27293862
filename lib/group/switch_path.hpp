// The switch as the group's algorithm: coll::SwitchPath over libprism's
// Communicator (an allreduce, reduce or barrier through the PRISM switch),
// and the switch's figures for the cost model.
#pragma once

#include "coll/call.hpp"
#include "coll/cost_model.hpp"
#include "prism/prism.hpp"

namespace prism::group {

class SwitchPath final : public coll::SwitchPath {
 public:
  explicit SwitchPath(Communicator& comm) : comm_(comm) {}
  // What the next run() sends that a Call does not say (the partials' transport between switches).
  void set_transport(PartialTransport t) { transport_ = t; }
  void run(const coll::Call& c) override;
  const OpReport& last() const { return last_; }

 private:
  Communicator& comm_;
  PartialTransport transport_ = PartialTransport::KULISCH;
  OpReport last_;
};

// switch_alpha: the least time of a one-element allreduce of `op` through
// the switch; switch_beta: the slope up to a 1 MiB one (each the least of
// three). Rank 0's figures reach every rank over `links`, so every rank's
// auto agrees.
void calibrate_switch(Communicator& comm, coll::Links& links, const coll::ReduceOp& op, coll::CostParams& c);

}  // namespace prism::group
