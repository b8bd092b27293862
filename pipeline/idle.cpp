#include "idle.hpp"

#include <rte_cycles.h>
#include <sys/prctl.h>
#include <time.h>

namespace prism::pipe {

IdleWait::IdleWait(Polling mode, uint32_t max_us)
    : mode_(mode), policy_(mode, max_us), us_per_tsc_(1e6 / double(rte_get_tsc_hz())) {}

void IdleWait::start() const {
  if (adaptive()) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // 1 us, for this thread only
}

uint64_t IdleWait::now_us() const { return uint64_t(double(rte_rdtsc()) * us_per_tsc_); }

void IdleWait::sleep(uint32_t us) {
  const uint64_t t0 = rte_rdtsc();
  const timespec ts{0, long(us) * 1000};
  nanosleep(&ts, nullptr);
  c_.sleeps.add();
  c_.slept_us.add(uint64_t(double(rte_rdtsc() - t0) * us_per_tsc_));
}

}  // namespace prism::pipe
