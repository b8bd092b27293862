// How an lcore gives its CPU back while it has nothing to do (the config's
// `polling:`). Busy: it polls without pause. Adaptive: after kEmptyPasses
// passes over its stages that moved nothing (every RX queue, inbox, VOQ and
// TX ring of the lcore empty), it sleeps 1 us, then twice as long after each
// further empty pass, up to polling_sleep_max_us; the first pass that moves a
// packet makes it busy again. Anchors: OVS-DPDK's pmd-sleep-max (a PMD
// thread's sleep grows while its queues stay empty, bounded by the setting),
// DPDK's examples/l3fwd-power (a count of empty polls, then short sleeps), VPP's
// adaptive mode (polling under load, waiting when idle).
//
// What it costs: an idle lcore wakes about 1e6 / max_us times a second for a
// pass over empty queues; the first packet after a quiet period waits up to
// max_us more (half of it on average). Timers (retention, op_timeout, pool
// reclaim) run on every pass, so they fire at most max_us late.
#pragma once

#include <cstdint>

#include "config/config.hpp"
#include "stage.hpp"

namespace prism::pipe {

// The policy alone (no clock, no sleep): what to sleep after each pass.
class IdleBackoff {
 public:
  static constexpr uint32_t kEmptyPasses = 64;  // ~20-60 us of empty polls before the first sleep
  IdleBackoff(Polling mode, uint32_t max_us) : adaptive_(mode == Polling::ADAPTIVE), max_us_(max_us ? max_us : 1) {}
  // After a pass that moved `moved` packets: microseconds to sleep now (0: poll again at once).
  uint32_t after_pass(unsigned moved) {
    if (!adaptive_ || moved) {
      empty_ = 0;
      sleep_us_ = 0;
      return 0;
    }
    if (++empty_ <= kEmptyPasses) return 0;
    sleep_us_ = sleep_us_ ? (sleep_us_ >= max_us_ / 2 ? max_us_ : sleep_us_ * 2) : 1;
    return sleep_us_;
  }

 private:
  bool adaptive_;
  uint32_t max_us_;
  uint32_t empty_ = 0, sleep_us_ = 0;
};

struct IdleCounters {
  Counter sleeps, slept_us;
};
inline constexpr CounterField<IdleCounters> kIdleCounters[] = {
    {"sleeps", "times the lcore slept with every queue empty (polling: adaptive)", &IdleCounters::sleeps},
    {"slept_us", "microseconds it slept in all (measured, timer slack included)", &IdleCounters::slept_us},
};

// One lcore's: the policy, the sleep, its counters.
class IdleWait {
 public:
  IdleWait(Polling mode, uint32_t max_us);
  // Call on the lcore's own thread before its loop: a sleep of a few
  // microseconds needs a small timer slack (Linux's default is 50 us).
  void start() const;
  void after_pass(unsigned moved) {
    if (const uint32_t us = policy_.after_pass(moved)) sleep(us);
  }
  const IdleCounters& counters() const { return c_; }
  bool adaptive() const { return mode_ == Polling::ADAPTIVE; }

 private:
  void sleep(uint32_t us);
  Polling mode_;
  IdleBackoff policy_;
  IdleCounters c_;
  double us_per_tsc_;
};

}  // namespace prism::pipe
