// Per-job contribution rates (jobs[].rate, pools[].rate): a two-rate
// three-colour marker per job (RFC 2698, DPDK's rte_meter trTCM,
// colour-blind), kept by each RX stage for the packets it admits. Green and
// yellow pass; red (over the peak rate) is dropped there, before it costs
// any reducer work, and counted `over_rate`. A job without a rate costs one
// load and a compare per packet.
//
// Each RX stage (one per port and queue) meters on its own: a job's packets
// spread over Q queues may pass at up to Q times its rate in all. The state
// is the stage's own (rte_meter is not thread-safe): nothing is shared.
#pragma once

#include <rte_meter.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "switch/directory.hpp"

namespace prism::pipe {

class Policer {
 public:
  // Throws std::runtime_error when DPDK refuses a rate's parameters.
  explicit Policer(const sw::Directory& dir);
  // Whether job `j`'s packet of `bytes` passes now.
  bool pass(const sw::Job& j, uint32_t bytes, uint64_t now_tsc) {
    const int32_t m = meter_of_[j.index];
    if (m < 0) return true;
    Meter& x = meters_[size_t(m)];
    return rte_meter_trtcm_color_blind_check(&x.state, &x.profile, now_tsc, bytes) != RTE_COLOR_RED;
  }

 private:
  struct Meter {
    rte_meter_trtcm_profile profile;
    rte_meter_trtcm state;
  };
  std::vector<int32_t> meter_of_;  // by Job::index: its meter, or -1
  std::vector<Meter> meters_;
};

}  // namespace prism::pipe
