#include "police.hpp"

#include <stdexcept>
#include <string>

namespace prism::pipe {

Policer::Policer(const sw::Directory& dir) : meter_of_(dir.jobs(), -1) {
  for (const sw::Job* j : dir.all_jobs()) {
    const RateConfig& r = j->cfg->rate;
    if (!r.set()) continue;
    Meter m{};
    rte_meter_trtcm_params p{r.committed, r.peak, r.committed_burst, r.peak_burst};
    int rc = rte_meter_trtcm_profile_config(&m.profile, &p);
    if (rc == 0) rc = rte_meter_trtcm_config(&m.state, &m.profile);
    if (rc != 0)
      throw std::runtime_error("job " + std::to_string(j->cfg->id) + ": DPDK refused its rate (rte_meter: " +
                               std::to_string(rc) + "): check jobs[].rate / pools[].rate");
    meter_of_[j->index] = int32_t(meters_.size());
    meters_.push_back(m);
  }
}

}  // namespace prism::pipe
